"""Outlining partitions into subgraphs, for any IR (torch-free).

``MutableGraphView`` can create, redirect and erase nodes but not move them, and a horizontally
merged partition's call may have to run *after* a fallback node that sits earlier in the
original order, so an in-place rewrite cannot always place it. :func:`outline` therefore builds
a **new parent** ``DictGraph`` -- graph inputs, fallback nodes and constants copied, one
``call_op`` node per partition whose ``attrs["subgraph"]`` holds the partition as its own
``DictGraph``, and a ``getter_op`` node per output for multi-output partitions -- in one
topological order computed once for the whole graph (:func:`emission_order`). IR adapters turn
that back into their format (FX has its own outliner: :mod:`torchvendor.sdk.compile.fx_outline`).

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.partitioner import partition
    >>> g = DictGraph(); x = g.add_input("x"); a = g.add_node("relu", [x], name="a")
    >>> s = g.add_node("sin", [a], name="s"); b = g.add_node("relu", [s], name="b")
    >>> _ = g.add_output([b])
    >>> out = outline(g, partition(g, {"relu"}))
    >>> [g2.op(n) for g2 in [out.parent] for n in g2.nodes()]
    ['placeholder', 'torchvendor.partition', 'sin', 'torchvendor.partition', 'output']
    >>> [n.op for n in out.subgraphs[0].nodes()]
    ['placeholder', 'relu', 'output']
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Hashable, Union

from ..ir.graph_view import DictGraph, DictNode

from .core import Partition, PartitionResult, paused_gc

__all__ = ["OutlinedGraph", "outline", "emission_order"]


def emission_order(result: PartitionResult) -> list[Union[Partition, Hashable]]:
    """One topological order of the contracted graph: each item is a node outside every
    partition or a whole :class:`Partition`. Ordering edges are honoured; ties keep the
    original order (a heap keyed by each unit's first node). O((V + E) log V).

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.partitioner import partition
    >>> g = DictGraph(); x = g.add_input("x"); y = g.add_node("relu", [x]); _ = g.add_output([y])
    >>> [type(u).__name__ for u in emission_order(partition(g, {"relu"}))]
    ['DictNode', 'Partition', 'DictNode']
    """
    view = result.view
    if result.graph_index is not None:
        nodes, preds = result.graph_index
        index = {n: i for i, n in enumerate(nodes)}
    else:
        nodes = list(view.nodes())
        index = {n: i for i, n in enumerate(nodes)}
        preds = [[index[x] for x in view.inputs(n)] for n in nodes]
    key = list(range(len(nodes)))
    units: dict[int, Any] = {}
    for p in result.partitions:
        first = index[p.nodes[0]]
        units[first] = p
        for n in p.nodes:
            key[index[n]] = first
    succ: dict[int, list[int]] = {}
    indeg = dict.fromkeys(set(key), 0)
    seen: set[tuple[int, int]] = set()

    def edge(q: int, u: int) -> None:
        if q != u and (q, u) not in seen:
            seen.add((q, u))
            succ.setdefault(q, []).append(u)
            indeg[u] += 1

    for i, pl in enumerate(preds):
        u = key[i]
        for j in pl:
            q = key[j]
            if q != u:
                edge(q, u)
    for a, b in result.ordering_edges:
        edge(key[index[a]], key[index[b]])
    heap = [u for u, d in indeg.items() if not d]
    heapq.heapify(heap)
    order: list[Any] = []
    while heap:
        u = heapq.heappop(heap)
        order.append(units[u] if u in units else nodes[u])
        for s in succ.get(u, ()):
            indeg[s] -= 1
            if not indeg[s]:
                heapq.heappush(heap, s)
    if len(order) != len(indeg):
        raise RuntimeError("internal error: contracting the partitions created a cycle; please report "
                           "this graph (the partitions are meant to be convex)")
    return order


@dataclass
class OutlinedGraph:
    """The result of :func:`outline`: the new parent graph, one subgraph per partition, the
    parent's call node per partition, and ``value_map`` from each original node to the parent
    node carrying its value (for partition outputs: the call or its getter)."""

    parent: DictGraph
    subgraphs: list[DictGraph]
    calls: list[DictNode]
    value_map: dict[Any, DictNode]


def _copy(dst: DictGraph, view: Any, node: Any, inputs: list[DictNode]) -> DictNode:
    kind = view.kind(node)
    return dst.add_node(view.op(node), inputs, dict(view.attrs(node)), name=view.name(node), kind=kind,
                        **dict(view.meta(node)))


def outline(result: PartitionResult | Any, partitions: PartitionResult | None = None, *,
            call_op: str = "torchvendor.partition", getter_op: str = "operator.getitem") -> OutlinedGraph:
    """Outline every partition of ``result`` (see the module docstring).

    Called as ``outline(result)`` or ``outline(view, result)``. Each subgraph has one
    ``placeholder`` input per boundary input (named after it) and an ``output`` node listing
    the partition's outputs in order; getter nodes carry ``attrs["index"]``.
    """
    if partitions is not None:
        result = partitions
    with paused_gc():
        return _outline(result, call_op, getter_op)


def _outline(result: PartitionResult, call_op: str, getter_op: str) -> OutlinedGraph:
    view = result.view
    parent = DictGraph()
    value: dict[Any, DictNode] = {}
    subgraphs: list[Any] = [None] * len(result.partitions)
    calls: list[Any] = [None] * len(result.partitions)
    for item in emission_order(result):
        if not isinstance(item, Partition):
            value[item] = _copy(parent, view, item, [value[x] for x in view.inputs(item)])
            continue
        sub = DictGraph()
        env = {x: sub.add_input(view.name(x), **dict(view.meta(x))) for x in item.inputs}
        for n in item.nodes:
            env[n] = _copy(sub, view, n, [env[x] for x in view.inputs(n)])
        sub.add_output([env[o] for o in item.outputs])
        call = parent.add_node(call_op, [value[x] for x in item.inputs],
                               {"subgraph": sub, "partition": item.id, "num_outputs": len(item.outputs)},
                               name=f"partition_{item.id}")
        if len(item.outputs) == 1:
            value[item.outputs[0]] = call
        else:
            for k, o in enumerate(item.outputs):
                value[o] = parent.add_node(getter_op, [call], {"index": k}, name=view.name(o), **dict(view.meta(o)))
        subgraphs[item.id], calls[item.id] = sub, call
    return OutlinedGraph(parent, subgraphs, calls, value)
