"""The reference CUDA backend's aligned matmuls (reference_backends/cuda/aligned.py): the same
values as ATen's operator, computed on operands zero-padded to 16-byte extents. The padding is
plain tensor code, so it is checked here on the CPU."""
from __future__ import annotations

import pytest
import torch

from torchvendor.reference_backends.cuda.aligned import _is_aligned, aligned_matmul

aten = torch.ops.aten
HALF = [torch.bfloat16, torch.float16]
TOL = {torch.bfloat16: {"atol": 1e-2, "rtol": 1.6e-2}, torch.float16: {"atol": 1e-3, "rtol": 1e-3}}


@pytest.mark.parametrize("dtype", HALF)
def test_an_odd_output_width_is_computed_padded_and_viewed(dtype):
    a, b = torch.randn(256, 96, dtype=dtype), torch.randn(96, 1001, dtype=dtype)
    out = aligned_matmul(aten.mm.default)(a, b)
    assert out.shape == (256, 1001) and out.stride() == (1008, 1)
    torch.testing.assert_close(out, aten.mm.default(a, b), **TOL[dtype])


@pytest.mark.parametrize("dtype", HALF)
def test_an_odd_reduction_extent_is_zero_padded(dtype):
    """The LM head's two gradients: K = 1001 (grad_logits @ W) and a column-major M = 1001
    (grad_logits^T @ h); zeros along K leave the sums unchanged."""
    g, w, h = torch.randn(512, 1001, dtype=dtype), torch.randn(1001, 64, dtype=dtype), torch.randn(512, 64, dtype=dtype)
    assert not _is_aligned(g) and not _is_aligned(g.t())
    torch.testing.assert_close(aligned_matmul(aten.mm.default)(g, w), aten.mm.default(g, w), **TOL[dtype])
    torch.testing.assert_close(aligned_matmul(aten.mm.default)(g.t(), h), aten.mm.default(g.t(), h), **TOL[dtype])


@pytest.mark.parametrize("dtype", HALF)
def test_addmm_and_baddbmm_biases_and_bmm_batches(dtype):
    bias, a, b = torch.randn(1001, dtype=dtype), torch.randn(129, 48, dtype=dtype), torch.randn(48, 1001, dtype=dtype)
    got = aligned_matmul(aten.addmm.default)(bias, a, b, beta=0.5, alpha=2.0)
    torch.testing.assert_close(got, aten.addmm.default(bias, a, b, beta=0.5, alpha=2.0), **TOL[dtype])
    full = torch.randn(129, 1001, dtype=dtype)
    torch.testing.assert_close(aligned_matmul(aten.addmm.default)(full, a, b), aten.addmm.default(full, a, b), **TOL[dtype])
    x, y = torch.randn(3, 100, 40, dtype=dtype), torch.randn(3, 40, 333, dtype=dtype)
    torch.testing.assert_close(aligned_matmul(aten.bmm.default)(x, y), aten.bmm.default(x, y), **TOL[dtype])
    c = torch.randn(3, 1, 333, dtype=dtype)
    torch.testing.assert_close(aligned_matmul(aten.baddbmm.default)(c, x, y), aten.baddbmm.default(c, x, y), **TOL[dtype])


def test_aligned_small_float32_and_other_operators_run_unchanged():
    assert aligned_matmul(aten.add.Tensor) is aten.add.Tensor
    mm = aligned_matmul(aten.mm.default)
    a, b = torch.randn(256, 64, dtype=torch.bfloat16), torch.randn(64, 1024, dtype=torch.bfloat16)
    assert mm(a, b).is_contiguous()                                       # aligned already: ATen's result
    small = mm(torch.randn(8, 8, dtype=torch.bfloat16), torch.randn(8, 7, dtype=torch.bfloat16))
    assert small.is_contiguous() and small.shape == (8, 7)                # too small to pay for padding
    assert mm(torch.randn(300, 4), torch.randn(4, 301)).is_contiguous()   # float32: SIMT kernels either way


@pytest.mark.parametrize("dtype", HALF)
def test_large_matmuls_run_a_block_of_rows_at_a_time_into_a_contiguous_result(monkeypatch, dtype):
    """The LM head's three matmuls (logits, and both gradients) above CHUNK_BYTES: a block of
    rows at a time (the padded copies one block at most, not the whole logits), the result
    contiguous (the program's layout: no second copy), the values ATen's; biases of addmm (a row
    broadcast or one per row) follow their rows."""
    from torchvendor.reference_backends.cuda import aligned

    monkeypatch.setattr(aligned, "CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(aligned, "MIN_CHUNK_ROWS", 16)
    mm, addmm = aligned_matmul(aten.mm.default), aligned_matmul(aten.addmm.default)
    h, w = torch.randn(300, 64, dtype=dtype), torch.randn(1001, 64, dtype=dtype)
    g = torch.randn(300, 1001, dtype=dtype)
    for a, b in ((h, w.t()), (g, w), (g.t(), h)):
        out = mm(a, b)
        assert out.is_contiguous() and out.shape == (a.shape[0], b.shape[1])
        torch.testing.assert_close(out, aten.mm.default(a, b), **TOL[dtype])
    assert aligned._chunk_rows(h, 304, 64, 1008) < 300 and aligned._chunk_rows(g.t(), 1008, 304, 64) < 1001
    for bias in (torch.randn(1001, dtype=dtype), torch.randn(300, 1001, dtype=dtype)):
        got = addmm(bias, h, w.t(), beta=0.5, alpha=2.0)
        assert got.is_contiguous()
        torch.testing.assert_close(got, aten.addmm.default(bias, h, w.t(), beta=0.5, alpha=2.0), **TOL[dtype])
