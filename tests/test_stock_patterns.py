"""The stock pattern library: every pattern matches the static AND the dynamic-shape ATen capture.

Each case captures a small module through the SDK's ATen path (``torchvendor.ir.capture``, the
``aten_ir_hook`` that backends use, default ``core_aten()`` table) once with static and once with
dynamic shapes (``torch.compile(dynamic=True)``: views take SymInt inputs) and requires the same
non-zero match count. A pattern that matches static but not dynamic fails here, not silently.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torchvendor.ir import capture
from torchvendor.ir import decompositions as D
from torchvendor.pattern_matcher import PatternError
from torchvendor.sdk.compile import patterns


class RMSNorm(nn.Module):  # eps a literal
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d) + 0.5)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class LlamaRMSNorm(RMSNorm):  # eps a float attribute: a 0-d tensor input under dynamic shapes
    def __init__(self, d: int) -> None:
        super().__init__(d)
        self.variance_epsilon = 1e-5

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


class Fn(nn.Module):
    def __init__(self, fn, **mods) -> None:
        super().__init__()
        self.fn = fn
        for k, v in mods.items():
            setattr(self, k, v)

    def forward(self, *args):
        return self.fn(self, *args)


def _mm_bias_gelu():
    m = Fn(lambda s, x: F.gelu(x @ s.w + s.b))
    m.w, m.b = nn.Parameter(torch.randn(8, 16)), nn.Parameter(torch.randn(16))
    return m


def _gelu_new(s, x):  # Hugging Face's "gelu_new" (GPT-2)
    y = s.l(x)
    return 0.5 * y * (1.0 + torch.tanh(0.7978845608028654 * (y + 0.044715 * torch.pow(y, 3.0))))


def _attention(s, q, k, v):
    return torch.softmax((q @ k.transpose(-2, -1)) * 0.125, dim=-1) @ v


x2, x3 = (lambda: torch.randn(6, 8)), (lambda: torch.randn(2, 5, 8))
qkv = lambda: [torch.randn(2, 3, 5, 8) for _ in range(3)]  # noqa: E731
img = lambda: [torch.randn(2, 3, 9, 9)]  # noqa: E731
GELU_DECOMPOSED = D.core_aten().adding("aten.gelu")

# (case id, stock name, module factory, inputs factory, decomposition table or None, expected count)
CASES = [
    ("linear-2d", "linear", lambda: nn.Linear(8, 16), lambda: [x2()], None, 1),
    ("linear-3d", "linear", lambda: nn.Linear(8, 16), lambda: [x3()], None, 1),
    ("mlp", "linear", lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), lambda: [x3()], None, 2),
    ("linear-gelu-2d", "linear_gelu", lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU()), lambda: [x2()], None, 1),
    ("linear-gelu-3d-tanh", "linear_gelu", lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU("tanh")),
     lambda: [x3()], None, 1),
    ("linear-gelu-erf-decomposed", "linear_gelu", lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU()),
     lambda: [x3()], GELU_DECOMPOSED, 1),
    ("linear-gelu-tanh-decomposed", "linear_gelu", lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU("tanh")),
     lambda: [x2()], GELU_DECOMPOSED, 1),
    ("linear-gelu-new-hf", "linear_gelu", lambda: Fn(_gelu_new, l=nn.Linear(8, 16)), lambda: [x3()], None, 1),
    ("mm-bias-gelu-3d", "linear_gelu", _mm_bias_gelu, lambda: [x3()], None, 1),
    ("mm-bias-gelu-2d", "linear_gelu", _mm_bias_gelu, lambda: [x2()], None, 1),
    ("layer-norm", "layer_norm", lambda: nn.LayerNorm(8), lambda: [x3()], None, 1),
    ("rms-norm", "rms_norm", lambda: RMSNorm(8), lambda: [x3()], None, 1),
    ("rms-norm-llama", "rms_norm", lambda: LlamaRMSNorm(8), lambda: [x3()], None, 1),
    ("rms-norm-torch", "rms_norm", lambda: nn.RMSNorm(8), lambda: [x3()], None, 1),
    ("softmax", "softmax", lambda: nn.Softmax(-1), lambda: [x3()], None, 1),
    ("sdpa-op", "sdpa", lambda: Fn(lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v)), qkv, None, 1),
    ("sdpa-written", "sdpa", lambda: Fn(_attention), qkv, None, 1),
    # batch == heads: the dynamic graph asks a computed tensor for its size (sym_size(view_2, 1))
    ("sdpa-written-shape-query", "sdpa", lambda: Fn(_attention), lambda: [torch.randn(2, 2, 4, 8) for _ in range(3)],
     None, 1),
    ("conv-bn", "conv_bn", lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval(), img, None, 1),
    ("conv-nobias-bn-relu", "conv_bn_relu",
     lambda: nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU()).eval(), img, None, 1),
]


def _count(name, make, inputs, table, dynamic):
    torch.manual_seed(0)
    prog = capture(make(), inputs(), level="aten", dynamic=dynamic, decompositions=table)
    return patterns.count(name, prog.graphs()["inference"])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_stock_pattern_matches_static_and_dynamic(case):
    _, name, make, inputs, table, expected = case
    static = _count(name, make, inputs, table, dynamic=False)
    dynamic = _count(name, make, inputs, table, dynamic=True)
    assert static == expected, f"{name}: {static} match(es) in the static capture, expected {expected}"
    assert dynamic == static, f"{name}: {static} match(es) static but {dynamic} with dynamic shapes"


def test_every_stock_pattern_is_covered():
    assert {c[1] for c in CASES} == set(patterns.names())


def test_bias_must_be_a_vector():
    """``mm(x, w) + residual`` is not a linear: the added tensor is 2-D."""
    f = Fn(lambda s, x, r: x @ s.w + r)
    f.w = nn.Parameter(torch.randn(8, 8))
    prog = capture(f, [x2(), torch.randn(6, 8)], level="aten")
    assert patterns.count("linear", prog.graphs()["inference"]) == 0


def test_unknown_stock_name_lists_the_library():
    with pytest.raises(PatternError, match="the library has"):
        patterns.rules("lienar", "acme.linear.default")


def test_training_variant_needs_a_stock_pattern_that_has_one():
    with pytest.raises(PatternError, match="no training variant"):
        patterns.rules("softmax", "acme.softmax.default", training_op="acme.softmax_t.default")


# ---- training variants and explain ---------------------------------------------------------------------

from torchvendor.pattern_matcher import P, Rule  # noqa: E402
from torchvendor.sdk.compile.fx_pattern import explain  # noqa: E402


def _forward(module, x, dynamic):
    torch.manual_seed(0)
    return capture(module, [x], level="aten", training=True, dynamic=dynamic).graphs()["forward"]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name,module", [("linear_gelu", lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU())),
                                         ("layer_norm", lambda: nn.LayerNorm(8))], ids=["linear_gelu", "layer_norm"])
def test_training_forward_needs_the_training_variant(name, module, dynamic):
    """The backward saves an interior value: the plain rule is rejected, the training variant matches."""
    gm = _forward(module(), x3(), dynamic)
    assert patterns.count(patterns.rules(name, None), gm) == 0
    assert patterns.count(name, gm, training=True) == 1
    text = explain(patterns.rules(name, None)[:1], gm)
    assert "is used outside the match by" in text and "extra output" in text, text


def test_explain_names_symbolic_sizes_of_a_naive_view_pattern():
    gm = capture(nn.Sequential(nn.Linear(8, 16), nn.GELU()), [x3()], level="aten", dynamic=True).graphs()["inference"]
    naive = Rule(P("aten.gelu.default", P("aten.view.default", P("aten.addmm.default", "b", P("aten.view.default", "x"),
                                                                   "w"))), name="naive")
    text = explain(naive, gm)
    assert text.startswith("rule 'naive': no match; nearest candidates:"), text
    assert "view_1 (aten.view.default) has 3 input(s), the pattern gives 1" in text
    assert "are symbolic sizes (dynamic shapes): accept them with Star()" in text
    assert patterns.explain("linear_gelu", gm).splitlines()[0] == "rule 'linear_gelu#0': 1 match(es), at gelu"


def test_explain_attribute_and_missing_anchor():
    gm = capture(nn.Sequential(nn.Linear(8, 16), nn.GELU()), [x2()], level="aten").graphs()["inference"]
    text = explain(Rule(P("aten.gelu.default", "x", attrs={"approximate": "tanh"}), name="tanh"), gm)
    assert "gelu: has no attribute 'approximate' (the pattern wants 'tanh'); the call leaves it to its default" in text
    assert "nothing almost matched" in patterns.explain("softmax", gm)
    ln = capture(nn.Sequential(nn.LayerNorm(8), nn.ReLU()), [x2()], level="aten").graphs()["inference"]
    text = explain(Rule(P("aten.relu.default", P("operator.getitem", "t", attrs={"arg1": 1})), name="r"), ln)
    assert "at relu: getitem: attribute arg1=0, the pattern wants 1 (after 1 pattern op(s) matched)" in text, text


# ---- every stock rule rewrites to a fused op with the documented signature, and the model still computes the same

from typing import Optional  # noqa: E402

from torchvendor.sdk.compile.vendor_ops import fused_op  # noqa: E402


def _conv_bn_ref(x, w, bn_w, bn_b, mean, var, cb, eps, stride, padding, dilation, groups):
    return F.batch_norm(F.conv2d(x, w, cb, stride, padding, dilation, groups), mean, var, bn_w, bn_b, False, 0.0, eps)


@fused_op("tvstock::linear")
def f_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return x @ w + b


@fused_op("tvstock::linear_gelu")
def f_linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *, approximate: str) -> torch.Tensor:
    return F.gelu(x @ w + b, approximate=approximate)


@fused_op("tvstock::layer_norm")
def f_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *, eps: float) -> torch.Tensor:
    return F.layer_norm(x, list(w.shape), w, b, eps)


@fused_op("tvstock::rms_norm")
def f_rms_norm(x: torch.Tensor, w: torch.Tensor, eps_t: Optional[torch.Tensor] = None, *, eps: float = 0.0) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + (eps if eps_t is None else eps_t)) * w


@fused_op("tvstock::softmax")
def f_softmax(x: torch.Tensor, *, dim: int) -> torch.Tensor:
    return torch.softmax(x, dim)


@fused_op("tvstock::sdpa")
def f_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float]) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


@fused_op("tvstock::conv_bn")
def f_conv_bn(x: torch.Tensor, w: torch.Tensor, bn_w: torch.Tensor, bn_b: torch.Tensor, mean: torch.Tensor,
              var: torch.Tensor, cb: Optional[torch.Tensor] = None, *, eps: float, stride: list[int],
              padding: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    return _conv_bn_ref(x, w, bn_w, bn_b, mean, var, cb, eps, stride, padding, dilation, groups)


@fused_op("tvstock::conv_bn_relu")
def f_conv_bn_relu(x: torch.Tensor, w: torch.Tensor, bn_w: torch.Tensor, bn_b: torch.Tensor, mean: torch.Tensor,
                   var: torch.Tensor, cb: Optional[torch.Tensor] = None, *, eps: float, stride: list[int],
                   padding: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    return torch.relu(_conv_bn_ref(x, w, bn_w, bn_b, mean, var, cb, eps, stride, padding, dilation, groups))


FUSED = {"linear": f_linear, "linear_gelu": f_linear_gelu, "layer_norm": f_layer_norm, "rms_norm": f_rms_norm,
         "softmax": f_softmax, "sdpa": f_sdpa, "conv_bn": f_conv_bn, "conv_bn_relu": f_conv_bn_relu}
_BACKENDS: dict = {}


def _stock_backend(table):
    from torchvendor.sdk import AtenBackend, register_backend

    name = "tvtest_stock" if table is None else "tvtest_stock_gelu_decomposed"
    if name not in _BACKENDS:
        rules = [r for stock_name in patterns.names() for r in patterns.rules(stock_name, FUSED[stock_name].key)]
        _BACKENDS[name] = type("Stock", (AtenBackend,), {"name": name, "patterns": tuple(rules), "decompositions": table,
                                                     "compile": lambda self, gm, example_inputs: gm})
        register_backend(_BACKENDS[name])
    return name


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_stock_rule_rewrites_to_its_documented_fused_op(case, dynamic):
    from torchvendor.sdk import last_report

    _, name, make, inputs, table, expected = case
    torch.compiler.reset()  # many modules share Sequential.forward: stay below Dynamo's recompile limit
    torch.manual_seed(0)
    module, args = make(), inputs()
    with torch.no_grad():
        out = torch.compile(module, backend=_stock_backend(table), dynamic=dynamic)(*args)
        torch.testing.assert_close(out, module(*args))
    fusions = last_report().graphs[0].fusions
    assert fusions.get(f"{name}->{FUSED[name].key}", 0) == expected, fusions


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_zoo_gpt_block_training_forward_fuses_its_mlp_and_norms(dynamic):
    """The MLP's input is a layer norm's output reshaped to 2-D and saved for the weight gradient:
    the saved view is copied for the output, so the training variant still matches."""
    from torchvendor.sdk.conformance import zoo

    model, inputs = zoo.build("gpt_block")
    gm = capture(model, list(inputs), level="aten", training=True, dynamic=dynamic).graphs()["forward"]
    assert patterns.count("linear_gelu", gm, training=True) == 1
    assert patterns.count("layer_norm", gm, training=True) == 2
