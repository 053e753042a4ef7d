"""The pattern matcher on DictGraph: the language, matching semantics, rewriting, errors, regressions."""
from __future__ import annotations

import subprocess
import sys

import pytest

from torchvendor.ir.graph_view import DictGraph
from torchvendor.pattern_matcher import (
    AttrOf, Fused, Multi, Opt, P, PatternError, PatternMatcher, RewriteError, Rule, Star, T, Template, W,
    find_all, map_keys,
)

MLP = P("mul", P("relu", P("add", "a", "b")), "c")


def graph(*inputs: str) -> tuple[DictGraph, list]:
    g = DictGraph()
    return g, [g.add_input(n) for n in inputs]


def ops(g: DictGraph) -> list[str]:
    return [g.op(n) for n in g.nodes()]


def test_import_does_not_import_torch():
    code = "import sys, torchvendor.pattern_matcher; assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the language ------------------------------------------------------------------------------------
def test_repr_is_readable():
    assert repr(MLP) == "mul(relu(add(a, b)), c)"
    assert repr(P("aten.cat.default", Star("xs"), attrs={"dim": 1})) == "cat(*xs, dim=1)"
    assert repr(Opt("aten.clone.default", P("relu", "x"))) == "(clone(relu(x)) | relu(x))"


@pytest.mark.parametrize("build, message", [
    (lambda: P(3), "bad operator"),
    (lambda: P("add", 3), "expected a pattern"),
    (lambda: P("add", Star(), Star()), "at most one is allowed"),
    (lambda: P("add", Star(), commutative=True), "both commutative and variadic"),
    (lambda: W("not a name"), "identifier"),
    (lambda: W("x", kind="output"), "kind"),
    (lambda: P("add", "x", P("relu", "y", name="x")), "used both for a"),
    (lambda: Multi(P("relu", "x"), P("neg", "y")), "shares no capture"),
    (lambda: Rule(W("x")), "root is a wildcard"),
    (lambda: Rule(MLP, Template(T("acme.f", "a", "z"))), "does not bind"),
    (lambda: Rule(MLP, Template("a", "b")), "has 2 outputs"),
    (lambda: Rule(P("cat", Star("xs")), Template(T("f", "xs"))), "write '\\*xs'"),
    (lambda: P("add", "a", "b", shape=5), "shape"),
    (lambda: PatternMatcher([42]), "must be Rule"),
])
def test_bad_patterns_name_what_is_wrong(build, message):
    with pytest.raises(PatternError, match=message):
        build()


# -- binding, commutativity, alternatives, optional, variadic, constraints ---------------------------------
def test_non_injective_binding():
    g, (x, y) = graph("x", "y")
    xx = g.add_node("add", [x, x])
    xy = g.add_node("add", [x, y])
    assert {m.anchor for m in find_all(g, P("add", "a", "b"))} == {xx, xy}      # add(a, b) binds a = b = x
    assert [m.anchor for m in find_all(g, P("add", "a", "a"))] == [xx]          # add(a, a) needs the same node


def test_commuted_operands_without_pattern_expansion():
    g, (a, b, c) = graph("a", "b", "c")
    r = g.add_node("relu", [g.add_node("add", [a, b])])
    m = g.add_node("mul", [c, r])                                                # c first
    found = find_all(g, MLP)
    assert {x.anchor for x in found} == {m}
    assert {(x["a"], x["b"], x["c"]) for x in found} == {(a, b, c), (b, a, c)}
    assert find_all(g, P("mul", P("relu", P("add", "a", "b")), "c", commutative=False)) == []
    # a non-commutative op is never swapped; add with alpha != 1 is not symmetric
    s = g.add_node("sub", [c, r])
    assert find_all(g, P("sub", P("relu", "z"), "w")) == [] and s is not None
    g2, (p, q) = graph("p", "q")
    g2.add_node("add", [p, q], {"alpha": 2})
    assert len(find_all(g2, P("add", "a", "b"))) == 1


def test_alternatives_and_optional_ops():
    g, (x,) = graph("x")
    gelu = g.add_node("gelu", [x])
    relu_c = g.add_node("relu", [g.add_node("clone", [x])])
    pat = P("relu", Opt("clone", "x")) | P("gelu", "x")
    assert {m.anchor for m in find_all(g, pat)} == {gelu, relu_c}
    assert find_all(g, P("relu", "x"))[0]["x"].op == "clone"


def test_variadic_arguments():
    g, (x, y, z) = graph("x", "y", "z")
    cat3 = g.add_node("cat", [x, y, z], {"dim": 1})
    cat1 = g.add_node("cat", [x], {"dim": 0})
    found = find_all(g, P("cat", Star("xs", min=2), attrs={"dim": 1}))
    assert [(m.anchor, m["xs"]) for m in found] == [(cat3, (x, y, z))]
    assert [m.anchor for m in find_all(g, P("cat", "first", Star("rest")))] == [cat3, cat1]
    r1, r2 = g.add_node("relu", [x]), g.add_node("relu", [y])
    cat_r = g.add_node("cat", [r1, r2])
    assert [m.anchor for m in find_all(g, P("cat", Star("rs", elem=P("relu", W()))))] == [cat_r]


def test_attribute_dtype_shape_and_where_constraints():
    g, (x,) = graph("x")
    s1 = g.add_node("sum", [x], {"dim": 1}, dtype="float32", shape=(4, 1))
    s2 = g.add_node("sum", [x], {"dim": 0}, dtype="float16", shape=(1, 8))
    anchors = lambda p: [m.anchor for m in find_all(g, p)]  # noqa: E731
    assert anchors(P("sum", "x", attrs={"dim": 1})) == [s1]
    assert anchors(P("sum", "x", attrs={"dim": lambda d: d in (0, 1)})) == [s1, s2]
    assert anchors(P("sum", "x", attrs={"keepdim": lambda v: v is None})) == [s1, s2]   # absent -> None
    assert anchors(P("sum", "x", dtype={"float16", "bfloat16"})) == [s2]
    assert anchors(P("sum", "x", shape=(None, 1))) == [s1]
    assert anchors(P("sum", "x", shape=lambda s: s[1] == 8)) == [s2]
    assert anchors(P("sum", "x", where=lambda view, n: view.name(n) == "sum_1")) == [s2]
    assert anchors(P("sum", W("x", kind="input"))) == [s1, s2]
    assert anchors(P(lambda key: key.startswith("su"), "x")) == [s1, s2]


def test_check_callback_sees_the_whole_match():
    g, (a, b, c) = graph("a", "b", "c")
    g.add_node("mul", [g.add_node("relu", [g.add_node("add", [a, b])]), c])
    seen = []
    rule = Rule(MLP, check=lambda m: seen.append(sorted(m.bindings)) or m["c"] is not c)
    assert PatternMatcher([rule]).match(g).matches == []
    assert seen and seen[0] == ["a", "b", "c"]


# -- validity: containment, cycles, overlaps ----------------------------------------------------------------
def test_interior_value_used_outside_does_not_match():
    g, (a, b, c) = graph("a", "b", "c")
    r = g.add_node("relu", [g.add_node("add", [a, b])])
    m = g.add_node("mul", [r, c])
    g.add_output([m, r])                                         # relu leaks to the output
    report = PatternMatcher([Rule(MLP, "acme.f")]).match(g)
    assert report.matches == [] and report.rejected["interior"] >= 1
    assert "used outside the match" in report.examples[0]


def test_match_that_would_create_a_cycle_does_not_match():
    # relu(add(x, y)) and mul(x, z) where z depends on relu: fusing both would create a cycle.
    g, (x, y) = graph("x", "y")
    r = g.add_node("relu", [g.add_node("add", [x, y])])
    z = g.add_node("neg", [r])
    m = g.add_node("mul", [x, z])
    g.add_output([m])
    pat = Multi(P("relu", P("add", "x", "y")), P("mul", "x", "z"))
    assert len(find_all(g, pat)) == 1                             # structurally it is there
    report = PatternMatcher([Rule(pat, Fused("acme.f", project=("getitem", "index")))]).match(g)
    assert report.matches == [] and report.rejected["cycle"] == 1


def test_overlapping_candidates_resolved_by_priority_then_position():
    g, (a, b, c) = graph("a", "b", "c")
    s = g.add_node("add", [a, b])
    m = g.add_node("mul", [g.add_node("relu", [s]), c])
    g.add_output([m])
    small = Rule(P("relu", P("add", "a", "b")), "acme.add_relu", priority=0)
    big = Rule(MLP, "acme.mlp", priority=1)
    assert [x.rule.name for x in PatternMatcher([small, big]).match(g).matches] == ["acme.mlp"]
    big.priority = -1
    assert [x.rule.name for x in PatternMatcher([small, big]).match(g).matches] == ["acme.add_relu"]
    # equal priority: the earlier anchor wins
    big.priority = 0
    assert [x.rule.name for x in PatternMatcher([big, small]).match(g).matches] == ["acme.add_relu"]


def test_multi_output_matches_never_form_a_cycle_together():
    # Each match alone is acyclic, but fusing both would give M1 -> M2 -> M1. M1's input p2 comes
    # after its first output p1 (placement), so only M2 is valid, and nothing joint is needed.
    g, (x, y) = graph("x", "y")
    p1, p2 = g.add_node("add", [x, y]), g.add_node("sub", [x, y])
    q1, q2 = g.add_node("mul", [x, p2]), g.add_node("div", [x, p1])   # M1 = {p1, q1}, M2 = {p2, q2}
    g.add_output([q1, q2])
    m1 = Multi(P("add", "x", "y"), P("mul", "x", "z"))
    m2 = Multi(P("sub", "v", "w"), P("div", "v", "t"))
    assert len(find_all(g, m1)) == len(find_all(g, m2)) == 1
    pm = PatternMatcher([Rule(m1, priority=1), Rule(m2, priority=0)], commutative=())
    report = pm.match(g)
    assert [m.rule.pattern for m in report.matches] == [m2] and report.rejected["placement"] == 1
    res = PatternMatcher([Rule(m1, Fused("f1", project=("getitem", "index"))),
                          Rule(m2, Fused("f2", project=("getitem", "index")))], commutative=()).rewrite(g)
    assert res.by_rule == {"f2": 1}
    order = {n: i for i, n in enumerate(g.nodes())}
    assert all(order[i] < order[n] for n in g.nodes() for i in n.inputs)


# -- rewriting ------------------------------------------------------------------------------------------
def test_fused_rewrite_carries_metadata_and_erases_the_match():
    g, (a, b, c) = graph("a", "b", "c")
    m = g.add_node("mul", [g.add_node("relu", [g.add_node("add", [a, b])]), c], dtype="float32", shape=(4,),
                   stack_trace="model.py:3")
    g.add_output([m])
    result = PatternMatcher([Rule(MLP, Fused("acme.fused_mlp", attrs={"act": "relu"}))]).rewrite(g)
    assert (result.replaced, result.created, result.erased) == (1, 1, 3)
    assert ops(g) == ["placeholder"] * 3 + ["acme.fused_mlp", "output"]
    fused = g.nodes()[3]
    assert fused.inputs == [a, b, c] and fused.attrs == {"act": "relu"}
    assert fused.meta["dtype"] == "float32" and fused.meta["shape"] == (4,) and fused.meta["stack_trace"] == "model.py:3"


def test_template_rewrite_with_attr_references_and_variadic_splice():
    g, (x, y) = graph("x", "y")
    cat = g.add_node("cat", [x, y], {"dim": 1})
    r = g.add_node("relu", [cat])
    g.add_output([r])
    rule = Rule(P("relu", P("cat", Star("xs"), name="c")),
                Template(T("acme.cat_relu", "*xs", dim=AttrOf("c", "dim"), n=lambda m: len(m["xs"]))))
    PatternMatcher([rule]).rewrite(g)
    new = g.nodes()[2]
    assert new.op == "acme.cat_relu" and new.inputs == [x, y] and new.attrs == {"dim": 1, "n": 2}


def test_multi_output_fused_rewrite_projects_each_output():
    g, (x, wq, wk, wv) = graph("x", "wq", "wk", "wv")
    q, k, v = (g.add_node("mm", [x, w]) for w in (wq, wk, wv))
    g.add_output([g.add_node("add", [g.add_node("mul", [q, k]), v])])
    qkv = Multi(P("mm", "x", "wq"), P("mm", "x", "wk"), P("mm", "x", "wv"))
    res = PatternMatcher([Rule(qkv, Fused("acme.qkv", ["x", "wq", "wk", "wv"], project=("getitem", "index")))],
                         commutative=()).rewrite(g)
    assert res.replaced == 1
    assert ops(g)[4:] == ["acme.qkv", "getitem", "getitem", "getitem", "mul", "add", "output"]
    assert [n.attrs["index"] for n in g.nodes()[5:8]] == [0, 1, 2]


def test_identity_replacement_terminates():  # pytorch/pytorch#97817
    g, (x,) = graph("x")
    v = x
    for _ in range(50):
        v = g.add_node("clone", [v])
    g.add_output([v])
    res = PatternMatcher([Rule(P("clone", "x"), Template("x"))]).rewrite(g, max_passes=5)
    assert res.replaced == 50 and ops(g) == ["placeholder", "output"] and g.nodes()[1].inputs == [x]
    # a replacement equal to the pattern is applied once per pass, never recursively
    g2, (y,) = graph("y")
    g2.add_output([g2.add_node("relu", [y])])
    res2 = PatternMatcher([Rule(P("relu", "x"), T("relu", "x"))]).rewrite(g2, max_passes=3)
    assert res2.passes == 3 and ops(g2) == ["placeholder", "relu", "output"]


def test_back_to_back_and_adjacent_matches():  # pytorch/pytorch#98974, #159613
    g, (x, y) = graph("x", "y")
    v = x
    for _ in range(5):                     # chain of back-to-back matches, each consuming the previous
        v = g.add_node("mul", [g.add_node("relu", [g.add_node("add", [v, y])]), y])
    lst = g.add_node("cat", [v, g.add_node("neg", [g.add_node("neg", [v])]), v])   # list argument uses
    g.add_output([lst])
    res = PatternMatcher([Rule(MLP, Fused("acme.mlp")), Rule(P("neg", P("neg", "x")), Template("x"))]).rewrite(g)
    assert res.by_rule == {"acme.mlp": 5, "neg(neg(x))": 1}
    live = set(g.nodes())
    for n in live:
        assert all(i in live for i in n.inputs), f"{n} refers to an erased node"
    last = lst.inputs[0]
    assert last.op == "acme.mlp" and lst.inputs == [last, last, last]


def test_custom_replacement_function_and_errors():
    g, (x,) = graph("x")
    g.add_output([g.add_node("neg", [x])])
    rule = Rule(P("neg", "x"), lambda m, emit: emit("sub", [emit("zero", []), m["x"]]))
    PatternMatcher([rule]).rewrite(g)
    assert ops(g) == ["placeholder", "zero", "sub", "output"]
    bad = Rule(P("sub", W(), "x"), lambda m, emit: None)
    with pytest.raises(RewriteError, match="returned None"):
        PatternMatcher([bad]).rewrite(g)


def test_rules_index_by_anchor_and_compose_with_plus():
    a = PatternMatcher([Rule(MLP, "acme.mlp")])
    b = PatternMatcher([Rule(P(lambda k: k == "neg", "x"), "acme.neg")])
    both = a + b
    assert len(both) == 2 and both._rules_for("mul") == (0, 1) and both._rules_for("neg") == (1,)


def test_one_pattern_written_once_for_several_irs():
    generic = P("mul", P("relu", P("add", "a", "b")), "c")
    onnx = map_keys(generic, "onnx")
    g, (a, b, c) = graph("a", "b", "c")
    g.add_node("Mul", [g.add_node("Relu", [g.add_node("Add", [a, b])]), c])
    assert len(find_all(g, onnx)) == 2                  # Add and Mul commute in ONNX too
    assert repr(map_keys(generic, "aten")) == "mul(relu(add(a, b)), c)"
    with pytest.raises(PatternError, match="no translation"):
        map_keys(P("frobnicate", "x"), "onnx")

