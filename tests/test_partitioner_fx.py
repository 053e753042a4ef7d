"""The partitioner and the FX outliner on real FX graphs (torch level from symbolic_trace, ATen
level from make_fx): numerics after outlining, the regression cases, and partition counts
against torch.fx's CapabilityBasedPartitioner."""
from __future__ import annotations

import operator
import random

import pytest
import torch
import torch.fx as fx
from hypothesis import HealthCheck, given, settings, strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from torchvendor.sdk.compile.fx_outline import outline_fx, partition_and_outline, partition_fx
from torchvendor.ir.fx_view import FxView
from torchvendor.partitioner import Unsupported, UnsupportedOperatorsError, render_html, unsupported_ops

aten = torch.ops.aten


def outlined_matches(gm, support, inputs, **options):
    new_gm, result = partition_and_outline(gm, support, **options)
    new_gm.graph.lint()
    expected, got = gm(*inputs), new_gm(*inputs)
    torch.testing.assert_close(got, expected)
    calls = [n for n in new_gm.graph.nodes if n.op == "call_module" and n.target.startswith("fused_")]
    assert len(calls) == len(result.partitions)
    return new_gm, result


# ---------------------------------------------------------------------------------------------
# random elementwise FX graphs with random support: outlining preserves numerics
# ---------------------------------------------------------------------------------------------
UNARY = [aten.relu.default, aten.sin.default, aten.neg.default, aten.tanh.default]
BINARY = [aten.add.Tensor, aten.mul.Tensor, aten.sub.Tensor]
TORCH_UNARY = [torch.relu, torch.sin, torch.neg, torch.tanh]
TORCH_BINARY = [operator.add, operator.mul, torch.sub]


def random_fx(seed: int, n: int, window: int = 8, torch_level: bool = False, p_unsup: float = 0.2):
    rng = random.Random(seed)
    g = fx.Graph()
    vals = [g.placeholder("x"), g.placeholder("y")]
    unsupported = set()
    for _ in range(n):
        if rng.random() < 0.5:
            fn = rng.choice(TORCH_UNARY if torch_level else UNARY)
            node = g.call_function(fn, (rng.choice(vals[-window:]),))
        else:
            fn = rng.choice(TORCH_BINARY if torch_level else BINARY)
            node = g.call_function(fn, (rng.choice(vals[-window:]), rng.choice(vals[-window:])))
        if rng.random() < p_unsup:
            unsupported.add(node.name)
        vals.append(node)
    sinks = [v for v in vals[2:] if not v.users][-4:] or [vals[-1]]
    g.output(tuple(sinks))
    gm = fx.GraphModule(torch.nn.Module(), g)
    oracle = lambda node: Unsupported("random") if node.name in unsupported else True  # noqa: E731
    return gm, oracle


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.integers(1, 60), st.sampled_from([2, 8]), st.booleans(), st.integers(1, 3),
       st.booleans())
def test_random_fx_outline_numerics(seed, n, window, torch_level, min_size, merge_independent):
    gm, oracle = random_fx(seed, n, window, torch_level)
    inputs = (torch.randn(5), torch.randn(5))
    outlined_matches(gm, oracle, inputs, min_size=min_size, merge_independent=merge_independent)


def test_outline_not_lazy_and_names():
    gm, oracle = random_fx(3, 40)
    result = partition_fx(gm, oracle)
    new_gm = outline_fx(gm, result, lazy=False, prefix="acme_")
    from torch.fx._lazy_graph_module import _LazyGraphModule

    assert isinstance(new_gm.acme_0, fx.GraphModule) and not isinstance(new_gm.acme_0, _LazyGraphModule)
    x = (torch.randn(3), torch.randn(3))
    torch.testing.assert_close(new_gm(*x), gm(*x))
    with pytest.raises(ValueError, match="not computed on FxView"):
        outline_fx(fx.symbolic_trace(lambda x: x + 1), result)


# ---------------------------------------------------------------------------------------------
# torch level (symbolic_trace) and ATen level (make_fx)
# ---------------------------------------------------------------------------------------------
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, x):
        h = torch.relu(self.lin(x)) * self.scale
        s = torch.sin(h)
        a, b = torch.chunk(s + h, 2, dim=-1)
        return torch.cat([a.exp(), b.tanh()], dim=-1) + x


def test_torch_level_symbolic_trace_module():
    gm = fx.symbolic_trace(Block())
    ops = {FxView(gm.graph).op(n) for n in gm.graph.nodes}
    assert {"module.Linear", "torch.sin", "torch.chunk", "operator.getitem", "method.exp"} <= ops
    new_gm, result = outlined_matches(gm, unsupported_ops({"torch.sin"}), (torch.randn(3, 8),))
    assert len(result.partitions) == 2
    # chunk and its getitems stay together; the Linear travels into its submodule
    assert any(isinstance(m, torch.nn.Linear) for m in new_gm.fused_0.modules())
    chunk = next(n for n in gm.graph.nodes if n.target is torch.chunk)
    getitems = [u for u in chunk.users]
    assert {result.partition_of(u) for u in getitems} == {result.partition_of(chunk)}


def test_aten_level_make_fx():
    def f(x, w):
        h = torch.relu(x @ w)
        return torch.sin(h).sum(-1) + h.mean(-1)

    x, w = torch.randn(4, 6), torch.randn(6, 6)
    gm = make_fx(f)(x, w)
    view = FxView(gm.graph)
    assert "aten.sin.default" in {view.op(n) for n in gm.graph.nodes}
    new_gm, result = outlined_matches(gm, unsupported_ops({"aten.sin"}), (x, w))
    assert [view.op(n) for n in result.fallback] == ["aten.sin.default"]
    assert len(result.partitions) == 2  # mm, relu, mean ... | sum, add


def test_fully_supported_fast_path_fx():
    gm = make_fx(lambda x: (x.relu() + 1).exp())(torch.randn(3))
    new_gm, result = outlined_matches(gm, lambda node: True, (torch.randn(3),))
    assert result.stats["fast_path"] and len(result.partitions) == 1


# ---------------------------------------------------------------------------------------------
# regression cases from the notes (§5.3)
# ---------------------------------------------------------------------------------------------
def test_80753_placeholders_never_assigned():
    gm = fx.symbolic_trace(lambda a, b: a + b)
    new_gm, result = outlined_matches(gm, lambda node: True, (torch.randn(2), torch.randn(2)))
    assert [n.op for n in new_gm.graph.nodes] == ["placeholder", "placeholder", "call_module", "output"]
    assert all(n.op == "call_function" for p in result.partitions for n in p.nodes)


def test_81244_fill_mutation():
    def f(x):
        y = x.clone()
        y.fill_(1.0)
        return y + x

    gm = fx.symbolic_trace(f)
    x = torch.randn(4)
    new_gm, result = outlined_matches(gm, lambda node: True, (x,), fallback_ops={"method.fill_"})
    assert len(result.partitions) == 2
    torch.testing.assert_close(new_gm(x), torch.ones(4) + x)
    # at ATen level too (make_fx keeps the in-place op when not functionalised)
    agm = make_fx(f)(x)
    assert any(FxView(agm.graph).op(n).startswith("aten.fill_") for n in agm.graph.nodes)
    outlined_matches(agm, lambda node: True, (x,), fallback_ops={"aten.fill_"})


def test_86108_two_outputs_sharing_an_input():
    gm = make_fx(lambda x: (x.relu(), x.exp(), x.sin()))(torch.randn(3))
    new_gm, result = outlined_matches(gm, unsupported_ops({"aten.sin"}), (torch.randn(3),))
    assert len(result.partitions) == 1 and len(result.partitions[0].outputs) == 2
    assert sum(1 for n in new_gm.graph.nodes if n.target is operator.getitem) == 2


class HRNetish(torch.nn.Module):
    """Multi-resolution branches exchanged every stage (the hrnet_w18 shape of #86159)."""

    def __init__(self, c=4):
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(c, c, 3, padding=1) for _ in range(6))

    def forward(self, x):
        hi = self.convs[0](x)
        lo = self.convs[1](torch.nn.functional.avg_pool2d(x, 2))
        for k in range(2):
            up = torch.nn.functional.interpolate(lo, scale_factor=2.0, mode="nearest")
            down = torch.nn.functional.avg_pool2d(hi, 2)
            hi, lo = self.convs[2 + 2 * k](hi + up).relu(), self.convs[3 + 2 * k](lo + down).relu()
        return hi, lo


def test_86159_hrnet_style_multi_branch():
    model = HRNetish()
    x = torch.randn(1, 4, 8, 8)
    gm = make_fx(model)(x)
    new_gm, result = outlined_matches(gm, unsupported_ops({"aten.upsample_nearest2d"}), (x,))
    assert result.fallback and len(result.partitions) >= 2
    tgm = fx.symbolic_trace(model)
    outlined_matches(tgm, unsupported_ops({"torch.nn.functional.interpolate"}), (x,))


def _nested(x):
    return (x + 1, (x * 2, x - 3))


def test_nested_getitem_chains():
    g = fx.Graph()
    x = g.placeholder("x")
    t = g.call_function(_nested, (x,))
    a = g.call_function(operator.getitem, (t, 0))
    inner = g.call_function(operator.getitem, (t, 1))
    b = g.call_function(operator.getitem, (inner, 0))
    c = g.call_function(operator.getitem, (inner, 1))
    s = g.call_function(torch.add, (a, g.call_function(torch.mul, (b, c))))
    g.output(s)
    gm = fx.GraphModule(torch.nn.Module(), g)
    inputs = (torch.randn(3),)
    new_gm, result = outlined_matches(gm, lambda node: node.target is not torch.mul, inputs)
    group = {t, a, inner, b, c}
    assert len({result.partition_of(n) for n in group}) == 1 and result.partition_of(t) is not None
    # the producer unsupported: the whole chain falls back, the rest still runs
    new_gm, result = outlined_matches(gm, lambda node: node.target is not _nested, inputs)
    assert set(result.fallback) == group


def test_81531_horizontal_fusion_fx():
    def f(x):
        a = x.relu()
        u = a.sin()
        b = x.exp()
        return u + b

    gm = make_fx(f)(torch.randn(3))
    new_gm, result = outlined_matches(gm, unsupported_ops({"aten.sin"}), (torch.randn(3),))
    assert [len(p) for p in result.partitions] == [1, 2]  # exp joins the add: fewer boundary bytes
    _, plain = outlined_matches(gm, unsupported_ops({"aten.sin"}), (torch.randn(3),), boundary_aware=False)
    assert [len(p) for p in plain.partitions] == [2, 1]  # the plain waves merge relu and exp
    assert result.report().boundary_bytes < plain.report().boundary_bytes


def test_min_size_and_require_full_fx():
    gm = make_fx(lambda x: x.relu().sin().exp().sin().neg().tanh())(torch.randn(3))
    outlined = outlined_matches(gm, unsupported_ops({"aten.sin"}), (torch.randn(3),), min_size=2)[1]
    assert [len(p) for p in outlined.partitions] == [2]
    none = outlined_matches(gm, unsupported_ops({"aten.sin"}), (torch.randn(3),), min_size=5)[1]
    assert none.partitions == [] and len(none.fallback) == 6
    with pytest.raises(UnsupportedOperatorsError, match=r"aten.sin.default x2"):
        partition_fx(gm, unsupported_ops({"aten.sin"}), require_full=True)


def test_picture_of_fx_graph(tmp_path):
    gm = fx.symbolic_trace(Block())
    result = partition_fx(gm, unsupported_ops({"torch.sin"}))
    page = render_html(result, tmp_path / "block.html", title="Block")
    assert "fallback: torch.sin is declared unsupported" in page and "module.Linear" in page


# ---------------------------------------------------------------------------------------------
# never more partitions than CapabilityBasedPartitioner (allows_single_node_partition=True)
# ---------------------------------------------------------------------------------------------
def cbp_partition_count(gm, unsupported_names):
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node):
            return node.op == "call_function" and node.name not in unsupported_names

    return len(CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True).propose_partitions())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.integers(1, 200), st.sampled_from([2, 8, 32]), st.sampled_from([0.05, 0.2, 0.5]))
def test_never_more_partitions_than_cbp(seed, n, window, p_unsup):
    gm, _ = random_fx(seed, n, window, p_unsup=p_unsup)
    rng = random.Random(seed + 1)
    unsupported = {node.name for node in gm.graph.nodes if node.op == "call_function" and rng.random() < p_unsup}
    ours = partition_fx(gm, lambda node: node.name not in unsupported)
    assert len(ours.partitions) <= cbp_partition_count(gm, unsupported)


def test_fx_nbytes_agrees_with_the_metadata_it_summarises():
    # FxView.nbytes (the partitioner's fast size path) and value_bytes(meta) must price alike:
    # static, tuple-valued (native_layer_norm), integer, bool and symbolic values, and no metadata
    from torchvendor.ir import capture
    from torchvendor.partitioner.boundary import value_bytes

    def f(x, idx):
        y = torch.nn.functional.layer_norm(x, x.shape[-1:]) * 2
        return y[idx].sum(-1) > 0, y.t()

    inputs = (torch.randn(6, 8), torch.tensor([0, 2, 5]))
    checked = 0
    for dynamic in (False, True):
        gm = capture(f, inputs, level="aten", dynamic=dynamic).graphs()["inference"] if dynamic else \
            make_fx(f)(*inputs)
        view = FxView(gm.graph)
        for node in gm.graph.nodes:
            assert view.nbytes(node) == value_bytes(view.meta(node)), node.format_node()
            checked += view.nbytes(node) is not None
    assert checked > 10
    bare = fx.symbolic_trace(lambda x: x + 1)
    assert all(FxView(bare.graph).nbytes(n) is None for n in bare.graph.nodes)
