"""Patterns and replacement templates written as Python functions, traced once into FX.

The torch side of :mod:`torchvendor.pattern_matcher`: a search function is traced (``make_fx`` for
ATen-level graphs, ``torch.fx.symbolic_trace`` for torch-level ones) and turned into the same
pattern objects one would write by hand with ``P``/``W``; a replacement function is traced once
into a :class:`~torchvendor.pattern_matcher.Template`, instantiated per match without re-tracing.

- Each parameter of the search function becomes a *named wildcard* (its parameter name). Example
  inputs are cloned before tracing, so aliased examples (``[t] * 3``) cannot collapse two
  parameters into one wildcard; a parameter the function never uses is an error.
- Non-tensor arguments recorded in the trace (scalars, dims, dtypes) become attribute constraints
  (``ignore_literals=True`` drops them).
- A function returning a tuple gives a multi-output pattern (:class:`~torchvendor.pattern_matcher.Multi`).

Example::

    >>> import torch
    >>> def search(a, b, c):
    ...     return torch.relu(a + b) * c
    >>> pattern_from_function(search, 3)
    mul(relu(add(a, b)), c)
    >>> pattern_from_function(search, level="torch")
    operator.mul(torch.relu(operator.add(a, b)), c)
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Literal, Mapping, Sequence

import torch
import torch.fx as fx

from torchvendor.pattern_matcher import (
    Fused, MatchContext, Multi, P, Pattern, PatternError, PatternMatcher, RewriteResult, Rule, T, Template, W,
)
from torchvendor.pattern_matcher.multi import MultiPattern

from torchvendor.ir.fx_view import FxView, op_key

__all__ = ["trace", "pattern_from_function", "pattern_from_graph", "template_from_function", "fx_rule",
           "rewrite_fx", "prepare_graph", "hoist_shape_queries", "unshare_saved_views", "explain"]

Level = Literal["aten", "torch"]


def _param_names(fn: Callable[..., Any], count: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) and len(params) == count:
        return [p.name for p in params]
    return [f"arg{i}" for i in range(count)]


def _examples(fn: Callable[..., Any], example_inputs: Sequence[Any] | int | None) -> list[Any]:
    if example_inputs is None:
        example_inputs = len(inspect.signature(fn).parameters)
    if isinstance(example_inputs, int):
        return [torch.randn(8, 8) for _ in range(example_inputs)]
    # Distinct objects per parameter: aliased examples ([t] * 3) would otherwise be traced as one value.
    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in example_inputs]


def trace(fn: Callable[..., Any], example_inputs: Sequence[Any] | int | None = None, level: Level = "aten",
          decomposition_table: Mapping[Any, Callable[..., Any]] | None = None) -> tuple[fx.Graph, list[str]]:
    """Trace ``fn`` to an FX graph at ``level``; returns the graph and the parameter names."""
    if level == "torch":
        gm = fx.symbolic_trace(fn)
        names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
        return gm.graph, [str(n) for n in names]
    if level != "aten":
        raise PatternError(f"level must be 'aten' or 'torch', got {level!r}")
    from torch.fx.experimental.proxy_tensor import make_fx

    args = _examples(fn, example_inputs)
    gm = make_fx(fn, decomposition_table=decomposition_table)(*args)
    return gm.graph, _param_names(fn, len(args))


def pattern_from_graph(graph: fx.Graph, names: Sequence[str] | None = None, *,
                       ignore_literals: bool = False) -> Pattern | MultiPattern:
    """Turn an FX graph into a pattern: placeholders become named wildcards, calls become ``P``.

    A node used twice becomes one shared pattern node; a ``get_attr`` becomes a constant wildcard.
    """
    view = FxView(graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    names = list(names) if names is not None else [str(n.target) for n in placeholders]
    if len(names) != len(placeholders):
        raise PatternError(f"{len(names)} names for {len(placeholders)} placeholders")
    for ph, name in zip(placeholders, names):
        if not ph.users:
            raise PatternError(f"search function parameter {name!r} is never used; a pattern cannot constrain it")
    made: dict[fx.Node, Pattern] = {ph: W(name) for ph, name in zip(placeholders, names)}
    result: Any = None
    for node in graph.nodes:
        if node.op in ("placeholder",):
            continue
        if node.op == "get_attr":
            made[node] = W(kind="constant")
        elif node.op == "output":
            result = node.args[0]
        else:
            attrs = None if ignore_literals else dict(view.attrs(node)) or None
            made[node] = P(view.op(node), *[made[i] for i in view.inputs(node)], attrs=attrs)
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    for o in outs:
        if not isinstance(o, fx.Node) or o.op == "placeholder":
            raise PatternError(f"a search function must return computed tensors, not {o!r}")
    pats = [made[o] for o in outs]
    return pats[0] if len(pats) == 1 else Multi(*pats)


def pattern_from_function(fn: Callable[..., Any], example_inputs: Sequence[Any] | int | None = None,
                          level: Level = "aten", *, ignore_literals: bool = False,
                          decomposition_table: Mapping[Any, Callable[..., Any]] | None = None
                          ) -> Pattern | MultiPattern:
    """Trace ``fn`` (see :func:`trace`) and compile it into a pattern; see the module docstring.

    ``example_inputs`` may be a list of example values, an argument count (8x8 tensors are used),
    or ``None`` (one tensor per parameter). Shapes only matter for tracing, never for matching.
    """
    graph, names = trace(fn, example_inputs, level, decomposition_table)
    return pattern_from_graph(graph, names, ignore_literals=ignore_literals)


def template_from_function(fn: Callable[..., Any], example_inputs: Sequence[Any] | int | None = None,
                           level: Level = "aten",
                           decomposition_table: Mapping[Any, Callable[..., Any]] | None = None) -> Template:
    """Trace a replacement function once into a template; its parameter names refer to captures.

    >>> import torch
    >>> template_from_function(lambda a, b, c: torch.addcmul(c, a, b), 3)
    Template(addcmul(c, a, b))
    """
    graph, names = trace(fn, example_inputs, level, decomposition_table)
    view = FxView(graph)
    made: dict[fx.Node, Any] = {}
    ph_names = iter(names)
    result: Any = None
    for node in graph.nodes:
        if node.op == "placeholder":
            made[node] = next(ph_names)
        elif node.op == "output":
            result = node.args[0]
        elif node.op == "get_attr":
            raise PatternError(f"replacement function uses a constant tensor ({node.target}); pass it as a capture")
        else:
            made[node] = T(view.op(node), *[made[i] for i in view.inputs(node)], attrs=dict(view.attrs(node)))
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    return Template(*[made[o] for o in outs])


def fx_rule(search: Callable[..., Any], replacement: Callable[..., Any] | Fused | Template | str | None = None,
            example_inputs: Sequence[Any] | int | None = None, level: Level = "aten", *,
            ignore_literals: bool = False, **rule_kwargs: Any) -> Rule:
    """A :class:`~torchvendor.pattern_matcher.Rule` from a search function and a replacement.

    A replacement function is traced once (with the same example inputs when its arity agrees).

    >>> import torch
    >>> fx_rule(lambda a, b, c: torch.relu(a + b) * c, "acme.fused_mlp", 3)
    Rule('acme.fused_mlp', mul(relu(add(a, b)), c), priority=0)
    """
    pattern = pattern_from_function(search, example_inputs, level, ignore_literals=ignore_literals)
    if callable(replacement) and not isinstance(replacement, (Fused, Template)):
        count = len(inspect.signature(replacement).parameters)
        ex = example_inputs if (isinstance(example_inputs, Sequence) and len(example_inputs) == count) else count
        replacement = template_from_function(replacement, ex, level)
    return Rule(pattern, replacement, **rule_kwargs)


def rewrite_fx(gm: fx.GraphModule, rules: PatternMatcher | Sequence[Rule], *, max_passes: int = 1,
               dce: bool = True) -> RewriteResult:
    """Rewrite ``gm`` in place with ``rules``, then lint and recompile it.

    The graph is first prepared (:func:`prepare_graph`): with ``dce`` dead nodes are removed
    (``make_fx`` leaves unused ``getitem``s of multi-output ops, batch norm and layer norm, whose
    users would otherwise make the producer look used outside a match); shape queries move to the
    graph inputs and views of inputs saved for the backward get their own copy, so neither makes
    an interior node of a match look used outside it.

    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: torch.neg(torch.neg(x)) + 1)
    >>> rewrite_fx(gm, [Rule(P("torch.neg", P("torch.neg", "x")), Template("x"))]).replaced
    1
    """
    matcher = rules if isinstance(rules, PatternMatcher) else PatternMatcher(rules)
    prepare_graph(gm.graph, dce=dce)
    result = matcher.rewrite(FxView(gm.graph), max_passes=max_passes)
    gm.graph.lint()
    gm.recompile()
    return result


# ---- graph preparation: what makes dynamic-shape and training graphs matchable -----------------------

_SYM_SIZE = torch.ops.aten.sym_size.int
_VIEWS = frozenset({"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.permute.default",
                    "aten.t.default", "aten.expand.default"})


def _graph_of(g: fx.Graph | fx.GraphModule) -> fx.Graph:
    return g.graph if isinstance(g, fx.GraphModule) else g


def _size_sources(graph: fx.Graph) -> tuple[dict[str, fx.Node], dict[str, tuple[fx.Node, int]]]:
    """SymInt graph inputs by expression, and (tensor input, dim) pairs whose size is a symbol."""
    symbols: dict[str, fx.Node] = {}
    dims: dict[str, tuple[fx.Node, int]] = {}
    for node in graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder" and isinstance(val, torch.SymInt):
            symbols.setdefault(str(val), node)
        elif node.op == "placeholder" and isinstance(val, torch.Tensor):
            for d, size in enumerate(val.shape):
                if isinstance(size, torch.SymInt):
                    dims.setdefault(str(size), (node, d))
        elif node.target is _SYM_SIZE and node.args[0].op == "placeholder" and isinstance(val, torch.SymInt):
            symbols.setdefault(str(val), node)
    return symbols, dims


def _same_size(val: torch.SymInt, symbols: Mapping[str, fx.Node], dims: Mapping[str, tuple[fx.Node, int]]) -> str | None:
    """The key of an input size provably equal to ``val`` (AOTAutograd may leave ``(s0**2)//s0``)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    key = str(val)
    if key in symbols or key in dims:
        return key
    sources = [(k, n.meta["val"]) for k, n in symbols.items()]
    sources += [(k, t.meta["val"].shape[d]) for k, (t, d) in dims.items()]
    for k, size in sources:
        if statically_known_true(val == size):
            return k
    return None


def hoist_shape_queries(graph: fx.Graph | fx.GraphModule) -> int:
    """Answer ``sym_size(t, d)`` of a computed tensor ``t`` from the graph inputs; returns how many.

    Under dynamic shapes AOTAutograd asks computed tensors for their sizes (``sym_size(view_2, 1)``
    feeding a later ``expand``). Such a query is a user of ``view_2``, so a pattern covering
    ``view_2`` would see an interior node used outside the match. The same size is a SymInt input
    of the graph, or a size of a tensor input: the query is redirected there (same value, so the
    graph computes the same thing).

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> f = lambda q, k: torch.softmax(q @ k.transpose(-2, -1), -1) @ k
    >>> gm = capture(f, [torch.randn(2, 2, 4, 8)] * 2, level="aten", dynamic=True).graphs()["inference"]
    >>> hoist_shape_queries(gm) >= 1
    True
    """
    graph = _graph_of(graph)
    symbols, dims = None, None
    moved = 0
    for node in list(graph.nodes):
        if node.target is not _SYM_SIZE or node.args[0].op == "placeholder":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.SymInt):
            continue
        if symbols is None:
            symbols, dims = _size_sources(graph)
        key = _same_size(val, symbols, dims)  # type: ignore[arg-type]
        source = symbols.get(key) if key is not None else None  # type: ignore[union-attr]
        if source is None and key is not None:
            tensor, d = dims[key]  # type: ignore[index]
            with graph.inserting_after(tensor):
                source = graph.call_function(_SYM_SIZE, (tensor, d))
            source.meta["val"] = val
            symbols[key] = source
        if source is not None:
            node.replace_all_uses_with(source)
            graph.erase_node(node)
            moved += 1
    return moved


_MATMULS = frozenset({"aten.mm.default", "aten.addmm.default", "aten.bmm.default"})


def unshare_saved_views(graph: fx.Graph | fx.GraphModule) -> int:
    """Give the graph output its own copy of a matmul operand's view that it also uses; returns how many.

    A training forward graph saves ``view(x)``, the input of a linear reshaped to 2-D, for the
    weight gradient; that use by the output makes the view an interior node used outside any
    match covering the linear. A view costs nothing, so the output gets a copy (reading ``x``,
    which is outside such a match) and the match keeps the original. Only views that feed a
    matmul are copied: a view of a matmul's *result* that is saved (the pre-activation before a
    ``gelu``) stays one node, which a training pattern declares as an extra output.

    >>> import torch
    >>> g = torch.fx.Graph(); x, w = g.placeholder("x"), g.placeholder("w")
    >>> v = g.call_function(torch.ops.aten.view.default, (x, [4, 2])); r = g.call_function(torch.ops.aten.mm.default, (v, w))
    >>> _ = g.output((r, v))
    >>> unshare_saved_views(g), len(v.users)
    (1, 1)
    """
    graph = _graph_of(graph)
    out = graph.output_node()
    split = 0
    for node in list(out.all_input_nodes):
        if node.op != "call_function" or op_key(node.target) not in _VIEWS or len(node.users) < 2:
            continue
        if not any(u.op == "call_function" and op_key(u.target) in _MATMULS for u in node.users):
            continue
        with graph.inserting_after(node):
            copy = graph.node_copy(node)
        copy.meta.update(node.meta)
        out.replace_input_with(node, copy)
        split += 1
    return split


def prepare_graph(graph: fx.Graph | fx.GraphModule, *, dce: bool = True) -> fx.Graph:
    """What :func:`rewrite_fx` does to a graph before matching (it computes the same thing after):
    dead-code elimination, :func:`hoist_shape_queries`, :func:`unshare_saved_views`.

    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: torch.relu(x))
    >>> [n.op for n in prepare_graph(gm).nodes]
    ['placeholder', 'call_function', 'output']
    """
    graph = _graph_of(graph)
    if dce:
        graph.eliminate_dead_code()
    hoist_shape_queries(graph)
    unshare_saved_views(graph)
    return graph


# ---- explain: why a rule does not match ---------------------------------------------------------------

_SYMBOLIC_KEYS = ("aten.sym_size.int", "operator.mul", "operator.add", "operator.floordiv", "operator.sub")


def _is_size(ctx: MatchContext, node: Any) -> bool:
    val = getattr(node, "meta", {}).get("val")
    return isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool) or ctx.op(node) in _SYMBOLIC_KEYS


def _constraint_failure(ctx: MatchContext, cons: Any, node: Any) -> str | None:
    """Which of a pattern node's constraints ``node`` fails, in words (None: all hold)."""
    name = ctx.view.name(node)
    if cons is None:
        return None
    attrs = ctx.attrs(node)
    for key, want in cons.attrs.items():
        have = attrs.get(key)
        if callable(want):
            if not want(have):
                return f"{name}: attribute {key}={have!r} fails the pattern's test"
        elif key not in attrs:
            sized = any(_is_size(ctx, i) for i in ctx.inputs(node))
            return (f"{name}: has no attribute {key!r} (the pattern wants {want!r}); " +
                    ("under dynamic shapes a size is an input node, not an attribute" if sized else
                     "the call leaves it to its default"))
        elif have != want:
            return f"{name}: attribute {key}={have!r}, the pattern wants {want!r}"
    meta = ctx.meta(node)
    if cons.dtype is not None and meta.get("dtype") not in cons.dtype:
        return f"{name}: dtype {meta.get('dtype')}, the pattern wants one of {sorted(cons.dtype)}"
    if cons.shape is not None:
        shape = meta.get("shape")
        ok = shape is not None and (cons.shape(tuple(shape)) if callable(cons.shape) else
                                    len(shape) == len(cons.shape) and all(w is None or w == d for w, d in
                                                                          zip(cons.shape, shape)))
        if not ok:
            return f"{name}: shape {tuple(shape) if shape is not None else None} fails the pattern's shape={cons.shape!r}"
    if cons.where is not None and not cons.where(ctx.view, node):
        return f"{name}: fails the pattern's where= predicate"
    return None


class _Miss(Exception):
    """A diagnosis: how many pattern operations matched before ``reason``."""

    def __init__(self, depth: int, reason: str) -> None:
        super().__init__(reason)
        self.depth, self.reason = depth, reason


def _diagnose(ctx: MatchContext, p: Any, node: Any, env: dict, depth: list[int]) -> None:
    """Match ``p`` at ``node`` greedily (trying alternatives and operand orders); raise the deepest _Miss."""
    from torchvendor.pattern_matcher.pattern import Alt, Op, Wildcard

    name = ctx.view.name
    if isinstance(p, Alt):
        return _first_fit([lambda t, d, b=b: _diagnose(ctx, b, node, t, d) for b in p.branches], env, depth)
    slot = p.name if isinstance(p, Wildcard) else (p.name or p)
    if slot is not None and slot in env:
        if env[slot] is not node:
            raise _Miss(depth[0], f"{slot if isinstance(slot, str) else p!r} is {name(env[slot])} elsewhere in the "
                                  f"pattern but {name(node)} here")
        return
    if isinstance(p, Wildcard):
        if p.kinds is not None and ctx.kind(node) not in p.kinds:
            raise _Miss(depth[0], f"{name(node)} is a graph {ctx.kind(node)}, {p!r} wants {sorted(p.kinds)}")
        why = _constraint_failure(ctx, p.cons, node)
        if why:
            raise _Miss(depth[0], why)
    else:
        _diagnose_op(ctx, p, node, env, depth)
    if slot is not None:
        env[slot] = node


def _diagnose_op(ctx: MatchContext, p: Any, node: Any, env: dict, depth: list[int]) -> None:
    name, key = ctx.view.name, ctx.op(node)
    if not (key in p.keys if p.keys is not None else p.pred(key)) or ctx.kind(node) != "op":
        raise _Miss(depth[0], f"{name(node)} is {key}, the pattern wants {p._label}")
    why = _constraint_failure(ctx, p.cons, node)
    if why:
        raise _Miss(depth[0], why)
    ins = list(ctx.inputs(node))
    args = list(p.args)
    if p.star_at >= 0:
        star = p.variadic()
        count = len(ins) - (len(args) - 1)
        if count < star.min:
            raise _Miss(depth[0], f"{name(node)} has {len(ins)} inputs, fewer than {p!r} needs")
        args = args[:p.star_at] + list(star.elements(count)) + args[p.star_at + 1:]
    elif len(ins) != len(args):
        extra = [name(i) for i in ins[len(args):] if _is_size(ctx, i)] if len(ins) > len(args) else []
        hint = (f"; {', '.join(extra)} {'is a symbolic size' if len(extra) == 1 else 'are symbolic sizes'} "
                f"(dynamic shapes): accept them with Star() after the tensor operands") if extra else ""
        raise _Miss(depth[0], f"{name(node)} ({key}) has {len(ins)} input(s), the pattern gives {len(args)}{hint}")
    depth[0] += 1
    orders = [ins]
    swap = ctx.op(node) in ctx.commutative if p.commutative is None else p.commutative
    if swap and len(ins) >= 2 and ins[0] is not ins[1]:
        orders.append([ins[1], ins[0], *ins[2:]])
    def operands(order: list[Any], trial: dict, d: list[int]) -> None:
        for sub, value in zip(args, order):
            _diagnose(ctx, sub, value, trial, d)
    _first_fit([functools.partial(operands, order) for order in orders], env, depth)


def _first_fit(attempts: list[Callable[[dict, list[int]], None]], env: dict, depth: list[int]) -> None:
    """Run each attempt on a copy of ``env``; keep the first that fits, else raise the deepest miss."""
    best: _Miss | None = None
    for attempt in attempts:
        trial, d = dict(env), [depth[0]]
        try:
            attempt(trial, d)
        except _Miss as miss:
            best = miss if best is None or miss.depth > best.depth else best
            continue
        env.update(trial)
        depth[0] = d[0]
        return
    raise best  # type: ignore[misc]


def _near_misses(ctx: MatchContext, rule: Rule, limit: int) -> list[str]:
    pattern = rule.pattern
    root = pattern.outputs[0] if isinstance(pattern, MultiPattern) else pattern
    keys = rule.anchor_keys()
    anchors = [n for n in ctx.positions if ctx.kind(n) == "op" and (keys is None or ctx.op(n) in keys)]
    if not anchors:
        return [f"no node has its anchor op ({', '.join(sorted(keys or ()))}): nothing almost matched"]
    misses: list[tuple[int, int, str]] = []
    for i, node in enumerate(anchors):
        try:
            _diagnose(ctx, root, node, {}, [0])
        except _Miss as miss:
            misses.append((-miss.depth, i, f"at {ctx.view.name(node)}: {miss.reason} "
                                           f"(after {miss.depth} pattern op(s) matched)"))
            continue
        if isinstance(pattern, MultiPattern):
            misses.append((-99, i, f"at {ctx.view.name(node)}: the first output matches, but not the others "
                                   f"({', '.join(map(repr, pattern.outputs[1:]))})"))
    misses.sort()
    return [text for _, _, text in misses[:limit]] + (
        [f"... and {len(misses) - limit} more candidate(s)"] if len(misses) > limit else [])


def _explain_rule(view: FxView, rule: Rule, limit: int) -> list[str]:
    from torchvendor.pattern_matcher import find_all

    matcher = PatternMatcher([rule])
    ctx = matcher.context(view)
    report = matcher.match(view, ctx)
    head = f"rule {rule.name!r}"
    if report.matches:
        at = ", ".join(view.name(m.anchor) for m in report.matches[:limit])
        return [f"{head}: {len(report.matches)} match(es), at {at}" + (" ..." if len(report.matches) > limit else "")]
    if report.examples:
        lines = [f"{head}: no valid match; {report.candidates} structural match(es) rejected:"]
        lines += [f"  {e.split(': ', 1)[-1]}" for e in report.examples[:limit]]
        if any("used outside the match" in e for e in report.examples):
            lines.append("  (an interior value used outside: in a training forward graph the backward saves it; "
                         "make it an extra output of the match and of the fused op, see docs/patterns.md)")
        return lines
    structural = find_all(view, rule.pattern, commutative=matcher.commutative)
    if structural:
        return [f"{head}: {len(structural)} structural match(es), all refused by the rule's check="]
    return [f"{head}: no match; nearest candidates:"] + [f"  {t}" for t in _near_misses(ctx, rule, limit)]


def explain(rules: Rule | Sequence[Rule] | str, graph: fx.Graph | fx.GraphModule, *, limit: int = 3) -> str:
    """Why ``rules`` match or do not match ``graph``, in words, one section per rule.

    A rule that matches says where. One whose structural matches are all invalid says which
    validity rule failed (containment, cycle, placement). One that matches nothing but whose
    anchor op is present says, for the ``limit`` nearest candidates (those that got furthest
    into the pattern), which constraint failed: the op, an attribute, a dtype or shape, an
    input count (naming symbolic-size inputs under dynamic shapes), or a repeated name bound to
    two nodes. ``rules`` may be a stock pattern name. The graph is prepared as
    :func:`rewrite_fx` prepares it (:func:`prepare_graph`, in place).

    >>> import torch
    >>> from torchvendor.pattern_matcher import P
    >>> gm = torch.fx.symbolic_trace(lambda x: torch.relu(x.view(2, -1)))
    >>> print(explain(Rule(P("torch.relu", P("method.view", "x", attrs={"arg1": 4}))), gm))
    rule 'torch.relu(method.view(x, arg1=4))': no match; nearest candidates:
      at relu: view: attribute arg1=2, the pattern wants 4 (after 1 pattern op(s) matched)
    """
    if isinstance(rules, str):
        from .patterns import _get

        stock = _get(rules)
        rules = stock.rules(None) + ([Rule(stock.training, None, name=f"{rules}[training]")]
                                     if stock.training is not None else [])
    rule_list = [rules] if isinstance(rules, Rule) else list(rules)
    view = FxView(prepare_graph(graph))
    lines: list[str] = []
    for rule in rule_list:
        lines += _explain_rule(view, rule, limit)
    return "\n".join(lines)
