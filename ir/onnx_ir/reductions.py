"""More of the ATen -> ONNX table: reductions the model suite meets (``any``/``all``, full
``max``/``min``, ``linalg_vector_norm``, ``topk``) and group norm, which is one. Registered into
:data:`.ops.CONVERTERS` when the package is imported; the conventions are that module's."""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx as fx

from .builder import Builder, Val
from .ops import all_static, register, result_meta

__all__: list[str] = []


def _dims(x: Val, dim: Any) -> list[int] | None:
    """The reduced dimensions as a list (None: all of them)."""
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return None
    return [dim] if isinstance(dim, int) else list(dim)


def _count_true(b: Builder, node: fx.Node, x: Val, dim: Any, keepdim: bool, negate: bool) -> str:
    """How many elements of ``x`` are nonzero (zero when ``negate``) over ``dim``, as int64."""
    flag = x.name if x.dtype is torch.bool else b.op("Not", [b.op("Equal", [x.name, b.const(0, x.dtype)])])
    if negate:
        flag = b.op("Not", [flag])
    ones = b.cast(flag, torch.int64, torch.bool)
    if x.rank == 0:
        return ones
    dims = _dims(x, dim)
    axes = [b.ints(dims)] if dims is not None else []
    return b.op("ReduceSum", [ones, *axes], keepdims=int(bool(keepdim)))  # 0 over an empty dimension


def _any_all(is_all: bool) -> Any:
    def convert(b: Builder, node: fx.Node, x: Val, dim: Any = None, keepdim: bool = False) -> str:
        # any: some element is nonzero; all: no element is zero
        found = b.op("Greater", [_count_true(b, node, x, dim, keepdim, negate=is_all), b.const(0, torch.int64)])
        found = b.op("Not", [found]) if is_all else found
        return b.cast(found, result_meta(node).dtype, torch.bool)
    return convert


register("aten.any.default", "aten.any.dim", "aten.any.dims")(_any_all(False))
register("aten.all.default", "aten.all.dim", "aten.all.dims")(_any_all(True))


def _full_reduce(onnx_op: str) -> Any:
    def convert(b: Builder, node: fx.Node, x: Val) -> str:
        return x.name if x.rank == 0 else b.op(onnx_op, [x.name], keepdims=0)
    return convert


def _full_check(node: fx.Node) -> str | None:
    x = node.args[0].meta["val"]
    return "a bool input (ONNX's ReduceMax takes numbers)" if x.dtype is torch.bool else None


register("aten.max.default", check=_full_check)(_full_reduce("ReduceMax"))
register("aten.min.default", check=_full_check)(_full_reduce("ReduceMin"))


def _norm_check(node: fx.Node) -> str | None:
    x = node.args[0].meta["val"]
    order = node.args[1] if len(node.args) > 1 else node.kwargs.get("ord", 2)
    if not x.dtype.is_floating_point or not isinstance(order, (int, float)):
        return "a vector norm of a non-float tensor or of a tensor order"
    if order == 0 or (order != math.inf and order < 0 and order != -math.inf):
        return f"a vector norm of order {order}"
    return None


@register("aten.linalg_vector_norm.default", check=_norm_check)
def _vector_norm(b: Builder, node: fx.Node, x: Val, order: Any = 2, dim: Any = None, keepdim: bool = False, *,
                 dtype: Any = None) -> str:
    dt = result_meta(node).dtype
    xs = b.cast(x, dt)
    if x.rank == 0:
        return b.op("Abs", [xs])
    dims = _dims(x, dim)
    axes = [b.ints(dims)] if dims is not None else []
    keep = int(bool(keepdim))
    if order == 2:
        return b.op("ReduceL2", [xs, *axes], keepdims=keep)
    if order == 1:
        return b.op("ReduceL1", [xs, *axes], keepdims=keep)
    if math.isinf(order):
        return b.op("ReduceMax" if order > 0 else "ReduceMin", [b.op("Abs", [xs]), *axes], keepdims=keep)
    powered = b.op("Pow", [b.op("Abs", [xs]), b.const(float(order), dt)])
    return b.op("Pow", [b.op("ReduceSum", [powered, *axes], keepdims=keep), b.const(1.0 / order, dt)])


def _topk_check(node: fx.Node) -> str | None:
    x = node.args[0].meta["val"]
    k = node.args[1]
    is_sorted = node.args[4] if len(node.args) > 4 else node.kwargs.get("sorted", True)
    if not isinstance(k, int) or x.dim() == 0:
        return "top-k of a symbolic k or of a 0-d input"
    if not x.dtype.is_floating_point:
        return "top-k of an integer tensor (ties: torch and ONNX order equal values differently)"
    return None if is_sorted else "unsorted top-k (torch's order is its own)"


@register("aten.topk.default", check=_topk_check)
def _topk(b: Builder, node: fx.Node, x: Val, k: int, dim: int = -1, largest: bool = True,
          is_sorted: bool = True) -> list[str]:
    return b.op("TopK", [x.name, b.ints([k])], 2, axis=dim, largest=int(largest), sorted=1)


def _group_norm_check(node: fx.Node) -> str | None:
    x = node.args[0].meta["val"]
    if x.dtype not in (torch.float32, torch.float64):  # torch's kernel accumulates half types in float
        return "group norm of a half-precision input"
    return None if all_static(node.args[6]) else "symbolic groups"


@register("aten.native_group_norm.default", check=_group_norm_check)
def _group_norm(b: Builder, node: fx.Node, x: Val, w: Val | None, bias: Val | None, n: Any, c: Any, hw: Any,
                groups: int, eps: float) -> list[str]:
    # (x - mean) * rstd over each group of channels, then the per-channel affine; also the
    # (N, groups) mean and rstd torch saves for the backward
    dt = x.dtype
    grouped = b.op("Reshape", [x.name, b.ints([0, groups, -1])])
    axis = b.ints([2])
    mean = b.op("ReduceMean", [grouped, axis], keepdims=1)
    centered = b.op("Sub", [grouped, mean])
    var = b.op("ReduceMean", [b.op("Mul", [centered, centered]), axis], keepdims=1)
    rstd = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [var, b.const(float(eps), dt)])])])
    out = b.op("Reshape", [b.op("Mul", [centered, rstd]), b.op("Shape", [x.name])])
    channel = b.ints([1, -1] + [1] * (x.rank - 2))  # (C,) against (N, C, *)
    if w is not None:
        out = b.op("Mul", [out, b.op("Reshape", [w.name, channel])])
    if bias is not None:
        out = b.op("Add", [out, b.op("Reshape", [bias.name, channel])])
    squeeze = b.ints([2])
    return [out, b.op("Squeeze", [mean, squeeze]), b.op("Squeeze", [rstd, squeeze])]
