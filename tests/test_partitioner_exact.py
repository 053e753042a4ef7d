"""Placement against an exact solver: brute force over every count-optimal, jointly convex
partitioning of small random DAGs (issue 22).

Any jointly convex partitioning of the supported units into the minimum number K of partitions
is a wave assignment satisfying the difference constraints (``wave(v) >= wave(u)`` along an edge
between supported units, ``>= wave(u) + 1`` through unsupported units only), labelled by a
topological order of the contracted graph; so enumerating those assignments enumerates every
count-optimal, jointly convex partitioning, and the boundary bytes do not depend on the labels.
"""
from __future__ import annotations

import itertools
import random

import pytest

from torchvendor.ir.graph_view import DictGraph
from torchvendor.partitioner import partition
from torchvendor.partitioner import core
from torchvendor.partitioner.boundary import boundary_total, refine_waves
from torchvendor.partitioner.cuts import min_cut, pair_cuts
from torchvendor.partitioner.span import span_cost, span_cut

SIZES = [1, 2, 4, 8, 16, 64]


def random_dag(rng: random.Random, n: int):
    preds = [[j for j in range(i) if rng.random() < rng.choice((0.2, 0.35, 0.5))] for i in range(n)]
    succ = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succ[p].append(i)
    sup = [rng.random() > rng.choice((0.1, 0.25, 0.4)) for _ in range(n)]
    sizes = [rng.choice(SIZES) for _ in range(n)]
    return preds, succ, sup, sizes


def constraints(n, preds, succ, sup):
    """(v, u, c): ``wave(v) >= wave(u) + c`` for supported u, v."""
    out = [(v, p, 0) for v in range(n) if sup[v] for p in preds[v] if sup[p]]
    for u in range(n):
        if not sup[u]:
            continue
        seen, stack = set(), [s for s in succ[u] if not sup[s]]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            for s in succ[x]:
                if sup[s]:
                    out.append((s, u, 1))
                else:
                    stack.append(s)
    return out


def feasible(w, cons) -> bool:
    return all(w[v] >= w[u] + c for v, u, c in cons)


def all_placements(n, preds, succ, sup, k):
    """Every wave assignment of the supported nodes into ``k`` waves meeting the constraints."""
    cons = constraints(n, preds, succ, sup)
    low = {v: [(u, c) for vv, u, c in cons if vv == v] for v in range(n)}
    s_nodes = [i for i in range(n) if sup[i]]
    w = [-1] * n

    def rec(i):
        if i == len(s_nodes):
            yield list(w)
            return
        v = s_nodes[i]
        lo = max((w[u] + c for u, c in low[v]), default=0)
        for wave in range(lo, k):
            w[v] = wave
            yield from rec(i + 1)
        w[v] = -1
    yield from rec(0)


def instances(count: int, seed: int = 0, max_nodes: int = 11):
    """Random DAGs with at least two waves (where placement matters)."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        n = rng.randint(4, max_nodes)
        preds, succ, sup, sizes = random_dag(rng, n)
        waves, k, _ = core._waves(n, succ, list(map(len, preds)), sup)
        if k >= 2:
            out.append((n, preds, succ, sup, sizes, waves, k))
    return out


def latest(waves, k, preds, succ):
    """The latest-wave assignment (``core._latest_waves`` on single-node units), or ``None``."""
    rev, k2, _ = core._waves(len(waves), preds, list(map(len, succ)), [w >= 0 for w in waves])
    return [k - 1 - w if w >= 0 else -1 for w in rev] if k2 == k else None


def place(waves, k, preds, succ, size):
    """What ``partition`` does on a graph of single-node units: the sweeps from the earliest
    waves and the latest waves, the cheaper of the two, then cuts and sweeps; the same from the
    span cut's waves where they are cheaper after the sweeps, and the cheaper result."""
    starts = [s for s in (list(waves), latest(waves, k, preds, succ)) if s is not None]
    spanned = span_cut(waves, k, succ, preds, None, succ, size)[0]
    total = lambda s: boundary_total(s, None, succ, size)  # noqa: E731
    for s in starts + [spanned]:
        refine_waves(s, k, succ, preds, None, {}, preds, succ, size)
    finalists = [min(starts, key=total)]
    if total(spanned) < total(finalists[0]):
        finalists.append(spanned)
    for w in finalists:
        for _ in range(core._PLACE_ROUNDS):
            pair_cuts(w, k, succ, preds, None, {}, preds, succ, size)
            if not refine_waves(w, k, succ, preds, None, {}, preds, succ, size):
                break
    return min(finalists, key=total)


def test_min_cut_against_brute_force():
    rng = random.Random(1)
    for _ in range(300):
        n = rng.randint(2, 7)
        arcs = [(a, b, rng.choice([1, 2, 5, float("inf")])) for a in range(n) for b in range(n)
                if a != b and rng.random() < 0.35]
        side = min_cut(n, arcs)
        assert min_cut(n, arcs, max_phases=1) in (None, side)  # a phase cap gives up or finds the same side
        cost = lambda s: sum(c for a, b, c in arcs if s[a] and not s[b])  # noqa: E731
        best = min(cost((True, False) + rest) for rest in itertools.product((True, False), repeat=n - 2))
        assert side[0] and side[1] == (best == float("inf"))  # no finite cut: the sink stays reachable
        if best < float("inf"):
            assert cost(side) == best


def test_pair_cuts_exact_with_two_waves():
    """Two waves: one pair, so the minimum cut is the exact optimum over every count-optimal,
    jointly convex partitioning."""
    checked = 0
    for n, preds, succ, sup, sizes, waves, k in instances(250, seed=2):
        if k != 2:
            continue
        size = sizes.__getitem__
        w = list(waves)
        pair_cuts(w, k, succ, preds, None, {}, preds, succ, size)
        assert feasible(w, constraints(n, preds, succ, sup))
        best = min(boundary_total(p, None, succ, size) for p in all_placements(n, preds, succ, sup, k))
        assert boundary_total(w, None, succ, size) == best
        checked += 1
    assert checked > 100


def test_pair_cuts_pair_optimal():
    """Any number of waves: no set of units moving between two adjacent waves lowers the bytes
    (brute force over every placement that differs only there)."""
    for n, preds, succ, sup, sizes, waves, k in instances(150, seed=3, max_nodes=10):
        size = sizes.__getitem__
        w = list(waves)
        before = boundary_total(w, None, succ, size)
        pair_cuts(w, k, succ, preds, None, {}, preds, succ, size)
        cons = constraints(n, preds, succ, sup)
        assert feasible(w, cons)
        got = boundary_total(w, None, succ, size)
        assert got <= before
        for lo in range(k - 1):
            movable = [u for u in range(n) if w[u] in (lo, lo + 1)]
            for bits in itertools.product((lo, lo + 1), repeat=len(movable)):
                alt = list(w)
                for u, b in zip(movable, bits):
                    alt[u] = b
                if feasible(alt, cons):
                    assert boundary_total(alt, None, succ, size) >= got, (lo, alt, w)


def _optimum_gaps(cases):
    """(#instances above the optimum: ours, the sweeps alone), checking on every instance what
    docs/partitioner.md proves: feasible, a node in every wave, never above the sweeps alone nor
    the earliest waves, within the span cut's bound of the optimum (and its lower bound below
    the optimum), and exact with two waves."""
    above = swept_above = 0
    for n, preds, succ, sup, sizes, waves, k in cases:
        size = sizes.__getitem__
        w = place(waves, k, preds, succ, size)
        _, span, shared, rho = span_cut(waves, k, succ, preds, None, succ, size)
        assert feasible(w, constraints(n, preds, succ, sup))
        assert all(w.count(wave) for wave in range(k)), "a wave lost its last node"
        swept = list(waves)
        refine_waves(swept, k, succ, preds, None, {}, preds, succ, size)
        got, alone = boundary_total(w, None, succ, size), boundary_total(swept, None, succ, size)
        assert got <= alone <= boundary_total(waves, None, succ, size)  # <= the sweeps <= the earliest waves
        best = min(boundary_total(p, None, succ, size) for p in all_placements(n, preds, succ, sup, k))
        assert got >= best
        assert 1 <= rho <= max(1, k - 1)
        assert got <= span and shared + (span - shared) / rho <= best  # the certified lower bound
        assert got - shared <= rho * (best - shared), "above the proven bound"
        if k == 2:
            assert got == best, "two waves: the pair cut is the exact optimum"
        above += got > best
        swept_above += alone > best
    return above, swept_above


def test_placement_against_exact_optimum():
    """The full placement (sweeps, pair cuts, sweeps) on 400 random DAGs (mostly two waves):
    feasible (so the count stays optimal and the partitions jointly convex), never above the
    sweeps alone, equal to the brute-force optimum on every two-wave instance."""
    above, _ = _optimum_gaps(instances(400, seed=4))
    assert above == 0


def test_placement_against_exact_optimum_three_waves_and_more():
    """400 random DAGs with three or more waves: within the proven bound on every one; exact
    on all but a few (NP-hard in general); measured with these seeds: 0 of 400 above the
    optimum, against 56 for the sweeps alone from the earliest waves."""
    rng = random.Random(7)
    cases = []
    while len(cases) < 400:
        n = rng.randint(6, 12)
        preds, succ, sup, sizes = random_dag(rng, n)
        waves, k, _ = core._waves(n, succ, list(map(len, preds)), sup)
        if k >= 3:
            cases.append((n, preds, succ, sup, sizes, waves, k))
    above, swept_above = _optimum_gaps(cases)
    assert above <= 2 < swept_above, (above, swept_above)


def test_span_cut_is_the_span_optimum():
    """The span cut's waves meet every constraint and are the least span cost over every
    count-optimal, jointly convex placement (brute force); their true bytes are at most that,
    and ``C + (min S - C) / rho`` is at most the true optimum."""
    checked = 0
    for n, preds, succ, sup, sizes, waves, k in instances(200, seed=12):
        size = sizes.__getitem__
        w, span, shared, rho = span_cut(waves, k, succ, preds, None, succ, size)
        assert feasible(w, constraints(n, preds, succ, sup))
        placements = list(all_placements(n, preds, succ, sup, k))
        assert span_cost(w, None, succ, size) == span == min(span_cost(p, None, succ, size) for p in placements)
        best = min(boundary_total(p, None, succ, size) for p in placements)
        assert boundary_total(w, None, succ, size) <= span
        assert rho * best >= shared * (rho - 1) + span
        checked += k > 2
    assert checked > 10


def test_span_cut_caps_give_up_or_give_the_uncapped_result():
    """A layer or phase cap only makes ``span_cut`` give up: otherwise the same waves, bound and
    size lookups as without caps; pinned units stay where they are."""
    rng = random.Random(13)
    gave_up = 0
    for _ in range(300):
        n = rng.randint(4, 70)
        preds, succ, sup, sizes = random_dag(rng, n)
        waves, k, _ = core._waves(n, succ, list(map(len, preds)), sup)
        if k < 2:
            continue
        pinned = [s and rng.random() < 0.15 for s in sup] if rng.random() < 0.3 else None
        caps = dict(max_layers=rng.choice((None, None, n // 2)), max_phases=rng.choice((None, 2, 4)))
        capped_sizes, free_sizes = [-1] * n, [-1] * n
        got = span_cut(waves, k, succ, preds, None, succ, sizes.__getitem__, sizes=capped_sizes, pinned=pinned,
                       **caps)
        free = span_cut(waves, k, succ, preds, None, succ, sizes.__getitem__, sizes=free_sizes, pinned=pinned)
        gave_up += got[0] is None
        assert got == (None, 0, 0, 1) or got == free
        assert all(s == sizes[i] for i, s in enumerate(free_sizes) if s >= 0)
        if pinned is not None and free[0] is not None:
            assert all(free[0][u] == waves[u] for u in range(n) if pinned[u])
    assert 10 < gave_up < 200


def _dict_graph(n, preds, sup, sizes):
    g = DictGraph()
    x = g.add_input("x", dtype="float32", shape=(4,))
    nodes = []
    for i in range(n):
        ins = [nodes[p] for p in preds[i]] or [x]
        nodes.append(g.add_node("relu" if sup[i] else "sin", ins, name=f"n{i}", dtype="float32",
                                shape=(sizes[i],)))
    g.add_output([v for v in nodes if not g.users(v)] or nodes[-1:])
    return g, nodes


@pytest.mark.parametrize("min_size", [1, 2])
def test_partition_with_cuts_keeps_count_convexity_and_books(min_size):
    """Through ``partition``: the same count as without the cuts, jointly convex, never more
    bytes than the sweeps alone, every partition at least ``min_size`` compute nodes."""
    from test_partitioner import contracted_is_acyclic

    rng = random.Random(5 + min_size)
    bounded = 0
    for _ in range(120):
        n = rng.randint(6, 24)
        preds, succ, sup, sizes = random_dag(rng, n)
        g, nodes = _dict_graph(n, preds, sup, sizes)
        groups = [nodes[i:i + 2] for i in range(0, n - 1, 7) if rng.random() < 0.5]
        kw = dict(min_size=min_size, atomic_groups=groups, cheap_ops=())
        ours = partition(g, {"relu"}, **kw)
        sweeps = partition(g, {"relu"}, pair_cuts=False, **kw)
        assert len(ours.partitions) == len(sweeps.partitions)
        assert contracted_is_acyclic(g, ours.partitions)
        got = ours.report().boundary_bytes
        assert got <= sweeps.report().boundary_bytes
        assert all(p.size >= min_size for p in ours.partitions)
        if "bytes_lower_bound" in ours.stats:  # the span cut ran: its bound holds (no views leave here)
            bounded += 1
            assert ours.stats["bytes_lower_bound"] <= got <= ours.stats["bytes_span"]
        for grp in groups:
            assert len({ours.assignment.get(m) for m in grp if sup[nodes.index(m)]}) <= 1
    assert bounded > 40


def test_pair_cuts_lower_the_bytes_and_keep_the_wave_books():
    """``pair_cuts`` on random DAGs, with and without wave books (``min_size``, counted and
    exempt units): moves only when the bytes go down, every wave keeps a node and the compute
    nodes ``min_size`` asks for (unless it holds an exempt unit, which stays where it is)."""
    rng = random.Random(11)
    moved = 0
    for _ in range(300):
        n = rng.randint(4, 60)
        preds, succ, sup, sizes = random_dag(rng, n)
        waves, k, _ = core._waves(n, succ, list(map(len, preds)), sup)
        if k < 2:
            continue
        size = sizes.__getitem__
        min_size, compute, exempt = 1, [True] * n, None
        books = None
        if rng.random() < 0.5:
            min_size, compute = rng.choice((1, 2, 3)), [rng.random() < 0.8 for _ in range(n)]
            exempt = [rng.random() < 0.1 for _ in range(n)] if rng.random() < 0.5 else None
            books = (min_size, compute, exempt)
        w = list(waves)
        refine_waves(w, k, succ, preds, None, {}, preds, succ, size)
        before, start = boundary_total(w, None, succ, size), list(w)
        got = pair_cuts(w, k, succ, preds, None, {}, preds, succ, size, books=books)
        after = boundary_total(w, None, succ, size)
        assert after < before if got else (after == before and w == start)
        for wave in range(k):
            was = [u for u in range(n) if start[u] == wave]
            now = [u for u in range(n) if w[u] == wave]
            assert now or not was
            if books is not None and min_size > 1 and not (exempt and any(exempt[u] for u in now)):
                assert sum(compute[u] for u in now) >= min(min_size, sum(compute[u] for u in was))
        if books is not None and min_size > 1 and exempt is not None:
            assert all(w[u] == start[u] for u in range(n) if exempt[u])
        moved += got
    assert moved > 50


def multiway_cut_gadget(n_free: int, edges: list[tuple[int, int]]):
    """The placement instance of a 3-terminal multiway cut on ``H`` (vertices ``0, 1, 2`` the
    terminals, then ``n_free`` others; ``edges`` undirected): a chain ``s0 -> q0 -> s1 -> q1 -> s2``
    (``q`` unsupported) pins terminal ``i`` (= ``s_i``) at wave ``i`` of 3; each other vertex is a
    supported node; each edge ``{u, v}`` gets copies ``u' <- u``, ``v' <- v`` and a node
    ``m <- u', v'``. Vertices' values weigh ``W`` (more than every edge together: copies stay
    with their vertex), copies 1: an edge then costs 2 (a read and a write) exactly when its
    ends differ (``m`` joins the later one). Returns ``(n, preds, sup, sizes, vertex nodes)``."""
    preds: list[list[int]] = [[], [0], [1], [2], [3]]  # s0, q0, s1, q1, s2
    sup = [True, False, True, False, True]
    vert = [0, 2, 4]
    for _ in range(n_free):
        vert.append(len(preds))
        preds.append([])
        sup.append(True)
    heavy = set(vert)
    for u, v in edges:
        cu, cv = len(preds), len(preds) + 1
        preds += [[vert[u]], [vert[v]], [cu, cv]]
        sup += [True, True, True]
    w = 4 * len(edges) + 1
    sizes = [w if i in heavy else 1 for i in range(len(preds))]
    return len(preds), preds, sup, sizes, vert


def test_placement_with_three_waves_is_np_hard():
    """The reduction behind docs/partitioner.md's hardness note, checked by brute force on every
    small ``H``: the least boundary bytes of the gadget (over every count-optimal, jointly
    convex placement) is a constant plus twice the minimum 3-terminal multiway cut of ``H``
    (NP-hard: Dahlhaus et al. 1994), so no polynomial placement is exact with 3 waves or more
    unless P = NP; two waves are one minimum cut (above)."""
    pairs = [(a, b) for a in range(4) for b in range(a + 1, 4) if b == 3 or a + b == 3]  # v=3 and t1-t2
    checked = set()
    for r in range(1, 4):
        for edges in itertools.combinations(pairs, r):
            n, preds, sup, sizes, vert = multiway_cut_gadget(1, list(edges))
            succ = [[] for _ in range(n)]
            for i, ps in enumerate(preds):
                for p in ps:
                    succ[p].append(i)
            waves, k, _ = core._waves(n, succ, list(map(len, preds)), sup)
            assert k == 3
            size = sizes.__getitem__
            best = min(boundary_total(p, None, succ, size) for p in all_placements(n, preds, succ, sup, k))
            cut = min(sum(lab[a] != lab[b] for a, b in edges) for lab in ((0, 1, 2, x) for x in range(3)))
            const = sum(sizes[:4])  # s0, s1 written for q0, q1 and q0, q1 read by s1, s2, whatever the placement
            assert best == const + 2 * cut, (edges, best, cut)
            checked.add(cut)
    assert checked == {0, 1, 2}
