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
def test_large_matmuls_run_a_block_at_a_time_into_a_contiguous_result(monkeypatch, dtype):
    """The LM head's three matmuls (logits, and both gradients) above CHUNK_BYTES run a block at a
    time (padded copies of one block at most, not of the whole logits) into a contiguous result
    (the program's layout: no second copy), with ATen's values. The logits (``h @ W.T``, only
    the vocabulary odd) go a block of W's rows at a time, and only the last block is copied;
    ``grad_logits @ W`` copies blocks of grad_logits only (W's odd last row goes in a small
    product); biases of addmm (a row broadcast or one per row) follow their blocks."""
    from torchvendor.reference_backends.cuda import aligned

    monkeypatch.setattr(aligned, "CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(aligned, "MIN_CHUNK_ROWS", 16)
    made = {}   # storage -> elements (a column-major copy is made through the transpose: counted once)
    padded = aligned._padded

    def counting(t, rows, cols):  # noqa: ANN001, ANN202
        out = padded(t, rows, cols)
        if out is not t:
            made[out.untyped_storage().data_ptr()] = out.numel()
        return out
    monkeypatch.setattr(aligned, "_padded", counting)
    mm, addmm = aligned_matmul(aten.mm.default), aligned_matmul(aten.addmm.default)
    # results of at least MIN_ELEMENTS (smaller ones are not padded at all)
    h, w, g = torch.randn(304, 256, dtype=dtype), torch.randn(1001, 256, dtype=dtype), torch.randn(304, 1001, dtype=dtype)
    for a, b in ((h, w.t()), (g, w), (g.t(), h)):
        made.clear()
        out = mm(a, b)
        copies = list(made.values())
        assert out.is_contiguous() and out.shape == (a.shape[0], b.shape[1])
        want = aten.mm.default(a, b)
        if a is g:   # the split rounds W's odd last row's product on its own: within an ulp of the largest
            ulp = want.abs().max().item() * torch.finfo(dtype).eps
            assert (out.float() - want.float()).abs().max().item() <= ulp
        else:
            torch.testing.assert_close(out, want, **TOL[dtype])
        assert copies and max(copies) * a.element_size() <= 64 * 1024 + 1008 * 256 * 2, copies  # a block, b
        if a is h:
            assert len(copies) == 1 and copies[0] < w.numel() // 4, copies         # the last block of W only
        if a is g:
            assert max(copies) < w.numel() // 4, copies   # W aligned but for its last row: not copied
    for bias in (torch.randn(1001, dtype=dtype), torch.randn(304, 1001, dtype=dtype)):
        for a in (h, h[:300]):   # the column blocks, and the row blocks (an odd M)
            got = addmm(bias[:a.shape[0]] if bias.dim() == 2 else bias, a, w.t(), beta=0.5, alpha=2.0)
            want = aten.addmm.default(bias[:a.shape[0]] if bias.dim() == 2 else bias, a, w.t(), beta=0.5, alpha=2.0)
            assert got.is_contiguous()
            torch.testing.assert_close(got, want, **TOL[dtype])
