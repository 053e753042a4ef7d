"""GraphView adapter for ONNX graphs (``onnx.GraphProto``), readable and rewritable.

Nodes, in this order: one ``"input"`` node per graph input that is not an initializer (op key
``"placeholder"``), one ``"constant"`` node per initializer (op key ``"initializer"``), one node
per ``NodeProto`` in graph order (op key ``op_type``, prefixed by the domain when it is not the
default one, e.g. ``"com.microsoft.FusedMatMul"``; a ``Constant`` NodeProto has kind
``"constant"``), and one ``"output"`` node consuming the graph outputs.

- ``inputs(n)``: the producers of the values ``n`` consumes, in order (optional empty inputs
  skipped); ``users(n)``: the distinct consumers of any of ``n``'s outputs;
- ``attrs(n)``: AttributeProtos as Python values (tensors as numpy arrays); an initializer has
  ``{"value": ndarray}``;
- ``meta(n)``: ``dtype`` (``"float32"``, ``"int64"``...) and ``shape`` (ints, or strings for
  symbolic dims, None where unknown) of the node's first output, from graph inputs/outputs,
  ``value_info`` and initializers, where present; ``"outputs"`` lists the output value names.

Rewrites edit the GraphProto in place, so ``onnx.checker.check_model`` applies right after.
``onnx`` is imported only by this module.

Example::

    >>> from onnx import helper, TensorProto
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    >>> v = OnnxView(g)
    >>> [v.op(n) for n in v.nodes()]
    ['placeholder', 'Relu', 'output']
"""
from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .graph_view import NodeKind

__all__ = ["OnnxView", "OnnxNode"]

_DEFAULT_DOMAINS = ("", "ai.onnx")


class OnnxNode:
    """A node of :class:`OnnxView`: a graph input, an initializer, a NodeProto or the output.
    Identity is the object; ``proto`` is the ValueInfoProto / TensorProto / NodeProto."""

    __slots__ = ("kind", "proto", "label")

    def __init__(self, kind: NodeKind, proto: Any, label: str) -> None:
        self.kind, self.proto, self.label = kind, proto, label

    @property
    def outputs(self) -> list[str]:
        """The value names this node produces."""
        if self.kind == "output":
            return []
        if isinstance(self.proto, onnx.NodeProto):
            return [o for o in self.proto.output if o]
        return [self.proto.name]

    def __repr__(self) -> str:
        return f"%{self.label}"


def _dtype_name(elem_type: int) -> str | None:
    if not elem_type:
        return None
    try:
        return str(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _value_meta(info: onnx.ValueInfoProto) -> dict[str, Any]:
    t = info.type.tensor_type if info.type.HasField("tensor_type") else None
    if t is None:
        return {}
    out: dict[str, Any] = {}
    if (d := _dtype_name(t.elem_type)) is not None:
        out["dtype"] = d
    if t.HasField("shape"):
        out["shape"] = tuple(dim.dim_value if dim.HasField("dim_value") else (dim.dim_param or None)
                             for dim in t.shape.dim)
    return out


class OnnxView:
    """A :class:`~torchvendor.ir.graph_view.MutableGraphView` over an ``onnx.GraphProto``."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        if not isinstance(graph, onnx.GraphProto):
            raise TypeError(f"OnnxView needs an onnx.GraphProto (model.graph), got {type(graph).__name__}")
        self.graph = graph
        init_names = {t.name for t in graph.initializer}
        self._inputs = [OnnxNode("input", i, i.name) for i in graph.input if i.name not in init_names]
        self._inits = [OnnxNode("constant", t, t.name) for t in graph.initializer]
        self._ops: list[OnnxNode] = []
        self._labels: set[str] = {n.label for n in self._inputs + self._inits} | {"output"}
        for proto in graph.node:
            self._ops.append(OnnxNode(self._op_kind(proto), proto, self._fresh(proto.name or proto.op_type)))
        self._output = OnnxNode("output", None, "output")
        self._fresh_values = itertools.count()
        self._index()

    # -- bookkeeping -----------------------------------------------------------------------------
    @staticmethod
    def _op_kind(proto: onnx.NodeProto) -> NodeKind:
        return "constant" if proto.op_type == "Constant" and proto.domain in _DEFAULT_DOMAINS and not proto.input else "op"

    def _fresh(self, hint: str) -> str:
        label, i = hint, 1
        while label in self._labels:
            label, i = f"{hint}_{i}", i + 1
        self._labels.add(label)
        return label

    def _index(self) -> None:
        self._producer: dict[str, OnnxNode] = {}
        for node in self._inputs + self._inits + self._ops:
            for value in node.outputs:
                self._producer[value] = node
        self._consumers: dict[str, dict[OnnxNode, None]] = {}
        for node in self._ops + [self._output]:
            for value in self._consumed(node):
                self._consumers.setdefault(value, {})[node] = None
        self._meta: dict[str, dict[str, Any]] = {}
        for info in itertools.chain(self.graph.input, self.graph.value_info, self.graph.output):
            self._meta.setdefault(info.name, _value_meta(info))
        for t in self.graph.initializer:
            self._meta[t.name] = {"dtype": _dtype_name(t.data_type), "shape": tuple(t.dims)}

    def _consumed(self, node: OnnxNode) -> list[str]:
        if node.kind == "output":
            return [o.name for o in self.graph.output]
        if isinstance(node.proto, onnx.NodeProto):
            return [i for i in node.proto.input if i]
        return []

    def _value_of(self, node: OnnxNode) -> str:
        outs = node.outputs
        if not outs:
            raise ValueError(f"{node!r} produces no value")
        return outs[0]

    def _sync(self) -> None:
        """Rewrite graph.node from the op list, and re-point each wrapper at its stored proto."""
        protos = [onnx.NodeProto() for _ in self._ops]
        for p, node in zip(protos, self._ops):
            p.CopyFrom(node.proto)
        del self.graph.node[:]
        self.graph.node.extend(protos)
        for node, stored in zip(self._ops, self.graph.node):
            node.proto = stored
        by_name = {i.name: i for i in self.graph.input} | {t.name: t for t in self.graph.initializer}
        for node in self._inputs + self._inits:
            node.proto = by_name[node.label]
        self._index()

    # -- GraphView ---------------------------------------------------------------------------------
    def nodes(self) -> list[OnnxNode]:
        return self._inputs + self._inits + self._ops + [self._output]

    def inputs(self, node: OnnxNode) -> list[OnnxNode]:
        out = []
        for value in self._consumed(node):
            if value not in self._producer:
                raise KeyError(f"value {value!r} consumed by {node!r} has no producer in graph {self.graph.name!r} "
                               f"(an outer-scope value of a subgraph?)")
            out.append(self._producer[value])
        return out

    def users(self, node: OnnxNode) -> list[OnnxNode]:
        users: dict[OnnxNode, None] = {}
        for value in node.outputs:
            users.update(self._consumers.get(value, {}))
        return list(users)

    def op(self, node: OnnxNode) -> str:
        if node.kind == "input":
            return "placeholder"
        if node.kind == "output":
            return "output"
        if isinstance(node.proto, onnx.TensorProto):
            return "initializer"
        p = node.proto
        return p.op_type if p.domain in _DEFAULT_DOMAINS else f"{p.domain}.{p.op_type}"

    def kind(self, node: OnnxNode) -> NodeKind:
        return node.kind

    def attrs(self, node: OnnxNode) -> dict[str, Any]:
        if isinstance(node.proto, onnx.TensorProto):
            return {"value": numpy_helper.to_array(node.proto)}
        if not isinstance(node.proto, onnx.NodeProto):
            return {}
        out = {}
        for a in node.proto.attribute:
            value = helper.get_attribute_value(a)
            out[a.name] = numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value
        return out

    def meta(self, node: OnnxNode) -> dict[str, Any]:
        outs = node.outputs
        out = dict(self._meta.get(outs[0], {})) if outs else {}
        if outs:
            out["outputs"] = outs
        return out

    def name(self, node: OnnxNode) -> str:
        return node.label

    # -- MutableGraphView -----------------------------------------------------------------------
    def create(self, op: str, inputs: Sequence[OnnxNode], attrs: Mapping[str, Any] | None = None, *,
               before: OnnxNode, meta: Mapping[str, Any] | None = None) -> OnnxNode:
        """Insert a NodeProto ``op`` (``"Domain.OpType"`` for other domains) before ``before``.

        It consumes the first output of each input node and produces one fresh value; ``meta``
        with ``dtype``/``shape`` adds a ``value_info`` entry for it.
        """
        domain, _, op_type = op.rpartition(".")
        if before is not self._output and before not in self._ops:
            raise ValueError(f"create(..., before={before!r}): insert before an op node or the output node")
        label = self._fresh(op_type.lower())
        value = f"{label}_out"
        while value in self._producer:
            value = f"{label}_out{next(self._fresh_values)}"
        proto = helper.make_node(op_type, [self._value_of(i) for i in inputs], [value], name=label,
                                 domain=domain or None, **dict(attrs or {}))
        node = OnnxNode("op", proto, label)
        position = len(self._ops) if before is self._output else self._ops.index(before)
        self._ops.insert(position, node)
        if meta and "dtype" in meta:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(meta["dtype"]))
            self.graph.value_info.append(helper.make_tensor_value_info(value, elem, meta.get("shape")))
        self._sync()
        return node

    def replace_uses(self, old: OnnxNode, new: OnnxNode) -> None:
        """Make every consumer of ``old``'s outputs (graph outputs included) use ``new``'s first output."""
        old_values, new_value = set(old.outputs), self._value_of(new)
        for node in self._ops:
            for i, value in enumerate(node.proto.input):
                if value in old_values:
                    node.proto.input[i] = new_value
        for info in self.graph.output:
            if info.name in old_values:
                info.name = new_value
        self._sync()

    def erase(self, node: OnnxNode) -> None:
        """Remove a node without users (an op, an unused initializer or graph input)."""
        if node.kind == "output":
            raise ValueError("cannot erase the output node")
        users = self.users(node)
        if users:
            raise ValueError(f"cannot erase {node!r}: still used by {users}")
        if node in self._ops:
            self._ops.remove(node)
        elif node in self._inits:
            self._inits.remove(node)
            keep = [t for t in self.graph.initializer if t.name != node.proto.name]
            del self.graph.initializer[:]
            self.graph.initializer.extend(keep)
        else:
            self._inputs.remove(node)
            keep = [i for i in self.graph.input if i.name != node.proto.name]
            del self.graph.input[:]
            self.graph.input.extend(keep)
        self._labels.discard(node.label)
        self._sync()
