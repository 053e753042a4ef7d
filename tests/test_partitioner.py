"""The IR-agnostic partitioner on DictGraphs: properties (hypothesis) and regression cases.

The checkers here are written independently of the partitioner's internals: convexity is
checked by contracting every partition at once and running Kahn's algorithm (O(V+E)); the
count lower bound is a DP over paths.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from torchvendor.ir.graph_view import DictGraph
from torchvendor.partitioner import (PartitionError, Unsupported, UnsupportedOperatorsError, any_chain, chain,
                                     dtypes, partition, predicate,
                                     render_html, supported_ops, unsupported_ops)
from torchvendor.partitioner.outline import emission_order, outline


# ---------------------------------------------------------------------------------------------
# independent checkers
# ---------------------------------------------------------------------------------------------
def contracted_is_acyclic(view, partitions) -> bool:
    """All partitions contracted at once give a DAG (implies each partition is convex)."""
    owner = {}
    for k, p in enumerate(partitions):
        for n in p.nodes:
            owner[n] = ("p", k)
    unit = lambda n: owner.get(n, ("n", id(n)))  # noqa: E731
    succ, indeg = defaultdict(set), defaultdict(int)
    units = set()
    for n in view.nodes():
        u = unit(n)
        units.add(u)
        for x in view.inputs(n):
            q = unit(x)
            if q != u and u not in succ[q]:
                succ[q].add(u)
                indeg[u] += 1
    ready = [u for u in units if indeg[u] == 0]
    seen = 0
    while ready:
        u = ready.pop()
        seen += 1
        for s in succ[u]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return seen == len(units)


def is_convex(view, members) -> bool:
    """No path leaves ``members`` and comes back (BFS from the outside users)."""
    members = set(members)
    users = defaultdict(list)
    for n in view.nodes():
        for x in view.inputs(n):
            users[x].append(n)
    frontier = [u for m in members for u in users[m] if u not in members]
    seen = set(frontier)
    while frontier:
        n = frontier.pop()
        for u in users[n]:
            if u in members:
                return False
            if u not in seen:
                seen.add(u)
                frontier.append(u)
    return True


def run_lower_bound(view, in_s) -> int:
    """Max number of maximal runs of S-nodes on any path: a lower bound on #partitions."""
    f = {}
    for n in view.nodes():
        best = 0
        for x in view.inputs(n):
            best = max(best, f[x] if (in_s(x) or not in_s(n)) else f[x] + 1)
        f[n] = max(best, 1) if in_s(n) else best
    return max(f.values(), default=0)


# ---------------------------------------------------------------------------------------------
# random DAGs
# ---------------------------------------------------------------------------------------------
OPS = ["add", "mul", "relu", "sin", "exp"]


class Case(tuple):
    """(graph, support, groups, output) with a short repr for hypothesis reports."""

    def __repr__(self) -> str:
        g, support, groups, _ = self
        lines = [f"{n.name} = {n.op}({', '.join(i.name for i in n.inputs)}) sup={support.get(n, '-')}"
                 for n in g.nodes()]
        return "Case:\n  " + "\n  ".join(lines) + f"\n  groups={groups}"


@st.composite
def random_dags(draw, max_nodes=40):
    g = DictGraph()
    n_in = draw(st.integers(1, 3))
    values = [g.add_input(f"in{i}") for i in range(n_in)]
    if draw(st.booleans()):
        values.append(g.add_node("const", (), name="w", kind="constant"))
    n_ops = draw(st.integers(0, max_nodes))
    support = {}
    for i in range(n_ops):
        k = draw(st.integers(1, 3))
        window = draw(st.sampled_from([2, 4, 1000]))
        cands = values[-window:]
        ins = [cands[draw(st.integers(0, len(cands) - 1))] for _ in range(k)]
        node = g.add_node(draw(st.sampled_from(OPS)), ins, name=f"n{i}")
        support[node] = draw(st.sampled_from([True, True, True, False]))
        values.append(node)
    sinks = [v for v in values if not g.users(v)] or values[-1:]
    out = g.add_output(sinks)
    groups = []
    ops = [v for v in values if g.kind(v) == "op"]
    for _ in range(draw(st.integers(0, 3))):
        if len(ops) >= 2:
            size = draw(st.integers(2, min(4, len(ops))))
            start = draw(st.integers(0, len(ops) - size))
            groups.append(ops[start:start + size] if draw(st.booleans()) else
                          [ops[draw(st.integers(0, len(ops) - 1))] for _ in range(size)])
    return Case((g, support, groups, out))


def check_invariants(g, result, support, groups=()):
    seen = set()
    for p in result.partitions:
        assert p.nodes, "empty partition"
        for n in p.nodes:
            assert n not in seen, "node in two partitions"
            seen.add(n)
            assert g.kind(n) == "op", f"{n} ({g.kind(n)}) inside a partition"
            assert support.get(n, True), f"unsupported {n} inside a partition"
        order = [i for i, n in enumerate(g.nodes()) if n in set(p.nodes)]
        assert [g.nodes()[i] for i in order] == p.nodes, "partition nodes not in topological order"
        assert is_convex(g, p.nodes)
    assert contracted_is_acyclic(g, result.partitions)
    # partitions in a topological order: no edge from a later to an earlier partition
    for n in g.nodes():
        for x in g.inputs(n):
            if n in result.assignment and x in result.assignment:
                assert result.assignment[x] <= result.assignment[n]
    # every op node is in a partition or in fallback, with a reason
    ops = [n for n in g.nodes() if g.kind(n) == "op"]
    assert set(result.fallback) | seen == set(ops) and not (set(result.fallback) & seen)
    assert all(result.reasons[n] for n in result.fallback)
    for group in groups:
        owners = {result.assignment.get(n) for n in group if g.kind(n) == "op"}
        assert len(owners) <= 1, f"atomic group {group} split over {owners}"
    # boundary inputs/outputs are exactly the crossing values
    for p in result.partitions:
        members = set(p.nodes)
        ins = {x for n in p.nodes for x in g.inputs(n) if x not in members}
        outs = {n for n in p.nodes if any(u not in members for u in g.users(n))}
        assert set(p.inputs) == ins and set(p.outputs) == outs


def oracle_of(support):
    return lambda view, n: support[n] or Unsupported(f"random: {view.op(n)}")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags())
def test_random_dag_invariants_and_count_optimality(case):
    g, support, _, _ = case
    result = partition(g, oracle_of(support))
    check_invariants(g, result, support)
    in_s = lambda n: n in result.assignment  # noqa: E731
    assert len(result.partitions) == run_lower_bound(g, in_s)
    # determinism: same input, same partitions
    again = partition(g, oracle_of(support))
    assert [p.nodes for p in again.partitions] == [p.nodes for p in result.partitions]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.integers(1, 5), st.booleans())
def test_random_dag_with_groups_min_size_and_components(case, min_size, merge_independent):
    g, support, groups, _ = case
    result = partition(g, oracle_of(support), atomic_groups=groups, min_size=min_size,
                       merge_independent=merge_independent)
    check_invariants(g, result, support, groups)
    assert all(p.size >= min_size for p in result.partitions)
    if not groups and merge_independent:
        assert len(result.partitions) == run_lower_bound(g, lambda n: n in result.assignment)
    if not merge_independent:  # components: each partition weakly connected (groups count as edges)
        together = defaultdict(list)
        for group in groups:
            for a in group:
                together[a].extend(group)
        for p in result.partitions:
            members, comp, stack = set(p.nodes), {p.nodes[0]}, [p.nodes[0]]
            while stack:
                n = stack.pop()
                for m in list(g.inputs(n)) + g.users(n) + together[n]:
                    if m in members and m not in comp:
                        comp.add(m)
                        stack.append(m)
            assert comp == members


def boundary_bytes(g, result, size):
    """Independent: every partition's inputs once per reading partition, outputs once."""
    total = 0
    for p in result.partitions:
        members = set(p.nodes)
        ins = {x for n in p.nodes for x in g.inputs(n) if x not in members}
        outs = {n for n in p.nodes if any(u not in members for u in g.users(n))}
        total += sum(size(v) for v in ins | outs)
    return total


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.integers(1, 3), st.booleans(), st.data())
def test_random_dag_boundary_aware_never_worse_than_plain_waves(case, min_size, with_groups, data):
    g, support, groups, _ = case
    for n in g.nodes():  # random value sizes; some unknown (they count 1); some one-input ops are views
        if g.kind(n) != "output" and data.draw(st.integers(0, 5)):
            n.meta.update(dtype="float32", shape=(data.draw(st.sampled_from([1, 4, 64, 1024])),))
        if g.kind(n) == "op" and len(g.inputs(n)) == 1 and data.draw(st.integers(0, 3)) == 0:
            n.op = "aten.view.default"
    size = lambda v: 4 * v.meta["shape"][0] if "shape" in v.meta else 1  # noqa: E731
    groups = groups if with_groups else ()
    kw = dict(atomic_groups=groups, min_size=min_size)
    smart = partition(g, oracle_of(support), **kw)
    plain = partition(g, oracle_of(support), boundary_aware=False, **kw)
    check_invariants(g, smart, support, groups)
    assert len(smart.partitions) == len(plain.partitions)
    # the same nodes partitioned, placed differently, but for views left out at a partition's edge
    assert set(smart.assignment) <= set(plain.assignment)
    for n in set(plain.assignment) - set(smart.assignment):
        assert g.op(n) == "aten.view.default" and "cheap op" in smart.reasons[n]
    assert all(p.size >= min_size for p in smart.partitions)
    if not groups and min_size == 1:  # optimal for the supported set (views left out may lower the bound)
        assert len(smart.partitions) == run_lower_bound(g, lambda n: n in plain.assignment)
    assert boundary_bytes(g, smart, size) <= boundary_bytes(g, plain, size)
    rep = smart.report()  # the report's bytes (unknown sizes count 0 there) match the checker's
    assert rep.boundary_bytes == boundary_bytes(g, smart, lambda v: size(v) if "shape" in v.meta else 0)
    again = partition(g, oracle_of(support), **kw)
    assert [p.nodes for p in again.partitions] == [p.nodes for p in smart.partitions]


def test_size_caches_are_shared_between_calls():
    from torchvendor.partitioner import boundary as bd

    succ, preds = [[1, 3], [2], [4], [4], []], [[], [0], [1], [0], [2, 3]]
    asked, sizes = [], [-1] * 5
    size_of = lambda i: asked.append(i) or 4  # noqa: E731
    w = [-1, 0, -1, 0, 1]
    bd.refine_waves(w, 2, succ, preds, None, {}, preds, succ, size_of, sizes=sizes)
    first = list(asked)
    total = bd.boundary_total(w, None, succ, size_of, sizes)
    assert first and all(sizes[i] == 4 for i in first) and sorted(set(asked)) == sorted(asked)
    assert total == bd.boundary_total(w, None, succ, lambda i: 4)


def test_placement_passes_callback_errors_on_and_min_cut_checks_its_network():
    from torchvendor.partitioner import boundary as bd
    from torchvendor.partitioner import cuts

    # x -> a -> s(unsupported) -> c ; x -> b -> c: pricing b's move asks for sizes
    succ, preds = [[1, 3], [2], [4], [4], []], [[], [0], [1], [0], [2, 3]]

    def broken(i):
        raise RuntimeError(f"no size for {i}")

    with pytest.raises(RuntimeError, match="no size for"):
        bd.refine_waves([-1, 0, -1, 0, 1], 2, succ, preds, None, {}, preds, succ, broken)
    with pytest.raises(RuntimeError, match="no size for"):
        bd.boundary_total([-1, 0, -1, 0, 1], None, succ, broken)
    with pytest.raises(RuntimeError, match="no size for"):
        cuts.pair_cuts([-1, 0, -1, 0, 1], 2, succ, preds, None, {}, preds, succ, broken)
    # w (input) -> t (view, also read outside) -> mm: ejecting t prices t's and w's values
    esucc, epreds = [[1], [2, 3], [3], []], [[], [0], [1], [1, 2]]
    with pytest.raises(RuntimeError, match="no size for"):
        bd.eject_cheap([-1, 0, 0, -1], None, {}, [1], epreds, esucc, broken)
    w = [-1, 0, 0, -1]
    assert bd.eject_cheap(w, None, {}, [1], epreds, esucc, lambda i: 4, books=(1, None, None)) == [1]
    assert w == [-1, -1, 0, -1]
    w = [-1, 0, -1, -1]  # the view alone in its wave: the books keep it
    assert bd.eject_cheap(w, None, {}, [1], epreds, [[1], [2, 3], [], []], lambda i: 4,
                          books=(1, None, None)) == [] and w == [-1, 0, -1, -1]
    with pytest.raises(IndexError, match=r"arc 0 \(0, 5\) names a node outside 0..2"):
        cuts.min_cut(3, [(0, 5, 1)])
    with pytest.raises(ValueError, match="a capacity is negative"):
        cuts.min_cut(3, [(0, 2, -1)])
    with pytest.raises(ValueError, match="distinct source and sink"):
        cuts.min_cut(3, [], 1, 1)


def test_boundary_aware_pulls_a_weight_transpose_to_its_matmul():
    # t(w) is ready in wave 0 but only read by the matmul after the unsupported op: the plain
    # waves cut a big value (the transposed weight); boundary-aware placement keeps it inside
    g = DictGraph()
    x = g.add_input("x", dtype="float32", shape=(8, 16))
    w = g.add_input("w", dtype="float32", shape=(1024, 16))
    a = g.add_node("relu", [x], name="a", dtype="float32", shape=(8, 16))
    wt = g.add_node("t", [w], name="wt", dtype="float32", shape=(16, 1024))
    s = g.add_node("sin", [a], name="s", dtype="float32", shape=(8, 16))
    mm = g.add_node("mm", [s, wt], name="mm", dtype="float32", shape=(8, 1024))
    g.add_output([mm])
    plain = partition(g, unsupported_ops({"sin"}), boundary_aware=False)
    smart = partition(g, unsupported_ops({"sin"}))
    assert [p.nodes for p in plain.partitions] == [[a, wt], [mm]]
    assert [p.nodes for p in smart.partitions] == [[a], [wt, mm]]
    assert smart.report().boundary_bytes < plain.report().boundary_bytes
    assert smart.stats["boundary_moves"] == 1


def test_view_in_an_atomic_group_stays_on_the_fast_path():
    g = DictGraph()
    x = g.add_input("x")
    v = g.add_node("aten.view.default", [x], name="v")
    a = g.add_node("add", [x], name="a")
    g.add_output([v, a])
    result = partition(g, lambda view, n: True, atomic_groups=[[v, a]])
    assert [p.nodes for p in result.partitions] == [[v, a]] and not result.fallback


def test_view_at_a_partition_edge_runs_outside_when_cheaper():
    # the forward graph returns t(w) (saved for backward) and a matmul reads it: inside the
    # partition, t(w) would be written back; outside, the partition reads it instead of w
    g = DictGraph()
    x = g.add_input("x", dtype="float32", shape=(8, 16))
    w = g.add_input("w", dtype="float32", shape=(1024, 16))
    wt = g.add_node("aten.t.default", [w], name="wt", dtype="float32", shape=(16, 1024))
    mm = g.add_node("aten.mm.default", [x, wt], name="mm", dtype="float32", shape=(8, 1024))
    g.add_output([mm, wt])
    sup = {"aten.t.default", "aten.mm.default"}
    smart, plain = partition(g, sup), partition(g, sup, cheap_ops=())
    assert [p.nodes for p in plain.partitions] == [[wt, mm]]
    assert [p.nodes for p in smart.partitions] == [[mm]] and smart.fallback == [wt]
    assert "cheap op" in smart.reasons[wt]
    assert smart.report().boundary_bytes == plain.report().boundary_bytes - 16 * 1024 * 4


def test_boundary_pricing_matches_a_full_recount():
    """The sweeps price a unit (or a block) by differences; every choice must be the wave of
    least total boundary bytes (recounted from scratch for each wave in the range), the latest
    such wave in a reverse sweep, and the earliest only if strictly cheaper in a forward one."""
    import random

    from torchvendor.partitioner import boundary as bd

    rng = random.Random(7)
    checked = blocks = 0
    for _ in range(150):
        n = rng.randint(3, 40)
        preds = [sorted(set(rng.sample(range(i), min(i, rng.randint(0, 3))))) for i in range(n)]
        succ = [[] for _ in range(n)]
        for i, ps in enumerate(preds):
            for q in ps:
                succ[q].append(i)
        n_waves = rng.randint(2, 6)
        waves = [rng.randrange(-1, n_waves) for _ in range(n)]
        sizes = [rng.choice([1, 4, 64, 1000]) for _ in range(n)]
        few = rng.choice([0, 8])  # 0: every value keeps reader counts (the many-readers path)
        for u in range(n):
            if waves[u] < 0:
                continue
            w0 = waves[u]
            same = [m for m in range(n) if waves[m] == w0]
            block = [u] if rng.random() < 0.5 else sorted({u, *rng.sample(same, min(len(same), rng.randint(1, 3)))})
            lo, hi = rng.randint(0, w0), rng.randint(w0, n_waves - 1)
            if lo == hi:
                continue
            backward = rng.random() < 0.5
            st = bd._Placement(list(waves), None, preds, succ, sizes.__getitem__)
            old, bd._FEW_READERS = bd._FEW_READERS, few
            try:
                got = (bd._best_single(st, u, w0, lo, hi, backward) if len(block) == 1
                       else bd._best_group(st, block, w0, lo, hi, backward))
            finally:
                bd._FEW_READERS = old

            def total(w):
                trial = list(waves)
                for m in block:
                    trial[m] = w
                return bd.boundary_total(trial, None, succ, sizes.__getitem__)

            costs = {w: total(w) for w in range(lo, hi + 1)}
            least = min(costs.values())
            if backward:
                want = max(w for w, c in costs.items() if c == least)
            else:
                want = w0 if costs[w0] == least else min(w for w, c in costs.items() if c == least)
            assert got == want, (preds, waves, sizes, block, lo, hi, backward, costs)
            checked += 1
            blocks += len(block) > 1
    assert checked > 500 and blocks > 200


@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_random_dag_outline_is_topological_and_complete(case):
    g, support, groups, _ = case
    result = partition(g, oracle_of(support), atomic_groups=groups)
    out = outline(result)
    pos = {n: i for i, n in enumerate(out.parent.nodes())}
    for n in out.parent.nodes():
        assert all(pos[x] < pos[n] for x in out.parent.inputs(n))
    calls = [n for n in out.parent.nodes() if n.op == "torchvendor.partition"]
    assert len(calls) == len(result.partitions)
    n_copied = sum(len(list(sg.nodes())) - len(p.inputs) - 1 for sg, p in zip(out.subgraphs, result.partitions))
    assert n_copied == sum(len(p) for p in result.partitions)


# ---------------------------------------------------------------------------------------------
# regression cases (notes §5.3), IR-agnostic form; the FX forms are in test_partitioner_fx.py
# ---------------------------------------------------------------------------------------------
def chain_graph(ops):
    g = DictGraph()
    v = g.add_input("x")
    nodes = []
    for i, op in enumerate(ops):
        v = g.add_node(op, [v], name=f"{op}{i}")
        nodes.append(v)
    g.add_output([v])
    return g, nodes


def test_inputs_outputs_constants_never_assigned_80753():
    g = DictGraph()
    a, b = g.add_input("a"), g.add_input("b")
    w = g.add_node("get_attr", (), name="w", kind="constant")
    s = g.add_node("add", [a, b])
    m = g.add_node("mul", [s, w])
    out = g.add_output([m])
    result = partition(g, lambda view, n: True)  # an oracle that says yes to everything
    assert [p.nodes for p in result.partitions] == [[s, m]]
    assert result.partitions[0].inputs == [a, b, w] and result.partitions[0].outputs == [m]
    assert out not in result.assignment and result.fallback == []


def test_fully_supported_graph_is_one_partition_fast_path():
    g, nodes = chain_graph(["relu"] * 50)
    result = partition(g, {"relu"})
    assert len(result.partitions) == 1 and result.partitions[0].nodes == nodes
    assert result.stats["fast_path"] and result.stats["oracle_calls"] == 1


def test_two_outputs_sharing_an_input_86108():
    g = DictGraph()
    x = g.add_input("x")
    a = g.add_node("relu", [x], name="a")
    b = g.add_node("exp", [x], name="b")
    c = g.add_node("sin", [x], name="c")
    g.add_output([a, b, c])
    result = partition(g, {"relu", "exp"})
    assert [p.nodes for p in result.partitions] == [[a, b]]
    assert result.partitions[0].outputs == [a, b]


def test_horizontal_fusion_around_unsupported_81531():
    # x -> a (sup) -> u (unsup) -> c (sup); x -> b (sup) -> c: a and b in one partition
    g = DictGraph()
    x = g.add_input("x")
    a = g.add_node("relu", [x], name="a")
    u = g.add_node("sin", [a], name="u")
    b = g.add_node("relu", [x], name="b")
    c = g.add_node("add", [u, b], name="c")
    g.add_output([c])
    result = partition(g, unsupported_ops({"sin"}), boundary_aware=False)
    assert [p.nodes for p in result.partitions] == [[a, b], [c]]
    # boundary-aware: the same count, but b joins its consumer (x already crosses once per partition)
    result = partition(g, unsupported_ops({"sin"}))
    assert [p.nodes for p in result.partitions] == [[a], [b, c]]
    # and an unsupported node between two *consumers* of one value
    g2 = DictGraph()
    x = g2.add_input("x")
    p0 = g2.add_node("relu", [x], name="p0")
    u = g2.add_node("sin", [x], name="u")
    c1 = g2.add_node("relu", [p0], name="c1")
    c2 = g2.add_node("add", [p0, u], name="c2")
    g2.add_output([c1, c2])
    assert [p.nodes for p in partition(g2, unsupported_ops({"sin"})).partitions] == [[p0, c1, c2]]


def test_hrnet_style_multi_branch_86159():
    # several resolution branches, each with an unsupported op, exchanged and fused repeatedly
    g = DictGraph()
    x = g.add_input("x")
    branches = [g.add_node("conv", [x], name=f"stem{i}") for i in range(4)]
    for stage in range(3):
        branches = [g.add_node("upsample" if (i + stage) % 3 == 0 else "conv", [b], name=f"s{stage}b{i}")
                    for i, b in enumerate(branches)]
        fused = []
        for i in range(4):
            fused.append(g.add_node("add", [branches[i], branches[(i + 1) % 4], branches[(i + 2) % 4]],
                                    name=f"s{stage}f{i}"))
        branches = fused
    g.add_output(branches)
    support = unsupported_ops({"upsample"})
    result = partition(g, support)
    truth = {n: g.op(n) != "upsample" for n in g.nodes() if g.kind(n) == "op"}
    check_invariants(g, result, truth)
    assert len(result.partitions) == run_lower_bound(g, lambda n: n in result.assignment)


def test_nested_getitem_chains_with_effects_stay_together():
    g = DictGraph()
    tok, x = g.add_input("token"), g.add_input("x")
    we = g.add_node("higher_order.with_effects", [tok, x], name="we")
    t = g.add_node("operator.getitem", [we], {"index": 0}, name="tok1")
    r = g.add_node("operator.getitem", [we], {"index": 1}, name="res")
    r0 = g.add_node("operator.getitem", [r], {"index": 0}, name="res0")
    r1 = g.add_node("operator.getitem", [r], {"index": 1}, name="res1")
    s = g.add_node("add", [r0, r1], name="s")
    g.add_output([t, s])
    sup = partition(g, lambda v, n: True)
    assert [p.nodes for p in sup.partitions] == [[we, t, r, r0, r1, s]]
    # producer unsupported: its getitems fall back with it, even though the oracle accepts them
    res = partition(g, unsupported_ops({"higher_order.with_effects"}))
    assert set(res.fallback) == {we, t, r, r0, r1}
    assert "atomic group" in res.reasons[r1] and [p.nodes for p in res.partitions] == [[s]]
    # a getitem unsupported: the producer and the whole chain fall back
    res2 = partition(g, lambda v, n: n is not r0)
    assert set(res2.fallback) == {we, t, r, r0, r1}


def test_fill_mutation_ordering_81244():
    # y = clone(x); fill_(y); z = add(y, x): if fill_ falls back, clone and add must not share
    # a partition (the add must see the fill).
    g = DictGraph()
    x = g.add_input("x")
    y = g.add_node("aten.clone.default", [x], name="y")
    f = g.add_node("aten.fill_.Scalar", [y], {"value": 1.0}, name="f")
    z = g.add_node("aten.add.Tensor", [y, x], name="z")
    g.add_output([z])
    result = partition(g, unsupported_ops({"aten.fill_"}))
    assert [p.nodes for p in result.partitions] == [[y], [z]]
    assert (f, z) in result.ordering_edges
    order = emission_order(result)
    assert order.index(f) < order.index(result.partitions[1])
    # without detection it would (wrongly) merge them: the edge is what prevents it
    assert len(partition(g, unsupported_ops({"aten.fill_"}), detect_mutation=False).partitions) == 1
    # when fill_ is supported everything is one partition, in order
    assert [p.nodes for p in partition(g, lambda v, n: True).partitions] == [[y, f, z]]


def test_qdq_unit_not_split():
    # dq -> conv -> q, with an unsupported consumer of the dq: the unit stays whole
    g = DictGraph()
    x, w = g.add_input("x"), g.add_input("w")
    dq = g.add_node("dequantize", [x], name="dq")
    dqw = g.add_node("dequantize", [w], name="dqw")
    conv = g.add_node("conv", [dq, dqw], name="conv")
    q = g.add_node("quantize", [conv], name="q")
    relu = g.add_node("relu", [q], name="relu")
    g.add_output([relu])
    unit = [dq, dqw, conv, q]
    result = partition(g, lambda v, n: n is not conv, atomic_groups=[unit])
    assert set(result.fallback) == set(unit) and [p.nodes for p in result.partitions] == [[relu]]
    assert all("atomic group with unsupported conv" in result.reasons[n] for n in (dq, dqw, q))
    ok = partition(g, lambda v, n: True, atomic_groups=[unit], min_size=2)
    assert [p.nodes for p in ok.partitions] == [[dq, dqw, conv, q, relu]]


def test_non_convex_group_is_closed_under_convexity():
    # group {a, c} with a -> b -> c: b joins the unit; if b is unsupported, all three fall back
    g, (a, b, c, d) = chain_graph(["relu", "sin", "exp", "neg"])
    res = partition(g, unsupported_ops({"sin"}), atomic_groups=[[a, c]])
    assert set(res.fallback) == {a, b, c} and [p.nodes for p in res.partitions] == [[d]]
    res2 = partition(g, unsupported_ops({"neg"}), atomic_groups=[[a, c]])
    assert [p.nodes for p in res2.partitions] == [[a, b, c]] and res2.fallback == [d]
    assert res2.stats["scc_merges"] >= 1
    full = partition(g, lambda v, n: True, atomic_groups=[[a, c]])
    assert [p.nodes for p in full.partitions] == [[a, b, c, d]] and full.stats["fast_path"]


def test_min_size_all_below_threshold():
    g, nodes = chain_graph(["relu", "sin", "relu", "sin", "relu"])
    result = partition(g, unsupported_ops({"sin"}), min_size=2)
    assert result.partitions == [] and result.fallback == nodes
    assert "below min_size=2" in result.reasons[nodes[0]]
    rep = result.report()
    assert rep.unsupported["relu"]["count"] == 3 and rep.unsupported["sin"]["count"] == 2


def test_min_size_rerun_merges_after_drop():
    # a(sup) -> u1 -> b(sup, small) -> u2 -> c(sup); d(sup) independent: after b is dropped the
    # re-run still puts d with a (wave 1); min-size counts compute nodes only
    g = DictGraph()
    x = g.add_input("x")
    a1 = g.add_node("relu", [x], name="a1")
    a2 = g.add_node("relu", [a1], name="a2")
    u1 = g.add_node("sin", [a2], name="u1")
    b = g.add_node("relu", [u1], name="b")
    u2 = g.add_node("sin", [b], name="u2")
    c1 = g.add_node("relu", [u2], name="c1")
    c2 = g.add_node("relu", [c1], name="c2")
    g.add_output([c2])
    result = partition(g, unsupported_ops({"sin"}), min_size=2)
    assert [p.nodes for p in result.partitions] == [[a1, a2], [c1, c2]]
    assert b in result.fallback and result.stats["rounds"] == 2
    # exempt ops keep a small partition
    kept = partition(g, unsupported_ops({"sin"}), min_size=2, min_size_exempt_ops={"relu"})
    assert len(kept.partitions) == 3


def test_require_full_lists_every_unsupported_op():
    g, _ = chain_graph(["relu", "sin", "sin", "cos", "relu"])
    with pytest.raises(UnsupportedOperatorsError) as info:
        partition(g, unsupported_ops({"sin", "cos"}), require_full=True)
    msg = str(info.value)
    assert "sin x2" in msg and "cos x1" in msg and "declared unsupported" in msg
    assert info.value.unsupported["sin"]["count"] == 2
    # fully supported + require_full ignores min_size: one partition
    g2, nodes = chain_graph(["relu"] * 3)
    assert [p.nodes for p in partition(g2, {"relu"}, require_full=True, min_size=10).partitions] == [nodes]


def test_fallback_ops_forced_by_prefix():
    g, nodes = chain_graph(["aten.add.Tensor", "aten.mul.Tensor", "aten.add.Scalar"])
    result = partition(g, lambda v, n: True, fallback_ops={"aten.add"})
    assert result.fallback == [nodes[0], nodes[2]] and [p.nodes for p in result.partitions] == [[nodes[1]]]
    assert result.reasons[nodes[0]] == "forced to fallback (fallback_ops)"


def test_support_combinators_and_reasons():
    g = DictGraph()
    x = g.add_input("x")
    a = g.add_node("relu", [x], dtype="float32")
    b = g.add_node("relu", [a], dtype="float64")
    c = g.add_node("exp", [b], dtype="float32")
    g.add_output([c])
    oracle = chain(supported_ops({"relu", "exp"}), dtypes("float32"))
    result = partition(g, oracle)
    assert result.reasons[b] == "dtype float64 not supported (allowed: float32)"
    either = any_chain(supported_ops({"relu"}), predicate(lambda op: op == "exp", "no exp", op_only=True))
    assert either.op_only and bool(either.by_op("exp")) and str(either.by_op("sin")).count(";") == 1
    assert partition(g, lambda n: "not today" if n is c else True).reasons[c] == "not today"
    with pytest.raises(TypeError, match="support oracle"):
        partition(g, 42)


def test_clear_errors():
    g, nodes = chain_graph(["relu"])
    with pytest.raises(PartitionError, match="unknown partition option"):
        partition(g, {"relu"}, min_block_size=3)
    with pytest.raises(PartitionError, match="not a node of the graph"):
        partition(g, {"relu"}, atomic_groups=[[object()]])
    with pytest.raises(PartitionError, match="against the topological order"):
        partition(g, {"relu"}, ordering_edges=[(g.nodes()[-1], nodes[0])])

    class Shuffled(DictGraph):  # lists a reader before the node it reads
        def nodes(self):
            listed = list(super().nodes())
            return [listed[0], listed[2], listed[1], *listed[3:]]

    h = Shuffled()
    a = h.add_node("relu", [h.add_input("x")], name="a")
    h.add_output([h.add_node("relu", [a], name="b")])
    with pytest.raises(PartitionError, match="not in topological order: b comes before its input a"):
        partition(h, {"relu"})
    with pytest.raises(PartitionError, match="collection of operator keys"):
        partition(g, {"relu"}, fallback_ops="relu")
    with pytest.raises(PartitionError, match=r"oracle raised on node relu0 \(relu\): KeyError"):
        partition(g, lambda node: {}[node])


def test_report_text_and_json():
    g, nodes = chain_graph(["relu", "sin", "relu", "relu"])
    rep = partition(g, unsupported_ops({"sin"})).report()
    data = json.loads(rep.to_json())
    assert data["num_partitions"] == 2 and data["num_fallback"] == 1
    assert data["partitions"][1]["inputs"] == ["sin1"] and data["partitions"][1]["outputs"] == ["relu3"]
    assert data["unsupported"] == {"sin": {"count": 1, "reasons": {"sin is declared unsupported": 1}}}
    text = rep.summary()
    assert "2 partition(s)" in text and "sin x1: sin is declared unsupported" in text


def test_picture_small_and_summary(tmp_path):
    g, _ = chain_graph(["relu", "sin", "relu"])
    result = partition(g, unsupported_ops({"sin"}))
    page = render_html(result, tmp_path / "g.html")
    assert (tmp_path / "g.html").exists() and page.count("<circle") == 5
    assert "fallback: sin is declared unsupported" in page and "partition 1" in page
    big, _ = chain_graph(["relu", "sin"] * 60)
    summary = render_html(partition(big, unsupported_ops({"sin"})), max_nodes=50)
    assert "<circle" not in summary and "partition sizes" in summary


def test_partitioner_does_not_import_torch():
    code = ("import sys, torchvendor.partitioner as p; from torchvendor.ir.graph_view import DictGraph; "
            "g = DictGraph(); x = g.add_input('x'); y = g.add_node('relu', [x]); g.add_output([y]); "
            "p.outline(p.partition(g, {'relu'})); p.render_html(p.partition(g, {'relu'})); "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(max_nodes=80), st.integers(1, 4), st.booleans())
def test_random_dag_many_examples(case, min_size, merge_independent):
    g, support, groups, _ = case
    result = partition(g, oracle_of(support), atomic_groups=groups, min_size=min_size,
                       merge_independent=merge_independent)
    check_invariants(g, result, support, groups)
    if not groups and merge_independent:
        assert len(result.partitions) == run_lower_bound(g, lambda n: n in result.assignment)


@pytest.mark.slow
def test_large_random_graph_linear_invariants():
    import random
    rng = random.Random(0)
    g = DictGraph()
    vals = [g.add_input("x")]
    support = {}
    for i in range(20000):
        node = g.add_node(rng.choice(OPS), [rng.choice(vals[-8:]) for _ in range(2)])
        support[node] = rng.random() > 0.05
        vals.append(node)
    g.add_output([vals[-1]])
    result = partition(g, oracle_of(support))
    assert contracted_is_acyclic(g, result.partitions)
    assert len(result.partitions) == run_lower_bound(g, lambda n: n in result.assignment)


def test_docs_examples_run():
    """Every ```python block of docs/partitioner.md runs (in order, one namespace each)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "partitioner.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 4
    for block in blocks:
        exec(compile(block, "docs/partitioner.md", "exec"), {})

