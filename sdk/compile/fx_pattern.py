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

import inspect
from typing import Any, Callable, Literal, Mapping, Sequence

import torch
import torch.fx as fx

from torchvendor.pattern_matcher import (
    Fused, MatchContext, Multi, P, Pattern, PatternError, PatternMatcher, RewriteResult, Rule, T, Template, W,
    explain_rule,
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


# ---- explain: why a rule does not match (the diagnosis is pattern_matcher/explain.py's) ---------------------------------------------------------------

_SYMBOLIC_KEYS = ("aten.sym_size.int", "operator.mul", "operator.add", "operator.floordiv", "operator.sub")


def _is_size(ctx: MatchContext, node: Any) -> bool:
    val = getattr(node, "meta", {}).get("val")
    return isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool) or ctx.op(node) in _SYMBOLIC_KEYS


def explain(rules: Rule | Sequence[Rule], graph: fx.Graph | fx.GraphModule, *, limit: int = 3) -> str:
    """Why ``rules`` match or do not match ``graph``, in words, one section per rule.

    A rule that matches says where. One whose structural matches are all invalid says which
    validity rule failed (containment, cycle, placement). One that matches nothing but whose
    anchor op is present says, for the ``limit`` nearest candidates (those that got furthest
    into the pattern), which constraint failed: the op, an attribute, a dtype or shape, an
    input count (naming symbolic-size inputs under dynamic shapes), or a repeated name bound to
    two nodes (:func:`~torchvendor.sdk.compile.patterns.explain` takes a stock pattern's name). The
    graph is prepared as
    :func:`rewrite_fx` prepares it (:func:`prepare_graph`, in place).

    >>> import torch
    >>> from torchvendor.pattern_matcher import P
    >>> gm = torch.fx.symbolic_trace(lambda x: torch.relu(x.view(2, -1)))
    >>> print(explain(Rule(P("torch.relu", P("method.view", "x", attrs={"arg1": 4}))), gm))
    rule 'torch.relu(method.view(x, arg1=4))': no match; nearest candidates:
      at relu: view: attribute arg1=2, the pattern wants 4 (after 1 pattern op(s) matched)
    """
    rule_list = [rules] if isinstance(rules, Rule) else list(rules)
    view = FxView(prepare_graph(graph))
    return "\n".join(line for rule in rule_list for line in explain_rule(view, rule, limit=limit, is_size=_is_size))
