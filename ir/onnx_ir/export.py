"""ATen FX graph -> ``onnx.ModelProto``: the walk over the graph and the model it builds.

Each FX node becomes ONNX nodes through the converter registered for its operator in
:mod:`.ops` (written with :mod:`.builder`). Names map back to the FX graph: a graph input, a
graph output and the value a node computes are named after the FX node (``addmm``,
``getitem_1``), each NodeProto is named after the FX node it came from (helpers get
``<node>__<k>``) and carries the node's op key in ``doc_string``.
A SymInt input (a dynamic size) becomes a 0-d int64 input; symbolic dimensions become
``dim_param`` strings (``"s77"``); Python constants become initializers.
"""
from __future__ import annotations

from typing import Any, Callable

import onnx
import torch.fx as fx
from onnx import helper

from .builder import Builder, ExportError, Val, onnx_dtype, static_dims, val_of
from .ops import CONVERTERS, op_name

__all__ = ["OPSET", "IR_VERSION", "to_onnx"]

#: the default opset: LayerNormalization (17), Reduce* axes as inputs, Split's num_outputs and
#: the Bitwise ops (18); ONNX Runtime, TensorRT 10 and OpenVINO all read it
OPSET = 18
#: the IR version the models declare (onnx 1.13's, the first with opset 18)
IR_VERSION = 8


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
    >>> p = capture(lambda x: x.relu() * 2, [torch.randn(3)], level="aten")
    >>> m = to_onnx(p.graphs()["inference"])
    >>> [n.op_type for n in m.graph.node], [i.name for i in m.graph.input]
    (['Relu', 'Mul'], ['arg0_1'])
    """
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
        return [None if r is None else Val(r, vals[i].dtype, static_dims(vals[i].shape)) for i, r in enumerate(result)]
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
