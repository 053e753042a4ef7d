"""The model zoo through compile backends: inference and a training step with an optimizer, on cpu
and on the simulated device, static and dynamic shapes, compared with eager.

The default tier runs the small models; ``-m slow`` adds the Hugging Face models and ResNet-18.
"""
from __future__ import annotations

import copy

import pytest
import torch

from torchvendor.ir import compat
from torchvendor.sdk import AtenBackend, register_backend
from torchvendor.sdk.conformance import zoo


class ZooPassThrough(AtenBackend):
    """An ATen backend claiming the common compute ops and running them as given: it checks the
    SDK's plumbing (AOTAutograd, partitions, eager fallback between them, training)."""

    name = "tv_zoo_passthrough"
    supported_ops = {"aten.addmm", "aten.mm", "aten.bmm", "aten.add", "aten.mul", "aten.relu", "aten.gelu",
                     "aten.convolution", "aten.view", "aten.permute", "aten.t", "aten.sum", "aten.div", "aten.exp"}
    min_partition_size = 2

    def compile(self, gm, example_inputs):
        return gm


register_backend(ZooPassThrough)

BACKENDS = ["tv_zoo_passthrough", "torchvendor_cpu"]


def _backend_available(name: str) -> None:
    if name == "torchvendor_cpu":
        import torchvendor.reference_backends.cpu  # noqa: F401  (registers torchvendor_cpu)


def _to(x, device):
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _close(a, b, **tol):
    for x, y in zip(zoo.leaves(a), zoo.leaves(b), strict=True):
        torch.testing.assert_close(x.detach().cpu(), y.detach().cpu(), **tol)


def check_model(name: str, backend: str, device: str = "cpu", dynamic: bool = False, train: bool = True) -> None:
    _backend_available(backend)
    compat.dynamo_reset()
    model, inputs = zoo.build(name)
    model = model.to(device)
    inputs = tuple(_to(x, device) for x in inputs)
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    tol = dict(rtol=1e-4, atol=1e-4)  # reassociated float32 sums (OpInfo's float32 default is 1.3e-6/1e-5)
    model.eval(), ref.eval()
    with torch.no_grad():
        _close(compiled(*inputs), ref(*inputs), **tol)
    if not train:
        return
    model.train(), ref.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.01)
    for m, o, fn in ((model, opt, compiled), (ref, ref_opt, ref)):
        o.zero_grad()
        zoo.loss(fn(*inputs)).backward()
    # Gradients by relative error norm (floored at 1, so an all-but-zero gradient such as an
    # attention key bias's compares absolutely): element-wise tolerances flag single elements
    # whose float32 sums were reassociated, while a wrong gradient moves the whole tensor.
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is None:
            assert p.grad is None, f"{n}: a gradient where eager has none"
            continue
        assert p.grad is not None, f"{n}: no gradient (eager has one)"
        err = (p.grad.cpu() - q.grad.cpu()).norm() / q.grad.cpu().norm().clamp_min(1.0)
        assert err < 1e-3, f"{n}: gradient relative error {err:.2e}"
    opt.step(), ref_opt.step()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-4, atol=1e-5, msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", zoo.names(tier="fast"))
def test_fast_zoo_cpu(name, backend):
    check_model(name, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["mlp", "gpt_block"])
def test_zoo_dynamic(name, backend):
    _backend_available(backend)
    compat.dynamo_reset()
    model, (x,) = zoo.build(name)
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch in (3, 5):
            xs = torch.randn(batch, *x.shape[1:])
            _close(compiled(xs), model(xs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_zoo_on_the_simulated_device(name, backend, acme):
    check_model(name, backend, device="acme")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", zoo.names(tier="slow"))
def test_slow_zoo_cpu(name, backend):
    check_model(name, backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", zoo.names(tier="fast"))  # lstm included: the device serves the fused cells
def test_fast_zoo_dynamic_and_device(name, backend, acme):
    check_model(name, backend, dynamic=True)
    check_model(name, backend, device="acme", train=False)
