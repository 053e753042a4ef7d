"""A start for the placement with a proven bound: one minimum cut for the *span* relaxation.

Among count-optimal, jointly convex placements (wave assignments meeting the difference
constraints of :mod:`~torchvendor.partitioner.boundary`), the boundary bytes are NP-hard to
minimise with three waves or more (docs/partitioner.md). Their *span* relaxation is not: it
prices a value by the waves it spans instead of the waves it reaches,

- produced in a partition, at wave ``a``, read by supported units up to wave ``b``:
  ``m * bytes * (b - a)``, ``m = 2`` (a write and a read per crossing), or ``m = 1`` plus one
  constant write when a fallback node or the graph output also reads it;
- produced outside every partition, read by supported units in waves ``a..b``:
  ``bytes * (1 + b - a)``.

Each is a sum over the wave boundaries ``t`` of "the producer at or below ``t`` and some reader
above" (or "some reader on each side"), and with ``y[u, t] = [wave(u) > t]`` (Ishikawa's layered
encoding) every such term is a submodular hyperedge term (Lawler), and every difference
constraint ``wave(v) >= wave(u) + c`` a set of infinite arcs. So **one minimum cut** is the
exact minimum of the span cost ``S`` over every count-optimal, jointly convex placement. A
placement's true bytes ``T`` never exceed its span cost, and per value ``S - c <= D * (T - c)``
(``c``: the constant part, ``D``: the widest span the value's windows allow), so with
``rho = max D`` (at most the number of waves minus one)::

    T(P_span) <= S(P_span) = min S <= S(OPT) <= C + rho * (T(OPT) - C)

and ``C + (min S - C) / rho`` is a certified lower bound on the optimum (``C``: the sum of the
constant parts). Unsupported units take part through one variable each, the latest supported
wave that reaches them (``z(q) >= wave(u)``, ``wave(v) >= z(q) + 1``), so the ``+ 1`` of paths
through unsupported units costs no transitive closure.

>>> # x -> a -> s(unsupported) -> c ; x -> b -> c : b joins c's wave (b's value stays inside)
>>> succ = [[1, 3], [2], [4], [4], []]; preds = [[], [0], [1], [0], [2, 3]]
>>> w, span, const, rho = span_cut([-1, 0, -1, 0, 1], 2, succ, preds, None, succ, lambda i: 1)
>>> w, span, const, rho
([-1, 0, -1, 1, 1], 4, 3, 1)
"""
from __future__ import annotations

from typing import Callable, Sequence

from .boundary import _topo_order
from .cuts import INF, min_cut

__all__ = ["span_cut", "span_windows", "span_cost"]

SOURCE, SINK = 0, 1


def span_windows(uwave: Sequence[int], n_waves: int, usucc: Sequence[Sequence[int]],
                 upreds: Sequence[Sequence[int]], order: Sequence[int],
                 pinned: Sequence[bool] | None = None) -> tuple[list[int], list[int]]:
    """``(lo, hi)`` per unit: the least and greatest wave of a supported unit (``uwave[u] >= 0``)
    over every assignment meeting the difference constraints (``pinned`` units stay at
    ``uwave``), and for an unsupported unit the range of ``z``, the latest supported wave reaching
    it: ``-1`` fixed when none does, ``n_waves - 1`` fixed when it reaches no supported unit.

    >>> span_windows([0, -1, 1, 0], 2, [[1], [2], [], []], [[], [0], [1], []], [0, 1, 2, 3])
    ([0, 0, 1, 0], [0, 0, 1, 1])
    """
    top = n_waves - 1
    lo, hi = [0] * len(uwave), [0] * len(uwave)
    for u in order:
        sup = uwave[u] >= 0
        v = 0 if sup else -1
        for p in upreds[u]:
            x = lo[p] + (sup and uwave[p] < 0)
            if x > v:
                v = x
        lo[u] = uwave[u] if sup and pinned is not None and pinned[u] else v
    for u in reversed(order):
        sup = uwave[u] >= 0
        v = top
        for s in usucc[u]:
            x = hi[s] - (not sup and uwave[s] >= 0)
            if x < v:
                v = x
        hi[u] = uwave[u] if sup and pinned is not None and pinned[u] else v
    for u in order:
        if uwave[u] < 0:
            if hi[u] == top:
                lo[u] = top
            elif lo[u] < 0:
                hi[u] = -1
    return lo, hi


class _Layers:
    """The layered network: node ``(u, t)`` on the source side iff ``wave(u) <= t``."""

    def __init__(self, lo: Sequence[int], hi: Sequence[int]) -> None:
        self.lo, self.hi = lo, hi
        self.base = [0] * len(lo)
        n = 2
        for u in range(len(lo)):
            self.base[u] = n - lo[u]
            n += hi[u] - lo[u]
        self.n = n
        self.arcs: list[tuple[int, int, float]] = []

    def node(self, u: int, t: int) -> int:
        if t < self.lo[u]:
            return SINK
        if t >= self.hi[u]:
            return SOURCE
        return self.base[u] + t

    def extra(self) -> int:
        self.n += 1
        return self.n - 1


def _constraints(net: _Layers, uwave, usucc) -> None:
    """Monotone layers, and ``wave(b) >= wave(a) + c`` per unit edge ``a -> b`` (``c = 1`` from an
    unsupported unit to a supported one): ``(b, t)`` on the source side takes ``(a, t - c)``."""
    lo, hi, arcs = net.lo, net.hi, net.arcs
    for u in range(len(lo)):
        b = net.base[u]
        for t in range(lo[u], hi[u] - 1):
            arcs.append((b + t, b + t + 1, INF))
    for a in range(len(lo)):
        for v in usucc[a]:
            c = int(uwave[a] < 0 <= uwave[v])
            for t in range(lo[v], hi[v]):
                x = net.node(a, t - c)
                if x != SOURCE:
                    arcs.append((net.base[v] + t, x, INF))


def _hyper(net: _Layers, tail: int, heads: list[int], size: int) -> int:
    """``size`` if ``tail`` is on the source side and some of ``heads`` on the sink side; returns
    the constant part (``tail`` the source and a head the sink)."""
    if tail == SINK:
        return 0
    if SINK in heads:
        if tail == SOURCE:
            return size
        net.arcs.append((tail, SINK, size))
        return 0
    heads = [h for h in heads if h != SOURCE]
    if not heads:
        return 0
    if len(heads) == 1:
        net.arcs.append((tail, heads[0], size))
        return 0
    a = net.extra()
    net.arcs.append((tail, a, size))
    net.arcs.extend((a, h, INF) for h in heads)
    return 0


def _split(net: _Layers, nodes: list[int], size: int) -> int:
    """``size`` if some of ``nodes`` is on each side; returns the constant part."""
    low, high = SOURCE in nodes, SINK in nodes
    free = [x for x in nodes if x > SINK]
    if low and high:
        return size
    if low:
        return _hyper(net, SOURCE, free, size)
    if high:
        if len(free) == 1:
            net.arcs.append((free[0], SINK, size))
        elif free:
            a = net.extra()
            net.arcs.append((a, SINK, size))
            net.arcs.extend((x, a, INF) for x in free)
        return 0
    if len(free) > 1:
        e1, e2 = net.extra(), net.extra()
        net.arcs.append((e1, e2, size))
        net.arcs.extend((x, e1, INF) for x in free)
        net.arcs.extend((e2, x, INF) for x in free)
    return 0


def _readers(x: int, pu: int, unit, uwave, succ) -> tuple[list[int], bool]:
    """The supported reader units of value ``x`` other than its producer's (distinct, in order),
    and whether an unsupported unit (a fallback node, the graph output) reads it."""
    seen = {pu}
    sup, fb = [], False
    for c in succ[x]:
        r = unit(c)
        if r in seen:
            continue
        seen.add(r)
        if uwave[r] >= 0:
            sup.append(r)
        else:
            fb = True
    return sup, fb


def _read_values(unit_of: Sequence[int] | None, uwave, succ):
    """``(x, producer unit, readers, fb)`` of every value that some other unit reads (``_readers``)."""
    unit = (lambda i: i) if unit_of is None else unit_of.__getitem__
    for x in range(len(succ)):
        pu = unit(x)
        readers, fb = _readers(x, pu, unit, uwave, succ)
        if readers or fb:
            yield x, pu, readers, fb


def _value(net: _Layers, pu: int, readers: list[int], fb: bool, uwave, size: int) -> tuple[int, int, int]:
    """Add one value's span terms; returns ``(constant of S, c, D)``: the part of the span cost
    that no placement avoids, the constant part shared with the true cost, the widest span."""
    lo, hi = net.lo, net.hi
    if uwave[pu] >= 0:
        c = size if fb else 0
        if not readers:
            return c, c, 0
        top = max(hi[r] for r in readers)
        w = size if fb else 2 * size
        const = c
        for t in range(lo[pu], top):
            const += _hyper(net, net.node(pu, t), [net.node(r, t) for r in readers], w)
        return const, c, top - lo[pu]
    if not readers:
        return 0, 0, 0
    bottom, top = min(lo[r] for r in readers), max(hi[r] for r in readers)
    const = size
    if len(readers) > 1:
        for t in range(bottom, top):
            const += _split(net, [net.node(r, t) for r in readers], size)
    return const, size, top - bottom


def span_cut(uwave: Sequence[int], n_waves: int, usucc: Sequence[Sequence[int]], upreds: Sequence[Sequence[int]],
             unit_of: Sequence[int] | None, succ: Sequence[Sequence[int]], size_of: Callable[[int], int],
             order: Sequence[int] | None = None, sizes: list[int] | None = None,
             pinned: Sequence[bool] | None = None,
             max_layers: int | None = None, max_phases: int | None = None) -> tuple[list[int] | None, int, int, int]:
    """The placement of least span cost (module docstring) from a feasible one ``uwave`` (the
    wave scan's; ``-1``: unsupported): returns ``(waves, min S, C, rho)``, so that its true
    bytes are at most ``min S`` and the optimum at least ``C + (min S - C) / rho``. Arguments as
    :func:`~torchvendor.partitioner.boundary.refine_waves`; ``pinned``: units that stay where they
    are (an exempt unit under ``min_size``); ``max_layers``: give up (``(None, 0, 0, 1)``) where
    the network would have more unit layers than this (the sum of the windows' widths), or its
    minimum cut more than ``max_phases`` phases of Dinic's algorithm (:func:`~.cuts.min_cut`)."""
    if order is None:
        order = range(len(uwave)) if unit_of is None else _topo_order(usucc, upreds)
    if sizes is None:
        sizes = [-1] * len(succ)
    lo, hi = span_windows(uwave, n_waves, usucc, upreds, order, pinned)
    if max_layers is not None and sum(hi) - sum(lo) > max_layers:
        return None, 0, 0, 1
    net = _Layers(lo, hi)
    _constraints(net, uwave, usucc)
    span = shared = 0
    rho = 1
    for x, pu, readers, fb in _read_values(unit_of, uwave, succ):
        if sizes[x] < 0:
            sizes[x] = size_of(x)
        k, c, d = _value(net, pu, readers, fb, uwave, sizes[x])
        span += k
        shared += c
        rho = max(rho, d)
    side = min_cut(net.n, net.arcs, max_phases=max_phases)
    if side is None:
        return None, 0, 0, 1
    out = [-1] * len(uwave)
    for u, w in enumerate(uwave):
        if w >= 0:
            t = lo[u]
            while t < hi[u] and not side[net.base[u] + t]:
                t += 1
            out[u] = t
    return out, span + _cut_value(net.arcs, side), shared, rho


def _cut_value(arcs, side) -> int:
    return sum(c for a, b, c in arcs if side[a] and not side[b])


def span_cost(waves: Sequence[int], unit_of: Sequence[int] | None, succ: Sequence[Sequence[int]],
              size_of: Callable[[int], int]) -> int:
    """The span cost ``S`` of a wave assignment (module docstring), for tests.

    >>> span_cost([0, 1, 2], None, [[1, 2], [], []], lambda i: 1)  # read in waves 1 and 2: spans 2
    4
    """
    total = 0
    for x, pu, readers, fb in _read_values(unit_of, waves, succ):
        size = size_of(x)
        if waves[pu] >= 0:
            top = max((waves[r] for r in readers), default=waves[pu])
            total += (size if fb else 0) + (1 if fb else 2) * size * (top - waves[pu])
        elif readers:
            ws = [waves[r] for r in readers]
            total += size * (1 + max(ws) - min(ws))
    return total
