"""The reference CUDA backend's aligned matmuls (reference_backends/cuda/aligned.py): the same
values as ATen's operator, with every operand and the result at a 16-byte leading dimension.
The padding is plain tensor code, so it is checked here on the CPU; the GPU speed is in
docs/bench_models.md."""
from __future__ import annotations

import pytest
import torch

from torchvendor.reference_backends.cuda.aligned import _is_aligned, aligned_matmul

aten = torch.ops.aten
DTYPES = [torch.float32, torch.bfloat16]


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return {"atol": 1e-5, "rtol": 1.3e-6} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1.6e-2}


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_odd_output_width_is_written_to_a_padded_result(dtype):
    a, b = torch.randn(256, 96, dtype=dtype), torch.randn(96, 1001, dtype=dtype)
    out = aligned_matmul(aten.mm.default)(a, b)
    assert out.shape == (256, 1001) and _is_aligned(out) and out.stride(0) % (16 // a.element_size()) == 0
    torch.testing.assert_close(out, aten.mm.default(a, b), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_misaligned_column_major_operand_is_padded_in_its_own_order(dtype):
    """The LM head's weight gradient: grad_logits^T (column-major, leading dimension 1001) @ h."""
    g, h = torch.randn(512, 1001, dtype=dtype), torch.randn(512, 64, dtype=dtype)
    assert not _is_aligned(g.t())
    out = aligned_matmul(aten.mm.default)(g.t(), h)
    torch.testing.assert_close(out, aten.mm.default(g.t(), h), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_addmm_and_bmm_keep_their_bias_scalars_and_batches(dtype):
    bias, a, b = torch.randn(1001, dtype=dtype), torch.randn(128, 48, dtype=dtype), torch.randn(48, 1001, dtype=dtype)
    got = aligned_matmul(aten.addmm.default)(bias, a, b, beta=0.5, alpha=2.0)
    torch.testing.assert_close(got, aten.addmm.default(bias, a, b, beta=0.5, alpha=2.0), **_tol(dtype))
    x, y = torch.randn(3, 100, 40, dtype=dtype), torch.randn(3, 40, 333, dtype=dtype)
    got = aligned_matmul(aten.bmm.default)(x, y)
    assert _is_aligned(got)
    torch.testing.assert_close(got, aten.bmm.default(x, y), **_tol(dtype))


def test_aligned_small_integer_and_other_operators_run_unchanged():
    assert aligned_matmul(aten.add.Tensor) is aten.add.Tensor
    mm = aligned_matmul(aten.mm.default)
    a, b = torch.randn(256, 64), torch.randn(64, 1024)
    assert mm(a, b).is_contiguous()                      # aligned already: ATen's own result
    small = mm(torch.randn(8, 8), torch.randn(8, 7))     # too small to pay for padding
    assert small.is_contiguous() and small.shape == (8, 7)
    ints = mm(torch.ones(300, 4, dtype=torch.int64), torch.ones(4, 301, dtype=torch.int64))
    assert ints.is_contiguous() and int(ints[0, 0]) == 4
