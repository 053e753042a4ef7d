"""Matmuls whose leading dimensions cuBLAS can use at full speed.

cuBLAS's fast tensor-core kernels access 16 bytes at a time along each matrix's contiguous
dimension; when an extent (M, N or K) or a leading dimension is not a multiple of that, it falls
back to ``align1`` kernels several times slower. A vocabulary of 50,257 (GPT-2) or 30,522 (BERT)
does that to the LM head and, in training, to both of its gradient matmuls: on an H200, GPT-2
124M at 8 x 512 in bf16 spent 3.3 ms in one ``align1`` kernel where Inductor, which pads such
matmuls in its ``pad_mm`` pass, spent 0.43 ms. Padding only the result's leading dimension did
not help (measured: the ``align1`` kernels stayed, as eager's do). :func:`aligned_matmul` pads as
Inductor does: the operands are copied, zero-filled, to extents that are multiples of 16 bytes
(zeros along K add nothing), the matmul runs on them and the result is the top-left view (the
runner copies it into the program's layout). Only 16-bit floats are padded: float32 without TF32
takes the same SIMT kernels either way. An operand already aligned at its extents is used as it is.

Memory: padding copies operands, and a padded result is copied again into the program's layout;
for the LM head those are the step's largest tensors (the logits and their gradient: 412 MB each
for GPT-2 at 8 x 512 in bf16), so whole copies would raise a step's peak by one of them. A 2-D
matmul whose padded operand row or result row times its rows is over :data:`CHUNK_BYTES` runs a
block at a time into a contiguous result, the layout the program declares:

- the logits (``h @ W.T``: ``a`` aligned, only the vocabulary odd) a block of ``b``'s columns at a
  time; every block of the weight but the last is aligned as it is, so the weight is not copied
  (Inductor's ``pad_mm`` copies it padded) and the extra memory is one block of the result;
- otherwise (the gradients: ``grad_logits @ W``, ``grad_logits.T @ h``) a block of ``a``'s rows at
  a time, each padded, against ``b`` padded once: one block plus the padded ``b``; where ``b`` is
  aligned but for its last few rows (``W`` in ``grad_logits @ W``: K is the vocabulary) those rows
  go in a small product added as ``addmm``'s bias, and ``b`` is not copied.

The blocks hold hundreds of rows or columns at least, so each matmul stays large.

    >>> import torch
    >>> mm = aligned_matmul(torch.ops.aten.mm.default)
    >>> a, b = torch.randn(300, 64, dtype=torch.bfloat16), torch.randn(64, 1001, dtype=torch.bfloat16)
    >>> out = mm(a, b)
    >>> out.shape, out.stride(), torch.equal(out, torch.ops.aten.mm.default(a, b))
    (torch.Size([300, 1001]), (1008, 1), True)
"""
from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["aligned_matmul", "ALIGN_BYTES", "MIN_ELEMENTS", "CHUNK_BYTES"]

#: the leading-dimension alignment cuBLAS's fast kernels need
ALIGN_BYTES = 16
#: smaller results are left alone (the padding's copies would cost more than they save)
MIN_ELEMENTS = 1 << 16
#: a 2-D matmul whose padded ``a`` or result is larger runs a block of rows at a time (module docstring)
CHUNK_BYTES = 32 << 20
#: the fewest rows a block gets
MIN_CHUNK_ROWS = 256

_aten = torch.ops.aten
#: operator -> index of its first matrix operand (``addmm``/``baddbmm``: after the bias)
_MATMULS: dict[Any, int] = {_aten.mm.default: 0, _aten.bmm.default: 0, _aten.addmm.default: 1,
                            _aten.baddbmm.default: 1}


def _lanes(t: torch.Tensor) -> int:
    return max(1, ALIGN_BYTES // t.element_size())


def _up(n: int, lanes: int) -> int:
    return -(-n // lanes) * lanes


def _is_aligned(t: torch.Tensor) -> bool:
    """Row- or column-major in its last two dimensions, both extents and the leading dimension
    multiples of 16 bytes."""
    n = _lanes(t)
    (r, c), (sr, sc) = t.shape[-2:], t.stride()[-2:]
    return r % n == 0 and c % n == 0 and ((sc == 1 and sr % n == 0) or (sr == 1 and sc % n == 0))


def _padded(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """``t`` copied into zeros of extents ``rows`` x ``cols``, keeping its major order (``t``
    itself where it has those extents and is aligned)."""
    if tuple(t.shape[-2:]) == (rows, cols) and _is_aligned(t):
        return t
    if t.stride(-2) == 1 and t.stride(-1) != 1:  # column-major: pad the transpose
        return _padded(t.mT, cols, rows).mT
    if tuple(t.shape[-2:]) == (rows, cols):   # only the leading dimension is off: a dense copy, no zeros
        return t.contiguous()
    out = t.new_zeros((*t.shape[:-2], rows, cols))
    out[..., :t.shape[-2], :t.shape[-1]].copy_(t)
    return out


def _padded_bias(bias: torch.Tensor, m: int, n: int, rows: int, cols: int) -> torch.Tensor:
    """``addmm``'s bias broadcast to the padded result (zeros in the padding)."""
    pad = [0, cols - n if bias.shape[-1] == n else 0]
    if bias.dim() >= 2:
        pad += [0, rows - m if bias.shape[-2] == m else 0]
    return torch.nn.functional.pad(bias, pad)


def aligned_matmul(aten: Callable[..., Any]) -> Callable[..., Any]:
    """``aten`` itself unless it is a matmul (``mm``, ``bmm``, ``addmm``, ``baddbmm``); then the
    same operator on operands zero-padded to 16-byte extents, its result the unpadded view (see
    the module docstring). Aligned operands, results of fewer than :data:`MIN_ELEMENTS`
    elements, other dtypes than float16/bfloat16 and keyword arguments other than
    ``beta``/``alpha`` run ``aten`` unchanged."""
    if aten not in _MATMULS:
        return aten
    first = _MATMULS[aten]

    def run(*args: Any, **kwargs: Any) -> Any:
        a, b = args[first], args[first + 1]
        if (set(kwargs) - {"beta", "alpha"} or a.dtype not in (torch.float16, torch.bfloat16) or a.dim() != b.dim()
                or a.shape[-2] * b.shape[-1] * (a.shape[0] if a.dim() == 3 else 1) < MIN_ELEMENTS
                or (_is_aligned(a) and _is_aligned(b))):
            return aten(*args, **kwargs)
        n = _lanes(a)
        (m, k), cols = a.shape[-2:], b.shape[-1]
        mp, kp, np_ = _up(m, n), _up(k, n), _up(cols, n)
        if a.dim() == 2 and mp * max(kp, np_) * a.element_size() > CHUNK_BYTES:
            if (mp, kp) == (m, k) and _is_aligned(a):   # only b's width is odd: b a block of columns at a time
                return _by_cols(aten, first, args, kwargs, _block(a, m))
            return _by_rows(aten, first, args, kwargs, _block(a, max(kp, np_)), (kp, np_))
        head = [_padded_bias(args[0], m, cols, mp, np_)] if first else []
        out = aten(*head, _padded(a, mp, kp), _padded(b, kp, np_), *args[first + 2:], **kwargs)
        return out[..., :m, :cols]

    return run


def _block(a: torch.Tensor, width: int) -> int:
    """Rows (or columns) per block where a row (column) is ``width`` elements of ``a``'s dtype:
    as many as fit in :data:`CHUNK_BYTES`, a multiple of the lanes, at least :data:`MIN_CHUNK_ROWS`."""
    n = _lanes(a)
    return max(MIN_CHUNK_ROWS, CHUNK_BYTES // (width * a.element_size()) // n * n)


def _by_rows(aten: Callable[..., Any], first: int, args: tuple, kwargs: dict, rows: int,
             padded: tuple[int, int]) -> torch.Tensor:
    """A 2-D matmul ``rows`` rows of ``a`` at a time into a contiguous result, ``b`` padded to
    ``padded`` once (module docstring); a plain ``mm`` whose ``b`` is aligned but for its last
    few rows (``grad_logits @ W``: K the vocabulary) is not copied at all (:func:`_split_k`)."""
    a, b = args[first], args[first + 1]
    (m, k), cols = a.shape, b.shape[-1]
    kp, np_ = padded
    main = k // _lanes(a) * _lanes(a)
    split = aten is _aten.mm.default and not kwargs and 0 < main < k and np_ == cols and _is_aligned(b[:main])
    bp = b[:main] if split else _padded(b, kp, np_)
    bias = args[0] if first else None
    out = None
    for r in range(0, m, rows):
        block = a[r:r + rows]
        mp = _up(block.shape[0], _lanes(a))
        if split:
            res = _split_k(block, b, main, mp)
        else:
            head = []
            if bias is not None:
                piece = bias[r:r + rows] if bias.dim() == 2 and bias.shape[0] == m else bias
                head = [_padded_bias(piece, block.shape[0], cols, mp, np_)]
            res = aten(*head, _padded(block, mp, kp), bp, *args[first + 2:], **kwargs)
        if out is None:
            out = res.new_empty((m, cols))
        out[r:r + block.shape[0]].copy_(res[:block.shape[0], :cols])
        del res
    return out


def _split_k(block: torch.Tensor, b: torch.Tensor, main: int, mp: int) -> torch.Tensor:
    """``block @ b`` where ``b``'s first ``main`` rows are aligned as they are, so the weight is
    not copied: the product of ``block``'s last few columns and ``b``'s last rows (fewer than 8
    terms of each sum, rounded to the dtype on its own) is the ``addmm`` bias of the aligned rest
    (``block``'s first ``main`` columns copied aligned, ``mp`` rows), whose sum is rounded once."""
    rest = _aten.mm.default(block[:, main:], b[main:])
    return _aten.addmm.default(_padded(rest, mp, rest.shape[1]), _padded(block[:, :main], mp, main), b[:main])


def _by_cols(aten: Callable[..., Any], first: int, args: tuple, kwargs: dict, step: int) -> torch.Tensor:
    """A 2-D matmul whose ``a`` is aligned and whose ``b`` is not only for its width (the LM head:
    ``h @ W.T`` with a vocabulary of odd size), ``step`` columns of ``b`` at a time into a
    contiguous result: each block of ``b`` but the last is aligned as it is (no copy of the
    weight), the last is padded, and the extra memory is one block of the result."""
    a, b = args[first], args[first + 1]
    m, cols = a.shape[0], b.shape[1]
    bias = args[0] if first else None
    lanes = _lanes(a)
    out = None
    for c in range(0, cols, step):
        block = b[:, c:c + step]
        nb = block.shape[1]
        nbp = _up(nb, lanes)
        head = []
        if bias is not None:
            piece = bias[..., c:c + step] if bias.dim() and bias.shape[-1] == cols else bias
            head = [_padded_bias(piece, m, nb, m, nbp)]
        res = aten(*head, a, _padded(block, block.shape[0], nbp), *args[first + 2:], **kwargs)
        if out is None:
            out = res.new_empty((m, cols))
        out[:, c:c + nb].copy_(res[:, :nb])
        del res
    return out
