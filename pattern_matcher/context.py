"""Per-pass caches over a GraphView: operator keys, inputs, users and kinds of nodes.

Matching asks for the same facts about a node many times (once per rule anchored there, once per
pattern node that visits it); adapters may compute them on each call (the FX adapter flattens
argument trees). A :class:`MatchContext` asks the view once per node and remembers the answer.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> g = DictGraph(); x = g.add_input("x"); r = g.add_node("relu", [x])
    >>> ctx = MatchContext(g)
    >>> ctx.op(r), ctx.inputs(r)
    ('relu', [%x])
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Hashable, Sequence

from ..ir.gc_pause import paused_gc
from ..ir.graph_view import GraphView, NodeKind

__all__ = ["MatchContext", "paused_gc"]


class _OnDemand(dict):
    """A cache that asks ``fn`` on a miss: ``cache[node]`` always answers, so compiled patterns
    subscript it directly and a pass pays only for the nodes it visits."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Hashable], Any]) -> None:
        super().__init__()
        self.fn = fn

    def __missing__(self, node: Hashable) -> Any:
        value = self[node] = self.fn(node)
        return value


class MatchContext:
    """Memoizing wrapper around a :class:`GraphView` used during one matching pass.

    ``commutative`` is the set of operator keys whose first two operands may be swapped.
    Operator keys are asked on demand and topological positions are numbered on first use,
    so a pass that visits only the anchors of its rules (see :meth:`anchors`) never walks the
    whole graph.
    """

    __slots__ = ("view", "commutative", "_ops", "_inputs", "_users", "_kinds", "_attrs", "_positions")

    def __init__(self, view: GraphView, commutative: Collection[str] = ()) -> None:
        self.view = view
        self.commutative = frozenset(commutative)
        self._ops: dict[Hashable, str] = _OnDemand(view.op)
        self._inputs: dict[Hashable, Sequence[Hashable]] = {}
        self._users: dict[Hashable, Sequence[Hashable]] = {}
        self._kinds: dict[Hashable, NodeKind] = {}
        self._attrs: dict[Hashable, Any] = {}
        self._positions: dict[Hashable, int] | None = None

    @property
    def positions(self) -> dict[Hashable, int]:
        """Topological position of each node, numbered on first use (one walk of the graph)."""
        pos = self._positions
        if pos is None:
            nodes = list(self.view.nodes())
            pos = self._positions = dict(zip(nodes, range(len(nodes))))
        return pos

    def index_positions(self) -> list[Hashable]:
        """Number the nodes in topological order and cache their operator keys; returns the nodes."""
        nodes = list(self.view.nodes())
        self._positions = dict(zip(nodes, range(len(nodes))))
        op, ops = self.view.op, self._ops
        if not ops:
            ops.update(zip(nodes, map(op, nodes)))
        else:
            for n in nodes:
                if n not in ops:
                    ops[n] = op(n)
        return nodes

    def anchors(self, keys: Collection[str]) -> list[Hashable] | None:
        """The nodes whose operator key is in ``keys``, in topological order, from the view's own
        index (``nodes_with_ops``, e.g. FX's lookup table by target), or ``None`` when the view
        has none: then the caller walks every node. Their keys are cached on the way.

        >>> from torchvendor.ir.graph_view import DictGraph
        >>> MatchContext(DictGraph()).anchors({"relu"}) is None   # DictGraph keeps no such index
        True
        """
        find = getattr(self.view, "nodes_with_ops", None)
        found = find(keys) if find is not None else None
        if found is not None and len(keys) == 1:
            self._ops.update(dict.fromkeys(found, next(iter(keys))))
        return found

    # Lookups miss once per node and pass, so they test the cache with get() rather than
    # catching KeyError, which costs more than the adapter call on a miss.
    def op(self, node: Hashable) -> str:
        key = self._ops.get(node)
        if key is None:
            key = self._ops[node] = self.view.op(node)
        return key

    def inputs(self, node: Hashable) -> Sequence[Hashable]:
        ins = self._inputs.get(node)
        if ins is None:
            ins = self._inputs[node] = self.view.inputs(node)
        return ins

    def users(self, node: Hashable) -> Sequence[Hashable]:
        us = self._users.get(node)
        if us is None:
            us = self._users[node] = self.view.users(node)
        return us

    def kind(self, node: Hashable) -> NodeKind:
        k = self._kinds.get(node)
        if k is None:
            k = self._kinds[node] = self.view.kind(node)
        return k

    def attrs(self, node: Hashable) -> Any:
        a = self._attrs.get(node)
        if a is None:
            a = self._attrs[node] = self.view.attrs(node)
        return a

    def meta(self, node: Hashable) -> Any:
        return self.view.meta(node)
