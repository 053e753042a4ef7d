"""The pattern matcher on real FX graphs: make_fx (ATen), symbolic_trace and Dynamo (torch level)."""
from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torchvendor.sdk.compile.fx_pattern import fx_rule, pattern_from_function, rewrite_fx, template_from_function
from torchvendor.ir.fx_view import FxView
from torchvendor.pattern_matcher import Fused, Multi, P, PatternError, PatternMatcher, Rule, T, Template, find_all

torch.manual_seed(0)


def mlp(a, b, c):
    return torch.relu(a + b) * c


def targets(gm: torch.fx.GraphModule) -> list[str]:
    view = FxView(gm.graph)
    return [view.op(n) for n in gm.graph.nodes if n.op == "call_function"]


# -- tracing patterns ---------------------------------------------------------------------------------
def test_aliased_example_inputs_stay_distinct_wildcards():
    t = torch.randn(4, 4)
    assert repr(pattern_from_function(mlp, [t, t, t])) == "mul(relu(add(a, b)), c)"
    raw = make_fx(mlp)(t, t, t)          # what happens without cloning: one placeholder for all three
    assert sum(1 for n in raw.graph.nodes if n.op == "placeholder" and n.users) == 1


def test_unused_parameter_and_bad_level_are_errors():
    with pytest.raises(PatternError, match="never used"):
        pattern_from_function(lambda a, b: torch.relu(a), 2)
    with pytest.raises(PatternError, match="level"):
        pattern_from_function(mlp, 3, level="loop")


def test_add_x_x_matches_where_fx_subgraph_matcher_does_not():
    from torch.fx.passes.utils.matcher_utils import SubgraphMatcher

    gm = make_fx(lambda x, y: torch.relu(x + x) * y)(torch.randn(4), torch.randn(4))
    ours = PatternMatcher([Rule(pattern_from_function(mlp, 3))]).match(FxView(gm.graph)).matches
    assert len(ours) == 1 and ours[0]["a"] is ours[0]["b"]
    fx_pattern = make_fx(mlp)(torch.randn(4), torch.randn(4), torch.randn(4)).graph
    assert SubgraphMatcher(fx_pattern, ignore_literals=True).match(gm.graph) == []


def test_commuted_operands_on_aten_graph():
    gm = make_fx(lambda x, y, z: z * torch.relu(y + x))(*torch.randn(3, 4))
    assert len(PatternMatcher([Rule(pattern_from_function(mlp, 3))]).match(FxView(gm.graph)).matches) == 1


# -- fusions on real ATen graphs -------------------------------------------------------------------------
def conv_bn_relu(x, w, b, rm, rv, g, beta):
    return torch.relu(F.batch_norm(F.conv2d(x, w, b), rm, rv, g, beta, False, 0.1, 1e-5))


def conv_folded(x, w, b, rm, rv, g, beta):
    scale = g * torch.rsqrt(rv + 1e-5)
    return torch.relu(F.conv2d(x, w * scale.reshape(-1, 1, 1, 1), (b - rm) * scale + beta))


def test_conv_bn_relu_folded_on_make_fx_module_graph():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval()
    for bn in (model[1], model[4]):
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 12, 12)
    gm = make_fx(model)(x)
    ex = [torch.randn(1, 3, 8, 8), torch.randn(8, 3, 3, 3)] + [torch.rand(8) + 0.5 for _ in range(5)]
    rule = fx_rule(conv_bn_relu, conv_folded, ex)
    result = rewrite_fx(gm, [rule])
    assert result.replaced == 2
    assert "aten.native_batch_norm.default" not in targets(gm)
    torch.testing.assert_close(gm(x), model(x), rtol=1e-4, atol=1e-4)


def gelu_erf(x, w, b):
    y = x @ w + b
    return 0.5 * y * (1 + torch.erf(y * 0.7071067811865476))


def gelu_tanh(x, w, b):
    y = x @ w + b
    return 0.5 * y * (1 + torch.tanh(0.7978845608028654 * (y + 0.044715 * y * y * y)))


@pytest.mark.parametrize("search, approximate", [(gelu_erf, "none"), (gelu_tanh, "tanh")])
def test_matmul_bias_gelu(search, approximate):
    def model(x, w1, b1, w2):
        return search(x, w1, b1) @ w2

    args = (torch.randn(8, 16), torch.randn(16, 32), torch.randn(32), torch.randn(32, 4))
    gm = make_fx(model)(*args)
    rule = fx_rule(search, lambda x, w, b: F.gelu(torch.addmm(b, x, w), approximate=approximate), 3)
    both = PatternMatcher([rule, fx_rule(gelu_erf if search is gelu_tanh else gelu_tanh, "acme.other", 3)])
    assert rewrite_fx(gm, both).by_rule == {rule.name: 1}
    assert targets(gm) == ["aten.addmm.default", "aten.gelu.default", "aten.mm.default"]
    torch.testing.assert_close(gm(*args), model(*args), rtol=1e-4, atol=1e-4)


def test_layer_norm_decomposition_is_matched_and_restored():
    from torch._decomp import get_decompositions

    table = get_decompositions([torch.ops.aten.native_layer_norm])

    def model(x, w, b):
        return F.layer_norm(torch.relu(x), (16,), w, b) * 2

    args = (torch.randn(4, 16), torch.randn(16), torch.randn(16))
    gm = make_fx(model, decomposition_table=table)(*args)
    assert "aten.native_layer_norm.default" not in targets(gm)
    pattern = pattern_from_function(lambda x, w, b: F.layer_norm(x, (16,), w, b), list(args),
                                    decomposition_table=table)
    rule = Rule(pattern, template_from_function(lambda x, w, b: F.layer_norm(x, (16,), w, b), list(args)))
    assert rewrite_fx(gm, [rule]).replaced == 1
    assert "aten.native_layer_norm.default" in targets(gm)
    torch.testing.assert_close(gm(*args), model(*args), rtol=1e-5, atol=1e-5)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def test_rms_norm_to_one_fused_op_with_metadata():
    def model(x, w1, w2):
        return rms_norm(torch.sin(rms_norm(x, w1)), w2)

    args = (torch.randn(4, 16), torch.randn(16), torch.randn(16))
    gm = make_fx(model, tracing_mode="fake")(*args)
    pattern = pattern_from_function(rms_norm, 2)
    result = rewrite_fx(gm, [Rule(pattern, Fused("aten.rms_norm.default", ["x"], {"normalized_shape": [16],
                                                                                 "weight": None, "eps": 1e-6}))])
    assert result.replaced == 2
    fused = [n for n in gm.graph.nodes if n.op == "call_function" and "rms_norm" in str(n.target)]
    assert all(n.meta["val"].shape == (4, 16) and n.meta["pattern_rule"] == "aten.rms_norm.default" for n in fused)


def attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-1) @ v


def test_attention_to_sdpa():
    def model(x, wq, wk, wv):
        q, k, v = (x @ w for w in (wq, wk, wv))
        return attention(q, k, v) + x

    x = torch.randn(2, 4, 8, 16)
    ws = [torch.randn(16, 16) / 4 for _ in range(3)]
    gm = make_fx(model)(x, *ws)
    ex = [torch.randn(2, 4, 8, 16) for _ in range(3)]
    rule = fx_rule(attention, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.125), ex)
    assert rewrite_fx(gm, [rule]).replaced == 1
    assert "aten._softmax.default" not in targets(gm)
    torch.testing.assert_close(gm(x, *ws), model(x, *ws), rtol=1e-4, atol=1e-4)


def test_qkv_multi_output_pattern_rewritten_into_one_matmul():
    def qkv(x, wq, wk, wv):
        return x @ wq, x @ wk, x @ wv

    def fused(x, wq, wk, wv):
        return torch.split(x @ torch.cat([wq, wk, wv], dim=1), wq.shape[1], dim=1)

    def model(x, wq, wk, wv):
        q, k, v = qkv(x, wq, wk, wv)
        return torch.softmax(q @ k.t(), -1) @ v

    args = [torch.randn(8, 16)] + [torch.randn(16, 16) for _ in range(3)]
    gm = make_fx(model)(*args)
    pattern = pattern_from_function(qkv, args)
    assert isinstance(pattern, Multi)
    result = rewrite_fx(gm, [Rule(pattern, template_from_function(fused, args))])
    assert result.replaced == 1 and targets(gm).count("aten.mm.default") == 3   # 1 fused + 2 attention
    torch.testing.assert_close(gm(*args), model(*args), rtol=1e-4, atol=1e-4)


def test_two_output_pattern_relu_add_and_mul():
    def model(x, y, z):
        return torch.relu(x + y) - x * z

    args = [torch.randn(4) for _ in range(3)]
    gm = make_fx(model)(*args)
    pat = Multi(P("aten.relu.default", P("aten.add.Tensor", "x", "y")), P("aten.mul.Tensor", "x", "z"))
    rule = Rule(pat, Template(T("aten.relu.default", T("aten.add.Tensor", "x", "y")), T("aten.mul.Tensor", "z", "x")))
    assert rewrite_fx(gm, [rule]).replaced == 1
    torch.testing.assert_close(gm(*args), model(*args))


# -- regressions from PyTorch issues --------------------------------------------------------------------
def test_back_to_back_matches_inside_list_arguments():  # pytorch/pytorch#159613, #98974
    def model(x, y):
        a = torch.relu(x + y) * y
        b = torch.relu(a + y) * y                       # back to back: consumes the previous match
        c = torch.relu(b + a) * x                       # adjacent to both
        return torch.cat([a, b, c, torch.cat([c, a])])

    args = (torch.randn(4), torch.randn(4))
    gm = make_fx(model)(*args)
    rule = fx_rule(mlp, lambda a, b, c: torch.relu(torch.add(b, a)) * c, 3)
    assert rewrite_fx(gm, [rule]).replaced == 3
    torch.testing.assert_close(gm(*args), model(*args))


def test_identity_replacement_on_fx():  # pytorch/pytorch#97817
    gm = make_fx(lambda x: torch.clone(torch.clone(x)) + torch.clone(x))(torch.randn(3))
    result = rewrite_fx(gm, [Rule(P("aten.clone.default", "x"), Template("x"))], max_passes=3)
    assert result.replaced == 3 and targets(gm) == ["aten.add.Tensor"]


# -- torch level: symbolic_trace patterns on Dynamo graphs ---------------------------------------------------
def test_torch_level_pattern_on_dynamo_graph():
    seen = {}

    def backend(gm, example_inputs):
        rule = fx_rule(mlp, lambda a, b, c: torch.mul(torch.relu(a + b), c), level="torch")
        seen["result"] = rewrite_fx(gm, [rule])
        seen["pattern"] = rule.pattern
        return gm.forward

    def f(x, y, z):
        return torch.relu(x + y) * z + torch.relu(z + x) * y

    args = [torch.randn(4) for _ in range(3)]
    out = torch.compile(f, backend=backend, fullgraph=True)(*args)
    torch.testing.assert_close(out, f(*args))
    assert repr(seen["pattern"]) == "operator.mul(torch.relu(operator.add(a, b)), c)"
    assert seen["result"].replaced == 2


def test_torch_level_symbolic_trace_graph():
    class M(torch.nn.Module):
        def forward(self, x, y):
            return torch.relu(x + y) * x

    gm = torch.fx.symbolic_trace(M())
    found = find_all(FxView(gm.graph), pattern_from_function(mlp, level="torch"))
    assert {(m["a"].name, m["b"].name, m["c"].name) for m in found} == {("x", "y", "x"), ("y", "x", "x")}
