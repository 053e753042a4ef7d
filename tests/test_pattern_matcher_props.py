"""Property tests: the matcher against a brute-force matcher on random small DAGs (DictGraph).

The brute force enumerates every assignment of the pattern's operation nodes to graph nodes (and
every operand order of commutative ones), derives the wildcard bindings from the structure, and
keeps the consistent assignments. It knows nothing of the matcher's backtracking, indexing,
anchored expansion or bounded cycle check, which it recomputes by contracting the whole graph.
"""
from __future__ import annotations

import itertools

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from torchvendor.ir.graph_view import DictGraph  # noqa: E402
from torchvendor.pattern_matcher import (  # noqa: E402
    Alt, Fused, Multi, MultiPattern, Op, P, PatternMatcher, Rule, T, Template, W, Wildcard, find_all,
)
from torchvendor.pattern_matcher.keymap import COMMUTATIVE_OPS  # noqa: E402

BINARY, UNARY = ("add", "mul", "sub"), ("neg",)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- random graphs and patterns ---------------------------------------------------------------------
def random_graph(data: st.DataObject, max_ops: int = 10) -> DictGraph:
    g = DictGraph()
    vals = [g.add_input(f"x{i}") for i in range(data.draw(st.integers(1, 3)))]
    for _ in range(data.draw(st.integers(1, max_ops))):
        op = data.draw(st.sampled_from(BINARY + UNARY))
        arity = 1 if op in UNARY else 2
        ins = [data.draw(st.sampled_from(vals)) for _ in range(arity)]
        vals.append(g.add_node(op, ins))
    ops = vals[len([v for v in vals if v.kind == "input"]):]
    outs = [ops[-1]] + [v for v in ops[:-1] if data.draw(st.booleans())]
    g.add_output(outs)
    return g


def random_tree(data: st.DataObject, depth: int, names: tuple[str, ...], key=lambda op: op) -> object:
    """A random pattern tree (no shared unnamed op objects; names may repeat); ``key`` spells
    the operators (the FX tests use ATen keys)."""
    if depth == 0 or data.draw(st.integers(0, 3)) == 0:
        name = data.draw(st.sampled_from(names + (None,)))
        return W(name)
    op = data.draw(st.sampled_from(BINARY + UNARY))
    arity = 1 if op in UNARY else 2
    args = [random_tree(data, depth - 1, names, key) for _ in range(arity)]
    node = P(key(op), *args)
    choice = data.draw(st.integers(0, 6))
    if choice == 0 and depth > 0:  # an alternative at this position
        other = data.draw(st.sampled_from(BINARY))
        node = Alt(node, P(key(other), *[random_tree(data, depth - 1, names, key) for _ in range(2)]))
    elif choice == 1:  # an optional neg around this op
        node = Alt(P(key("neg"), node), node)
    return node


def root_op(p: object) -> bool:
    return isinstance(p, Op) or (isinstance(p, Alt) and all(root_op(b) for b in p.branches))


# -- brute force ----------------------------------------------------------------------------------------
def expand(p: object) -> list[object]:
    """Alternative-free variants of a pattern tree, as nested tuples."""
    if isinstance(p, Wildcard):
        return [("w", p.name)]
    if isinstance(p, Alt):
        return [v for b in p.branches for v in expand(b)]
    assert isinstance(p, Op)
    key = next(iter(p.keys))
    return [("op", key, p.name, tuple(args)) for args in itertools.product(*[expand(a) for a in p.args])]


def brute_force(g: DictGraph, outputs: list[tuple]) -> set[tuple]:
    """All matches of concrete output trees, as (outputs, bindings, nodes) keys."""
    op_occ: list[tuple] = []

    def collect(t: tuple) -> None:
        if t[0] == "op":
            op_occ.append(t)
            for a in t[3]:
                collect(a)

    for t in outputs:
        collect(t)
    nodes = g.nodes()
    cands = [[n for n in nodes if n.kind == "op" and n.op == t[1]] for t in op_occ]
    comm = [t[1] in COMMUTATIVE_OPS for t in op_occ]
    found: set[tuple] = set()
    for assign in itertools.product(*cands):
        for swaps in itertools.product(*[(False, True) if c else (False,) for c in comm]):
            where = {id(t): (n, s) for t, n, s in zip(op_occ, assign, swaps)}
            binds: dict[str, object] = {}
            ok = True

            def bind(name: str | None, node: object) -> bool:
                if name is None:
                    return True
                return binds.setdefault(name, node) is node

            for t in op_occ:
                n, s = where[id(t)]
                ins = list(n.inputs)
                if len(ins) != len(t[3]):
                    ok = False
                    break
                if s:
                    if ins[0] is ins[1]:
                        ok = False  # the same as the unswapped order
                        break
                    ins[0], ins[1] = ins[1], ins[0]
                if not bind(t[2], n):
                    ok = False
                    break
                for a, x in zip(t[3], ins):
                    if a[0] == "w":
                        ok = ok and bind(a[1], x)
                    else:
                        ok = ok and where[id(a)][0] is x
                if not ok:
                    break
            roots = tuple(where[id(t)][0] if t[0] == "op" else None for t in outputs)
            if ok and len(set(roots)) == len(roots):
                found.add((roots, frozenset(binds.items()), frozenset(n for n, _ in where.values())))
    return found


def brute_matches(g: DictGraph, pattern: object) -> set[tuple]:
    trees = pattern.outputs if isinstance(pattern, MultiPattern) else (pattern,)
    out: set[tuple] = set()
    for combo in itertools.product(*[expand(t) for t in trees]):
        out |= brute_force(g, list(combo))
    return out


def brute_valid(g: DictGraph, key: tuple, capture_names: set[str]) -> bool:
    roots, binds, nodes = key
    for n in nodes:
        if n not in roots and any(u not in nodes for u in n.users):
            return False
    if any(v in nodes for k, v in binds if k in capture_names):
        return False
    if len(roots) > 1:  # placement: inputs computed before the first output
        order = {n: i for i, n in enumerate(g.nodes())}
        if any(order[v] > min(order[r] for r in roots) for k, v in binds if k in capture_names):
            return False
    return acyclic_after(g, [nodes])


def acyclic_after(g: DictGraph, groups: list) -> bool:
    """Whether the graph stays acyclic with each group contracted to one node (Kahn on everything)."""
    owner = {n: i for i, grp in enumerate(groups) for n in grp}
    rep = lambda n: ("M", owner[n]) if n in owner else n  # noqa: E731
    indeg: dict = {}
    succ: dict = {}
    for n in g.nodes():
        indeg.setdefault(rep(n), 0)
        for i in n.inputs:
            if rep(i) != rep(n):
                indeg[rep(n)] = indeg.get(rep(n), 0) + 1
                succ.setdefault(rep(i), []).append(rep(n))
    ready = [r for r, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        r = ready.pop()
        seen += 1
        for s in succ.get(r, []):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return seen == len(indeg)


def keys_of(matches) -> set[tuple]:
    return {m.key() for m in matches}


# -- properties ---------------------------------------------------------------------------------------
@SETTINGS
@given(st.data())
def test_single_output_matches_equal_brute_force(data):
    check_single(data)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_single_output_matches_equal_brute_force_many(data):
    check_single(data)


def check_single(data: st.DataObject) -> None:
    g = random_graph(data)
    pat = random_tree(data, 3, ("a", "b", "c"))
    if not root_op(pat):
        pat = P("add", pat, W("c"))
    assert keys_of(find_all(g, pat)) == brute_matches(g, pat)


@SETTINGS
@given(st.data())
def test_multi_output_matches_equal_brute_force(data):
    check_multi(data)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_multi_output_matches_equal_brute_force_many(data):
    check_multi(data)


def check_multi(data: st.DataObject) -> None:
    g = random_graph(data, max_ops=8)
    first = P(data.draw(st.sampled_from(BINARY)), random_tree(data, 1, ("a", "b")), W("x"))
    second = P(data.draw(st.sampled_from(BINARY)), W("x"), random_tree(data, 1, ("b", "c")))
    pat = Multi(first, second)
    assert keys_of(find_all(g, pat)) == brute_matches(g, pat)


@SETTINGS
@given(st.data())
def test_valid_candidates_and_selection_agree_with_brute_force(data):
    g = random_graph(data)
    multi = data.draw(st.booleans())
    if multi:
        pat = Multi(P(data.draw(st.sampled_from(BINARY)), random_tree(data, 1, ("a",)), W("x")),
                    P(data.draw(st.sampled_from(BINARY)), W("x"), W("c")))
    else:
        pat = random_tree(data, 3, ("a", "b", "c"))
        if not root_op(pat):
            pat = P("mul", pat, W("c"))
    pm = PatternMatcher([Rule(pat)])
    captures = {k for k, v in pat.slot_kinds().items() if isinstance(k, str) and v != "op"}
    valid = {k for k in brute_matches(g, pat) if brute_valid(g, k, captures)}
    cands = pm.candidates(g)
    assert keys_of(cands) <= valid
    assert {m.anchor for m in cands} == {k[0][0] for k in valid}
    chosen = pm.match(g).matches
    claimed: set = set()
    for m in chosen:
        assert claimed.isdisjoint(m.nodes)
        claimed |= set(m.nodes)
    # maximality: every valid match of the matcher's choice per anchor was chosen or overlaps a chosen one
    for m in cands:
        assert m in chosen or not claimed.isdisjoint(m.nodes)
    assert acyclic_after(g, [set(m.nodes) for m in chosen])  # fusing all chosen together stays acyclic


# -- rewriting is semantics-preserving -------------------------------------------------------------
EVAL = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b, "neg": lambda a: -a,
        "fma": lambda a, b, c: a * b + c, "madd": lambda a, b, c: (a + b) * c}


def evaluate(g: DictGraph, env: dict[str, int]) -> list[int]:
    vals: dict = {}
    out = None
    for n in g.nodes():
        assert all(i in vals for i in n.inputs), f"{n} used before its inputs are computed"
        if n.kind == "input":
            vals[n] = env[n.name]
        elif n.kind == "output":
            out = [vals[i] for i in n.inputs]
        else:
            vals[n] = EVAL[n.op](*[vals[i] for i in n.inputs])
    return out


RULES = [
    Rule(P("add", P("mul", "a", "b"), "c"), Fused("fma", ["a", "b", "c"]), priority=1),
    Rule(P("mul", P("add", "a", "b"), "c"), Template(T("add", T("mul", "a", "c"), T("mul", "b", "c")))),
    Rule(P("neg", P("neg", "x")), Template("x")),
    Rule(P("sub", "x", "x"), Template(T("sub", "x", "x"))),
    Rule(Multi(P("add", "x", "y"), P("mul", "x", "z")),
         lambda m, emit: [emit("add", [m["x"], m["y"]]), emit("mul", [m["x"], m["z"]])]),
]


@SETTINGS
@given(st.data())
def test_rewrite_preserves_values(data):
    g = random_graph(data, max_ops=12)
    env = {n.name: data.draw(st.integers(-5, 5)) for n in g.nodes() if n.kind == "input"}
    before = evaluate(g, env)
    rules = [r for r in RULES if data.draw(st.booleans())] or RULES[:1]
    result = PatternMatcher(rules).rewrite(g, max_passes=data.draw(st.integers(1, 3)))
    assert evaluate(g, env) == before
    live = set(g.nodes())
    for n in live:
        assert all(i in live for i in n.inputs) and all(u in live for u in n.users)
    assert result.replaced >= 0


def test_brute_force_sanity():
    """The brute force itself: add(a, b) on add(x, x) and on add(x, y)."""
    g = DictGraph()
    x, y = g.add_input("x"), g.add_input("y")
    g.add_node("add", [x, x])
    g.add_node("add", [x, y])
    assert len(brute_matches(g, P("add", "a", "b"))) == 3  # (x,x), (x,y), (y,x)
    assert len(find_all(g, P("add", "a", "b"))) == 3


# -- compiled patterns search exactly as the interpreter does ------------------------------------------
def random_dag_pattern(data: st.DataObject) -> object:
    """A random tree, or one with a shared subpattern, a named op, a constrained wildcard or an
    explicit commutativity."""
    def where_even(view, node) -> bool:
        return len(view.name(node)) % 2 == 0

    op = data.draw(st.sampled_from(BINARY))
    leaf = data.draw(st.sampled_from([W("a"), W("b"), W(), W("a", where=where_even), W("c", kind="input")]))
    inner = data.draw(st.sampled_from(BINARY + UNARY))
    shared = P(inner, *([leaf, W("b")] if inner in BINARY else [leaf]), name=data.draw(st.sampled_from([None, "s"])))
    choice = data.draw(st.integers(0, 4))
    if choice == 0:  # the same pattern object twice: one graph node
        return P(op, shared, shared)
    if choice == 1:
        return P(op, shared, leaf, commutative=data.draw(st.sampled_from([None, True, False])))
    if choice == 2:
        return P(op, leaf, W("b"), where=lambda view, node: True)
    body = random_tree(data, data.draw(st.integers(1, 3)), ("a", "b", "c"))
    return body if root_op(body) else P(op, body, leaf)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_compiled_search_equals_interpreter(data):
    """Same structural matches in the same order at every anchor, and the same stop on acceptance."""
    from torchvendor.pattern_matcher import MatchContext
    from torchvendor.pattern_matcher.compiled import compile_pattern
    from torchvendor.pattern_matcher.match import Searcher

    g = random_graph(data)
    for n in g.nodes():  # add(x, y, alpha=2) must not be matched with its operands swapped
        if n.op == "add" and data.draw(st.booleans()):
            n.attrs["alpha"] = 2
    pat = random_dag_pattern(data)
    stop_at = data.draw(st.integers(0, 3))  # accept the stop_at-th match at an anchor (0: never)
    ctx = MatchContext(g, COMMUTATIVE_OPS)
    ctx.index_positions()
    assert compile_pattern(pat, ctx.commutative) is not None
    seen: dict[bool, list] = {True: [], False: []}
    for use in (True, False):
        def on_match(m, log=seen[use]) -> bool:
            log.append((m.anchor, tuple(m.bindings.items()), m.nodes))
            return stop_at > 0 and sum(1 for e in log if e[0] is m.anchor) == stop_at
        searcher = Searcher(ctx, pat, on_match, use_compiled=use)
        assert (searcher._run is not None) is use
        for node in g.nodes():
            seen[use].append(("anchor", node, searcher.run(node)))
    assert seen[True] == seen[False]


def test_compiled_shared_subpattern_is_one_node():
    from torchvendor.pattern_matcher.compiled import compile_pattern

    """P(add, s, s) with one object s: two different neg nodes do not match, one used twice does."""
    g = DictGraph()
    x, y = g.add_input("x"), g.add_input("y")
    nx, ny = g.add_node("neg", [x]), g.add_node("neg", [y])
    two, one = g.add_node("add", [nx, ny]), g.add_node("add", [nx, nx])
    g.add_output([two, one])
    s = P("neg", "v")
    for pat in (P("add", s, s), P("add", P("neg", "v", name="n"), P("neg", "w", name="n"))):
        assert [m.anchor for m in find_all(g, pat)] == [one]
        assert compile_pattern(pat, COMMUTATIVE_OPS) is not None  # find_all ran the compiled code


# -- FX: the anchor index and the batched graph edits ------------------------------------------------
ATEN = {"add": "aten.add.Tensor", "mul": "aten.mul.Tensor", "sub": "aten.sub.Tensor", "neg": "aten.neg.default"}


def random_fx(data: st.DataObject, max_ops: int = 12):
    """A random ATen FX graph; some nodes are inserted before earlier ones, so FX's index by
    target (creation order) differs from the graph order."""
    import torch
    import torch.fx as fx

    from torchvendor.ir.fx_view import resolve_op

    g = fx.Graph()
    vals = [g.placeholder(f"x{i}") for i in range(data.draw(st.integers(1, 3)))]
    n_inputs = len(vals)
    out = g.output(vals[0])
    for _ in range(data.draw(st.integers(1, max_ops))):
        op = data.draw(st.sampled_from(BINARY + UNARY))
        at = data.draw(st.integers(max(n_inputs, len(vals) // 2), len(vals)))  # insert after vals[at - 1]
        pool = vals[:at]
        ins = tuple(data.draw(st.sampled_from(pool)) for _ in range(1 if op in UNARY else 2))
        with g.inserting_before(vals[at] if at < len(vals) else out):
            node = g.call_function(resolve_op(ATEN[op]), ins)
        vals.insert(at, node)
    out.args = (tuple(v for v in vals if v.op != "placeholder") or (vals[0],),)
    g.lint()
    return fx.GraphModule(torch.nn.Module(), g)


class _ScanView:
    """An FxView without the target index: the matcher walks every node."""

    def __new__(cls, graph):
        from torchvendor.ir.fx_view import FxView

        view = FxView(graph)
        view.nodes_with_ops = None  # type: ignore[method-assign]
        return view


def _described(view, matches) -> list[tuple]:
    return [(m.rule.name, view.name(m.anchor), tuple(view.name(n) for n in m.nodes),
             tuple(sorted((k, view.name(v)) for k, v in m.bindings.items()))) for m in matches]


@SETTINGS
@given(st.data())
def test_fx_anchor_index_equals_full_scan(data):
    """Visiting only the anchors (FX's index by target, sorted into graph order) finds the same
    matches, in the same order, as the walk over every node; roots with alternatives anchor on
    several keys."""
    from torchvendor.ir.fx_view import FxView

    gm = random_fx(data)
    rules = []
    for i in range(data.draw(st.integers(1, 3))):
        pat = random_tree(data, 3, ("a", "b", "c"), ATEN.__getitem__)
        if not root_op(pat):
            pat = P(ATEN["add"], pat, W("c"))
        rules.append(Rule(pat, name=f"r{i}", priority=data.draw(st.integers(0, 1))))
    pm = PatternMatcher(rules)
    fast, scan = FxView(gm.graph), _ScanView(gm.graph)
    assert _described(fast, pm.match(fast).matches) == _described(scan, pm.match(scan).matches)
    # candidates come in anchor (graph) order, then rule order
    assert _described(fast, pm.candidates(fast)) == _described(scan, pm.candidates(scan))


FX_RULES = [
    Rule(P(ATEN["add"], "a", "b"), Template(T(ATEN["add"], "b", "a"))),
    Rule(P(ATEN["mul"], P(ATEN["add"], "a", "b"), "c"),
         Template(T(ATEN["add"], T(ATEN["mul"], "a", "c"), T(ATEN["mul"], "b", "c")))),
    Rule(P(ATEN["neg"], P(ATEN["neg"], "x")), Template("x")),
    Rule(P(ATEN["add"], "a", P(ATEN["neg"], "b")), Fused(ATEN["sub"], ["a", "b"])),
]


@SETTINGS
@given(st.data())
def test_fx_rewrite_keeps_values_names_and_index(data):
    """Rewrites through the batched FX edits (compat.fx_insert_node / fx_erase_node) leave a
    graph that lints, computes the same values, has unique names, and whose index by target
    and length agree with its node list."""
    import torch

    from torchvendor.ir.fx_view import FxView

    gm = random_fx(data)
    n_in = len([n for n in gm.graph.nodes if n.op == "placeholder"])
    xs = [torch.randint(-5, 6, (3,)) for _ in range(n_in)]
    gm.recompile()
    before = gm(*xs)
    rules = [r for r in FX_RULES if data.draw(st.booleans())] or FX_RULES[:1]
    PatternMatcher(rules).rewrite(FxView(gm.graph), max_passes=data.draw(st.integers(1, 2)))
    gm.graph.lint()
    gm.recompile()
    after = gm(*xs)
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    nodes = list(gm.graph.nodes)
    assert len(gm.graph.nodes) == len(nodes) and len({n.name for n in nodes}) == len(nodes)
    for target in {n.target for n in nodes if n.op == "call_function"}:
        assert gm.graph.find_nodes(op="call_function", target=target) == \
            [n for n in nodes if n.op == "call_function" and n.target == target]
