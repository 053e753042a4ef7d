"""The CPU reference's vector ``expf`` (``reference_backends/cpu/prelude.h``): a compiled ``exp``
loop is within 1 ulp of the correctly rounded result on every kind of input (normal, subnormal
results, underflow, overflow, infinities, NaN), and the libraries define the vector variants
themselves instead of calling libmvec's, whose special-input path is scalar."""
from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

import torchvendor.reference_backends.cpu  # noqa: F401  (registers torchvendor_cpu)
from torchvendor.ir import compat
from torchvendor.reference_backends.cpu.codegen import PRELUDE
from torchvendor.reference_backends.cpu.toolchain import build, compiler_flags

pytestmark = pytest.mark.skipif("-DTV_VECTOR_MATH" not in compiler_flags(),
                                reason="no libmvec here: exp loops are not vectorized, the prelude's variants unused")


def _floats() -> torch.Tensor:
    """Every 257th float of [-110, 95] (each binade of the range, subnormal results, both
    thresholds), the specials, and the thresholds' neighbours."""
    lo, hi = (torch.tensor([v], dtype=torch.float32).view(torch.int32).item() for v in (-110.0, 95.0))
    negative = torch.arange(0x80000000 - 2**32, lo + 1, 257, dtype=torch.int64)   # -0.0 .. -110
    positive = torch.arange(0, hi + 1, 257, dtype=torch.int64)
    sampled = torch.cat([negative, positive]).to(torch.int32).view(torch.float32)
    edges = torch.tensor([88.72283935546875, -103.97208404541015625, -87.33654, 88.7228317])
    near = torch.cat([torch.nextafter(edges, torch.full_like(edges, s)) for s in (-1e9, 1e9)])
    specials = torch.tensor([float("-inf"), float("inf"), float("nan"), -0.0, 0.0, -200.0, 200.0, 1e-30, -1e-30])
    return torch.cat([sampled, edges, near, specials])


def test_compiled_exp_is_within_one_ulp_everywhere():
    x = _floats()
    compat.dynamo_reset()
    got = torch.compile(lambda t: torch.exp(t), backend="torchvendor_cpu")(x)
    want = torch.exp(x.double()).float()   # correctly rounded (double's exp is far more accurate)
    same_kind = (got.isnan() == want.isnan()) & (got.isinf() == want.isinf())
    assert bool(same_kind.all()), [(float(a), float(b), float(c)) for a, b, c in zip(x[~same_kind], got[~same_kind],
                                                                                     want[~same_kind])][:10]
    finite = want.isfinite()
    ulps = (got[finite].view(torch.int32).long() - want[finite].view(torch.int32).long()).abs()
    worst = int(ulps.argmax())
    assert int(ulps.max()) <= 1, f"{int(ulps.max())} ulp at exp({float(x[finite][worst])!r})"


@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm")
def test_the_library_defines_the_vector_variant_it_calls(tmp_path):
    """The loop's vector call resolves inside the library (a local symbol), so libmvec's slow
    special-input path is never taken."""
    source = PRELUDE + ('extern "C" void f(float* __restrict__ y, const float* __restrict__ x, long n) {\n'
                        '#pragma omp simd\nfor (long i = 0; i < n; ++i) y[i] = std::exp(x[i]); }\n')
    library = str(tmp_path / "exp.so")
    build(source, library)
    symbols = subprocess.run(["nm", library], capture_output=True, text=True, check=True).stdout.split("\n")
    variants = {line.split()[-1]: line.split()[-2] for line in symbols if "_ZGV" in line and line.endswith("_expf")}
    assert variants and set(variants.values()) == {"t"}, variants   # t: defined here, local; U: libmvec's
