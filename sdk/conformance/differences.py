"""What differs between a result and its reference, in words, computed on the CPU (never with the
device under test: a broken device would misreport its own mismatch, as "Mismatched elements:
0 / 4 ... Greatest relative difference: 0.5" did when the comparison ran on it).

    >>> import torch
    >>> what_differs(torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([1.0, 2.0, 3.0]))
    'NaN pattern: 1 NaN where the reference has none (at index (1,))'
    >>> what_differs(torch.tensor([1.0, 2.0]), torch.tensor([1, 2]))
    'dtype: torch.float32, the reference torch.int64'
    >>> what_differs(torch.tensor([1.0, 2.5, 3.0, 9.0]), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    'values: 2 of 4 elements differ, the first at index (1,): 2.5 where the reference has 2.0'
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["what_differs"]


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        out.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return tuple(reversed(out))


def _nan_pattern(a: torch.Tensor, e: torch.Tensor) -> str:
    if not (a.is_floating_point() or a.is_complex()):
        return ""
    na, ne = torch.isnan(a), torch.isnan(e)
    if torch.equal(na, ne):
        return ""
    extra, missing = na & ~ne, ne & ~na
    parts = []
    if extra.any():
        at = _index(int(extra.flatten().nonzero()[0]), a.shape)
        parts.append(f"{int(extra.sum())} NaN where the reference has none (at index {at})")
    if missing.any():
        at = _index(int(missing.flatten().nonzero()[0]), a.shape)
        parts.append(f"{int(missing.sum())} number(s) where the reference has NaN (at index {at})")
    return "NaN pattern: " + "; ".join(parts)


def what_differs(actual: Any, expected: Any, *, rtol: float | None = None, atol: float | None = None,
                 check_stride: bool = False) -> str:
    """The first difference between two tensors (device, dtype, shape, stride, NaN pattern, values),
    or "" when they are close. Both are compared on the CPU."""
    if not (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)):
        return "" if actual == expected else f"value: {actual!r}, the reference {expected!r}"
    if actual.device.type != expected.device.type and "cpu" not in (actual.device.type, expected.device.type):
        return f"device: {actual.device}, the reference {expected.device}"
    a, e = actual.detach().cpu(), expected.detach().cpu()
    if a.dtype != e.dtype:
        return f"dtype: {a.dtype}, the reference {e.dtype}"
    if a.shape != e.shape:
        return f"shape: {tuple(a.shape)}, the reference {tuple(e.shape)}"
    if check_stride and a.stride() != e.stride():
        return f"stride: {a.stride()}, the reference {e.stride()}"
    nan = _nan_pattern(a, e)
    if nan:
        return nan
    if a.dtype == torch.bool or not (a.is_floating_point() or a.is_complex()):
        close = a == e
    else:
        kw = {} if rtol is None else {"rtol": rtol, "atol": atol if atol is not None else 0.0}
        close = torch.isclose(a, e, equal_nan=True, **kw)
    if bool(close.all()):
        return ""
    wrong = (~close).flatten()
    first = int(wrong.nonzero()[0])
    at = _index(first, a.shape)
    return (f"values: {int(wrong.sum())} of {a.numel()} elements differ, the first at index {at}: "
            f"{a.flatten()[first].item()} where the reference has {e.flatten()[first].item()}")
