"""Exact placement between adjacent waves: minimum s-t cuts over the units that may sit in either.

The wave scan's count is optimal for any assignment of supported units to waves that satisfies
the difference constraints of :mod:`~torchvendor.partitioner.boundary` (``wave(v) >= wave(u)``
along an edge between supported units, ``wave(v) >= wave(u) + 1`` through unsupported units
only). :func:`pair_cuts` lowers the boundary bytes over that set, not one unit at a time: for a
pair of adjacent waves ``(k, k + 1)`` and every other unit where it is, the units whose range
holds both waves choose one of them each, and the choice of least boundary bytes is one minimum
cut of a flow network (Kolmogorov-Zabih; the value terms are hyperedge cuts, Lawler):

- a unit is a node: source side = wave ``k``, sink side = wave ``k + 1``;
- a precedence edge ``u -> v`` between two such units: ``v -> u`` of infinite capacity (``u``
  at ``k + 1`` forces ``v`` there);
- "some consumer of ``x`` in wave ``k + 1``" costs ``bytes(x)``: an extra node ``a`` with
  ``source -> a`` of capacity ``bytes(x)`` and ``a -> c`` of infinite capacity per consumer
  ``c``; "some consumer in wave ``k``" symmetrically towards the sink; a value's write and
  reads in the pair reduce to these terms and single-unit ones (see :func:`_value_terms`).

Pairs of one parity (``(0, 1), (2, 3), ...``) do not constrain each other, so one network
solves them all at once; passes alternate parities until neither lowers the bytes (each
accepted pass lowers an integer total, so this ends). The result is **pair-optimal**: no set of
units moving between two adjacent waves lowers the bytes; with two waves that is the exact
optimum over every count-optimal, jointly convex placement (``tests/test_partitioner_exact.py``
checks both against brute force). With three waves or more no polynomial placement is exact
unless P = NP: a 3-terminal multiway cut is such a placement (docs/partitioner.md, *How close to
the optimum*; the test checks the reduction by brute force).

A value's cost is what it really moves: ``bytes * (reads by other partitions + one write if it
leaves its partition)``, so a value that the graph returns (a training forward's saved
activations) pays its write whatever the placement, and only its reads are placed.

>>> # x -> a -> s(unsupported) -> c ; x -> b -> c : b joins c's wave (b's value stays inside)
>>> succ = [[1, 3], [2], [4], [4], []]; preds = [[], [0], [1], [0], [2, 3]]
>>> w = [-1, 0, -1, 0, 1]
>>> pair_cuts(w, 2, succ, preds, None, {}, preds, succ, lambda i: 1), w
(1, [-1, 0, -1, 1, 1])
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Mapping, Sequence

from .boundary import _topo_order, boundary_cost

__all__ = ["pair_cuts", "min_cut"]

INF = float("inf")


def min_cut(n: int, arcs: Sequence[tuple[int, int, float]], source: int = 0, sink: int = 1,
            max_phases: int | None = None) -> list[bool] | None:
    """Source side of a minimum ``source``-``sink`` cut of a network on nodes ``0..n-1`` with
    ``arcs`` ``(tail, head, capacity)`` (Dinic's algorithm); the smallest such side, or ``None``
    if Dinic would take more than ``max_phases`` phases (breadth-first levelings).

    Capacities are non-negative integers or ``float("inf")``. The side is the same whatever the
    flow (the smallest source side is unique); an infinite source-sink path stops it (no finite
    cut: the sink is then on the source side).

    >>> min_cut(4, [(0, 2, 3), (2, 1, 1), (0, 3, 1), (3, 1, 5)])
    [True, False, True, False]
    """
    if source == sink:
        raise ValueError("min_cut needs distinct source and sink")
    head: list[int] = []
    cap: list[float] = []
    adj: list[list[int]] = [[] for _ in range(n)]
    for k, (a, b, c) in enumerate(arcs):
        if not (0 <= a < n and 0 <= b < n):
            raise IndexError(f"arc {k} ({a}, {b}) names a node outside 0..{n - 1}")
        if c < 0:
            raise ValueError(f"arc {k} ({a}, {b}): a capacity is negative")
        adj[a].append(len(head))
        head.append(b)
        cap.append(c)
        adj[b].append(len(head))
        head.append(a)
        cap.append(0)
    phases = 0
    while True:
        level = _levels(n, adj, head, cap, source)
        if level[sink] < 0:
            break
        phases += 1
        if max_phases is not None and phases > max_phases:
            return None
        it = [0] * n
        pushed = _augment(adj, head, cap, level, it, source, sink)
        while 0 < pushed < INF:
            pushed = _augment(adj, head, cap, level, it, source, sink)
        if pushed == INF:  # an infinite path: no finite cut
            break
    return [lv >= 0 for lv in _levels(n, adj, head, cap, source)]


def _levels(n: int, adj, head, cap, source: int) -> list[int]:
    level = [-1] * n
    level[source] = 0
    queue = deque([source])
    while queue:
        v = queue.popleft()
        for e in adj[v]:
            w = head[e]
            if cap[e] > 0 and level[w] < 0:
                level[w] = level[v] + 1
                queue.append(w)
    return level


def _augment(adj, head, cap, level, it, source: int, sink: int) -> float:
    """One blocking-flow path from ``source`` to ``sink`` (iterative DFS), pushed; returns the
    amount (0: none left in this phase; ``INF``: an infinite path, nothing pushed)."""
    path: list[int] = []
    v = source
    while True:
        if v == sink:
            push = min(cap[e] for e in path)
            if push == INF:
                return INF
            for e in path:
                cap[e] -= push
                cap[e ^ 1] += push
            return push
        edges = adj[v]
        while it[v] < len(edges):
            e = edges[it[v]]
            w = head[e]
            if cap[e] > 0 and level[w] == level[v] + 1:
                break
            it[v] += 1
        else:
            if not path:
                return 0
            level[v] = -1  # dead end: never again in this phase
            e = path.pop()
            v = head[e ^ 1]
            it[v] += 1
            continue
        path.append(edges[it[v]])
        v = head[edges[it[v]]]


def _free_units(uwave: Sequence[int], pairs: set[int]) -> dict[int, int]:
    """Unit -> the low wave ``k`` of its pair for every supported unit in a wave of one of
    ``pairs`` (low waves of one parity)."""
    free = {}
    for u, w in enumerate(uwave):
        if w in pairs:
            free[u] = w
        elif w - 1 in pairs:
            free[u] = w - 1
    return free


def _active_pairs(uwave: Sequence[int], unit_of, succ: Sequence[Sequence[int]]) -> set[int]:
    """The pairs ``(k, k + 1)`` where some value has an end (its producer or a reader) in
    each wave: elsewhere no set of moves between the two waves lowers the bytes (the waves of
    every value's ends would stay as they are, or split)."""
    nwave = uwave if unit_of is None else [uwave[u] for u in unit_of]
    active = set()
    for x, readers in enumerate(succ):
        if not readers:
            continue
        w0 = nwave[x]
        ends = {nwave[c] for c in readers}
        ends.add(w0)
        for w in ends:
            if w >= 0 and w + 1 in ends:
                active.add(w)
    return active


class _Network:
    """The flow network of one pass: node 0 the source, 1 the sink, then free units and extras."""

    def __init__(self, free: Mapping[int, int]) -> None:
        self.node = {u: 2 + i for i, u in enumerate(free)}
        self.n = 2 + len(free)
        self.arcs: list[tuple[int, int, float]] = []

    def extra(self) -> int:
        self.n += 1
        return self.n - 1

    def some_at(self, units: Sequence[int], upper: bool, size: int) -> None:
        """``size`` if some of ``units`` sits in the upper wave (``upper``) or the lower one."""
        node, arcs = self.node, self.arcs
        if len(units) == 1:
            arcs.append((0, node[units[0]], size) if upper else (node[units[0]], 1, size))
            return
        a = self.extra()
        if upper:
            arcs.append((0, a, size))
            arcs.extend((a, node[c], INF) for c in units)
        else:
            arcs.append((a, 1, size))
            arcs.extend((node[c], a, INF) for c in units)

    def lower(self, u: int, size: int) -> None:
        """``size`` if unit ``u`` sits in the lower wave."""
        self.arcs.append((self.node[u], 1, size))


def _value_terms(net: _Network, pu: int, consumers: Sequence[int], uwave, free: Mapping[int, int], size: int) -> int:
    """Add the terms of one value (produced by unit ``pu``, read by the distinct units
    ``consumers``, ``pu`` excluded; a consumer's wave ``-1``: outside every partition) to the
    network; returns the constant part that the network does not hold (negative terms).

    Its cost is one read per wave other than the producer's that holds a consumer, plus one
    write if any consumer is elsewhere. A consumer never sits below its producer, so with the
    producer free in the pair ``(k, k + 1)`` the read of wave ``k + 1`` costs
    ``[some consumer at k + 1] - [producer at k + 1]`` (both are 1 when the producer is up), and
    so does its write when every consumer is in the pair."""
    const = 0
    kp = free.get(pu)
    pw = uwave[pu]
    by_pair: dict[int, list[int]] = {}
    fixed: set[int] = set()
    for c in consumers:
        k = free.get(c)
        if k is None:
            fixed.add(uwave[c])
        else:
            by_pair.setdefault(k, []).append(c)
    for k, group in by_pair.items():  # reads of the pairs that hold free consumers
        if k == kp:
            if k + 1 not in fixed:
                net.some_at(group, True, size)
                net.lower(pu, size)
                const -= size
            continue
        if pw != k and k not in fixed:
            net.some_at(group, False, size)
        if pw != k + 1 and k + 1 not in fixed:
            net.some_at(group, True, size)
    if kp is not None and kp + 1 in fixed:  # the read of a fixed consumer at kp + 1
        net.lower(pu, size)
    if pw < 0 or -1 in fixed:  # the write: none, or paid whatever
        return const
    if kp is not None:
        if len(by_pair) > (kp in by_pair) or fixed - {kp + 1}:
            return const
        if kp + 1 in fixed:
            net.lower(pu, size)
        elif by_pair:
            net.some_at(by_pair[kp], True, size)
            net.lower(pu, size)
            const -= size
        return const
    if fixed - {pw} or len(by_pair) != 1:
        return const
    (k, group), = by_pair.items()
    if pw == k:
        net.some_at(group, True, size)
    elif pw == k + 1:
        net.some_at(group, False, size)
    return const


def pair_cuts(uwave: list[int], n_waves: int, usucc: Sequence[Sequence[int]], upreds: Sequence[Sequence[int]],
              unit_of: Sequence[int] | None, members: Mapping[int, Sequence[int]],
              preds: Sequence[Sequence[int]], succ: Sequence[Sequence[int]], size_of: Callable[[int], int],
              order: Sequence[int] | None = None, sizes: list[int] | None = None,
              books: tuple[int, Sequence[bool] | None, Sequence[bool] | None] | None = None,
              max_passes: int = 64) -> int:
    """Move supported units (``uwave[u] >= 0``) between adjacent waves, in place, by minimum
    cuts, until no pass lowers the boundary bytes (or ``max_passes``); returns the number of
    unit moves. Arguments as :func:`~torchvendor.partitioner.boundary.refine_waves` (``books``:
    ``(min_size, compute, exempt)``: a wave keeps a node and ``min_size`` compute nodes, and a
    unit holding an exempt node stays where it is)."""
    if n_waves < 2:
        return 0
    if order is None:
        order = range(len(uwave)) if unit_of is None else _topo_order(usucc, upreds)
    if sizes is None:
        sizes = [-1] * len(succ)
    st = _State(uwave, n_waves, usucc, upreds, unit_of, members, preds, succ, size_of, order, sizes, books)
    dirty = {k for k in _active_pairs(uwave, unit_of, succ) if k + 1 < n_waves}
    moves, parity = 0, 0
    for _ in range(max_passes):
        if not dirty:
            break
        pairs = {k for k in dirty if k % 2 == parity}
        if pairs:
            m, changed = st.run_pass(pairs)
            moves += m
            dirty -= pairs
            dirty.update(j for k in changed for j in (k - 1, k + 1) if 0 <= j < n_waves - 1)
        parity ^= 1
    return moves


class _State:
    """What every pass of :func:`pair_cuts` reads: the graphs, sizes and the wave books."""

    def __init__(self, uwave, n_waves, usucc, upreds, unit_of, members, preds, succ, size_of, order, sizes,
                 books) -> None:
        self.uwave, self.n_waves, self.usucc, self.upreds = uwave, n_waves, usucc, upreds
        self.unit_of, self.members, self.preds, self.succ = unit_of, members, preds, succ
        self.size_of, self.order, self.sizes = size_of, order, sizes
        self.min_size, self.compute, self.exempt = books if books is not None else (0, None, None)

    def size(self, x: int) -> int:
        s = self.sizes[x]
        if s < 0:
            s = self.sizes[x] = self.size_of(x)
        return s

    def unit(self, i: int) -> int:
        return i if self.unit_of is None else self.unit_of[i]

    def group(self, u: int) -> Sequence[int]:
        return self.members.get(u, (u,))

    def run_pass(self, pairs: set[int]) -> tuple[int, set[int]]:
        """Solve the pairs ``(k, k + 1)`` for ``k`` in ``pairs`` (one parity) in one network;
        returns the moves and the pairs that changed."""
        uwave = self.uwave
        free = _free_units(uwave, pairs)
        if not free:
            return 0, set()
        net = _Network(free)
        node, arcs = net.node, net.arcs
        for u, to in self._forced(free).items():
            node[u] = to  # pinned: the source (wave k) or the sink (wave k + 1) itself
        for u, k in free.items():
            nu = node[u]
            if nu < 2:
                continue
            for s in self.usucc[u]:
                if free.get(s) == k and node[s] != 1:
                    arcs.append((node[s], nu, INF))  # u at k + 1 takes s along
        unit, succ = self.unit, self.succ
        for x in self._values(free):
            pu = unit(x)
            consumers = {unit(c) for c in succ[x]}
            consumers.discard(pu)
            if consumers:
                _value_terms(net, pu, list(consumers), uwave, free, self.size(x))
        side = min_cut(net.n, [a for a in arcs if a[0] != a[1] and a[0] != 1 and a[1] != 0])
        changed = {}
        for u, k in free.items():
            w = k + (not side[node[u]])
            if w != uwave[u]:
                changed[u] = w
        if not changed:
            return 0, set()
        return self._apply(changed, free)

    def _forced(self, free: Mapping[int, int]) -> dict[int, int]:
        """Free units that cannot move: ``0`` (must stay at ``k``) or ``1`` (at ``k + 1``).
        Paths through unsupported units only pin both ends (``wave(v) >= wave(u) + 1`` in a
        pair leaves ``u`` at ``k`` and ``v`` at ``k + 1``), and so do exempt units under
        ``min_size``; a unit at ``k`` pins its producers in the pair, one at ``k + 1`` its
        consumers (precedence)."""
        uwave, usucc, upreds = self.uwave, self.usucc, self.upreds
        pinned = self.exempt if self.exempt is not None and self.min_size > 1 else None
        forced: dict[int, int] = {}
        for u, k in free.items():
            up = uwave[u] > k
            if pinned is not None and pinned[u]:
                forced[u] = int(up)
            elif up and any(uwave[p] < 0 and self._reached_from(p, k) for p in upreds[u]):
                forced[u] = 1
            elif not up and any(uwave[s] < 0 and self._reaches(s, k + 1) for s in usucc[u]):
                forced[u] = 0
        stack = list(forced)
        while stack:  # precedence within a pair: down pins producers, up pins consumers
            u = stack.pop()
            k, to = free[u], forced[u]
            for v in (usucc[u] if to else upreds[u]):
                if free.get(v) == k and v not in forced:
                    forced[v] = to
                    stack.append(v)
        return forced

    def _reached_from(self, p: int, k: int) -> bool:
        """Whether a supported unit in wave ``k`` reaches unsupported unit ``p`` through
        unsupported units only."""
        return self._chain(p, k, self.upreds)

    def _reaches(self, s: int, k: int) -> bool:
        return self._chain(s, k, self.usucc)

    def _chain(self, start: int, k: int, edges) -> bool:
        uwave = self.uwave
        seen, stack = {start}, [start]
        while stack:
            x = stack.pop()
            for y in edges[x]:
                w = uwave[y]
                if w == k:
                    return True
                if w < 0 and y not in seen:
                    seen.add(y)
                    stack.append(y)
        return False

    def _values(self, units) -> list[int]:
        """The values whose cost depends on ``units``: their members' and those members' inputs."""
        out: dict[int, None] = {}
        for u in units:
            for m in self.group(u):
                out[m] = None
                out.update(dict.fromkeys(self.preds[m]))
        return list(out)

    def _cost(self, values: Sequence[int]) -> int:
        uwave, unit, succ = self.uwave, self.unit, self.succ
        total = 0
        for x in values:
            if succ[x]:
                total += boundary_cost(self.size(x), uwave[unit(x)], [uwave[unit(c)] for c in succ[x]])
        return total

    def _apply(self, changed: dict[int, int], free: Mapping[int, int]) -> tuple[int, set[int]]:
        """Take the moves if they keep the wave books and lower the exact total; else undo.
        Returns the moves and the pairs that changed."""
        uwave = self.uwave
        values = self._values(changed)
        before = self._cost(values)
        old = {u: uwave[u] for u in changed}
        for u, w in changed.items():
            uwave[u] = w
        pairs = {free[u] for u in changed}
        for k in self._short_pairs(pairs, free):
            pairs.discard(k)
            for u in changed:
                if free[u] == k:
                    uwave[u] = old[u]
        if not pairs or self._cost(values) >= before:
            for u, w in old.items():
                uwave[u] = w
            return 0, set()
        return sum(uwave[u] != w for u, w in old.items()), pairs

    def _short_pairs(self, pairs: set[int], free: Mapping[int, int]) -> list[int]:
        """The pairs whose waves would hold no node, or fewer than ``min_size`` compute nodes
        (every supported unit of a pair's waves is in ``free``)."""
        uwave, compute, exempt = self.uwave, self.compute, self.exempt
        nodes: dict[int, int] = {}
        comp: dict[int, int] = {}
        kept = set()
        for u, k in free.items():
            if k not in pairs:
                continue
            w = uwave[u]
            group = self.group(u)
            nodes[w] = nodes.get(w, 0) + len(group)
            comp[w] = comp.get(w, 0) + (len(group) if compute is None else sum(1 for i in group if compute[i]))
            if exempt is not None and exempt[u]:
                kept.add(w)
        bad = []
        for k in pairs:
            for w in (k, k + 1):
                if not nodes.get(w) or (self.min_size > 1 and comp.get(w, 0) < self.min_size and w not in kept):
                    bad.append(k)
                    break
        return bad
