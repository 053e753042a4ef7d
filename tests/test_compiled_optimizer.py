"""A compiled optimizer step on a torchvendor device (issue 34): ``torch.compile`` of
``optimizer.step`` with the reference LOOP backend runs natively on ``acme`` for SGD, Adam and
AdamW (foreach and single-tensor, capturable and not), with 0 partitions fallen back, and ends
where eager ends after 3 steps. Non-capturable Adam keeps its step counters as 0-d host tensors
that the device kernels read: the runner hands the kernels device copies, never a host pointer.
A partition whose run fails falls back with a warning, never raises to the user (Inductor's
reinplacing once rewrote the fallback graph in place, so the fallback itself raised)."""
from __future__ import annotations

import warnings

import pytest
import torch

import torchvendor.reference_backends.cpu  # noqa: F401 - registers torchvendor_cpu
from torchvendor.reference_backends.cpu import CpuBackend
from torchvendor.sdk import last_report, register_backend
from torchvendor.sdk.compile import BackendFallbackWarning

VARIANTS = [
    ("SGD", {"momentum": 0.9, "foreach": True}),
    ("SGD", {"momentum": 0.9, "foreach": False}),
    ("Adam", {"foreach": True}),
    ("Adam", {"foreach": False}),
    ("Adam", {"foreach": True, "capturable": True}),
    ("Adam", {"foreach": False, "capturable": True}),
    ("AdamW", {"foreach": True}),
    ("AdamW", {"foreach": False}),
    ("AdamW", {"foreach": True, "capturable": True}),
    ("AdamW", {"foreach": False, "capturable": True}),
]


def _optimizer(name: str, options: dict, device: str) -> tuple[list[torch.nn.Parameter], torch.optim.Optimizer]:
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3, generator=g).to(device)),
              torch.nn.Parameter(torch.randn(5, generator=g).to(device))]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device)
    return params, getattr(torch.optim, name)(params, lr=0.1, **options)


def _steps(name: str, options: dict, backend: str | None, n: int = 3, **compile_options) -> list[torch.Tensor]:
    params, opt = _optimizer(name, options, "acme")
    step = opt.step if backend is None else torch.compile(opt.step, backend=backend, options=compile_options or None)
    for _ in range(n):
        step()
    return [p.detach().cpu() for p in params]


@pytest.mark.parametrize("name,options", VARIANTS, ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in o.items())}"
                                                        for n, o in VARIANTS])
def test_compiled_step_runs_on_the_device(name: str, options: dict) -> None:
    torch._dynamo.reset()
    eager = _steps(name, options, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BackendFallbackWarning)
        compiled = _steps(name, options, "torchvendor_cpu")
    report = last_report()
    parts = [p for g in report.graphs for p in g.partitions]
    assert parts and not [p for p in parts if p.status != "compiled"], str(report)
    assert report.unsupported() == {}, str(report)
    for c, e in zip(compiled, eager):  # eager's bias correction is Python (double) math, the kernels' float32
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5)


class _FailingRun(CpuBackend):
    """The reference backend whose kernels raise when run: every partition must fall back."""

    name = "test_failing_run"

    def compile(self, kernel):  # noqa: ANN001, ANN201
        def run(*args):  # noqa: ANN002, ANN202
            raise RuntimeError("this vendor kernel cannot run")
        return run


def test_a_failing_partition_falls_back_with_a_warning(tmp_path) -> None:  # noqa: ANN001
    register_backend(_FailingRun)
    torch._dynamo.reset()
    eager = _steps("AdamW", {"foreach": True}, None)
    with pytest.warns(BackendFallbackWarning, match="cannot run"):  # an empty cache: Inductor lowers the partition
        compiled = _steps("AdamW", {"foreach": True}, "test_failing_run", cache_dir=str(tmp_path))
    for c, e in zip(compiled, eager):
        torch.testing.assert_close(c, e)
