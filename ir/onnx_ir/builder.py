"""The ONNX graph under construction, and the values it is made of: what every converter of
:mod:`.ops` writes with (:class:`Builder`, :class:`Val`) and the torch-to-ONNX dtype table.

    >>> import torch
    >>> b = Builder()
    >>> b.op("Relu", [b.const([1.0, -1.0], torch.float32, (2,))]), [n.op_type for n in b.nodes]
    ('graph__1', ['Relu'])
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
import torch
import torch.fx as fx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["ONNX_DTYPES", "INT64_MAX", "INT64_MIN", "ExportError", "onnx_dtype", "Val", "static_dims", "val_of",
           "Builder"]

#: torch dtype -> ONNX ``TensorProto`` element type (a dtype not here has no ONNX tensor type)
ONNX_DTYPES = {torch.float32: TensorProto.FLOAT, torch.float64: TensorProto.DOUBLE, torch.float16: TensorProto.FLOAT16,
           torch.bfloat16: TensorProto.BFLOAT16, torch.int64: TensorProto.INT64, torch.int32: TensorProto.INT32,
           torch.int16: TensorProto.INT16, torch.int8: TensorProto.INT8, torch.uint8: TensorProto.UINT8,
           torch.bool: TensorProto.BOOL, torch.uint16: TensorProto.UINT16, torch.uint32: TensorProto.UINT32,
           torch.uint64: TensorProto.UINT64}


class ExportError(ValueError):
    """A node this exporter cannot express in ONNX (the message names it and why)."""


def onnx_dtype(dtype: torch.dtype) -> int:
    """The ``TensorProto`` element type of a torch dtype.

    >>> onnx_dtype(torch.float32) == TensorProto.FLOAT
    True
    """
    if dtype not in ONNX_DTYPES:
        raise ExportError(f"dtype {dtype} has no ONNX tensor type (supported: {sorted(map(str, ONNX_DTYPES))})")
    return ONNX_DTYPES[dtype]


class Val:
    """An ONNX value standing for an FX node's result: its name, dtype and shape (ints, or
    strings for symbolic sizes). A SymInt input is a 0-d int64 value with ``sym=True``."""

    __slots__ = ("name", "dtype", "shape", "sym")

    def __init__(self, name: str, dtype: torch.dtype, shape: tuple, sym: bool = False) -> None:
        self.name, self.dtype, self.shape, self.sym = name, dtype, shape, sym

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Val({self.name}: {self.dtype} {list(self.shape)})"


def static_dims(shape: Sequence[Any]) -> tuple:
    """ONNX dims of a torch shape: ints where known, the symbol's name (``"s77"``) where symbolic."""
    return tuple(int(s) if isinstance(s, int) or (hasattr(s, "node") and s.node.is_constant()) else str(s)
                 for s in shape)


def val_of(node: fx.Node, name: str | None = None) -> Val:
    """The :class:`Val` of an FX node from its metadata (``val`` or ``example_value``)."""
    v = node.meta.get("val", node.meta.get("example_value"))
    if isinstance(v, torch.Tensor):
        return Val(name or node.name, v.dtype, static_dims(v.shape))
    if isinstance(v, (torch.SymInt, int)):
        return Val(name or node.name, torch.int64, (), sym=True)
    raise ExportError(f"node {node.name} has no tensor or SymInt metadata (meta['val'] is {type(v).__name__})")


class Builder:
    """Collects the NodeProtos and initializers of one graph; names are unique and readable."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.owner = "graph"        # the FX node being converted: helpers are named after it
        self.doc = ""
        self._count = 0
        self._consts: dict[tuple, str] = {}
        self.named: set[str] = set()   # tuple elements already named after their getitem node

    def fresh(self) -> str:
        self._count += 1
        return f"{self.owner}__{self._count}"

    def op(self, op_type: str, inputs: Sequence[str | None], n_out: int = 1, *, domain: str = "",
           **attrs: Any) -> Any:
        """Emit one NodeProto; returns its output name (a list when ``n_out > 1``)."""
        outs = [self.fresh() for _ in range(n_out)]
        node = helper.make_node(op_type, [i or "" for i in inputs], outs, name=self.fresh(), domain=domain or None,
                                doc_string=self.doc, **attrs)
        self.nodes.append(node)
        return outs[0] if n_out == 1 else outs

    def const(self, value: Any, dtype: torch.dtype, shape: tuple | None = None) -> str:
        """An initializer holding ``value`` (a scalar, or a list with ``shape``) as ``dtype``; shared."""
        key = (repr(value), dtype, shape)
        if key not in self._consts:
            # numpy, not torch: the SDK may export inside a fake-tensor mode
            name = f"const_{len(self._consts)}"
            if dtype is torch.bfloat16:
                tensor = helper.make_tensor(name, TensorProto.BFLOAT16, shape or (), [float(v) for v in np.ravel(value)])
            else:
                arr = np.array(value, dtype=helper.tensor_dtype_to_np_dtype(onnx_dtype(dtype)))
                tensor = numpy_helper.from_array(arr if shape is None else arr.reshape(shape), name)
            self.initializers.append(tensor)
            self._consts[key] = tensor.name
        return self._consts[key]

    def ints(self, values: Sequence[Any]) -> str:
        """A 1-D int64 value of ``values``: Python ints, or :class:`Val` SymInt inputs (dynamic sizes)."""
        if all(isinstance(v, int) for v in values):
            return self.const(list(values), torch.int64, (len(values),))
        parts = [self.op("Unsqueeze", [v.name, self.const([0], torch.int64, (1,))]) if isinstance(v, Val)
                 else self.const([int(v)], torch.int64, (1,)) for v in values]
        return self.op("Concat", parts, axis=0)

    def scalar(self, v: Any, dtype: torch.dtype) -> str:
        """A 0-d value of ``dtype``: a constant from a Python number, or a :class:`Val` cast."""
        if isinstance(v, Val):
            return self.cast(v, dtype)
        return self.const(v, dtype)

    def cast(self, v: Val | str, dtype: torch.dtype, current: torch.dtype | None = None) -> str:
        if isinstance(v, Val):
            name, current = v.name, v.dtype
        else:
            name = v
        if current == dtype:
            return name
        return self.op("Cast", [name], to=onnx_dtype(dtype))


INT64_MAX = 2 ** 63 - 1
INT64_MIN = -2 ** 63
