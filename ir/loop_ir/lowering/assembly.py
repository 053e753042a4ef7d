"""Program assembly: the :class:`~torchvendor.ir.loop_ir.schema.LoopProgram` of an Inductor
graph whose scheduler has generated code (:func:`build_program`) — its buffers and views, its
kernels and extern kernels in the scheduler's order, its inputs and outputs — and the program of
a graph without operations, which Inductor returns uncompiled (:func:`passthrough_program`).

    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: (x,))
    >>> passthrough_program(gm, [torch.ones(2)], "inference", "cpu").outputs
    (BufferRef(name='x'),)
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import sympy
import torch

from ... import compat
from ...fx_view import op_key
from ..index_expr import format_expr
from ..schema import Buffer, BufferRef, ExternKernel, Kernel, LoopProgram, SizeExpr, TorchValue
from .recorder import convert_nodes, dtype_name
from .state import GraphState
from .unsupported import LoopIRUnsupported

__all__ = ["build_program", "passthrough_program"]


def build_program(graph: Any, state: GraphState) -> LoopProgram:
    """Assemble the LoopProgram of a GraphLowering whose scheduler has generated code."""
    return _Assembler(graph, state).run()


class _Assembler:
    def __init__(self, graph: Any, state: GraphState) -> None:
        self.g, self.state, self.ir = graph, state, compat.inductor().ir
        self.views: dict[str, Buffer] = {}
        self.extra_buffers: dict[str, Buffer] = {}

    def expr(self, e: Any) -> str:
        """The schema string of a sympy expression (size symbols renamed)."""
        return format_expr(e, self.state.rename)

    def device(self, node: Any) -> str:
        d = node.get_device() if hasattr(node, "get_device") else None
        return str(d.type) if d is not None else str(self.g.device_type)

    # buffers and views -------------------------------------------------------------------------
    def ref(self, node: Any) -> Any:
        """A BufferRef for a tensor IR node (views become alias buffers), or a plain value."""
        ir = self.ir
        if isinstance(node, (list, tuple)):
            return tuple(self.ref(n) for n in node)
        if isinstance(node, sympy.Basic):
            return SizeExpr(self.expr(node))
        if isinstance(node, ir.ShapeAsConstantBuffer):
            return SizeExpr(self.expr(node.expr))
        if isinstance(node, ir.NoneAsConstantBuffer):
            return None
        if isinstance(node, ir.IRNode):
            while isinstance(node, (ir.TensorBox, ir.StorageBox)):
                node = node.data
            if isinstance(node, ir.ReinterpretView):
                return BufferRef(self.view_buffer(node))
            if isinstance(node, ir.BaseView):
                raise LoopIRUnsupported(f"unrealized view {type(node).__name__} as an extern argument")
            return BufferRef(self.state.real_name(node.get_name()))
        return _plain(node, self.expr)

    def view_buffer(self, view: Any) -> str:
        base = self.state.real_name(view.data.get_name())
        layout = view.layout
        size, stride = tuple(map(self.expr, layout.size)), tuple(map(self.expr, layout.stride))
        off = self.expr(layout.offset)
        base_buf = self.buffer_for(base)
        if base_buf is not None and base_buf.view_of is None and (base_buf.size, base_buf.stride, base_buf.offset) == (size, stride, off):
            return base
        for b in self.views.values():
            if (b.view_of, b.size, b.stride, b.offset) == (base, size, stride, off):
                return b.name
        name = f"{base}_v{sum(1 for b in self.views.values() if b.view_of == base)}"
        self.views[name] = Buffer(name, dtype_name(layout.dtype), size, stride, str(layout.device.type), "intermediate", off, base)
        return name

    def buffer_for(self, name: str) -> Buffer | None:
        ir, g = self.ir, self.g
        if name in self.views:
            return self.views[name]
        if name in self.extra_buffers:
            return self.extra_buffers[name]
        if name in g.graph_inputs and not isinstance(g.graph_inputs[name], sympy.Basic):
            t = g.graph_inputs[name]
            return Buffer(name, dtype_name(t.get_dtype()), tuple(map(self.expr, t.get_size())),
                          tuple(map(self.expr, t.get_stride())), self.device(t), "input")
        if name in g.constants:
            c = g.constants[name]
            return Buffer(name, dtype_name(c.dtype), tuple(map(str, c.shape)), tuple(map(str, c.stride())),
                          str(c.device.type), "constant")
        try:
            buf = g.get_buffer(name)
        except Exception:
            buf = None
        layout = getattr(buf, "layout", None)
        if layout is None or isinstance(layout, (ir.NoneLayout, ir.MultiOutputLayout)):
            return None
        view_of, off = None, self.expr(getattr(layout, "offset", 0))
        if isinstance(layout, ir.NonOwningLayout):
            view = layout.view
            view_of = self.state.real_name(view.data.get_name())
            off = self.expr(view.get_layout().offset)
        return Buffer(name, dtype_name(layout.dtype), tuple(map(self.expr, layout.size)), tuple(map(self.expr, layout.stride)),
                      str(layout.device.type), "intermediate", off, view_of)

    # ops ---------------------------------------------------------------------------------------------
    def extern(self, node: Any) -> ExternKernel:
        ir = self.ir
        name = node.get_name()
        kernel = str(getattr(node, "python_kernel_name", "") or "")
        if isinstance(node, ir.MultiOutput):
            parent = node.inputs[0].get_name()
            idx = tuple(int(i) for _, i in node.indices)
            return ExternKernel(name, "getitem", (BufferRef(parent), *idx), (), (name,), "multi_output")
        if isinstance(node, (compat.inductor().Conditional, ir.WhileLoop, ir.InvokeSubgraph)) or isinstance(node, ir.UserDefinedTritonKernel):
            raise LoopIRUnsupported(f"{type(node).__name__} is not captured at loop level")
        tensor_refs = [self.ref(i) for i in node.inputs]
        if isinstance(node, ir.ScatterFallback):
            dim, *rest = node.constant_args
            target, index, *source = tensor_refs  # scatter_(target, dim, index, source or value)
            args, kwargs = [target, dim, index, *(source or rest)], {k: v for k, v in node.kwargs.items() if v is not None}
            if not kwargs.get("include_self", False) and "reduce" not in kwargs:
                kwargs.pop("include_self", None)
        elif isinstance(node, ir.IndexPutFallback):
            target, values, *index_tensors = tensor_refs  # index_put_(target, indices, values)
            tensors = iter(index_tensors)
            indices = tuple(None if i is None else next(tensors) for i in node.indices)
            args, kwargs = [target, indices, values, *node.constant_args], {}
        elif isinstance(node, ir.DeviceCopy):  # a copy across devices, for which Inductor names no op
            kernel = "prims.device_put.default"
            args, kwargs = [tensor_refs[0], node.get_device()], {}
        elif compat.is_fallback_kernel(node) and getattr(node, "unflatten_args", None) is not None:
            args, kwargs = node.unflatten_args(tensor_refs, [self.ref(a) if isinstance(a, sympy.Basic) else a
                                                             for a in node.constant_args])
            kwargs = {**kwargs, **node.kwargs}
        else:
            args, kwargs = [*tensor_refs, *node.constant_args], dict(node.kwargs)
        op = _op_name(getattr(node, "op_overload", None), kernel)
        mutated = tuple(self.state.real_name(n) for n in node.get_mutation_names())
        # a multi-output kernel's results are taken by the MultiOutput nodes after it
        writes_itself = not isinstance(getattr(node, "layout", None), (ir.MultiOutputLayout, ir.NoneLayout))
        outputs: tuple[str, ...] = (name,) if writes_itself else ()
        schema_kwargs = tuple((k, _plain(v, self.expr, self.ref)) for k, v in kwargs.items() if k != "out")
        schema_args = tuple(_plain(a, self.expr, self.ref) for a in args)
        return ExternKernel(name, op, schema_args, schema_kwargs, outputs, kernel, mutated)

    def run(self) -> LoopProgram:
        graph, state = self.g, self.state
        ops = self.operations()
        inputs = tuple(graph.graph_input_names)
        scalars = tuple((name, self.expr(graph.graph_inputs[name])) for name in inputs
                        if isinstance(graph.graph_inputs[name], sympy.Basic))
        outputs = tuple(self.ref(o) for o in graph.graph_outputs)
        buffers = self.buffers(inputs, ops, outputs)
        constants = tuple((n, tuple(graph.constants[n].detach().cpu().flatten().tolist()))
                          for n in buffers if n in graph.constants)
        kind = "backward" if graph.is_backward else "inference" if graph.is_inference else "forward"
        # base buffers before their views, otherwise first-use order
        ordered = [b for b in buffers.values() if b.view_of is None] + [b for b in buffers.values() if b.view_of]
        return LoopProgram(kind, str(graph.device_type), tuple(ordered), inputs, outputs, tuple(ops),
                           scalars, tuple(str(s) for s in state.rename.values()), self.output_fx_names(), constants)

    def operations(self) -> list[Kernel | ExternKernel]:
        """The kernels and extern kernels of the graph, in the scheduler's order."""
        ns, state = compat.inductor(), self.state
        ops: list[Kernel | ExternKernel] = []
        for node in self.g.scheduler.nodes:
            if isinstance(node, ns.NopKernelSchedulerNode):
                continue
            if isinstance(node, ns.ExternKernelSchedulerNode):
                ops.append(self.extern(node.node))
                continue
            if not isinstance(node, (ns.SchedulerNode, ns.FusedSchedulerNode)):
                raise LoopIRUnsupported(f"scheduler node {type(node).__name__} ({node.get_name()}) is not captured")
            snodes = list(node.get_nodes())
            if not all(isinstance(s, ns.SchedulerNode) for s in snodes):
                raise LoopIRUnsupported(f"{type(node).__name__} mixes templates or externs into a kernel")
            kernel = state.kernels.get(snodes[0].get_name())
            if kernel is None:
                kernel = convert_nodes(snodes, state, state.next_kernel_name())
            ops.append(kernel)
        return ops

    def buffers(self, inputs: Sequence[str], ops: Sequence[Kernel | ExternKernel],
                outputs: Sequence[Any]) -> dict[str, Buffer]:
        """Every buffer the program names, and the bases of its views, in first-use order."""
        graph = self.g
        names: dict[str, None] = dict.fromkeys(n for n in inputs if not isinstance(graph.graph_inputs[n], sympy.Basic))
        for op in ops:
            names.update(dict.fromkeys((*op.reads(), *op.writes())))
        output_names = [o.name for o in outputs if isinstance(o, BufferRef)]
        names.update(dict.fromkeys(output_names))
        # results of multi-output externs exist only as their MultiOutput parts
        multi = {o.name for o in ops if isinstance(o, ExternKernel) and not o.outputs and not o.mutated}
        buffers: dict[str, Buffer] = {}
        pending = list(names)
        while pending:
            name = pending.pop(0)
            if name in buffers:
                continue
            buf = self.buffer_for(name)
            if buf is None:
                if name in multi:
                    continue
                raise LoopIRUnsupported(f"buffer {name!r} has no layout the loop IR can describe")
            if buf.kind == "intermediate" and name in output_names:
                buf = dataclasses.replace(buf, kind="output")
            buffers[name] = buf
            if buf.view_of and buf.view_of not in buffers:
                pending.append(buf.view_of)
        return buffers

    def output_fx_names(self) -> tuple[str, ...]:
        """The FX names of the graph's outputs (how the ATen graph named them), if known."""
        module_graph = getattr(getattr(self.g, "module", None), "graph", None)
        if module_graph is None:
            return ()
        out_node = next(n for n in reversed(module_graph.nodes) if n.op == "output")
        if not isinstance(out_node.args[0], (list, tuple)):
            return ()
        return tuple(getattr(a, "name", "") for a in out_node.args[0])


def _op_name(op_overload: Any, kernel: str) -> str:
    """The schema's op name of an extern kernel: its functional ATen overload where known."""
    if op_overload is not None and not isinstance(op_overload, str):
        return _functional(op_key(op_overload))
    if kernel.startswith("aten.") and kernel.count(".") == 2:
        return _functional(kernel)
    short = kernel.rsplit(".", 1)[-1]
    if kernel.startswith(("extern_kernels.", "torch.ops.aten.", "aten.")) and hasattr(torch.ops.aten, short):
        return f"aten.{short}.default"
    if kernel:
        return kernel
    raise LoopIRUnsupported("extern kernel without an op name")


def _functional(key: str) -> str:
    """``aten.mm.out`` -> ``aten.mm.default``, ``aten.randint.low_out`` -> ``aten.randint.low``:
    extern kernels are described by their functional op (the interpreter copies the result)."""
    ns, name, overload = key.split(".") if key.count(".") == 2 else (key, "", "")
    if overload == "out":
        overload = "default"
    elif overload.endswith("_out"):
        overload = overload[: -len("_out")]
    else:
        return key
    packet = getattr(getattr(torch.ops, ns, None), name, None)
    return f"{ns}.{name}.{overload}" if packet is not None and hasattr(packet, overload) else key


def _plain(v: Any, expr: Callable[[Any], str], ref: Callable[[Any], Any] | None = None) -> Any:
    """Schema-native form of an extern argument."""
    if isinstance(v, (BufferRef, SizeExpr)) or v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, sympy.Basic):
        if v.is_Integer:
            return int(v)
        return SizeExpr(expr(v))
    if isinstance(v, (torch.dtype, torch.memory_format, torch.layout)):
        return TorchValue(str(v))
    if isinstance(v, torch.device):
        return TorchValue(f"device:{v}")
    if isinstance(v, (list, tuple)):
        return tuple(_plain(a, expr, ref) for a in v)
    if ref is not None:
        r = ref(v)
        if isinstance(r, (BufferRef, SizeExpr)) or r is None:
            return r
    raise LoopIRUnsupported(f"extern kernel argument of type {type(v).__name__} ({v!r})")


def passthrough_program(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], kind: str, device: str) -> LoopProgram:
    """The program of a graph without operations (Inductor returns such graphs uncompiled, e.g.
    a backward that only forwards a tangent): its outputs are its inputs (or None)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = gm.graph.output_node()
    rename: dict[Any, Any] = {}

    def sym(v: Any) -> Any:
        e = v.node.expr if isinstance(v, torch.SymInt) else sympy.Integer(int(v))
        for s in sorted(e.free_symbols, key=lambda s: s.name):
            rename.setdefault(s, sympy.Symbol(f"s{len(rename)}", integer=True, positive=True))
        return e

    buffers, scalars = [], []
    for node, ex in zip(placeholders, example_inputs):
        if isinstance(ex, torch.Tensor):
            size, stride = [sym(d) for d in ex.shape], [sym(d) for d in ex.stride()]
            buffers.append((node.name, ex, size, stride))
        else:
            scalars.append((node.name, sym(ex)))
    bufs = tuple(Buffer(n, dtype_name(ex.dtype), tuple(format_expr(e, rename) for e in size),
                        tuple(format_expr(e, rename) for e in stride), device, "input")
                 for n, ex, size, stride in buffers)
    outputs: list[Any] = []
    for a in out.args[0]:
        if a is None:
            outputs.append(None)
        elif isinstance(a, torch.fx.Node) and a.op == "placeholder":
            outputs.append(BufferRef(a.name) if a.name in {b.name for b in bufs} else
                           SizeExpr(format_expr(dict(scalars)[a.name], rename)))
        else:
            raise LoopIRUnsupported(f"graph output {a!r} of an operation-free graph")
    return LoopProgram(kind, device, bufs, tuple(n.name for n in placeholders), tuple(outputs), (),
                       tuple((n, format_expr(e, rename)) for n, e in scalars), tuple(str(s) for s in rename.values()),
                       tuple(getattr(a, "name", "") for a in out.args[0]))
