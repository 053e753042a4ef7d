"""The stock pattern library: the ATen fusions vendors write, each written once.

Every stock pattern matches what the SDK's ATen path (AOTAutograd with the default
``core_aten()`` table) produces for the module it names, **static and dynamic-shape alike**:
under ``torch.compile(dynamic=True)`` a ``view``/``expand`` takes its symbolic sizes as graph
inputs (SymInt nodes), so each shape-taking op is written ``P(op, x, Star())`` — the sizes are
values the pattern binds and ignores, never an arity mismatch. ``tests/test_stock_patterns.py``
captures a small module both ways for every entry and requires the same, non-zero match count.

=================  ==========================================  =====================================
name               matches                                     fused-op inputs, attributes
=================  ==========================================  =====================================
``linear``         ``addmm``; ``view→addmm→view``; ``mm+add``  ``x, w, b`` (``w`` as addmm takes it:
                   and ``view→mm→view+add`` (bias 1-D)         ``[in, out]``)
``linear_gelu``    ``linear`` then ``gelu`` (``aten.gelu``     ``x, w, b``; ``approximate``
                   or its erf / tanh decomposition)            (``"none"``/``"tanh"``)
``layer_norm``     ``native_layer_norm`` (affine) → item 0     ``x, w, b``; ``eps``
``rms_norm``       ``x * rsqrt(mean(x², -1) + eps) * w``       ``x, w``; ``eps``; or ``x, w, eps_t``
                                                               (a 0-d tensor: a float module
                                                               attribute under dynamic shapes)
``softmax``        ``_softmax``                                ``x``; ``dim``
``sdpa``           ATen's SDPA ops (→ item 0), and attention   ``q, k, v``; ``scale`` (``None``: the
                   written out: ``bmm(softmax(bmm(q, kᵀ)·s),   default ``1/sqrt(E)``)
                   v)`` with its views and expands
``conv_bn``        ``convolution → batch norm (eval) → item    ``x, w, bn_w, bn_b, mean, var`` then
                   0``                                         the conv bias if any; ``eps``,
                                                               ``stride, padding, dilation, groups``
``conv_bn_relu``   ``conv_bn`` then ``relu``                   as ``conv_bn``
=================  ==========================================  =====================================

``rules(name, op)`` turns an entry into the :class:`~torchvendor.pattern_matcher.Rule` list that
rewrites each match to the vendor's fused op ``op`` (an operator key such as
``"acme.linear_gelu.default"``, see :mod:`torchvendor.sdk.compile.vendor_ops`). With ``training_op=`` the
entries that have one also get a *training* variant: in a training forward graph AOTAutograd
saves intermediates for the backward (the pre-activation of ``linear_gelu``, the mean and rstd of
``layer_norm``), so the plain match is rejected by containment (an interior value used outside);
the training variant makes those intermediates extra outputs of the match, and ``training_op``
returns them as extra outputs (``(y, pre)``; ``(y, mean, rstd)``).

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> p = capture(torch.nn.Linear(8, 4), [torch.randn(2, 3, 8)], level="aten", dynamic=True)
    >>> count("linear", p.graphs()["inference"])
    1
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Sequence

from torchvendor.pattern_matcher import (
    AttrOf, Fused, Match, Multi, MultiPattern, P, Pattern, PatternError, PatternMatcher, Rule, Star, W,
)
from torchvendor.pattern_matcher.pattern import Alt

from torchvendor.ir.fx_view import FxView

from . import fx_pattern
from .fx_pattern import prepare_graph

__all__ = ["STOCK", "Stock", "SavedOutputs", "rules", "count", "explain", "names", "view_of", "VIEW_OPS"]

#: The reshaping ops a pattern steps through; under dynamic shapes their sizes are SymInt inputs.
VIEW_OPS = frozenset({"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"})


def view_of(inner: Pattern | str, name: str | None = None, *, ops: frozenset[str] = VIEW_OPS) -> Pattern:
    """A reshape of ``inner`` that matches static and dynamic captures alike.

    Its sizes are an attribute in a static capture and SymInt inputs (``[s0 * s1, 8]``) in a
    dynamic one; ``Star()`` after the tensor operand binds and ignores them. Use the same form for
    any op taking sizes (``ops={"aten.expand.default"}``).

    >>> view_of(P("aten.addmm.default", "b", "x", "w"))
    aten._unsafe_view.default|aten.reshape.default|aten.view.default(addmm(b, x, w), *_)
    """
    return P(ops, inner, Star(), name=name)


def _near(value: float) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, (int, float)) and abs(v - value) <= 1e-6 * max(1.0, abs(value))


def _unit(v: Any) -> bool:
    return v is None or v == 1


def _vector(name: str) -> Pattern:
    """A 1-D tensor input (a bias): keeps ``mm(x, w) + residual`` from passing for a linear."""
    return W(name, shape=lambda s: len(s) == 1)


class SavedOutputs(MultiPattern):
    """``main`` plus named operation nodes inside it as extra outputs of the match.

    In a training forward graph an intermediate that the backward needs (``addmm`` before a
    ``gelu``) is used outside the match, so containment rejects the match; declaring it an output
    makes the match valid, and the fused op returns it (``(y, pre)``). Every name must be bound
    by every match of ``main`` (e.g. name the root of each alternative).

    >>> SavedOutputs(P("aten.gelu.default", P("aten.addmm.default", "b", "x", "w", name="pre")), "pre")
    Saved(gelu(pre=addmm(b, x, w)), pre)
    """

    def __init__(self, main: Pattern, *saved: str) -> None:  # noqa: D107 - no climbs: outputs are inside main
        if not saved:
            raise PatternError("SavedOutputs(main, *names) needs at least one name of an operation inside main")
        kinds = main.slot_kinds()
        found: dict[str, Pattern] = {}
        for p in main.walk():
            name = getattr(p, "name", None)
            if name in saved and kinds.get(name) == "op":
                found.setdefault(name, p)
        missing = [s for s in saved if s not in found]
        if missing:
            raise PatternError(f"SavedOutputs: {missing} name no operation P(..., name=...) inside {main!r}")
        self.outputs = (main, *(found[s] for s in saved))
        self.saved = tuple(saved)
        self.climbs = []

    def match(self, ctx: Any, anchor: Hashable, env: dict, then: Callable[[tuple[Hashable, ...]], bool]) -> bool:
        def emit() -> bool:
            if any(env.get(s) is None for s in self.saved):
                return False
            return then((anchor, *(env[s] for s in self.saved)))
        return self.outputs[0].match(ctx, anchor, env, emit)

    def __repr__(self) -> str:
        return f"Saved({self.outputs[0]!r}, {', '.join(self.saved)})"


def _escapes(*names: str) -> Callable[[Match], bool]:
    """A check: some named node is used outside the match (so the training variant is needed)."""
    def check(m: Match) -> bool:
        inside = set(m.nodes)
        return any(u not in inside for n in names if n in m for u in m.view.users(m[n]))
    return check


@dataclass(frozen=True)
class Stock:
    """One stock fusion: its pattern variants, what the fused op takes, an optional training form.

    ``variants`` are ``(pattern, priority)`` pairs (or ``(pattern, priority, inputs, attrs)`` for a
    variant that hands the fused op other arguments): an N-d form outranks the 2-D form it contains,
    and a stock pattern the stock patterns it contains (``linear_gelu`` > ``linear``, ``sdpa`` >
    ``softmax``, ``conv_bn_relu`` > ``conv_bn``), so a backend may list them all;
    ``inputs`` the binding names passed as the fused op's tensor inputs (``"*cb"`` splices a
    ``Star``); ``attrs`` the fused op's other arguments (values, :class:`AttrOf`, or callables of
    the match); ``training`` a pattern with extra outputs (:class:`SavedOutputs` or ``Multi``) and
    ``saves`` the names whose outside use makes it necessary.
    """

    name: str
    variants: tuple[tuple[Any, int], ...]
    inputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    training: Any = None
    saves: tuple[str, ...] = ()
    doc: str = ""

    def rules(self, op: str | None, *, training_op: str | None = None, priority: int = 0,
              check: Callable[[Match], bool] | None = None) -> list[Rule]:
        """Rules rewriting every match to ``op`` (and training matches to ``training_op``).

        ``op=None`` gives match-only rules (for counting, or to mark fusion groups).
        """
        out = []
        if training_op is not None:
            if self.training is None:
                raise PatternError(f"stock pattern {self.name!r} has no training variant; pass training_op=None")
            out.append(Rule(self.training, self._fused(training_op), name=f"{self.name}[training]->{training_op}",
                            priority=priority + 10, check=_both(_escapes(*self.saves) if self.saves else None, check)))
        for i, (pattern, bump, *own) in enumerate(self.variants):
            out.append(Rule(pattern, self._fused(op, *own), name=f"{self.name}->{op}" if op else f"{self.name}#{i}",
                            priority=priority + bump, check=check))
        return out

    def _fused(self, op: str | None, inputs: Sequence[str] | None = None,
               attrs: Mapping[str, Any] | None = None) -> Fused | None:
        """The replacement; a variant may pass its own ``inputs`` and ``attrs`` (third and fourth items)."""
        if op is None:
            return None
        return Fused(op, list(self.inputs if inputs is None else inputs), dict(self.attrs if attrs is None else attrs))


def _both(a: Callable[[Match], bool] | None, b: Callable[[Match], bool] | None) -> Callable[[Match], bool] | None:
    if a is None or b is None:
        return a or b
    return lambda m: a(m) and b(m)


# ---- linear ------------------------------------------------------------------------------------

def _linear_cores() -> tuple[Pattern, Pattern]:
    """(N-d forms, 2-D forms) of ``x @ w + b``; each root is named ``pre``."""
    addmm = lambda x, name=None: P("aten.addmm.default", _vector("b"), x, "w", name=name,  # noqa: E731
                                   attrs={"beta": _unit, "alpha": _unit})
    mm_add = lambda x: P("aten.add.Tensor", P("aten.mm.default", x, "w"), _vector("b"), name="pre")  # noqa: E731
    nd = Alt(view_of(addmm(view_of("x")), name="pre"),
             P("aten.add.Tensor", view_of(P("aten.mm.default", view_of("x"), "w")), _vector("b"), name="pre"))
    flat = Alt(addmm("x", name="pre"), mm_add("x"))
    return nd, flat


def _linear() -> Stock:
    nd, flat = _linear_cores()
    return Stock("linear", ((nd, 1), (flat, 0)), ("x", "w", "b"), doc="x @ w + b, 2-D and N-d")


# ---- gelu ---------------------------------------------------------------------------------------

def _gelu_forms(y: Pattern) -> Pattern:
    """``gelu(y)``: the ATen op, or its erf or tanh decomposition (as ``torch._decomp`` writes them,
    and the tanh form as Hugging Face's ``gelu_new`` writes it, with ``pow(y, 3)``)."""
    half = P("aten.mul.Tensor", y, attrs={"other": _near(0.5)})
    erf = P("aten.mul.Tensor", half, P("aten.add.Tensor", P("aten.erf.default", P(
        "aten.mul.Tensor", y, attrs={"other": _near(math.sqrt(0.5))})), attrs={"other": 1}), name="act_erf")
    cube = Alt(P("aten.mul.Tensor", P("aten.mul.Tensor", y, y), y),  # torch._decomp's spelling
               P("aten.pow.Tensor_Scalar", y, attrs={"exponent": 3}))    # Hugging Face's gelu_new
    inner = P("aten.add.Tensor", y, P("aten.mul.Tensor", cube, attrs={"other": _near(0.044715)}))
    tanh = P("aten.mul.Tensor", half, P("aten.add.Tensor", P("aten.tanh.default", P(
        "aten.mul.Tensor", inner, attrs={"other": _near(math.sqrt(2 / math.pi))})), attrs={"other": 1}),
        name="act_tanh")
    return Alt(P("aten.gelu.default", y, name="act"), erf, tanh)


def _approximate(m: Match) -> str:
    if "act_tanh" in m:
        return "tanh"
    if "act" in m:
        return m.attrs("act").get("approximate") or "none"
    return "none"


def _linear_gelu() -> Stock:
    nd, flat = _linear_cores()
    core = Alt(nd, flat)
    return Stock("linear_gelu", ((_gelu_forms(nd), 3), (_gelu_forms(flat), 2)), ("x", "w", "b"),
                 {"approximate": _approximate},
                 training=SavedOutputs(P("aten.gelu.default", core, name="act"), "pre"), saves=("pre",),
                 doc="gelu(x @ w + b); training: (y, pre)")


# ---- norms, softmax -------------------------------------------------------------------------------

def _layer_norm() -> Stock:
    ln = P("aten.native_layer_norm.default", "x", "w", "b", name="ln")
    item = lambda i: P("operator.getitem", ln, attrs={"arg1": i})  # noqa: E731
    return Stock("layer_norm", ((item(0), 0),), ("x", "w", "b"), {"eps": AttrOf("ln", "eps")},
                 training=Multi(item(0), item(1), item(2)),
                 doc="native_layer_norm with weight and bias; training: (y, mean, rstd)")


def _over_last_dim(view: Any, node: Any) -> bool:
    """A ``mean.dim`` over the last dimension only (``[-1]`` or ``[rank - 1]``)."""
    dims = view.attrs(node).get("dim")
    rank = len(view.meta(node).get("shape", ()))
    return isinstance(dims, (list, tuple)) and len(dims) == 1 and dims[0] in (-1, rank - 1)


def _rms_norm() -> Stock:
    x = W("x")
    var = P("aten.mean.dim", P("aten.pow.Tensor_Scalar", x, attrs={"exponent": 2}),
            attrs={"keepdim": True}, where=_over_last_dim)
    const = P({"aten.add.Tensor", "aten.add.Scalar"}, var, name="eps_add", attrs={"other": lambda v: isinstance(v, float)})
    # Under dynamic shapes Dynamo passes a float module attribute (Llama's variance_epsilon) as a
    # 0-d float64 tensor input, converted before the add: the eps is then a value, not an attribute.
    eps_t = W("eps_t", shape=())
    cast = lambda inner: P("prims.convert_element_type.default", inner)  # noqa: E731
    lifted = P("aten.add.Tensor", var, Alt(cast(cast(eps_t)), cast(eps_t), eps_t), attrs={"alpha": _unit})
    rms = lambda eps: P("aten.mul.Tensor", P("aten.mul.Tensor", x, P("aten.rsqrt.default", eps)), "w")  # noqa: E731
    return Stock("rms_norm", ((rms(const), 0), (rms(lifted), 0, ("x", "w", "eps_t"), {})), ("x", "w"),
                 {"eps": AttrOf("eps_add", "other")},
                 doc="x * rsqrt(mean(x^2, -1, keepdim) + eps) * w (Llama, torch.nn.RMSNorm)")


def _softmax() -> Stock:
    return Stock("softmax", ((P("aten._softmax.default", "x", name="sm", attrs={"half_to_float": False}), 0),), ("x",),
                 {"dim": AttrOf("sm", "dim")}, doc="softmax over one dim")


# ---- attention --------------------------------------------------------------------------------------

SDPA_OPS = frozenset({"aten._scaled_dot_product_flash_attention_for_cpu.default",
                      "aten._scaled_dot_product_flash_attention.default",
                      "aten._scaled_dot_product_efficient_attention.default",
                      "aten._scaled_dot_product_cudnn_attention.default"})


def _swaps_last_two(dims: Any) -> bool:
    n = len(dims) if isinstance(dims, (list, tuple)) else 0
    return n >= 2 and list(dims) == [*range(n - 2), n - 1, n - 2]


def _sdpa_scale(m: Match) -> float | None:
    if "attn" in m:
        return m.attrs("attn").get("scale")
    if "scaled" in m:
        s = m.attrs("scaled")["other"]
        return float(s) if m.view.op(m["scaled"]) == "aten.mul.Tensor" else 1.0 / float(s)
    return None


def _sdpa() -> Stock:
    op = P(SDPA_OPS, "q", "k", "v", name="attn",
           attrs={"dropout_p": lambda v: not v, "is_causal": lambda v: not v})
    fused = P("operator.getitem", op, attrs={"arg1": 0})
    bmm = lambda a, b: P("aten.bmm.default", a, b)  # noqa: E731
    batched = lambda t: view_of(view_of(t, ops=frozenset({"aten.expand.default"})))  # noqa: E731
    scores = view_of(bmm(batched("q"), batched(P("aten.permute.default", "k", attrs={"dims": _swaps_last_two}))))
    scaled = P({"aten.mul.Tensor", "aten.div.Tensor"}, scores, name="scaled",
               attrs={"other": lambda v: isinstance(v, (int, float))})
    probs = P("aten._softmax.default", Alt(scaled, scores), attrs={"dim": -1, "half_to_float": False})
    written = view_of(bmm(batched(probs), batched("v")))
    return Stock("sdpa", ((fused, 2), (written, 2)), ("q", "k", "v"), {"scale": _sdpa_scale},
                 doc="scaled dot-product attention without mask or dropout")


# ---- convolution + batch norm ----------------------------------------------------------------------

def _conv_bn_core() -> Pattern:
    conv = P("aten.convolution.default", "x", "w", Star("cb"), name="conv", attrs={"transposed": False})
    bn = P("aten._native_batch_norm_legit_no_training.default", conv, "bn_w", "bn_b", "mean", "var", name="bn")
    return P("operator.getitem", bn, attrs={"arg1": 0})


_CONV_ATTRS = {"eps": AttrOf("bn", "eps"), **{k: AttrOf("conv", k) for k in ("stride", "padding", "dilation", "groups")}}
_CONV_INPUTS = ("x", "w", "bn_w", "bn_b", "mean", "var", "cb")  # the optional conv bias last


def _conv_bn() -> Stock:
    return Stock("conv_bn", ((_conv_bn_core(), 0),), _CONV_INPUTS, _CONV_ATTRS, doc="conv2d + eval batch norm")


def _conv_bn_relu() -> Stock:
    return Stock("conv_bn_relu", ((P("aten.relu.default", _conv_bn_core()), 2),), _CONV_INPUTS, _CONV_ATTRS,
                 doc="conv2d + eval batch norm + relu")


#: Every stock fusion by name.
STOCK: dict[str, Stock] = {s.name: s for s in (_linear(), _linear_gelu(), _layer_norm(), _rms_norm(), _softmax(),
                                               _sdpa(), _conv_bn(), _conv_bn_relu())}


def names() -> list[str]:
    """The stock pattern names.

    >>> names()[:3]
    ['conv_bn', 'conv_bn_relu', 'layer_norm']
    """
    return sorted(STOCK)


def _get(name: str) -> Stock:
    try:
        return STOCK[name]
    except KeyError:
        raise PatternError(f"no stock pattern {name!r}; the library has {names()}") from None


def rules(name: str, op: str, *, training_op: str | None = None, priority: int = 0,
          check: Callable[[Match], bool] | None = None) -> list[Rule]:
    """Rules rewriting stock pattern ``name`` to the fused op ``op`` (see the module docstring).

    >>> [r.name for r in rules("linear_gelu", "acme.linear_gelu.default", training_op="acme.linear_gelu_t.default")]
    ['linear_gelu[training]->acme.linear_gelu_t.default', 'linear_gelu->acme.linear_gelu.default', 'linear_gelu->acme.linear_gelu.default']
    """
    return _get(name).rules(op, training_op=training_op, priority=priority, check=check)


def count(name: str | Sequence[Rule], gm: Any, *, training: bool = False) -> int:
    """How many non-overlapping valid matches stock pattern ``name`` (or ``rules``) has in ``gm``.

    The graph's shape queries are first moved to the graph inputs
    (:func:`~torchvendor.sdk.compile.fx_pattern.hoist_shape_queries`), as ``rewrite_fx`` does.
    """
    if isinstance(name, str):
        stock = _get(name)
        rs = stock.rules(None)
        if training and stock.training is not None:
            rs = [Rule(stock.training, None, name=f"{name}[training]", priority=10,
                       check=_escapes(*stock.saves) if stock.saves else None)] + rs
    else:
        rs = list(name)
    prepare_graph(gm)
    return len(PatternMatcher(rs).match(FxView(gm.graph)).matches)


def explain(name: str | Rule | Sequence[Rule], graph: Any, *, limit: int = 3) -> str:
    """Why stock pattern ``name`` (or ``rules``) matches ``graph`` or not, one section per rule
    (:func:`~torchvendor.sdk.compile.fx_pattern.explain`; a stock name explains its inference rules
    and, where it has one, its training form).
    """
    if isinstance(name, str):
        stock = _get(name)
        name = stock.rules(None) + ([Rule(stock.training, None, name=f"{name}[training]")]
                                    if stock.training is not None else [])
    return fx_pattern.explain(name, graph, limit=limit)
