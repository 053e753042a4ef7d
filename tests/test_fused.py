"""Vendor fused ops (sdk/compile/vendor_ops.py): forward and backward match eager, with OpInfo's tolerances.

Tolerances are torch.testing's per-dtype defaults (what OpInfo tests use unless an op overrides
them): float32 rtol 1.3e-6 / atol 1e-5, float64 1e-7 / 1e-7. Gradients are checked against
eager autograd of the unfused code, and with ``torch.autograd.gradcheck`` in float64.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchvendor.sdk.compile.vendor_ops import FusedOp, fused_op


@fused_op("tvtest::linear_gelu")
def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    return F.gelu(x @ w + b, approximate=approximate)  # x may be N-d: the pattern binds it before the view


@fused_op("tvtest::linear_gelu_train")
def linear_gelu_train(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *,
                      approximate: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    pre = x @ w + b
    return F.gelu(pre, approximate=approximate), pre


def _ln_setup(ctx, inputs, output):
    x, w, b = inputs[:3]
    _, mean, rstd = torch.ops.aten.native_layer_norm.default(x, [x.shape[-1]], w, b, inputs[3])
    ctx.save_for_backward(x, w, b, mean, rstd)


def _ln_backward(ctx, grad):
    x, w, b, mean, rstd = ctx.saved_tensors
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward.default(grad, x, [x.shape[-1]], mean, rstd, w, b,
                                                                  [True, True, True])
    return gx, gw, gb, None


@fused_op("tvtest::layer_norm", backward=_ln_backward, setup_context=_ln_setup)
def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x, [x.shape[-1]], w, b, eps)


def _inputs(dtype, n=6, k=8, m=16):
    torch.manual_seed(0)
    return [torch.randn(*s, dtype=dtype, requires_grad=True) for s in ((n, k), (k, m), (m,))]


def _grads(fn, args):
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    torch.manual_seed(1)
    loss = sum((o * torch.randn_like(o)).sum() for o in outs)
    return outs, torch.autograd.grad(loss, args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_unfused_backward_matches_eager(dtype, approximate):
    args = _inputs(dtype)
    fused, gf = _grads(lambda *a: linear_gelu(*a, approximate=approximate), args)
    eager, ge = _grads(lambda x, w, b: F.gelu(x @ w + b, approximate=approximate), args)
    torch.testing.assert_close(fused, eager)
    torch.testing.assert_close(gf, ge)
    assert linear_gelu.autograd == "unfused"


def test_multi_output_training_op_backward_matches_eager():
    args = _inputs(torch.float32)
    fused, gf = _grads(linear_gelu_train, args)
    eager, ge = _grads(lambda x, w, b: (F.gelu(x @ w + b), x @ w + b), args)
    torch.testing.assert_close(fused, eager)
    torch.testing.assert_close(gf, ge)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_vendor_backward_matches_eager(dtype):
    torch.manual_seed(0)
    args = [torch.randn(4, 5, 8, dtype=dtype, requires_grad=True), torch.rand(8, dtype=dtype, requires_grad=True),
            torch.randn(8, dtype=dtype, requires_grad=True)]
    fused, gf = _grads(lambda x, w, b: layer_norm(x, w, b, 1e-5), args)
    eager, ge = _grads(lambda x, w, b: F.layer_norm(x, [8], w, b, 1e-5), args)
    torch.testing.assert_close(fused, eager)
    torch.testing.assert_close(gf, ge)
    assert layer_norm.autograd == "vendor"


def test_gradcheck_float64_both_autograd_kinds():
    x, w, b = (t.detach().requires_grad_() for t in _inputs(torch.float64, 3, 4, 5))
    assert torch.autograd.gradcheck(lambda *a: linear_gelu(*a), (x, w, b))
    assert torch.autograd.gradcheck(lambda *a: linear_gelu_train(*a), (x, w, b))
    xs = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    ws, bs = torch.rand(6, dtype=torch.float64, requires_grad=True), torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: layer_norm(*a, 1e-5), (xs, ws, bs))


def test_opcheck_schema_fake_and_autograd_registration():
    x, w, b = _inputs(torch.float32)
    ln_args = (torch.randn(3, 8, requires_grad=True), torch.rand(8, requires_grad=True), torch.randn(8, requires_grad=True))
    for op, args, kwargs in ((linear_gelu.op, (x, w, b), {"approximate": "tanh"}), (linear_gelu_train.op, (x, w, b), {}),
                             (layer_norm.op, (*ln_args, 1e-5), {})):
        torch.library.opcheck(op, args, kwargs)


def test_compiles_with_dynamic_shapes_through_the_fake_implementation():
    f = torch.compile(lambda x, w, b: linear_gelu(x, w, b) * 2, backend="aot_eager", dynamic=True, fullgraph=True)
    for n in (5, 9):
        x, w, b = _inputs(torch.float32, n=n)
        torch.testing.assert_close(f(x, w, b), F.gelu(x @ w + b) * 2)


def test_vendor_kernel_runs_instead_of_the_reference():
    @fused_op("tvtest::double")
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    calls = []

    @double.register_kernel("cpu")
    def _(x):
        calls.append(x.shape)
        return x + x

    x = torch.randn(3, requires_grad=True)
    double(x).sum().backward()
    assert calls == [(3,)]
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


def test_key_resolves_through_the_fx_adapter():
    from torchvendor.ir.fx_view import resolve_op

    assert resolve_op(linear_gelu.key) is linear_gelu.op
    assert repr(linear_gelu) == "FusedOp('tvtest.linear_gelu.default', autograd='unfused')"


def test_bad_declarations_are_named():
    with pytest.raises(ValueError, match="namespace::name"):
        FusedOp("no_namespace", lambda x: x)
    with pytest.raises(ValueError, match="setup_context= without backward="):
        fused_op("tvtest::bad", setup_context=lambda ctx, inputs, output: None)(lambda x: x)


# ---- training-graph fusion: the fused op returns what the backward needs ------------------------------

@fused_op("tvtest::layer_norm_train")
def layer_norm_train(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.ops.aten.native_layer_norm.default(x, list(w.shape), w, b, eps)


@fused_op("tvtest::layer_norm_infer")
def layer_norm_infer(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *, eps: float) -> torch.Tensor:
    return F.layer_norm(x, list(w.shape), w, b, eps)


_REGISTERED: list[str] = []


def _training_backend(name):
    from torchvendor.sdk import AtenBackend, register_backend
    from torchvendor.sdk.compile import patterns as stock

    if name in _REGISTERED:
        return
    _REGISTERED.append(name)

    class Trainer(AtenBackend):
        supported_ops = {linear_gelu.key, linear_gelu_train.key, layer_norm_train.key, layer_norm_infer.key,
                         "aten.addmm", "aten.mm", "aten.permute", "aten.view", "operator.getitem"}
        patterns = (*stock.rules("linear_gelu", linear_gelu.key, training_op=linear_gelu_train.key),
                    *stock.rules("layer_norm", layer_norm_infer.key, training_op=layer_norm_train.key))

        def compile(self, gm, example_inputs):
            return gm

    Trainer.name = name
    register_backend(Trainer)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("shape", [(6, 8), (2, 5, 8)], ids=["2d", "3d"])
def test_training_forward_graph_fuses(dynamic, shape):
    from torchvendor.sdk import last_report

    _training_backend("tvtest_trainer")
    torch.compiler.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    compiled = torch.compile(model, backend="tvtest_trainer", dynamic=dynamic)
    x = torch.randn(*shape)
    out = compiled(x)
    fw = last_report().graphs[0]
    grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out, model(x))
    eager = torch.autograd.grad(model(x).square().sum(), list(model.parameters()))
    torch.testing.assert_close(grads, eager)
    assert fw.kind == "forward"
    assert fw.fusions == {f"linear_gelu[training]->{linear_gelu_train.key}": 1,
                          f"layer_norm[training]->{layer_norm_train.key}": 1}, fw.fusions
    assert [p.status for p in fw.partitions] == ["compiled"] * len(fw.partitions)
    assert any(linear_gelu_train.key in p.ops for p in fw.partitions), (fw.partitions, fw.unsupported, fw.reasons)
