"""torch.fx internals: lazily compiled GraphModules, fast node insertion and removal (FX's
private books), pytree (``torch.utils._pytree``) and ``make_fx`` tracing.

    >>> leaves, spec = tree_flatten([1, (2, 3)]); leaves
    [1, 2, 3]
"""
from __future__ import annotations

from typing import Any as _Any, Callable as _Callable

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten  # no public alias yet

__all__ = ["LazyGraphModule", "HAS_FX_FAST_EDITS", "fx_insert_node", "fx_erase_node", "tree_flatten",
           "tree_unflatten", "make_fx"]

try:  # GraphModules that generate their Python code on first call (torch.fx._lazy_graph_module)
    from torch.fx._lazy_graph_module import _LazyGraphModule as LazyGraphModule
except ImportError:  # pragma: no cover - a release without it: plain, eagerly compiled modules
    LazyGraphModule = torch.fx.GraphModule


def _fx_graph_internals_ok() -> bool:
    """Whether ``fx.Graph`` keeps the private books :func:`fx_insert_node` updates (2.13)."""
    g = torch.fx.Graph()
    return (hasattr(g, "_graph_namespace") and hasattr(g._graph_namespace, "create_name")
            and hasattr(g, "_find_nodes_lookup_table") and hasattr(g, "_len") and hasattr(g, "_target_to_str"))


#: :func:`fx_insert_node` and :func:`fx_erase_node` use FX's private books directly (else the
#: public ``create_node``/``erase_node``, same result, slower)
HAS_FX_FAST_EDITS: bool = _fx_graph_internals_ok()
_FX_NAMES: dict[int, tuple[_Any, str]] = {}  # id(target) -> (target, FX's name stem for it)


def fx_insert_node(graph: torch.fx.Graph, op: str, target: _Any, args: tuple, kwargs: dict,
                   before: torch.fx.Node) -> torch.fx.Node:
    """``graph.create_node(op, target, args, kwargs)`` inserted before ``before``, without its
    per-call costs that a rewrite pass does not need: the pytree walk that warns about raw
    SymInt arguments (rewrites pass nodes and constants of the matched graph), the
    ``inserting_before`` context, and the name stem recomputed from the target each time (cached
    here). The node gets a unique name from the graph's namespace, the owning module's
    create-node hooks run, and the graph's index by target and its length are kept, as
    ``create_node`` does.

    >>> g = torch.fx.Graph(); x = g.placeholder("x"); out = g.output(x)
    >>> n = fx_insert_node(g, "call_function", torch.relu, (x,), {}, out)
    >>> [m.name for m in g.nodes], g.find_nodes(op="call_function", target=torch.relu) == [n]
    (['x', 'relu', 'output'], True)
    """
    if not HAS_FX_FAST_EDITS:  # pragma: no cover - a release that moved the books
        with graph.inserting_before(before):
            return graph.create_node(op, target, args, kwargs)
    hit = _FX_NAMES.get(id(target))
    if hit is None or hit[0] is not target:
        hit = _FX_NAMES[id(target)] = (target, graph._target_to_str(target))
    namespace = graph._graph_namespace
    name = namespace.create_name(hit[1], None)
    node = torch.fx.Node(graph, name, op, target, args, kwargs or _EMPTY_KWARGS)
    owner = graph.owning_module
    if owner is not None:
        for hook in getattr(owner, "_create_node_hooks", None) or ():
            hook(node)
    namespace.associate_name_with_obj(name, node)
    before.prepend(node)
    graph._find_nodes_lookup_table.insert(node)
    graph._len += 1
    return node


def fx_erase_node(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """``graph.erase_node(node)`` for a node without users whose arguments are flat (nodes and
    constants, no containers): its inputs are unlinked with one call instead of a ``map_arg``
    walk; any other node goes through ``erase_node``.

    >>> g = torch.fx.Graph(); x = g.placeholder("x"); r = g.call_function(torch.relu, (x,))
    >>> fx_erase_node(g, r); [n.name for n in g.nodes], len(x.users)
    (['x'], 0)
    """
    if (not HAS_FX_FAST_EDITS or node.users or node.kwargs or node.graph is not graph or node._erased
            or not all(type(a) in _FLAT_ARGS for a in node.args)):
        graph.erase_node(node)
        return
    owner = graph.owning_module
    if owner is not None:
        for hook in getattr(owner, "_erase_node_hooks", None) or ():
            hook(node)
    graph._find_nodes_lookup_table.remove(node)
    node._remove_from_list()
    node._erased = True
    graph._len -= 1
    node._update_args_kwargs(tuple(None if type(a) is _FxNode else a for a in node.args), _EMPTY_KWARGS)


_FxNode = torch.fx.Node
_FLAT_ARGS = frozenset({torch.fx.Node, int, float, bool, str, type(None)})
try:
    from torch.fx.immutable_collections import immutable_dict as _immutable_dict
    _EMPTY_KWARGS: _Any = _immutable_dict()
except ImportError:  # pragma: no cover
    _EMPTY_KWARGS = {}


def make_fx(fn: _Callable[..., _Any], *args: _Any) -> torch.fx.GraphModule:
    """Trace ``fn(*args)`` to an ATen FX graph with ``make_fx``; fake/symbolic ``args`` are kept
    in their own fake mode (the one AOTAutograd used), so SymInt sizes stay symbolic."""
    from torch.fx.experimental.proxy_tensor import make_fx as _make_fx

    return _make_fx(fn)(*args)
