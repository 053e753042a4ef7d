"""Inductor's decomposition table as the loop level lowers with it (:func:`inductor_decompositions`):
the graph a backend lowers with :func:`~torchvendor.ir.loop_ir.lower_graph` must be decomposed
with it.

    >>> import torch
    >>> torch.ops.aten.var_mean.correction in inductor_decompositions()
    True
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from ... import compat

__all__ = ["inductor_decompositions"]


def inductor_decompositions() -> dict[Any, Any]:
    """Inductor's decomposition table, for ``aten_ir_hook(decompositions=...)`` before :func:`lower_graph`,
    with one numerics fix: ``var_mean`` over an empty dimension gives NaN for both results, as
    eager does (Inductor folds the empty Welford reduction to a mean of 0), and one device fix:
    ``masked_scatter`` asks the device's Inductor backend for a feature, but a torchvendor
    device's Scheduling is registered only while its graph is lowered, after decomposition, so
    the question asserted; there it gets the answer of the LOOP schedulings (which lack the
    feature): no decomposition, Inductor's own ``masked_scatter`` lowering.

    >>> import torch
    >>> table = inductor_decompositions()
    >>> table[torch.ops.aten.var_mean.correction](torch.ones(3, 0), [1])
    (tensor([nan, nan, nan]), tensor([nan, nan, nan]))
    """
    table = compat.select_decomp_table()
    table[torch.ops.aten.var_mean.correction] = _var_mean_of_empty
    masked_scatter = table.get(torch.ops.aten.masked_scatter.default)
    if masked_scatter is not None:
        table[torch.ops.aten.masked_scatter.default] = functools.partial(_masked_scatter, masked_scatter)
    return table


def _masked_scatter(inductor_decomposition: Any, self: torch.Tensor, mask: torch.Tensor,
                    source: torch.Tensor) -> Any:
    """Inductor's decomposition where Inductor knows the device's backend; NotImplemented (keep
    the operator) for a device whose LOOP Scheduling is not registered yet."""
    if compat.has_device_scheduling(self.device.type):
        return inductor_decomposition(self, mask, source)
    return NotImplemented


def _var_mean_of_empty(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    """NaN results for a reduction over no elements (statically known); NotImplemented, i.e.
    Inductor's own lowering, otherwise."""
    dims = range(x.dim()) if dim is None or (isinstance(dim, (list, tuple)) and not dim) else \
        [d % max(x.dim(), 1) for d in ([dim] if isinstance(dim, int) else dim)]
    reduced = [x.shape[d] for d in dims] if x.dim() else [1]
    if not any(isinstance(n, int) and n == 0 for n in reduced):  # a symbolic size is never 0 (0 is specialized)
        return NotImplemented
    shape = [1 if d in dims else n for d, n in enumerate(x.shape)] if keepdim else \
        [n for d, n in enumerate(x.shape) if d not in dims]
    nan = torch.full(shape, float("nan"), dtype=x.dtype, device=x.device)
    return nan, nan.clone()
