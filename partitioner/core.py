"""The capability partitioner: maximal convex groups of supported nodes, in linear time.

Algorithm (ONNX Runtime's ``CreateSupportedPartitionNodeGroups``, generalised):

1. **Index** the graph once: ``view.nodes()`` (topological), data edges from ``view.inputs``,
   plus *ordering edges* (read-before-write / write-before-read around in-place operators and
   any edges the caller passes), so mutation cannot be reordered by outlining (pytorch#81244).
2. **Support**: a node is a candidate iff ``view.kind(node) == "op"`` (inputs, outputs and
   constants never are, whatever the oracle says: pytorch#80753), its key is not in
   ``fallback_ops``, and the oracle accepts it. Op-key-only oracles are evaluated once per key.
3. **Atomic units**: atomic groups (pattern matches, QDQ units, caller-given), and each
   multi-output producer with its ``getitem`` users (transitively: nested ``with_effects``
   chains), are merged with union-find. If contracting the units creates a cycle (a node
   between two members of a group, or two groups that reach each other), the strongly connected
   components of the unit graph are merged (Tarjan): a group is closed under convexity. A unit
   with any unsupported member falls back whole.
4. **Waves** (Kahn's topological sort over units): the current group takes every ready
   supported unit; a ready unsupported unit runs at once unless it consumes the current group
   (then it is deferred to the next wave). When nothing is ready, the group closes. Independent
   branches around an unsupported node land in the same group (horizontal merging, #81531).
5. **Minimum size**: groups with fewer than ``min_size`` compute nodes go back to fallback and
   the waves are re-run with those nodes unsupported, until no group is too small.

Guarantees (see ``docs/partitioner.md`` for the proof sketch):

- every partition is convex, and all of them can be contracted at once without a cycle;
  partitions are returned in a topological order of the contracted graph;
- count-optimal ("maximal"): with the final candidate set S (supported nodes minus those
  dropped by ``min_size``), the number of partitions equals the largest number of maximal runs
  of S-units along any path of the unit graph -- a lower bound for *any* convex partitioning
  of S. No partition can be merged with another without breaking convexity;
- deterministic, and O(V + E) time and memory per round (one round unless ``min_size`` drops
  something).

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> g = DictGraph(); x = g.add_input("x")
    >>> a = g.add_node("relu", [x], name="a"); s = g.add_node("sin", [a], name="s")
    >>> b = g.add_node("relu", [x], name="b"); c = g.add_node("add", [s, b], name="c")
    >>> _ = g.add_output([c])
    >>> result = partition(g, {"relu", "add"})
    >>> [[g.name(n) for n in p.nodes] for p in result.partitions]  # b joins c: its value stays inside
    [['a'], ['b', 'c']]
    >>> [g.name(n) for n in result.fallback]
    ['s']
"""
from __future__ import annotations

import time
from collections import Counter
from itertools import chain, compress
from dataclasses import dataclass, field, fields, replace
from typing import Any, Collection, Generic, Hashable, Iterable, Sequence, TypeVar

from ..ir.gc_pause import paused_gc
from ..ir.graph_view import GraphView

from .boundary import boundary_total, eject_cheap, refine_waves, size_reader
from .cuts import pair_cuts
from .span import span_cut
from .support import as_oracle, check, op_matches

__all__ = ["PartitionOptions", "Partition", "PartitionResult", "PartitionError",
           "UnsupportedOperatorsError", "partition", "mutation_edges", "is_inplace_op", "paused_gc"]

N = TypeVar("N", bound=Hashable)

FORCED_REASON = "forced to fallback (fallback_ops)"
EJECTED_REASON = "a cheap op (cheap_ops) at a partition's edge: runs outside, fewer boundary bytes"

#: view-like ATen ops: cheap on the host, so a partition may leave them out at its edges
DEFAULT_CHEAP_OPS = frozenset({"aten.view", "aten._unsafe_view", "aten.reshape", "aten.permute", "aten.t",
                               "aten.transpose", "aten.expand", "aten.unsqueeze", "aten.squeeze", "aten.alias",
                               "aten.slice", "aten.select", "aten.detach"})


class PartitionError(ValueError):
    """A partitioning request that cannot be honoured (bad graph, bad options)."""


class UnsupportedOperatorsError(PartitionError):
    """Raised with ``require_full=True`` when some operator must fall back.

    ``unsupported`` maps each operator key to ``{"count": n, "reasons": {reason: n}}``.
    """

    def __init__(self, unsupported: dict[str, dict[str, Any]], total: int) -> None:
        self.unsupported = unsupported
        lines = [f"require_full=True but {total} node(s) of {len(unsupported)} operator(s) are not supported:"]
        for op, info in sorted(unsupported.items(), key=lambda kv: (-kv[1]["count"], kv[0])):
            reasons = "; ".join(f"{r} (x{c})" for r, c in info["reasons"].items())
            lines.append(f"  {op} x{info['count']}: {reasons}")
        super().__init__("\n".join(lines))


def _frozen(value: Any, name: str) -> frozenset[str]:
    if isinstance(value, str):
        raise PartitionError(f"{name} must be a collection of operator keys, not the string {value!r}")
    return frozenset(value)


@dataclass(frozen=True)
class PartitionOptions:
    """Options of :func:`partition` (hashable, so a backend can key caches by them).

    Attributes:
        min_size: partitions with fewer compute nodes go back to fallback (Torch-TensorRT's
            ``min_block_size``); the waves are then re-run.
        fallback_ops: operator keys forced to fallback (``torch_executed_ops``); a dotted prefix
            names every overload (``"aten.add"``) or a namespace (``"aten"``).
        require_full: raise :class:`UnsupportedOperatorsError` listing every unsupported
            operator (with counts and reasons) instead of falling back; ``min_size`` is ignored.
        getitem_ops: keys of tuple-element getters kept with their producer (FX
            ``operator.getitem``); empty to disable.
        non_compute_ops: keys not counted towards ``min_size``.
        min_size_exempt_ops: a partition containing one of these is kept whatever its size.
        merge_independent: keep horizontally merged independent branches in one partition;
            ``False`` splits every partition into its weakly connected components.
        detect_mutation: add ordering edges around in-place operators (see :func:`mutation_edges`).
        max_rounds: cap on min-size re-runs; past it, small partitions are dropped without re-run.
        boundary_aware: among the placements with the same (minimum) count, move units between
            waves to lower the boundary bytes (:mod:`~torchvendor.partitioner.boundary`);
            ``False`` keeps the plain earliest-wave assignment. Needs ``merge_independent``.
        pair_cuts: with ``boundary_aware``, place units by minimum cuts between adjacent waves
            (:mod:`~torchvendor.partitioner.cuts`, exact per pair) after the local sweeps, on graphs up
            to 1,000 nodes; ``False``: the sweeps only.
        cheap_ops: keys (dotted prefixes) of ops cheap to run outside (views); with
            ``boundary_aware``, one at a partition's edge falls back when that lowers the boundary
            bytes (CBP's bookend removal), with a reason saying so. Empty to disable.
    """

    min_size: int = 1
    fallback_ops: frozenset[str] = frozenset()
    require_full: bool = False
    getitem_ops: frozenset[str] = frozenset({"operator.getitem"})
    non_compute_ops: frozenset[str] = frozenset({"operator.getitem"})
    min_size_exempt_ops: frozenset[str] = frozenset()
    merge_independent: bool = True
    detect_mutation: bool = True
    max_rounds: int = 32
    boundary_aware: bool = True
    pair_cuts: bool = True
    cheap_ops: frozenset[str] = DEFAULT_CHEAP_OPS

    def __post_init__(self) -> None:
        for name in ("fallback_ops", "getitem_ops", "non_compute_ops", "min_size_exempt_ops", "cheap_ops"):
            object.__setattr__(self, name, _frozen(getattr(self, name), name))
        if not isinstance(self.min_size, int) or self.min_size < 0:
            raise PartitionError(f"min_size must be a non-negative int, got {self.min_size!r}")
        if self.max_rounds < 1:
            raise PartitionError(f"max_rounds must be >= 1, got {self.max_rounds!r}")


@dataclass
class Partition(Generic[N]):
    """One supported group. ``nodes`` are in the graph's topological order; ``inputs`` are the
    outside nodes whose values it consumes (order of first use); ``outputs`` the member nodes
    whose values are used outside (graph output included); ``size`` counts compute nodes."""

    id: int
    nodes: list[N]
    inputs: list[N]
    outputs: list[N]
    size: int

    def __len__(self) -> int:
        return len(self.nodes)


@dataclass
class PartitionResult(Generic[N]):
    """What :func:`partition` returns. ``reasons`` says why each fallback op node falls back."""

    view: GraphView
    partitions: list[Partition[N]]
    fallback: list[N]
    reasons: dict[N, str]
    assignment: dict[N, int]
    options: PartitionOptions
    ordering_edges: list[tuple[N, N]]
    stats: dict[str, Any] = field(default_factory=dict)
    #: operator key of every node, as computed once by the partitioner (reports reuse it)
    op_keys: dict[N, str] = field(default_factory=dict, repr=False)
    #: the indexed graph the partitioner saw (nodes in order, deduplicated data inputs as
    #: positions): lets outliners compute their order without asking the adapter again
    graph_index: tuple[list[N], list[list[int]]] | None = field(default=None, repr=False)
    #: value sizes (bytes, ``None`` if unknown) the partitioner looked up: reports reuse them
    value_sizes: dict[N, int | None] = field(default_factory=dict, repr=False)

    def partition_of(self, node: N) -> int | None:
        """The id of the partition holding ``node``, or ``None``."""
        return self.assignment.get(node)

    def report(self) -> "Any":
        """A :class:`~torchvendor.partitioner.report.PartitionReport` (text and JSON)."""
        from .report import PartitionReport

        return PartitionReport.from_result(self)


_INPLACE_EXCLUDE = frozenset({"operator.getitem"})


def is_inplace_op(op: str) -> bool:
    """Heuristic: the key names an in-place operator (a dotted part ending in one ``_``), which
    mutates its first input, e.g. ``aten.fill_.Scalar``, ``method.add_``, ``aten.copy_.default``.

    >>> is_inplace_op("aten.fill_.Scalar"), is_inplace_op("method.add_"), is_inplace_op("aten.add.Tensor")
    (True, True, False)
    """
    if op in _INPLACE_EXCLUDE:
        return False
    return any(part.endswith("_") and not part.endswith("__") for part in op.split(".")[1:])


def mutation_edges(view: GraphView, nodes: Sequence[Any] | None = None,
                   is_inplace: Any = None) -> list[tuple[Any, Any]]:
    """Ordering edges that keep reads and in-place writes of the same value in order.

    For each in-place node ``m`` (``is_inplace(view.op(m))``, default :func:`is_inplace_op`)
    that mutates its first input ``v``: every other user ``w`` of ``v`` gets ``w -> m`` if it
    comes first in ``view.nodes()`` (read before write) and ``m -> w`` otherwise. Aliases made
    by view operators are not tracked (functionalised ATen graphs have none).

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> g = DictGraph(); x = g.add_input("x"); y = g.add_node("clone", [x], name="y")
    >>> f = g.add_node("method.fill_", [y], name="f"); z = g.add_node("add", [y, x], name="z")
    >>> [(a.name, b.name) for a, b in mutation_edges(g)]
    [('f', 'z')]
    """
    nodes = list(view.nodes()) if nodes is None else nodes
    is_inplace = is_inplace or is_inplace_op
    position = None
    edges = []
    for m in nodes:
        if view.kind(m) != "op" or not is_inplace(view.op(m)):
            continue
        ins = view.inputs(m)
        if not ins:
            continue
        if position is None:
            position = {n: i for i, n in enumerate(nodes)}
        pm = position[m]
        for w in view.users(ins[0]):
            if w is m or w == m:
                continue
            edges.append((w, m) if position[w] < pm else (m, w))
    return edges


def _mutation_edges(nodes, ops, kinds, preds, succ, view_inputs, get_index) -> list[tuple[Any, Any]]:
    """:func:`mutation_edges` on the partitioner's index arrays (no extra adapter calls)."""
    edges = []
    inplace_cache: dict[str, bool] = {}
    for m, op in enumerate(ops):
        flag = inplace_cache.get(op)
        if flag is None:
            flag = inplace_cache[op] = is_inplace_op(op)
        if not flag or kinds[m] != "op" or not preds[m]:
            continue
        v = get_index(view_inputs(nodes[m])[0])
        for w in succ[v]:
            if w != m:
                edges.append((nodes[w], nodes[m]) if w < m else (nodes[m], nodes[w]))
    return edges


class _UnionFind:
    __slots__ = ("parent", "linked")

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        #: every node ever attached below another root: the only non-roots
        self.linked: list[int] = []

    def find(self, x: int) -> int:
        parent = self.parent
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if ra < rb:
            self.parent[rb] = ra
            self.linked.append(rb)
        else:
            self.parent[ra] = rb
            self.linked.append(ra)
        return True


def _waves(n: int, succ: Sequence[Sequence[int]], indeg0: Sequence[int],
           sup: Sequence[bool]) -> tuple[list[int], int, list[int]]:
    """Kahn's sort in waves (see the module docstring). Returns (wave of each unit or -1,
    #waves, the units in processing order: a topological order, short iff the unit graph has a
    cycle)."""
    indeg = list(indeg0)
    ready = [u for u in range(n - 1, -1, -1) if not indeg[u]]
    assign = [-1] * n
    border = [-1] * n
    deferred: list[int] = []
    wave, group = 0, 0
    order: list[int] = []
    pop, push, done = ready.pop, ready.append, order.append
    while True:
        while ready:
            u = pop()
            if sup[u]:
                done(u)
                assign[u] = wave
                group += 1
                for s in succ[u]:
                    border[s] = wave
                    indeg[s] -= 1
                    if not indeg[s]:
                        push(s)
            elif border[u] == wave:
                deferred.append(u)
            else:
                done(u)
                for s in succ[u]:
                    indeg[s] -= 1
                    if not indeg[s]:
                        push(s)
        if not deferred:
            break
        if group:
            wave, group = wave + 1, 0
        deferred.reverse()
        ready.extend(deferred)
        deferred.clear()
    return assign, wave + (1 if group else 0), order


def _tarjan_merge(n: int, succ: Sequence[Iterable[int]], uf: _UnionFind, rep: Sequence[int]) -> int:
    """Union (in ``uf``, through representative node ``rep[u]``) the units of every non-trivial
    strongly connected component of the unit graph; iterative Tarjan. Returns #merges."""
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    counter = merges = 0
    succ_l = [list(s) for s in succ]
    for root in range(n):
        if index[root] != -1:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, i = work[-1]
            if i < len(succ_l[v]):
                work[-1] = (v, i + 1)
                w = succ_l[v][i]
                if index[w] == -1:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, 0))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    if w != v:
                        merges += uf.union(rep[v], rep[w])
                    else:
                        break
    return merges


def partition(view: GraphView, support: Any, *, atomic_groups: Iterable[Collection[Any]] = (),
              ordering_edges: Iterable[tuple[Any, Any]] = (), options: PartitionOptions | None = None,
              **option_overrides: Any) -> PartitionResult:
    """Split ``view`` into maximal convex partitions of supported nodes (see the module docstring).

    Args:
        view: any :class:`~torchvendor.ir.graph_view.GraphView`; ``nodes()`` must be topological.
        support: the oracle: a :class:`~torchvendor.partitioner.support.SupportRule`, a collection
            of supported operator keys, or a callable ``fn(view, node)`` / ``fn(node)`` returning
            ``True``, ``False``, an ``Unsupported(reason)`` or a reason string.
        atomic_groups: collections of nodes never split (pattern matches, QDQ units); non-op
            members are ignored; overlapping groups are merged.
        ordering_edges: extra ``(before, after)`` dependencies (side effects the graph does not
            show as data flow).
        options: a :class:`PartitionOptions`; keyword arguments override its fields.

    Example::

        >>> from torchvendor.ir.graph_view import DictGraph
        >>> g = DictGraph(); x = g.add_input("x"); y = g.add_node("relu", [x])
        >>> z = g.add_node("relu", [y]); _ = g.add_output([z])
        >>> [len(p) for p in partition(g, {"relu"}).partitions], partition(g, {"relu"}, min_size=3).fallback
        ([2], [%relu, %relu_1])
    """
    opts = options or PartitionOptions()
    if option_overrides:
        known = {f.name for f in fields(PartitionOptions)}
        unknown = sorted(set(option_overrides) - known)
        if unknown:
            raise PartitionError(f"unknown partition option(s) {unknown}; known: {sorted(known)}")
        opts = replace(opts, **option_overrides)
    rule = as_oracle(support)
    with paused_gc():
        return _partition(view, rule, atomic_groups, ordering_edges, opts)


class _Index:
    """The graph as position arrays (step 1): what every later step reads.

    ``preds``/``data_succ`` hold data edges only; ``all_preds``/``all_succ`` add the ordering
    edges (``edges``). ``index`` maps a node to its position in ``nodes``."""

    __slots__ = ("nodes", "index", "ops", "kinds", "is_op", "preds", "data_succ",
                 "all_preds", "all_succ", "edges", "op_set", "sizes")

    def __init__(self, nodes, index, ops, kinds, preds, data_succ, all_preds, all_succ, edges, op_set) -> None:
        self.nodes, self.index, self.ops, self.kinds, self.op_set = nodes, index, ops, kinds, op_set
        #: value sizes looked up so far (position -> bytes, ``None`` if unknown)
        self.sizes: dict[int, int | None] = {}
        self.is_op = [k == "op" for k in kinds]
        self.preds, self.data_succ, self.all_preds, self.all_succ, self.edges = (
            preds, data_succ, all_preds, all_succ, edges)


class _Units:
    """The atomic units (step 3): ``unit_of`` is ``None`` when every node is its own unit."""

    __slots__ = ("uf", "n_units", "unit_of", "usucc", "uindeg", "members", "sup", "upreds", "order")

    def __init__(self, uf, n_units, unit_of, usucc, uindeg, members, sup, upreds) -> None:
        self.uf, self.n_units, self.unit_of, self.usucc = uf, n_units, unit_of, usucc
        self.uindeg, self.members, self.sup, self.upreds = uindeg, members, sup, upreds
        #: a topological order of the units (the wave scan's processing order), once it ran
        self.order: Sequence[int] | None = None


def _partition(view: GraphView, rule: Any, atomic_groups: Iterable[Collection[Any]],
               ordering_edges: Iterable[tuple[Any, Any]], opts: PartitionOptions) -> PartitionResult:
    """Steps 1-6 of the module docstring, one function each."""
    t_start = time.perf_counter()
    g = _index_graph(view, ordering_edges, opts.detect_mutation)
    reasons, n_unsupported, oracle_calls = _support(view, rule, g, opts)
    n_nodes = len(g.nodes)
    stats: dict[str, Any] = {"nodes": n_nodes, "edges": sum(map(len, g.preds)), "ordering_edges": len(g.edges),
                             "oracle_calls": oracle_calls, "rounds": 0, "waves": 0,
                             "fast_path": False, "unit_merges": 0, "scc_merges": 0}
    atomic_groups = list(atomic_groups)
    fast = (n_unsupported == 0 and (opts.merge_independent or not atomic_groups)
            and not _has_interior_non_op(g))
    units = _atomic_units(view, g, reasons, atomic_groups, opts, fast, stats)
    groups, units, unit_wave = _waves_and_min_size(view, g, units, reasons, opts, fast, stats)
    if (opts.boundary_aware and opts.merge_independent and stats["waves"] and "min_size_capped" not in stats
            and (stats["waves"] > 1 or opts.cheap_ops) and not (stats["fast_path"] and atomic_groups)):
        # (the fast path builds no units, so it cannot tell an atomic group's view apart)
        groups = _refine_boundary(view, g, units, unit_wave, reasons, opts, stats) or groups
    result = _assemble(view, g, groups, reasons, opts, stats)
    stats["seconds"] = time.perf_counter() - t_start
    return result


def _index_graph(view: GraphView, ordering_edges: Iterable[tuple[Any, Any]], detect_mutation: bool) -> _Index:
    """Step 1: positions, op keys, kinds, deduplicated data edges, and ordering edges."""
    nodes = list(view.nodes())
    n_nodes = len(nodes)
    index = dict(zip(nodes, range(n_nodes)))
    if len(index) != n_nodes:
        raise PartitionError("view.nodes() lists a node twice")
    get_index, view_inputs, view_op = index.__getitem__, view.inputs, view.op
    ops = list(map(view_op, nodes))
    kinds = _kinds(view, nodes, ops)
    preds, succ, p = _data_edges(view, nodes, index)
    if p >= 0:
        raise PartitionError(f"view.nodes() is not in topological order: {view.name(nodes[succ[p][0]])} "
                             f"comes before its input {view.name(nodes[p])}")
    edges = list(ordering_edges)
    op_set = set(ops)
    if detect_mutation and any(map(is_inplace_op, op_set)):
        edges += _mutation_edges(nodes, ops, kinds, preds, succ, view_inputs, get_index)
    all_preds, all_succ = preds, succ
    if edges:
        all_preds, all_succ = list(preds), list(succ)
        for a, b in edges:
            if a not in index or b not in index:
                raise PartitionError(f"ordering edge ({a!r}, {b!r}) names a node not in the graph")
            ia, ib = index[a], index[b]
            if ia >= ib:
                raise PartitionError(f"ordering edge {view.name(a)} -> {view.name(b)} goes against the "
                                     f"topological order of view.nodes()")
            if ia in all_preds[ib]:
                continue
            all_preds[ib] = all_preds[ib] + [ia]  # new lists: preds/succ stay data-only
            all_succ[ia] = all_succ[ia] + [ib]
    return _Index(nodes, index, ops, kinds, preds, succ, all_preds, all_succ, edges, op_set)


def _kinds(view: GraphView, nodes: list[Any], ops: list[str]) -> list[str]:
    """``view.kind`` of every node; asked once per operator key when the view declares that a
    node's kind follows from its key (``kind_follows_op``, e.g. FX)."""
    if not getattr(view, "kind_follows_op", False):
        return list(map(view.kind, nodes))
    first = dict(zip(reversed(ops), reversed(nodes)))  # a node of each key
    kind_of = {op: view.kind(node) for op, node in first.items()}
    return list(map(kind_of.__getitem__, ops))


def _data_edges(view: GraphView, nodes: list[Any],
                index: dict[Any, int]) -> tuple[list[list[int]], list[list[int]], int]:
    """Each node's distinct data inputs (positions, order of first use) and readers (in order),
    and the first node read at or before its own position (which breaks the topological order),
    else -1. The view is asked once per node; the positions are looked up in one flat pass."""
    ins = list(map(view.inputs, nodes))
    try:
        flat = list(map(index.__getitem__, chain.from_iterable(ins)))
    except KeyError as exc:
        raise PartitionError(f"a node consumes {exc.args[0]!r}, which view.nodes() does not list") from None
    return _edges(list(map(len, ins)), flat)


def _edges(lens: list[int], flat: list[int]) -> tuple[list[list[int]], list[list[int]], int]:
    """:func:`_data_edges` from the inputs' counts and their positions end to end.

    >>> _edges([0, 2, 3], [0, 0, 1, 0, 1])
    ([[], [0], [1, 0]], [[1, 2], [2], []], -1)
    """
    n = len(lens)
    preds: list[list[int]] = []
    at = 0
    for k in lens:
        pl = flat[at:at + k]
        at += k
        # most nodes have one or two distinct inputs: test for repeats before paying for a dedup
        if k == 2:
            if pl[0] == pl[1]:
                del pl[1]
        elif k > 2 and len(set(pl)) != k:
            pl = list(dict.fromkeys(pl))
        preds.append(pl)
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, pl in enumerate(preds):
        for p in pl:
            succ[p].append(i)
    first = [ss[0] if ss else n for ss in succ]  # readers are in order: the first must come after
    return preds, succ, next((p for p, f in enumerate(first) if f <= p), -1)


def _support(view: GraphView, rule: Any, g: _Index, opts: PartitionOptions) -> tuple[list[str | None], int, int]:
    """Step 2: the reason each op node falls back (``None``: supported). Returns (reasons,
    #unsupported op nodes, #oracle calls); raises with ``require_full``."""
    ops, is_op, nodes = g.ops, g.is_op, g.nodes
    forced = opts.fallback_ops
    op_cache: dict[str, str | None] = {}
    oracle_calls = 0
    for op in dict.fromkeys(compress(ops, is_op)):  # distinct op keys, first-seen order
        if forced and op_matches(op, forced):
            op_cache[op] = FORCED_REASON
        elif rule.op_only:
            try:
                op_cache[op] = check(rule.by_op(op))
            except Exception as exc:
                raise PartitionError(f"the support oracle raised on operator {op}: "
                                     f"{type(exc).__name__}: {exc}") from exc
    if rule.op_only:
        reasons: list[str | None] = [op_cache[o] if k else None for o, k in zip(ops, is_op)]
        oracle_calls = len(op_cache)
    else:
        reasons = [None] * len(nodes)
        evaluate = rule.evaluate
        for i, op in enumerate(ops):
            if not is_op[i]:
                continue
            if op in op_cache:
                reasons[i] = op_cache[op]
                continue
            oracle_calls += 1
            try:
                reasons[i] = check(evaluate(view, nodes[i], op))
            except Exception as exc:
                raise PartitionError(f"the support oracle raised on node {view.name(nodes[i])} ({op}): "
                                     f"{type(exc).__name__}: {exc}") from exc
    n_unsupported = len(nodes) - reasons.count(None)  # non-op nodes have no reason
    if opts.require_full and n_unsupported:
        raise UnsupportedOperatorsError(_summarise(ops, reasons, is_op), n_unsupported)
    return reasons, n_unsupported, oracle_calls


def _has_interior_non_op(g: _Index) -> bool:
    """An input/constant between two op nodes (the fast path, Torch-TensorRT#4530, needs none)."""
    is_op, all_preds, all_succ = g.is_op, g.all_preds, g.all_succ
    return any(not is_op[i] and any(is_op[p] for p in all_preds[i]) and any(is_op[s] for s in all_succ[i])
               for i in range(len(is_op)))


def _atomic_units(view: GraphView, g: _Index, reasons: list[str | None], atomic_groups: list[Collection[Any]],
                  opts: PartitionOptions, fast: bool, stats: dict[str, Any]) -> _Units:
    """Step 3: union atomic groups and getitem chains; contract them into units.

    On the fast path (every op node supported, no interior input) one partition holds every op
    node, so units cannot change the result and are not built."""
    n_nodes, index, is_op, ops, preds = len(g.nodes), g.index, g.is_op, g.ops, g.preds
    uf: _UnionFind | None = None
    for group in atomic_groups:
        members = []
        for node in group:
            if node not in index:
                raise PartitionError(f"atomic group member {node!r} is not a node of the graph")
            if is_op[index[node]]:
                members.append(index[node])
        if len(members) > 1 and not fast:
            uf = uf or _UnionFind(n_nodes)
            for m in members[1:]:
                stats["unit_merges"] += uf.union(members[0], m)
    getitem_ops = opts.getitem_ops if not fast else frozenset()
    if getitem_ops and not getitem_ops.isdisjoint(g.op_set):
        for i in range(n_nodes):
            if is_op[i] and ops[i] in getitem_ops and preds[i]:
                producer = preds[i][0]  # getitem(x, k) consumes one node: its producer
                if is_op[producer]:
                    uf = uf or _UnionFind(n_nodes)
                    stats["unit_merges"] += uf.union(producer, i)
    if uf is None or fast:
        return _Units(None, n_nodes, None, g.all_succ, list(map(len, g.all_preds)), {},
                      [k and r is None for k, r in zip(is_op, reasons)], g.all_preds)
    return _contract(view, g, uf, reasons)


def _contract(view: GraphView, g: _Index, uf: _UnionFind, reasons: list[str | None]) -> _Units:
    """The unit graph of ``uf``'s classes, with each unit's support."""
    n_units, unit_of, usucc, upreds, members = _quotient(uf, len(g.nodes), g.all_preds, g.all_succ)
    sup = _unit_support(view, g.nodes, g.ops, g.is_op, reasons, unit_of, members)
    return _Units(uf, n_units, unit_of, usucc, list(map(len, upreds)), members, sup, upreds)


def _merge_cycles(view: GraphView, g: _Index, units: _Units, reasons: list[str | None],
                  stats: dict[str, Any]) -> _Units:
    """Contracting the atomic units made a cycle: merge each strongly connected component of
    the unit graph into one unit (once)."""
    if units.unit_of is None or stats["scc_merges"]:
        raise AssertionError("internal error: cycle in the graph or unit graph after SCC merge")
    rep = [0] * units.n_units
    for i in range(len(g.nodes) - 1, -1, -1):
        rep[units.unit_of[i]] = i
    stats["scc_merges"] = _tarjan_merge(units.n_units, units.usucc, units.uf, rep)
    return _contract(view, g, units.uf, reasons)


def _waves_and_min_size(view: GraphView, g: _Index, units: _Units, reasons: list[str | None],
                        opts: PartitionOptions, fast: bool,
                        stats: dict[str, Any]) -> tuple[dict[tuple[int, int], list[int]], _Units, list[int]]:
    """Steps 4 and 5: waves, then drop groups below ``min_size`` and re-run until none is.
    Returns (groups keyed by (wave, first node), the final units, wave of each unit or -1)."""
    ops = g.ops
    non_compute, exempt = opts.non_compute_ops, opts.min_size_exempt_ops
    min_size = 0 if opts.require_full else opts.min_size
    while True:
        stats["rounds"] += 1
        if fast:
            stats["fast_path"] = True
            wave_of_unit = [0 if s else -1 for s in units.sup]
            n_waves = 1 if any(units.sup) else 0
        else:
            wave_of_unit, n_waves, units.order = _waves(units.n_units, units.usucc, units.uindeg, units.sup)
            if len(units.order) != units.n_units:
                units = _merge_cycles(view, g, units, reasons, stats)
                stats["rounds"] -= 1
                continue
        stats["waves"] = n_waves
        unit_of = units.unit_of
        node_wave = wave_of_unit if unit_of is None else list(map(wave_of_unit.__getitem__, unit_of))
        groups = _split_groups(node_wave, g.all_preds, opts.merge_independent, unit_of)
        small = []
        if min_size > 1:
            all_compute = non_compute.isdisjoint(g.op_set)
            for key, members in groups.items():
                size = len(members) if all_compute else sum(1 for i in members if ops[i] not in non_compute)
                if size < min_size and not (exempt and any(op_matches(ops[i], exempt) for i in members)):
                    small.append((members, size))
        if not small:
            return groups, units, wave_of_unit
        for members, size in small:
            why = f"in a partition of {size} compute node(s), below min_size={min_size}"
            for i in members:
                reasons[i] = why
                units.sup[i if unit_of is None else unit_of[i]] = False
        if stats["rounds"] >= opts.max_rounds:  # give up re-running: drop what is still small
            for members, _ in small:
                for i in members:
                    node_wave[i] = -1
            stats["min_size_capped"] = True
            return {k: v for k, v in groups.items() if reasons[v[0]] is None}, units, wave_of_unit
        fast = False


def _refine_boundary(view: GraphView, g: _Index, units: _Units, unit_wave: list[int], reasons: list[str | None],
                     opts: PartitionOptions, stats: dict[str, Any]) -> dict[tuple[int, int], list[int]] | None:
    """Step 5b: move units between waves to lower the boundary bytes, keeping the count, and
    leave cheap ops at partition edges outside where that helps
    (:mod:`~torchvendor.partitioner.boundary`); the groups of the new waves (``None``: unchanged)."""
    n_waves, unit_of = stats["waves"], units.unit_of
    cheap_ops = opts.cheap_ops
    is_cheap = {op: op_matches(op, cheap_ops) for op in dict.fromkeys(g.ops)} if cheap_ops else {}
    cheap = [i for i, op in enumerate(g.ops) if is_cheap[op]] if any(is_cheap.values()) else []
    if n_waves < 2 and not cheap:
        return None
    nodes, nbytes = g.nodes, size_reader(view)
    sizes = g.sizes  # node -> bytes or None (unknown: counts 1 here), kept for the report

    def size_of(i: int) -> int:
        s = sizes.get(i, -1)
        if s == -1:
            s = sizes[i] = nbytes(nodes[i])
        return s or 1

    upreds = units.upreds
    min_size = 0 if opts.require_full else opts.min_size
    starts = [unit_wave]
    if 1 < n_waves and len(nodes) <= _TWO_STARTS_MAX_NODES:
        latest = _latest_waves(units, upreds, n_waves)
        if latest is not None and (min_size <= 1 or _sizes_ok(g, units, latest, n_waves, min_size, opts)):
            starts.append(latest)
    best = None
    shared = [-1] * len(nodes)  # size_of per node, looked up once for every start
    books = _books(g, units, min_size, opts)
    eject = (lambda w: eject_cheap(w, unit_of, units.members, cheap, g.preds, g.data_succ, size_of, sizes=shared,
                                   books=books) if cheap else [])
    cuts = opts.pair_cuts and n_waves > 1 and len(nodes) <= _CUTS_MAX_NODES
    n_old = len(starts)
    if cuts:  # the span cut's placement (a proven bound), from the scan's waves before they are refined
        spanned = _span_start(g, units, unit_wave, n_waves, size_of, shared, books, opts, stats)
        if spanned is not None:
            starts.append(spanned)
    swept = []
    for i, start in enumerate(starts):  # earliest waves, latest waves (small graphs), the span cut's
        moves = refine_waves(start, n_waves, units.usucc, upreds, unit_of, units.members, g.preds, g.data_succ,
                             size_of, order=None if unit_of is None else units.order, sizes=shared,
                             books=books) if n_waves > 1 else 0
        placed = list(start) if cuts else None
        ejected = eject(start)
        cost = boundary_total(start, unit_of, g.data_succ, size_of, shared) if len(starts) > 1 or cuts else 0
        swept.append((cost, i, start, moves, ejected, placed))
    finalists = [min(swept[:n_old], key=lambda r: r[0])]  # the cheaper of the earliest and latest waves
    if len(swept) > n_old and swept[-1][0] < finalists[0][0]:
        finalists.append(swept[-1])  # the span cut's is cheaper after the sweeps: finish both, keep the cheaper
    best = None
    for cost, i, start, moves, ejected, placed in finalists:
        if cuts:  # the exact pair cuts from the sweeps' placement: kept where they lower the bytes
            cut = _place(placed, n_waves, units, g, size_of, shared, books, stats)
            if cut:
                ejected_cut = eject(placed)
                after = boundary_total(placed, unit_of, g.data_succ, size_of, shared)
                if after < cost:
                    cost, start, ejected, moves = after, placed, ejected_cut, moves + cut
        if best is None or cost < best[0]:
            best = (cost, i, start, moves, ejected)
    _, i, unit_wave, stats["boundary_moves"], ejected = best
    stats["boundary_start"] = ("earliest", "latest", "span")[i if i < n_old else 2]
    stats["ejected"] = len(ejected)
    for i in ejected:
        reasons[i] = EJECTED_REASON
    node_wave = unit_wave if unit_of is None else list(map(unit_wave.__getitem__, unit_of))
    return _split_groups(node_wave, g.all_preds, True, unit_of)


def _span_start(g: _Index, units: _Units, unit_wave: list[int], n_waves: int, size_of, sizes: list[int], books,
                opts: PartitionOptions, stats: dict[str, Any]) -> list[int] | None:
    """The placement of least span cost (:func:`~torchvendor.partitioner.span.span_cut`), or
    ``None`` where its network would pass :data:`_SPAN_MAX_LAYERS` (or its cut
    :data:`_SPAN_MAX_PHASES`) or a wave would fall below
    ``min_size``. Sets ``stats["bytes_lower_bound"]`` (no count-optimal, jointly convex placement
    moves fewer bytes) and ``stats["bytes_bound"]`` (``rho``: the placement is within that factor
    of the optimum, docs/partitioner.md)."""
    min_size, _, exempt = books
    order = None if units.unit_of is None else units.order
    waves, span, shared, rho = span_cut(unit_wave, n_waves, units.usucc, units.upreds, units.unit_of, g.data_succ,
                                        size_of, order=order, sizes=sizes, pinned=exempt,
                                        max_layers=_SPAN_MAX_LAYERS * len(g.nodes), max_phases=_SPAN_MAX_PHASES)
    if waves is None or (min_size > 1 and not _sizes_ok(g, units, waves, n_waves, min_size, opts)):
        return None
    stats["bytes_span"] = span  # the span start's true bytes are at most this, so the result's too
    stats["bytes_lower_bound"] = shared + -(-(span - shared) // rho)  # ceil: the optimum is an integer
    stats["bytes_bound"] = rho
    return waves


#: the span cut runs where its layered network has at most this many nodes per graph node
_SPAN_MAX_LAYERS = 8
#: and gives up past this many phases of its minimum cut (Dinic): on the corpus most cuts take a few, a few
#: take about a hundred (a long augmenting path per phase through the layers) at 20x the time
_SPAN_MAX_PHASES = 32


def _place(uwave: list[int], n_waves: int, units: _Units, g: _Index, size_of, sizes: list[int], books,
           stats: dict[str, Any]) -> int:
    """Pair cuts (:func:`~torchvendor.partitioner.cuts.pair_cuts`: exact between adjacent
    waves), then the local sweeps where they still lower the bytes, alternated until neither
    moves a unit (at most :data:`_PLACE_ROUNDS` times); returns the number of moves."""
    order = None if units.unit_of is None else units.order
    args = (uwave, n_waves, units.usucc, units.upreds, units.unit_of, units.members, g.preds, g.data_succ, size_of)
    moves = 0
    for _ in range(_PLACE_ROUNDS):
        cut = pair_cuts(*args, order=order, sizes=sizes, books=books)
        swept = refine_waves(*args, order=order, sizes=sizes, books=books)
        stats["cut_moves"] = stats.get("cut_moves", 0) + cut
        moves += cut + swept
        if not swept:
            break
    return moves


#: rounds of pair cuts and sweeps in :func:`_place`
_PLACE_ROUNDS = 4

#: graphs up to this many nodes get the pair cuts (without the cap the 10k-node bench rows took 2.8-4.6x their
#: capped time, even with the cuts in C as they were in issue 22's second round: larger graphs keep the sweeps)
_CUTS_MAX_NODES = 1000


def _sizes_ok(g: _Index, units: _Units, unit_wave: list[int], n_waves: int, min_size: int,
              opts: PartitionOptions) -> bool:
    """Every wave holds ``min_size`` compute nodes, or an exempt op."""
    ops, non_compute, exempt = g.ops, opts.non_compute_ops, opts.min_size_exempt_ops
    node_wave = unit_wave if units.unit_of is None else list(map(unit_wave.__getitem__, units.unit_of))
    if not exempt and non_compute.isdisjoint(g.op_set):  # every node computes: count at C speed
        per_wave = Counter(node_wave)
        return all(per_wave[w] >= min_size for w in range(n_waves))
    count = [0] * n_waves
    kept = [False] * n_waves
    for i, w in enumerate(node_wave):
        if w >= 0:
            count[w] += ops[i] not in non_compute
            if exempt and op_matches(ops[i], exempt):
                kept[w] = True
    return all(c >= min_size or k for c, k in zip(count, kept))


#: graphs up to this many nodes are also refined from the latest-wave assignment
_TWO_STARTS_MAX_NODES = 5000


def _latest_waves(units: _Units, upreds: Sequence[Sequence[int]], n_waves: int) -> list[int] | None:
    """The waves run on the reversed unit graph, numbered back: every unit as late as it can
    be (``None`` if the count differs, which the symmetric optimality rules out)."""
    rev_indeg = list(map(len, units.usucc))
    rev, k, order = _waves(units.n_units, upreds, rev_indeg, units.sup)
    if k != n_waves or len(order) != units.n_units:
        return None
    return [n_waves - 1 - w if w >= 0 else -1 for w in rev]


def _books(g: _Index, units: _Units, min_size: int, opts: PartitionOptions) -> tuple[int, list[bool] | None,
                                                                                   list[bool] | None]:
    """The :func:`~torchvendor.partitioner.boundary.wave_books` rule of this graph: ``min_size``,
    whether each node counts towards it (``None``: all do), and whether each unit holds a
    ``min_size_exempt_ops`` node (``None``: none does, or ``min_size <= 1``)."""
    ops, non_compute, exempt = g.ops, opts.non_compute_ops, opts.min_size_exempt_ops
    compute = None if non_compute.isdisjoint(g.op_set) else [op not in non_compute for op in ops]
    exempt_units = None
    if min_size > 1 and exempt:
        exempt_units = [False] * units.n_units
        for i, op in enumerate(ops):
            if op_matches(op, exempt):
                exempt_units[i if units.unit_of is None else units.unit_of[i]] = True
    return min_size, compute, exempt_units


def _assemble(view: GraphView, g: _Index, groups: dict[tuple[int, int], list[int]],
              reasons: list[str | None], opts: PartitionOptions, stats: dict[str, Any]) -> PartitionResult:
    """Step 6: :class:`Partition` objects (ids in group-key order), fallback nodes and reasons."""
    nodes, ops, preds, is_op = g.nodes, g.ops, g.preds, g.is_op
    non_compute = opts.non_compute_ops
    all_compute = non_compute.isdisjoint(g.op_set)
    node_at = nodes.__getitem__
    n_nodes = len(nodes)
    parts = [groups[key] for key in sorted(groups)]
    part_of, inputs, is_out = _crossings(parts, preds, n_nodes)
    result_parts: list[Partition] = []
    assignment: dict[Any, int] = {}
    for pid, members in enumerate(parts):
        size = len(members) if all_compute else sum(1 for i in members if ops[i] not in non_compute)
        member_nodes = list(map(node_at, members))
        outs = list(compress(member_nodes, map(is_out.__getitem__, members)))
        result_parts.append(Partition(pid, member_nodes, list(map(node_at, inputs[pid])), outs, size))
        assignment.update(dict.fromkeys(member_nodes, pid))
    fallback_idx = [i for i, p in enumerate(part_of) if p < 0 and is_op[i]]
    fallback = list(map(node_at, fallback_idx))
    reason_map = {nodes[i]: reasons[i] or "" for i in fallback_idx}
    return PartitionResult(view, result_parts, fallback, reason_map, assignment, opts,
                           [(a, b) for a, b in g.edges], stats, dict(zip(nodes, ops)), (nodes, preds),
                           {nodes[i]: b for i, b in g.sizes.items()})


def _unit_support(view, nodes, ops, is_op, reasons, unit_of, members) -> list[bool]:
    """A unit is supported iff all its members are supported op nodes; members of a failing
    multi-node unit get a reason naming the culprit. ``members``: root -> members, for the
    multi-node units only (every other unit is its own single node)."""
    unit_sup = [k and r is None for k, r in zip(is_op, reasons)]
    for root, group in members.items():
        for i in group[1:]:  # slots of non-root members are not units
            unit_sup[i] = False
        bad = next((i for i in group if is_op[i] and reasons[i] is not None), None)
        if bad is None and all(is_op[i] for i in group):
            unit_sup[root] = True
            continue
        unit_sup[root] = False
        for i in group:
            if is_op[i] and reasons[i] is None:
                reasons[i] = (f"in an atomic group with unsupported {view.name(nodes[bad])} ({ops[bad]})"
                              if bad is not None else "in an atomic group with a non-op node")
    return unit_sup


def _quotient(uf: _UnionFind, n_nodes: int, all_preds: Sequence[Sequence[int]],
              all_succ: Sequence[Sequence[int]]):
    """Contract units. A unit's id is its root, the index of its first node (so ids follow the
    graph order); slots of non-root members stay empty. Only edges that touch a multi-node unit
    are rewritten and deduplicated; the rest of the adjacency is shared with the node graph."""
    find = uf.find
    unit_of = list(range(n_nodes))
    for i in uf.linked:
        unit_of[i] = find(i)
    members: dict[int, list[int]] = {}
    for i in sorted(uf.linked):
        members.setdefault(unit_of[i], [unit_of[i]]).append(i)
    usucc: list[Sequence[int]] = list(all_succ)
    upreds: list[Sequence[int]] = list(all_preds)
    touched: dict[int, None] = {}
    for group in members.values():
        for m in group:
            touched[m] = None
            touched.update(dict.fromkeys(all_preds[m]))
            touched.update(dict.fromkeys(all_succ[m]))
    # An untouched unit is a single node with no multi-node neighbour: its node adjacency is
    # already its unit adjacency. Touched units are recomputed: distinct neighbour units.
    done: set[int] = set()
    for t in touched:
        r = unit_of[t]
        if r != t:  # slot of a non-root member: empty
            usucc[t], upreds[t] = [], []
        if r in done:
            continue
        done.add(r)
        group = members.get(r, (r,))
        outs: dict[int, None] = {}
        ins: dict[int, None] = {}
        for m in group:
            for k in all_succ[m]:
                outs[unit_of[k]] = None
            for k in all_preds[m]:
                ins[unit_of[k]] = None
        outs.pop(r, None)
        ins.pop(r, None)
        usucc[r], upreds[r] = list(outs), sorted(ins)
    return n_nodes, unit_of, usucc, upreds, members


def _split_groups(node_wave: Sequence[int], all_preds: Sequence[Sequence[int]], merge_independent: bool,
                  unit_of: Sequence[int] | None) -> dict[tuple[int, int], list[int]]:
    """Group assigned nodes by wave (or by weakly connected component within a wave); members in
    topological order; the key is (wave, component's first node)."""
    groups: dict[tuple[int, int], list[int]] = {}
    if merge_independent:
        return {(w, b[0]): b for w, b in enumerate(_buckets(node_wave)) if b}
    uf = _UnionFind(len(node_wave))
    first_of_unit: dict[int, int] = {}
    for i, w in enumerate(node_wave):
        if w >= 0:
            if unit_of is not None:  # atomic units are never split into components
                uf.union(first_of_unit.setdefault(unit_of[i], i), i)
            for p in all_preds[i]:
                if node_wave[p] == w:
                    uf.union(p, i)
    for i, w in enumerate(node_wave):
        if w >= 0:
            groups.setdefault((w, uf.find(i)), []).append(i)
    return {(w, members[0]): members for (w, _), members in groups.items()}


def _buckets(node_wave: Sequence[int]) -> list[list[int]]:
    """The nodes of each wave, in order (``-1``: in none).

    >>> _buckets([1, -1, 0, 1])
    [[2], [0, 3]]
    """
    buckets: list[list[int]] = [[] for _ in range(max(node_wave, default=-1) + 1)]
    for i, w in enumerate(node_wave):
        if w >= 0:
            buckets[w].append(i)
    return buckets


def _crossings(parts: Sequence[Sequence[int]], preds: Sequence[Sequence[int]],
               n_nodes: int) -> tuple[list[int], list[list[int]], list[bool]]:
    """The partition of each node (``-1``: none), then one pass over the data edges: a crossing
    edge makes its source an input of the reading partition (order of first use) and an output
    of its own. Returns (partition of each node, inputs of each partition, output flags).

    >>> _crossings([[0, 1], [2]], [[], [0], [1, 0], [2]], 4)
    ([0, 0, 1, -1], [[], [1, 0]], [True, True, True, False])
    """
    part_of = [-1] * n_nodes
    for pid, members in enumerate(parts):
        for i in members:
            part_of[i] = pid
    inputs: list[dict[int, None]] = [{} for _ in parts]
    is_out = [False] * n_nodes
    for i, (pi, ps) in enumerate(zip(part_of, preds)):
        for j in ps:
            pj = part_of[j]
            if pj != pi:
                if pi >= 0:
                    inputs[pi][j] = None
                if pj >= 0:
                    is_out[j] = True
    return part_of, [list(d) for d in inputs], is_out


def _summarise(ops: Sequence[str], reasons: Sequence[str | None], is_op: Sequence[bool]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i, why in enumerate(reasons):
        if is_op[i] and why is not None:
            entry = out.setdefault(ops[i], {"count": 0, "reasons": {}})
            entry["count"] += 1
            entry["reasons"][why] = entry["reasons"].get(why, 0) + 1
    return out
