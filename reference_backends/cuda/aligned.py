"""Matmuls whose leading dimensions cuBLAS can use at full speed.

cuBLAS picks its fast kernels only when every matrix's leading dimension is a multiple of 16
bytes; a vocabulary of 50,257 (GPT-2) or 30,522 (BERT) makes the LM head's output, and in
training its gradient's operands, odd, and cuBLAS falls back to ``align1`` kernels several times
slower (GPT-2 124M at 8 x 512 in bf16 on an H200: 3.4 ms for the LM head against 0.43 ms for
Inductor, which pads such matmuls in its ``pad_mm`` pass). :func:`aligned_matmul` does the same
for an extern kernel: a misaligned operand is copied into a padded layout, and the result is
written into a padded buffer and handed back as a view of it (the runner copies it into the
program's layout where that differs). The padding copies move the matrix once; the slow kernel
reads it many times.

    >>> import torch
    >>> mm = aligned_matmul(torch.ops.aten.mm.default)
    >>> a, b = torch.randn(300, 64, dtype=torch.bfloat16), torch.randn(64, 1001, dtype=torch.bfloat16)
    >>> out = mm(a, b)
    >>> out.stride(), torch.equal(out, torch.ops.aten.mm.default(a, b))
    ((1008, 1), True)
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
#: operator -> (index of the first matrix operand, its out= overload)
_MATMULS: dict[Any, tuple[int, Any]] = {
    _aten.mm.default: (0, _aten.mm.out),
    _aten.bmm.default: (0, _aten.bmm.out),
    _aten.addmm.default: (1, _aten.addmm.out),
    _aten.baddbmm.default: (1, _aten.baddbmm.out),
}


def _lanes(t: torch.Tensor) -> int:
    return max(1, ALIGN_BYTES // t.element_size())


def _is_aligned(t: torch.Tensor) -> bool:
    """Row- or column-major in its last two dimensions with a leading dimension cuBLAS aligns."""
    n = _lanes(t)
    (r, c), (sr, sc) = t.shape[-2:], t.stride()[-2:]
    return (sc == 1 and (sr % n == 0 or r == 1)) or (sr == 1 and (sc % n == 0 or c == 1))


def _padded(t: torch.Tensor) -> torch.Tensor:
    """``t`` copied into a layout whose leading dimension is padded, keeping its major order."""
    if t.stride(-2) == 1 and t.stride(-1) != 1:  # column-major: pad the transpose's rows
        return _padded(t.mT).mT
    n = _lanes(t)
    cols = t.shape[-1]
    out = t.new_empty((*t.shape[:-1], -(-cols // n) * n))[..., :cols]
    return out.copy_(t)


def aligned_matmul(aten: Callable[..., Any]) -> Callable[..., Any]:
    """``aten`` itself unless it is a matmul (``mm``, ``bmm``, ``addmm``, ``baddbmm``); then the
    same operator run on 16-byte-aligned operands into a 16-byte-aligned result (see the module
    docstring). Results of fewer than :data:`MIN_ELEMENTS` elements, integer matmuls and calls
    with keyword arguments other than ``beta``/``alpha`` run ``aten`` unchanged."""
    if aten not in _MATMULS:
        return aten
    first, out_op = _MATMULS[aten]

    def run(*args: Any, **kwargs: Any) -> Any:
        a, b = args[first], args[first + 1]
        if (set(kwargs) - {"beta", "alpha"} or not a.is_floating_point() or a.dim() != b.dim()
                or a.shape[-2] * b.shape[-1] * (a.shape[0] if a.dim() == 3 else 1) < MIN_ELEMENTS):
            return aten(*args, **kwargs)
        n = _lanes(a)
        if _is_aligned(a) and _is_aligned(b) and b.shape[-1] % n == 0:
            return aten(*args, **kwargs)
        a, b = (x if _is_aligned(x) else _padded(x) for x in (a, b))
        rows, cols = a.shape[-2], b.shape[-1]
        out = a.new_empty((*a.shape[:-2], rows, -(-cols // n) * n))[..., :cols]
        return out_op(*args[:first], a, b, *args[first + 2:], **kwargs, out=out)

    return run
