"""Boundary-aware placement: among partitionings with the minimum count, move fewer bytes.

The wave scan (:mod:`~torchvendor.partitioner.core`) puts every supported unit in the
*earliest* wave it can join. Any other wave assignment that satisfies the same difference
constraints gives the same partitions count, convex and contractible at once:

- ``wave(v) >= wave(u)`` for a data or ordering edge ``u -> v`` between supported units;
- ``wave(v) >= wave(u) + 1`` when ``u`` reaches ``v`` through unsupported units only.

:func:`refine_waves` walks the units in reverse and then in forward topological order; each
supported unit with room between its neighbours (``lo < hi``) is moved to the wave in
``[lo, hi]`` that minimises the boundary bytes of the values it touches. Every move is exact
(the cost of each affected value is priced by differences, :func:`_best_single`; a test
checks each choice against a full recount) and never increases the total, so the result
never moves more bytes than the plain wave assignment. The bounds of a unit depend only on its
neighbours and, through chains of unsupported units, on summaries (``A``: the latest supported
wave reaching an unsupported unit; ``B``: the earliest supported wave it reaches) that a sweep
keeps exact: in a reverse sweep, ``B`` is computed as the sweep goes and ``A`` from the state
before it (the predecessors of the current unit have not moved yet), and symmetrically.

Cost of a value ``x`` produced in partition ``P`` (``-1``: not in a partition) whose consumers
lie in the set of partitions ``C`` (``-1`` for a consumer outside every partition, the graph
output included)::

    bytes(x) * (|C - {P, -1}| + [P != -1 and C - {P} non-empty])

i.e. one read per other partition that consumes it, plus one write when it leaves its own
partition: the sum over partitions of their inputs' and outputs' bytes.

>>> value_bytes({"dtype": "float32", "shape": (2, 3)}), value_bytes({}), value_bytes({"shape": ("s0",)})
(24, None, None)
"""
from __future__ import annotations

from collections import Counter
from itertools import compress
from typing import Any, Callable, Mapping, Sequence

__all__ = ["value_bytes", "size_reader", "refine_waves", "wave_books", "boundary_cost", "boundary_total", "eject_cheap"]

_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
             "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16, "float8_e4m3fn": 1,
             "float8_e5m2": 1, "uint16": 2, "uint32": 4, "uint64": 8, "double": 8, "float": 4, "half": 2,
             "long": 8, "int": 4}


def value_bytes(meta: Mapping[str, Any]) -> int | None:
    """Bytes of a value from a GraphView ``meta`` (``dtype`` and ``shape``), ``None`` if unknown
    (no dtype or shape, or a symbolic size).

    >>> value_bytes({"dtype": "bfloat16", "shape": (4, 8)}), value_bytes({"dtype": "int64", "shape": ()})
    (64, 8)
    """
    dtype, shape = meta.get("dtype"), meta.get("shape")
    if dtype is None or shape is None:
        return None
    item = _ITEMSIZE.get(str(dtype).removeprefix("torch."))
    if item is None:
        return None
    total = item
    for d in shape:
        if type(d) is not int:
            try:
                d = int(d)  # a concrete SymInt; a symbolic one raises
            except Exception:
                return None
        total *= d
    return total


def size_reader(view: Any) -> Callable[[Any], int | None]:
    """``node -> bytes or None`` for a GraphView: its ``nbytes`` fast path, else
    :func:`value_bytes` of its ``meta``.

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> g = DictGraph(); x = g.add_input("x", dtype="float32", shape=(8,))
    >>> size_reader(g)(x)
    32
    """
    nbytes = getattr(view, "nbytes", None)
    if nbytes is not None:
        return nbytes
    meta = view.meta
    return lambda node: value_bytes(meta(node))


def boundary_cost(size: int, producer: int, consumer_parts: Any) -> int:
    """The boundary bytes of one value (see the module docstring); ``consumer_parts`` iterates
    the partition of each consumer (``-1``: outside every partition).

    >>> boundary_cost(10, 0, [0, 1, 1, -1]), boundary_cost(10, -1, [0, 1, -1]), boundary_cost(10, 2, [2])
    (20, 20, 0)
    """
    others = set(consumer_parts)
    others.discard(producer)
    if not others:
        return 0
    reads = len(others) - (-1 in others)
    return size * (reads + (producer != -1))


def boundary_total(uwave: Sequence[int], unit_of: Sequence[int] | None, succ: Sequence[Sequence[int]],
                   size_of: Callable[[int], int], sizes: list[int] | None = None) -> int:
    """Total boundary bytes of a wave assignment (``uwave`` per unit, ``-1``: fallback); node
    ``i`` reads its value's consumers from ``succ[i]``. ``sizes``: a cache of ``size_of`` per
    node (``-1``: not looked up yet) shared with other calls, filled as sizes are looked up.

    >>> boundary_total([0, 0, 1], None, [[1, 2], [], []], lambda i: 4)  # value 0 leaves wave 0 for wave 1
    8
    """
    if sizes is not None:
        size_of = _cached(size_of, sizes)
    node_wave = uwave if unit_of is None else list(map(uwave.__getitem__, unit_of))
    total = 0
    for x, consumers in enumerate(succ):
        if not consumers:
            continue
        px = node_wave[x]
        for k in consumers:
            if node_wave[k] != px:
                total += boundary_cost(size_of(x), px, [node_wave[k] for k in consumers])
                break
    return total


def _cached(size_of: Callable[[int], int], sizes: list[int]) -> Callable[[int], int]:
    def cached(x: int) -> int:
        s = sizes[x]
        if s < 0:
            s = sizes[x] = size_of(x)
        return s
    return cached


class _Placement:
    """Mutable state of :func:`refine_waves`: unit waves, the wave of every node (kept in step,
    so a value's placement is one list read), lazily built per-value consumer-wave counts, and
    lazily computed value sizes (lists indexed by node: cheaper than dicts in the hot loops)."""

    def __init__(self, uwave, unit_of, preds, succ, size_of, sizes=None) -> None:
        self.uwave, self.unit_of, self.preds, self.succ = uwave, unit_of, preds, succ
        #: wave of each node: ``uwave`` itself when every node is its own unit
        self.nwave = uwave if unit_of is None else list(map(uwave.__getitem__, unit_of))
        self.size_of = size_of
        n = len(succ)
        self.sizes: list[int] = [-1] * n if sizes is None else sizes
        self.counts: list[dict[int, int] | None] = [None] * n
        #: per unit, whether a sweep must look at it (see :func:`_boundary_marks`)
        self.marks: list[bool] | None = None
        #: unit -> the bounds ``(lo, hi)`` of its last pricing, which found its wave cheapest;
        #: dropped when a move changes a value it reads or writes (see :func:`_move`)
        self.settled: dict[int, tuple[int, int]] | None = None

    def wave(self, i: int) -> int:
        return self.nwave[i]

    def count(self, x: int) -> dict[int, int]:
        c = self.counts[x]
        if c is None:
            c = {}
            nwave = self.nwave
            for k in self.succ[x]:
                w = nwave[k]
                c[w] = c.get(w, 0) + 1
            self.counts[x] = c
        return c

    def size(self, x: int) -> int:
        s = self.sizes[x]
        if s < 0:
            s = self.sizes[x] = self.size_of(x)
        return s


def _cost_at(st: _Placement, touched: dict[int, int], inside: set[int] | None, member: int | None,
             old: int, new: int) -> int:
    """Boundary bytes of the values ``touched`` (value -> #edges into the unit) when the unit
    (members ``inside``, or the single node ``member``) sits at wave ``new`` instead of ``old``."""
    total = 0
    for x, k in touched.items():
        c = st.count(x)
        producer = new if (x == member if inside is None else x in inside) else st.wave(x)
        keys = set()
        for w, n in c.items():
            if w == old and n <= k:
                continue
            keys.add(w)
        if k:
            keys.add(new)
        keys.discard(producer)
        if keys:
            total += st.size(x) * (len(keys) - (-1 in keys) + (producer != -1))
    return total


def refine_waves(uwave: list[int], n_waves: int, usucc: Sequence[Sequence[int]], upreds: Sequence[Sequence[int]],
                 unit_of: Sequence[int] | None, members: Mapping[int, Sequence[int]],
                 preds: Sequence[Sequence[int]], succ: Sequence[Sequence[int]], size_of: Callable[[int], int],
                 movable: Callable[[int, int, int], bool] | None = None, sweeps: int = 2,
                 order: Sequence[int] | None = None, sizes: list[int] | None = None,
                 books: tuple[int, Sequence[bool] | None, Sequence[bool] | None] | None = None) -> int:
    """Move supported units (``uwave[u] >= 0``) between waves, in place, to lower the boundary
    bytes; returns the number of moves. ``usucc``/``upreds``: the unit graph (ordering edges
    included); ``preds``/``succ``: node data edges (the values); ``size_of(node)``: bytes of a
    node's value; ``movable(unit, old, new)``: whether the unit may move (called once per
    chosen move; it may keep its own books, e.g. for ``min_size``). ``order``: a topological
    order of the units to sweep in (default: the ids when every node is a unit, else Kahn's).
    ``sizes``: a cache of ``size_of`` per node shared between calls (see :func:`boundary_total`).
    ``books``: instead of ``movable``, the arguments of :func:`wave_books` after the waves
    (``(min_size, compute, exempt)``), kept from ``uwave``.

    >>> # x -> a -> s(unsupported) -> c ; x -> b -> c : b joins c's wave (b's value stays inside)
    >>> succ = [[1, 3], [2], [4], [4], []]; preds = [[], [0], [1], [0], [2, 3]]
    >>> w = [-1, 0, -1, 0, 1]
    >>> refine_waves(w, 2, succ, preds, None, {}, preds, succ, lambda i: 1), w
    (1, [-1, 0, -1, 1, 1])
    """
    if order is None:
        order = range(len(uwave)) if unit_of is None else _topo_order(usucc, upreds)
    if books is not None and movable is not None:
        raise ValueError("refine_waves takes movable or books, not both")
    if books is not None:
        movable = wave_books(uwave, n_waves, unit_of, members, *books)
    st = _Placement(uwave, unit_of, preds, succ, size_of, sizes)
    # Only units at a wave boundary can gain; the marks are found once and kept a superset by
    # the moves (each re-marks its neighbours), and a sweep clears a unit it finds interior.
    st.marks = _boundary_marks(st, members)
    st.settled = {}
    moves = 0
    for sweep in range(sweeps):
        backward = sweep % 2 == 0
        moves += _sweep(st, order, n_waves, usucc, upreds, members, backward, movable)
    return moves


def wave_books(uwave: Sequence[int], n_waves: int, unit_of: Sequence[int] | None, members: Mapping[int, Sequence[int]],
               min_size: int, compute: Sequence[bool] | None = None,
               exempt: Sequence[bool] | None = None) -> Callable[[int, int, int], bool]:
    """``movable(unit, old, new)`` for :func:`refine_waves` and :func:`eject_cheap`, keeping
    per-wave books from the assignment ``uwave``: a unit may leave its wave only if the wave
    keeps a node and, when ``min_size > 1``, ``min_size`` compute nodes (``compute``: whether
    each node counts, ``None``: all do), and never if it holds an exempt node (``exempt`` per
    unit, ``None``: none). Each accepted move is booked.

    >>> movable = wave_books([0, 0, 1], 2, None, {}, min_size=2)
    >>> movable(2, 1, 0), movable(0, 0, 1), movable(1, 0, 1)  # wave 1 would be empty; wave 0 too small
    (False, False, False)
    """
    node_wave = uwave if unit_of is None else list(map(uwave.__getitem__, unit_of))
    n_nodes = [0] * (n_waves + 1)  # slot -1: fallback
    for w, c in Counter(node_wave).items():
        n_nodes[w] = c
    n_compute = n_nodes
    if min_size > 1 and compute is not None:
        n_compute = [0] * (n_waves + 1)
        for w, c in Counter(compress(node_wave, compute)).items():
            n_compute[w] = c

    def movable(u: int, old: int, new: int) -> bool:
        group = members.get(u, (u,))
        k = len(group)
        c = k if compute is None else sum(1 for i in group if compute[i])
        if min_size > 1 and (n_compute[old] - c < min_size or (exempt is not None and exempt[u])):
            return False
        if n_nodes[old] - k < 1:
            return False
        n_nodes[old] -= k
        n_nodes[new] += k
        if n_compute is not n_nodes:
            n_compute[old] -= c
            n_compute[new] += c
        return True

    return movable


def eject_cheap(uwave: list[int], unit_of: Sequence[int] | None, members: Mapping[int, Sequence[int]],
                cheap: Sequence[int],
                preds: Sequence[Sequence[int]], succ: Sequence[Sequence[int]], size_of: Callable[[int], int],
                movable: Callable[[int, int, int], bool] | None = None, sizes: list[int] | None = None,
                books: tuple[int, Sequence[bool] | None, Sequence[bool] | None] | None = None) -> list[int]:
    """Take cheap single-node units (views) out of their partition where that lowers the
    boundary bytes, as CBP's ``remove_bookend_non_compute_ops`` does: a transpose of a weight
    that is also a graph output then runs on the host, and the partition reads the weight's
    view instead of writing it back. ``cheap``: candidate node indices, in graph order; only
    single-node units (not in ``members``, the multi-node units by root) are taken out.
    Returns the ejected nodes; ``uwave`` is updated (``-1``).

    Safe for convexity iff every supported producer's wave is below every supported
    consumer's wave (then each path through the node still climbs strictly). ``sizes``: as in
    :func:`boundary_total`; ``books``: ``(min_size, compute, exempt)`` of :func:`wave_books`,
    kept from ``uwave`` instead of asking ``movable``.

    >>> # w (input) -> t (view, also a graph output) -> mm: t's value need not leave the device
    >>> succ = [[1], [2, 3], [3], []]; preds = [[], [0], [1], [1, 2]]
    >>> eject_cheap([-1, 0, 0, -1], None, {}, [1], preds, succ, lambda i: 4)
    [1]
    """
    n_waves = max(uwave, default=-1) + 1
    if books is not None:
        movable = wave_books(uwave, n_waves, unit_of, members, *books)
    st = _Placement(uwave, unit_of, preds, succ, size_of, sizes)
    wave = st.wave
    out = []
    for v in cheap:
        u = v if unit_of is None else unit_of[v]
        w0 = uwave[u]
        if w0 < 0 or u != v or u in members:
            continue
        hi_pred = max((wave(p) for p in preds[v]), default=-1)
        lo_succ = min((w for w in map(wave, succ[v]) if w >= 0), default=None)
        if lo_succ is not None and hi_pred >= lo_succ:
            continue
        touched, _ = _touched(st, v, None)
        if _cost_at(st, touched, None, v, w0, -1) >= _cost_at(st, touched, None, v, w0, w0):
            continue
        if movable is not None and not movable(u, w0, -1):
            continue
        _move(st, (u,), None, w0, -1)
        out.append(v)
    return out


def _topo_order(usucc: Sequence[Sequence[int]], upreds: Sequence[Sequence[int]]) -> list[int]:
    """A topological order of the unit graph (unit ids follow first nodes, which is not one)."""
    indeg = [len(p) for p in upreds]
    ready = [u for u in range(len(indeg) - 1, -1, -1) if not indeg[u]]
    order = []
    while ready:
        u = ready.pop()
        order.append(u)
        for s in usucc[u]:
            indeg[s] -= 1
            if not indeg[s]:
                ready.append(s)
    return order


def _summaries(uwave: Sequence[int], order: Sequence[int], edges: Sequence[Sequence[int]], forward: bool,
               n_waves: int) -> list[int]:
    """``A`` (forward: latest supported wave reaching each unsupported unit through unsupported
    units, -1 if none) or ``B`` (backward: earliest reached, ``n_waves`` if none)."""
    out = [0] * len(uwave)
    if forward:
        for u in order:
            if uwave[u] < 0:
                a = -1
                for p in edges[u]:
                    v = uwave[p] if uwave[p] >= 0 else out[p]
                    if v > a:
                        a = v
                out[u] = a
    else:
        for u in reversed(order):
            if uwave[u] < 0:
                b = n_waves
                for s in edges[u]:
                    v = uwave[s] if uwave[s] >= 0 else out[s]
                    if v < b:
                        b = v
                out[u] = b
    return out


def _sweep(st: _Placement, order: Sequence[int], n_waves: int, usucc, upreds, members, backward: bool,
           movable) -> int:
    """One sweep (see the module docstring); returns the number of moves."""
    if backward:
        return _sweep_backward(st, order, n_waves, usucc, upreds, members, movable)
    return _sweep_forward(st, order, n_waves, usucc, upreds, members, movable)


# The two sweeps are mirror images, written out so that the bounds of the many units that cannot
# move cost no call: only the side the sweep has not moved yet is computed second, and it stops
# as soon as the range is empty. Only units at a wave boundary (``st.marks``) can gain.
def _sweep_backward(st: _Placement, order, n_waves: int, usucc, upreds, members, movable) -> int:
    """Reverse topological order: ``A`` from the state before the sweep, ``B`` as it goes."""
    uwave, edge = st.uwave, st.marks
    a_of = _summaries(uwave, order, upreds, True, n_waves)
    b_of = [n_waves] * len(uwave)
    moves = 0
    for u in reversed(order):
        w0 = uwave[u]
        if w0 < 0:
            b = n_waves
            for s in usucc[u]:
                v = uwave[s]
                if v < 0:
                    v = b_of[s]
                if v < b:
                    b = v
            b_of[u] = b
            continue
        if not edge[u]:
            continue
        hi = n_waves - 1
        for s in usucc[u]:
            v = uwave[s]
            if v < 0:
                v = b_of[s] - 1
            if v < hi:
                hi = v
        lo = 0
        for p in upreds[u]:
            v = uwave[p]
            if v < 0:
                v = a_of[p] + 1
            if v > lo:
                lo = v
                if lo >= hi:
                    break
        if lo < hi:
            moves += _visit(st, u, w0, lo, hi, True, usucc, upreds, members, movable)
    return moves


def _sweep_forward(st: _Placement, order, n_waves: int, usucc, upreds, members, movable) -> int:
    """Topological order: ``B`` from the state before the sweep, ``A`` as it goes."""
    uwave, edge = st.uwave, st.marks
    b_of = _summaries(uwave, order, usucc, False, n_waves)
    a_of = [-1] * len(uwave)
    moves = 0
    for u in order:
        w0 = uwave[u]
        if w0 < 0:
            a = -1
            for p in upreds[u]:
                v = uwave[p]
                if v < 0:
                    v = a_of[p]
                if v > a:
                    a = v
            a_of[u] = a
            continue
        if not edge[u]:
            continue
        lo = 0
        for p in upreds[u]:
            v = uwave[p]
            if v < 0:
                v = a_of[p] + 1
            if v > lo:
                lo = v
        hi = n_waves - 1
        for s in usucc[u]:
            v = uwave[s]
            if v < 0:
                v = b_of[s] - 1
            if v < hi:
                hi = v
                if hi <= lo:
                    break
        if lo < hi:
            moves += _visit(st, u, w0, lo, hi, False, usucc, upreds, members, movable)
    return moves


def _visit(st: _Placement, u: int, w0: int, lo: int, hi: int, backward: bool, usucc, upreds, members,
           movable) -> int:
    """Price unit ``u`` (room ``[lo, hi]``) and move it, or its cone, where that does not cost
    more; returns the number of moves."""
    group = members.get(u)
    if group is None and _interior(st, u, w0):
        st.marks[u] = False
        return 0
    settled = st.settled
    last = settled.get(u) if settled is not None else None
    if last is not None and last[0] <= lo and hi <= last[1]:
        best = w0  # nothing it touches moved since it was found cheapest on a range holding this one
    else:
        best = _best_group(st, group, w0, lo, hi, backward) if group else _best_single(st, u, w0, lo, hi, backward)
    if best != w0 and (movable is None or movable(u, w0, best)):
        _move(st, (u,), group, w0, best)
        if settled is not None:
            settled[u] = (lo, hi)
        return 1
    if best == w0 and settled is not None:
        settled[u] = (lo, hi)
    if group is not None:
        return 0
    if backward and hi > w0:
        inward, outward, lo = upreds, usucc, w0
    elif not backward and lo < w0:
        inward, outward, hi = usucc, upreds, w0
    else:
        return 0
    uwave, unit_of = st.uwave, st.unit_of
    for p in inward[u]:  # the cone's first step (most units have none: no call, no sets)
        if uwave[p] != w0 or p in members or (unit_of is not None and unit_of[p] != p):
            continue
        for x in outward[p]:
            if x != u and (uwave[x] >= 0 or outward[x]):
                break
        else:
            return _move_cone(st, u, w0, lo, hi, inward, outward, members, movable)
    return 0


def _boundary_marks(st: _Placement, members: Mapping[int, Sequence[int]]) -> list[bool]:
    """Per unit: True unless it is a single node whose inputs and consumers are all in its
    wave (:func:`_interior`); every multi-node unit is marked."""
    nwave, unit_of, preds = st.nwave, st.unit_of, st.preds
    marks = [False] * len(st.uwave)
    if unit_of is None:
        for k, ps in enumerate(preds):
            wk = nwave[k]
            for p in ps:
                if nwave[p] != wk:
                    marks[p] = marks[k] = True
    else:
        for k, ps in enumerate(preds):
            wk = nwave[k]
            for p in ps:
                if nwave[p] != wk:
                    marks[unit_of[p]] = marks[unit_of[k]] = True
        for root in members:
            marks[root] = True
    return marks


def _cone(st: _Placement, u: int, w0: int, upreds, usucc, members, limit: int = 32) -> list[int]:
    """``u`` and its exclusive producers in its wave, transitively (single-node supported
    units all of whose successors are in the cone or sinks outside every partition, such as the
    graph output): a weight's transpose feeding only a matmul
    moves with it, where moving either alone would cut a value. With the edge lists swapped:
    its exclusive consumers."""
    uwave, unit_of = st.uwave, st.unit_of
    cone, inset = [u], {u}
    i = 0
    while i < len(cone) < limit:
        m = cone[i]
        i += 1
        for p in upreds[m]:
            if p in inset or uwave[p] != w0 or p in members or (unit_of is not None and unit_of[p] != p):
                continue
            for x in usucc[p]:  # every other consumer in the cone, or a sink outside every partition
                if x not in inset and (uwave[x] >= 0 or usucc[x]):
                    break
            else:
                cone.append(p)
                inset.add(p)
    return cone


def _move_cone(st: _Placement, u: int, w0: int, lo: int, hi: int, inward, outward, members, movable) -> int:
    """Try moving ``u``'s cone (:func:`_cone` along ``inward`` edges) as one block within
    ``[lo, hi]``. The cone's other edges stay inside it, so ``u``'s bounds are the cone's: in a
    reverse sweep (producers' cone, later waves) only ``u`` has outside consumers; in a forward
    sweep (consumers' cone, earlier waves) only ``u`` has outside producers."""
    cone = _cone(st, u, w0, inward, outward, members)
    if len(cone) == 1:
        return 0
    backward = hi > w0
    best = _best_group(st, cone, w0, lo, hi, backward)
    if best == w0:
        return 0
    done = []
    for m in cone:
        if movable is not None and not movable(m, w0, best):
            for d in done:
                movable(d, best, w0)
            return 0
        done.append(m)
    _move(st, cone, cone, w0, best)
    return 1


def _interior(st: _Placement, u: int, w0: int) -> bool:
    """A single-node unit whose inputs are all produced in its wave and whose value is read
    only there: any move creates crossings (sizes are >= 1), so it is not tried."""
    nwave = st.nwave
    for p in st.preds[u]:
        if nwave[p] != w0:
            return False
    for k in st.succ[u]:
        if nwave[k] != w0:
            return False
    return True


def _touched(st: _Placement, u: int, group: Sequence[int] | None) -> tuple[dict[int, int], set[int] | None]:
    """Values whose cost depends on unit ``u``'s wave: its members' values (0 edges into the
    unit counted for them unless consumed inside) and their inputs (#edges into the unit)."""
    preds = st.preds
    if group is None:
        touched = {u: 0}
        for p in preds[u]:
            touched[p] = touched.get(p, 0) + 1
        return touched, None
    inside = set(group)
    touched = dict.fromkeys(group, 0)
    for m in group:
        for p in preds[m]:
            touched[p] = touched.get(p, 0) + 1
    return touched, inside


#: values with more readers than this keep a per-wave reader count (updated by moves); the
#: others are priced from their readers directly, which is cheaper than keeping books
_FEW_READERS = 8


def _best_single(st: _Placement, u: int, w0: int, lo: int, hi: int, backward: bool) -> int:
    """The cheapest wave in ``[lo, hi]`` for the single-node unit ``u`` now at ``w0``.

    Moving ``u`` to wave ``w`` changes the cost of its own value (producer wave ``w``) and of
    each input ``p`` (one reader moves from ``w0`` to ``w``; inputs are deduplicated, so one
    edge each). For an input whose other readers lie in the waves ``D0`` and whose producer is
    in ``P``, the cost at ``w`` is a constant plus ``pen`` unless ``w`` is in ``D0`` or is ``P``
    (then the read is shared or internal), where ``pen = size * (1 + [P != -1 and D0 within {P}])``
    (a new reader also forces the write when nothing else read it outside). So the total is a
    constant, minus the ``pen`` of every input whose ``D0 | {P}`` holds ``w``, plus the own
    value's cost: one dict accumulation per input. The cost changes only at waves some touched
    value is produced or read in, so only those (and ``lo``, ``hi``) are tried; a reverse sweep
    breaks ties towards later waves, so a chain can follow its reader one unit at a time, a
    forward sweep moves only on a strict gain."""
    sizes, nwave, succ = st.sizes, st.nwave, st.succ
    gain: dict[int, int] = {}
    # (an input whose gain falls on no wave of [lo, hi], where w0 is, adds the same to every
    # wave tried: its size is not even looked up)
    for p in st.preds[u]:
        pw = nwave[p]
        readers = succ[p]
        if len(readers) == 1:  # read by u alone (common): a move away from pw adds read and write
            if lo <= pw <= hi:
                pen = sizes[p]
                if pen < 0:
                    pen = st.size(p)
                gain[pw] = gain.get(pw, 0) + pen + pen
            continue
        if len(readers) <= _FEW_READERS:
            zone = {nwave[x] for x in readers if x != u}
        else:
            zone = {w for w, n in st.count(p).items() if w != w0 or n > 1}
        zone.discard(pw)
        if not lo <= pw <= hi:
            for w in zone:
                if lo <= w <= hi:
                    break
            else:
                continue
        pen = sizes[p]
        if pen < 0:
            pen = st.size(p)
        if not zone and pw != -1:  # no other reader outside: a new one adds the write
            pen += pen
        gain[pw] = gain.get(pw, 0) + pen
        for w in zone:
            gain[w] = gain.get(w, 0) + pen
    readers = succ[u]
    own = {nwave[x] for x in readers} if len(readers) <= _FEW_READERS else set(st.count(u))
    candidates = {w for w in gain if lo <= w <= hi}
    candidates.update(w for w in own if lo <= w <= hi)
    candidates.add(lo)
    candidates.add(hi)
    candidates.discard(w0)
    neg = -1 in own
    m = len(own) - neg
    s_u = 0
    if own:
        s_u = sizes[u]
        if s_u < 0:
            s_u = st.size(u)
    a = m - (w0 in own)
    best, best_cost = w0, s_u * (a + (a > 0 or neg)) - gain.get(w0, 0)
    for w in sorted(candidates):
        a = m - (w in own)
        cost = s_u * (a + (a > 0 or neg)) - gain.get(w, 0)
        if cost < best_cost or (backward and cost == best_cost and w > best):
            best, best_cost = w, cost
    return best


def _best_group(st: _Placement, group: Sequence[int], w0: int, lo: int, hi: int, backward: bool) -> int:
    """:func:`_best_single` for a block of nodes moved together (a multi-node unit, a cone):
    an outside input keeps the readers outside the block; a member's value keeps the readers
    outside the block and is written from the new wave."""
    sizes, nwave, preds, succ = st.sizes, st.nwave, st.preds, st.succ
    inside = set(group)
    edges_in: dict[int, int] = {}
    for m in group:
        for p in preds[m]:
            edges_in[p] = edges_in.get(p, 0) + 1
    gain: dict[int, int] = {}
    for p, k in edges_in.items():
        if p in inside:
            continue
        pw = nwave[p]
        pen = sizes[p]
        if pen < 0:
            pen = st.size(p)
        zone = _outside_readers(st, p, inside, w0, k)
        zone.discard(pw)
        if not zone and pw != -1:
            pen += pen
        gain[pw] = gain.get(pw, 0) + pen
        for w in zone:
            gain[w] = gain.get(w, 0) + pen
    candidates = {w for w in gain if lo <= w <= hi}
    owns = []  # (waves read outside the block, #those >= 0, read by a fallback node?, size)
    for x in group:
        out = _outside_readers(st, x, inside, w0, edges_in.get(x, 0))
        candidates.update(w for w in out if lo <= w <= hi)
        if out:
            neg = -1 in out
            owns.append((out, len(out) - neg, neg, st.size(x)))
    candidates.add(lo)
    candidates.add(hi)
    candidates.discard(w0)
    best, best_cost = w0, None
    for w in (w0, *sorted(candidates)):
        cost = -gain.get(w, 0)
        for out, m, neg, size in owns:
            a = m - (w in out)
            cost += size * (a + (a > 0 or neg))
        if best_cost is None or cost < best_cost or (backward and cost == best_cost and w > best):
            best, best_cost = w, cost
    return best


def _outside_readers(st: _Placement, x: int, inside: set[int], w0: int, k: int) -> set[int]:
    """The waves of the readers of value ``x`` outside the block ``inside`` (at wave ``w0``,
    with ``k`` of its readers)."""
    readers = st.succ[x]
    if len(readers) <= _FEW_READERS:
        nwave = st.nwave
        return {nwave[y] for y in readers if y not in inside}
    return {w for w, n in st.count(x).items() if w != w0 or n > k}


def _move(st: _Placement, units: Sequence[int], group, old: int, new: int) -> None:
    """Put ``units`` in wave ``new``; ``group``: the nodes they hold (``None``: the units are nodes)."""
    for u in units:
        st.uwave[u] = new
    counts, nwave, settled, succ = st.counts, st.nwave, st.settled, st.succ
    marks, unit_of = st.marks, st.unit_of
    for m in (group or units):
        nwave[m] = new
        if marks is not None:  # the neighbours' values now cross (or stop crossing) a wave
            for x in (*st.preds[m], *succ[m]):
                marks[x if unit_of is None else unit_of[x]] = True
        if settled:  # a unit's price depends on its inputs' readers and producers and its readers
            settled.pop(m if unit_of is None else unit_of[m], None)
            for x in succ[m]:
                settled.pop(x if unit_of is None else unit_of[x], None)
            for p in st.preds[m]:
                settled.pop(p if unit_of is None else unit_of[p], None)
                for x in succ[p]:
                    settled.pop(x if unit_of is None else unit_of[x], None)
        for p in st.preds[m]:
            c = counts[p]
            if c is not None:
                c[old] -= 1
                if not c[old]:
                    del c[old]
                c[new] = c.get(new, 0) + 1
