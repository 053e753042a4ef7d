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
takes the same SIMT kernels either way.

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

__all__ = ["aligned_matmul", "ALIGN_BYTES", "MIN_ELEMENTS"]

#: the leading-dimension alignment cuBLAS's fast kernels need
ALIGN_BYTES = 16
#: smaller results are left alone (the padding's copies would cost more than they save)
MIN_ELEMENTS = 1 << 16

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
    """``t`` copied into zeros of extents ``rows`` x ``cols``, keeping its major order."""
    if t.stride(-2) == 1 and t.stride(-1) != 1:  # column-major: pad the transpose
        return _padded(t.mT, cols, rows).mT
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
        head = [_padded_bias(args[0], m, cols, mp, np_)] if first else []
        out = aten(*head, _padded(a, mp, kp), _padded(b, kp, np_), *args[first + 2:], **kwargs)
        return out[..., :m, :cols]

    return run
