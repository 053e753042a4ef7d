"""ATen FX graph -> ``onnx.ModelProto``: the walk over the graph and the model it builds.

Each FX node becomes ONNX nodes through the converter registered for its operator in
:mod:`.ops`. Names map back to the FX graph: a graph input, a graph output and the value a node
computes are named after the FX node (``addmm``, ``getitem_1``), each NodeProto is named after the
FX node it came from (helpers get ``<node>__<k>``) and carries the node's op key in ``doc_string``.
A SymInt input (a dynamic size) becomes a 0-d int64 input; symbolic dimensions become
``dim_param`` strings (``"s77"``); Python constants become initializers.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import onnx
import torch
import torch.fx as fx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["OPSET", "IR_VERSION", "Val", "Builder", "to_onnx", "onnx_dtype", "ExportError"]

#: the default opset: LayerNormalization (17), Reduce* axes as inputs, Split's num_outputs and
#: the Bitwise ops (18); ONNX Runtime, TensorRT 10 and OpenVINO all read it
OPSET = 18
#: the IR version the models declare (onnx 1.13's, the first with opset 18)
IR_VERSION = 8

_DTYPES = {torch.float32: TensorProto.FLOAT, torch.float64: TensorProto.DOUBLE, torch.float16: TensorProto.FLOAT16,
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
    if dtype not in _DTYPES:
        raise ExportError(f"dtype {dtype} has no ONNX tensor type (supported: {sorted(map(str, _DTYPES))})")
    return _DTYPES[dtype]


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


def _dims(shape: Sequence[Any]) -> tuple:
    return tuple(int(s) if isinstance(s, int) or (hasattr(s, "node") and s.node.is_constant()) else str(s)
                 for s in shape)


def val_of(node: fx.Node, name: str | None = None) -> Val:
    """The :class:`Val` of an FX node from its metadata (``val`` or ``example_value``)."""
    v = node.meta.get("val", node.meta.get("example_value"))
    if isinstance(v, torch.Tensor):
        return Val(name or node.name, v.dtype, _dims(v.shape))
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


def _resolve(arg: Any, env: dict[fx.Node, Any]) -> Any:
    if isinstance(arg, fx.Node):
        return env[arg]
    if isinstance(arg, (list, tuple)):
        return type(arg)(_resolve(a, env) for a in arg)
    if isinstance(arg, dict):  # keyword arguments may be nodes too (an attention mask)
        return {k: _resolve(a, env) for k, a in arg.items()}
    return arg


def _rename(b: Builder, start: int, old: str, new: str) -> bool:
    """Give the value ``old``, made by nodes emitted since ``start``, the name ``new``."""
    for node in reversed(b.nodes[start:]):
        for i, out in enumerate(node.output):
            if out == old:
                node.output[i] = new
                node.name = new
                return True
    return False


def _value_info(v: Val) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(v.name, onnx_dtype(v.dtype), list(v.shape))


def to_onnx(gm: fx.GraphModule, *, opset: int = OPSET, name: str = "partition",
            converters: dict[str, Callable[..., Any]] | None = None) -> onnx.ModelProto:
    """The ONNX model of an ATen FX graph (one partition): inputs and outputs in the graph's order.

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> p = capture(lambda x: torch.relu(x) * 2, [torch.randn(3)], level="aten")
    >>> m = to_onnx(p.graphs()["inference"])
    >>> [n.op_type for n in m.graph.node], [i.name for i in m.graph.input]
    (['Relu', 'Mul'], ['arg0_1'])
    """
    from .ops import CONVERTERS, op_name

    table = converters or CONVERTERS
    b = Builder()
    env: dict[fx.Node, Any] = {}
    inputs: list[Val] = []
    outputs: list[onnx.ValueInfoProto] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = val_of(node)
            inputs.append(env[node])
        elif node.op == "call_function":
            key = op_name(node.target)
            if key == "operator.getitem":
                env[node] = _getitem(b, node, env)
                continue
            if key not in table:
                raise ExportError(f"node {node.name}: {key} has no ONNX converter")
            b.owner, b.doc, start = node.name, key, len(b.nodes)
            result = table[key](b, node, *_resolve(node.args, env), **_resolve(node.kwargs, env))
            env[node] = _name_result(b, node, start, result)
        elif node.op == "output":
            outputs = _outputs(b, node, env)
        else:
            raise ExportError(f"node {node.name}: {node.op} nodes are not exported (only placeholders and calls)")
    graph = helper.make_graph(b.nodes, name, [_value_info(v) for v in inputs], outputs, b.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="torchvendor", ir_version=IR_VERSION)
    return model


def _name_result(b: Builder, node: fx.Node, start: int, result: Any) -> Any:
    """The converter's value(s) as :class:`Val`; a single value is renamed to the FX node's name."""
    if isinstance(result, (list, tuple)):  # a multi-output op: getitem names each element
        vals = node.meta.get("val")
        return [None if r is None else Val(r, vals[i].dtype, _dims(vals[i].shape)) for i, r in enumerate(result)]
    v = val_of(node)
    if not _rename(b, start, result, node.name):  # the converter returned an existing value
        b.owner = node.name
        b.nodes.append(helper.make_node("Identity", [result], [node.name], name=node.name, doc_string=b.doc))
    return v


def _getitem(b: Builder, node: fx.Node, env: dict[fx.Node, Any]) -> Val:
    parts = env[node.args[0]]
    v = parts[node.args[1]]
    if v is None:
        raise ExportError(f"node {node.name}: element {node.args[1]} of {node.args[0].name} is not exported")
    # nothing has consumed the element yet (only getitem reaches it): name it after this node
    if v.name not in b.named and _rename(b, 0, v.name, node.name):
        v.name = node.name
        b.named.add(v.name)
    return v


def _outputs(b: Builder, node: fx.Node, env: dict[fx.Node, Any]) -> list[onnx.ValueInfoProto]:
    args = node.args[0]
    outs = list(args) if isinstance(args, (tuple, list)) else [args]
    seen: set[str] = set()
    produced = {out for n in b.nodes for out in n.output}
    infos = []
    for i, o in enumerate(outs):
        if not isinstance(o, fx.Node):
            raise ExportError(f"output {i} is {o!r}, not a node: a partition returns tensors")
        v = env[o]
        if v.sym:
            raise ExportError(f"output {i} ({o.name}) is a SymInt: a partition returns tensors")
        name = v.name
        if name not in produced or name in seen:  # an input or a repeated value: ONNX outputs are distinct
            name = f"{v.name}__out{i}"
            b.nodes.append(helper.make_node("Identity", [v.name], [name], name=name))
        seen.add(name)
        infos.append(_value_info(Val(name, v.dtype, v.shape)))
    return infos


INT64_MAX = 2 ** 63 - 1
INT64_MIN = -2 ** 63
