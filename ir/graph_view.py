"""The GraphView protocol: the smallest read/write view of a dataflow graph.

The pattern matcher and the partitioner see graphs only through this protocol, which is what
makes them IR-agnostic: each IR (FX graphs at torch and ATen level, loop IR, ONNX) supplies a
thin adapter, and the algorithms are written once. This module imports no torch.

A node is any hashable object the adapter chooses (an ``fx.Node``, an index, a NodeProto
wrapper). Operator keys are strings such as ``"aten.add.Tensor"``, ``"Relu"`` or ``"load"``.

Example::

    >>> g = DictGraph()
    >>> x = g.add_input("x")
    >>> y = g.add_node("relu", [x])
    >>> _ = g.add_output([y])
    >>> [g.op(n) for n in g.nodes()]
    ['placeholder', 'relu', 'output']
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Literal, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

__all__ = ["NodeKind", "GraphView", "MutableGraphView", "DictGraph", "DictNode"]

N = TypeVar("N", bound=Hashable)

#: What a node is, independently of its operator key. Only ``"op"`` nodes compute; inputs,
#: outputs and constants are never matched as interior pattern nodes nor put in partitions.
NodeKind = Literal["input", "output", "constant", "op"]


@runtime_checkable
class GraphView(Protocol[N]):
    """Read access to a dataflow graph (see the module docstring)."""

    def nodes(self) -> Sequence[N]:
        """Every node, in a topological order (producers before consumers)."""

    def inputs(self, node: N) -> Sequence[N]:
        """The nodes whose values ``node`` consumes, in argument order, duplicates kept."""

    def users(self, node: N) -> Sequence[N]:
        """The distinct nodes that consume ``node``'s value(s)."""

    def op(self, node: N) -> str:
        """The operator key, e.g. ``"aten.add.Tensor"``; inputs and outputs have keys too."""

    def kind(self, node: N) -> NodeKind:
        """Whether the node is a graph input, the output, a constant or an operation."""

    def attrs(self, node: N) -> Mapping[str, Any]:
        """Named non-graph operands and attributes (scalars, shapes, axis, index expressions)."""

    def meta(self, node: N) -> Mapping[str, Any]:
        """Metadata where known: ``"dtype"`` (str, e.g. ``"float32"``), ``"shape"`` (tuple)."""

    def name(self, node: N) -> str:
        """A name unique in the graph, for reports and error messages."""

    # Optional fast paths an adapter may add (the algorithms look them up with getattr):
    # ``nbytes(node) -> int | None``, the bytes of a node's value (else read from ``meta``);
    # ``nodes_with_ops(keys)``, the nodes of given operator keys from an index (else a walk);
    # ``kind_follows_op = True``, a node's kind follows from its key (asked once per key).


@runtime_checkable
class MutableGraphView(GraphView[N], Protocol):
    """A GraphView that can also be rewritten."""

    def create(self, op: str, inputs: Sequence[N], attrs: Mapping[str, Any] | None = None, *,
               before: N, meta: Mapping[str, Any] | None = None) -> N:
        """Insert a new op node computing ``op(inputs, **attrs)`` just before ``before``."""

    def replace_uses(self, old: N, new: N) -> None:
        """Make every user of ``old`` (the output included) use ``new`` instead."""

    def erase(self, node: N) -> None:
        """Remove a node that has no users."""


@dataclass(eq=False)
class DictNode:
    """A node of :class:`DictGraph`. Identity is the object itself."""

    name: str
    op: str
    kind: NodeKind
    inputs: list["DictNode"]
    attrs: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    users: dict["DictNode", None] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"%{self.name}"


class DictGraph:
    """A small torch-free mutable graph implementing :class:`MutableGraphView`.

    Used by tests, benchmarks and as the model for adapters. Example::

        >>> g = DictGraph()
        >>> a, b = g.add_input("a"), g.add_input("b")
        >>> s = g.add_node("add", [a, b], name="s")
        >>> _ = g.add_output([s])
        >>> g.users(a)
        [%s]
    """

    def __init__(self) -> None:
        # A doubly linked list keeps insertion before a node O(1); dict order alone cannot.
        self._head = DictNode("", "", "op", [])
        self._prev: dict[DictNode, DictNode] = {self._head: self._head}
        self._next: dict[DictNode, DictNode] = {self._head: self._head}
        self._names: set[str] = set()
        self._next_suffix: dict[str, int] = {}  # per name hint, so fresh names cost O(1)

    def _link(self, node: DictNode, before: DictNode) -> None:
        prev = self._prev[before]
        self._next[prev], self._prev[node] = node, prev
        self._next[node], self._prev[before] = before, node

    # -- building --------------------------------------------------------------------------
    def _fresh(self, hint: str) -> str:
        name, i = hint, self._next_suffix.get(hint, 1)
        while name in self._names:
            name, i = f"{hint}_{i}", i + 1
        self._next_suffix[hint] = i
        self._names.add(name)
        return name

    def _make(self, op: str, kind: NodeKind, inputs: Iterable[DictNode], attrs: Mapping[str, Any] | None,
              meta: Mapping[str, Any] | None, name: str | None) -> DictNode:
        node = DictNode(self._fresh(name or op.split(".")[-1].lower()), op, kind, list(inputs),
                        dict(attrs or {}), dict(meta or {}))
        for i in node.inputs:
            if i not in self._prev or i is self._head:
                raise ValueError(f"input {i!r} of new node {node.name} is not in this graph")
            i.users[node] = None
        return node

    def add_input(self, name: str, **meta: Any) -> DictNode:
        node = self._make("placeholder", "input", (), None, meta, name)
        self._link(node, self._head)
        return node

    def add_node(self, op: str, inputs: Sequence[DictNode] = (), attrs: Mapping[str, Any] | None = None,
                 *, name: str | None = None, kind: NodeKind = "op", **meta: Any) -> DictNode:
        node = self._make(op, kind, inputs, attrs, meta, name)
        self._link(node, self._head)
        return node

    def add_output(self, values: Sequence[DictNode]) -> DictNode:
        return self.add_node("output", values, name="output", kind="output")

    # -- GraphView ----------------------------------------------------------------------------
    def nodes(self) -> list[DictNode]:
        out, node, nxt = [], self._next[self._head], self._next
        while node is not self._head:
            out.append(node)
            node = nxt[node]
        return out

    def inputs(self, node: DictNode) -> list[DictNode]:
        return node.inputs

    def users(self, node: DictNode) -> list[DictNode]:
        return list(node.users)

    def op(self, node: DictNode) -> str:
        return node.op

    def kind(self, node: DictNode) -> NodeKind:
        return node.kind

    def attrs(self, node: DictNode) -> Mapping[str, Any]:
        return node.attrs

    def meta(self, node: DictNode) -> Mapping[str, Any]:
        return node.meta

    def name(self, node: DictNode) -> str:
        return node.name

    # -- MutableGraphView -----------------------------------------------------------------------
    def create(self, op: str, inputs: Sequence[DictNode], attrs: Mapping[str, Any] | None = None, *,
               before: DictNode, meta: Mapping[str, Any] | None = None) -> DictNode:
        node = self._make(op, "op", inputs, attrs, meta, None)
        self._link(node, before)
        return node

    def replace_uses(self, old: DictNode, new: DictNode) -> None:
        for user in list(old.users):
            user.inputs = [new if i is old else i for i in user.inputs]
            new.users[user] = None
        old.users.clear()

    def erase(self, node: DictNode) -> None:
        if node.users:
            raise ValueError(f"cannot erase {node!r}: still used by {list(node.users)}")
        for i in node.inputs:
            i.users.pop(node, None)
        prev, nxt = self._prev.pop(node), self._next.pop(node)
        self._next[prev], self._prev[nxt] = nxt, prev
        self._names.discard(node.name)
