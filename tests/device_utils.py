"""The device tests' helpers: the device name, tensor helpers, and the conformance suite's OpInfo
runner re-exported (``tests/`` is on ``sys.path`` under pytest; the runner lives in the package so
vendors run it too, the helpers here are the tests' own)."""
from __future__ import annotations

import functools

import torch

from torchvendor.sdk.conformance.opinfo import OpResult
from torchvendor.sdk.conformance.opinfo import (REPRESENTATIVE_OPS, format_failure,  # noqa: F401
                                                opinfo_ops, run_opinfo_corpus, run_opinfo_corpus_isolated,
                                                run_opinfo_op, summarize)

#: the reference simulated accelerator the device tests register
DEVICE = "acme"

ALL_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex64, torch.complex128,
]


def dev(index: int | None = None) -> torch.device:
    return torch.device(DEVICE if index is None else f"{DEVICE}:{index}")


def make_cpu(shape, dtype, *, seed: int = 0, low=None, high=None) -> torch.Tensor:  # noqa: ANN001
    """A deterministic CPU tensor of any dtype (values in a range that every dtype holds)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        real = torch.randn(shape, generator=g, dtype=torch.float64)
        imag = torch.randn(shape, generator=g, dtype=torch.float64)
        return torch.complex(real, imag).to(dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 4).to(dtype)
    if dtype == torch.uint8:
        lo, hi = (0 if low is None else low), (200 if high is None else high)
    else:
        lo, hi = (-100 if low is None else low), (100 if high is None else high)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


@functools.lru_cache(maxsize=None)
def corpus_on_device(names: frozenset[str]) -> dict[str, OpResult]:
    """The float32 OpInfos ``names`` on the device through its fallback and native kernels, run
    once per session in a child process (``run_opinfo_corpus_isolated``): the device OpInfo tests
    and the stable-kernel tests' fallback-only baseline share one run (about 20 s)."""
    return run_opinfo_corpus_isolated(DEVICE, torch.float32, names=sorted(names), op_timeout=600)


def kernel_template():
    """The stable-ABI kernel template (examples/stable_kernels) built with cmake, as
    ``examples/native_kernel.py`` builds it; skips the calling test where cmake is missing."""
    import importlib.util
    import shutil
    from pathlib import Path

    import pytest

    if shutil.which("cmake") is None:
        pytest.skip("no cmake")
    path = Path(__file__).resolve().parents[1] / "examples" / "native_kernel.py"
    spec = importlib.util.spec_from_file_location("tv_native_kernel_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_template()
