"""Extraction of the loop IR from Inductor, after lowering and fusion, through its official
out-of-tree device hook.

For each graph Inductor compiles (inference, forward, backward), a custom ``Scheduling``
registered with ``register_backend_for_device`` receives the fused scheduler nodes, replays each
node's ``LoopBody`` on a recording ops handler (Inductor's own codegen works this way) and turns
it into a :class:`~torchvendor.ir.loop_ir.schema.Kernel`. A wrapper-codegen subclass assembles
the whole :class:`LoopProgram` (buffers, kernels, extern kernels, inputs, outputs) when Inductor
generates the wrapper, and hands it to the active scope's sink. Lowering for a backend
(``run=False``) stops there: no wrapper is generated. A capture whose compiled function runs
(``run=True``) also emits, per kernel, a wrapper line calling the reference interpreter.

The override is scoped to our own compiles (:func:`_capture_scope`, used by the hooks of
:mod:`.capture`): the previous registration of the device is put back after each compile, and a
custom pass whose ``uuid()`` names this module keys the FX-graph cache. Our compiles bypass the
FX-graph and AOTAutograd caches (a cache hit would skip lowering, so there would be nothing to
record).

Example::

    >>> import torch
    >>> from torchvendor.ir.loop_ir import loop_backend
    >>> programs = []
    >>> f = torch.compile(lambda x: (x * 2).sum(-1), backend=loop_backend(on_program=programs.append))
    >>> _ = f(torch.ones(4, 8))
    >>> [k.kind for k in programs[0].kernels]
    ['reduction']
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import weakref
from typing import Any, Callable, Iterator, Sequence

import sympy
import torch

from .. import compat
from .index_expr import format_expr
from .invariants import validate
from .schema import (SCHEMA_VERSION, Buffer, BufferRef, ExternKernel, Kernel, LoopNest, LoopProgram, SizeExpr,
                     Stmt, TorchValue)

__all__ = ["LoopIRUnsupported", "EXTRACTOR_VERSION", "build_program", "convert_nodes"]

#: Part of the FX-graph cache key of everything compiled under our Scheduling.
EXTRACTOR_VERSION = f"torchvendor.loop_ir/{SCHEMA_VERSION}.1"


class LoopIRUnsupported(NotImplementedError):
    """Inductor produced something the loop IR cannot express (the message says what)."""


def _dtype(d: torch.dtype | None) -> str | None:
    return None if d is None else str(d).removeprefix("torch.")


# ---- recording ops handler -----------------------------------------------------------------------
class _Value:
    """An SSA value while replaying a LoopBody (``dtype`` feeds Inductor's dtype propagation)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: torch.dtype | None) -> None:
        self.name, self.dtype = name, dtype

    def __repr__(self) -> str:
        return self.name


def _attr_value(v: Any, rename: dict[Any, Any]) -> Any:
    if isinstance(v, torch.dtype):
        return _dtype(v)
    if isinstance(v, sympy.Basic):
        return format_expr(v, rename)
    if isinstance(v, (tuple, list)):
        return tuple(_attr_value(x, rename) for x in v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise LoopIRUnsupported(f"loop IR cannot record an ops.* operand of type {type(v).__name__}: {v!r}")


class _Recorder(compat.inductor().DefaultHandler):  # type: ignore[misc]
    """Replays a LoopBody into a list of :class:`Stmt` (one recorder per kernel)."""

    def __init__(self, state: "_GraphState", counter: Iterator[int], indirect: Iterator[int]) -> None:
        self.state, self.counter, self.indirect = state, counter, indirect
        self.stmts: list[Stmt] = []
        ns = compat.inductor()
        self._dtypes = ns.DtypePropagationOpsHandler() if ns.DtypePropagationOpsHandler else None

    # -- helpers ---------------------------------------------------------------------------------
    def _infer(self, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> torch.dtype | None:
        if self._dtypes is None:
            return None
        try:
            out = getattr(self._dtypes, name)(*args, **kwargs)
        except Exception:  # dtype metadata is best effort
            return None
        return out if isinstance(out, torch.dtype) else None

    def _emit(self, op: str, args: Sequence[_Value], attrs: Sequence[tuple[str, Any]],
              dtype: torch.dtype | None, body: Sequence[Stmt] = (), define: bool = True) -> _Value | None:
        name = f"t{next(self.counter)}" if define else None
        self.stmts.append(Stmt(name, op, tuple(a.name for a in args), tuple(attrs), _dtype(dtype), tuple(body)))
        return _Value(name, dtype) if name else None

    def _expr(self, e: Any) -> str:
        return format_expr(e, self.state.rename)

    def _real(self, name: str) -> str:
        return self.state.real_name(name)

    # -- generic ops ------------------------------------------------------------------------------
    def _default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if name in _UNSUPPORTED_OPS:
            raise LoopIRUnsupported(f"ops.{name} is not expressible in the loop IR yet")
        vals: list[_Value] = []
        attrs: list[tuple[str, Any]] = []
        for i, a in enumerate(args):
            if isinstance(a, _Value):
                vals.append(a)
            else:
                attrs.append((f"arg{i}", _attr_value(a, self.state.rename)))
        for k, v in kwargs.items():
            if isinstance(v, _Value):
                raise LoopIRUnsupported(f"ops.{name}: SSA value passed as keyword {k!r}")
            attrs.append((k, _attr_value(v, self.state.rename)))
        if len(vals) == len(args) and not kwargs:
            attrs = []
        elif vals:
            attrs.append(("nargs", len(args)))
        return self._emit(name, vals, attrs, self._infer(name, args, kwargs))

    # -- ops with a meaning the schema names ------------------------------------------------------
    def load(self, name: str, index: sympy.Expr) -> _Value:
        return self._emit("load", (), (("buffer", self._real(name)), ("index", self._expr(index))),
                          self.state.dtype_of(name))

    def store(self, name: str, index: sympy.Expr, value: _Value, mode: Any = None) -> None:
        if value is None:  # the body of a side effect only (an assertion): its buffer holds nothing
            return
        self._emit("store", (value,), (("buffer", self._real(name)), ("index", self._expr(index)),
                                       ("mode", mode)), None, define=False)

    def store_reduction(self, name: str, index: sympy.Expr, value: _Value) -> None:
        self._emit("store_reduction", (value,), (("buffer", self._real(name)), ("index", self._expr(index))),
                   None, define=False)

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value: Any) -> Any:
        values = tuple(value) if isinstance(value, (tuple, list)) else (value,)
        n_out = _reduction_outputs(reduction_type)
        out = self._emit("reduction", values, (("kind", reduction_type), ("dtype", _dtype(dtype)),
                                               ("src_dtype", _dtype(src_dtype))),
                         dtype if n_out == 1 else None)
        if n_out == 1:
            return out
        return tuple(self._emit("getitem", (out,), (("index", k),), dtype) for k in range(n_out))

    def constant(self, value: Any, dtype: torch.dtype) -> _Value:
        return self._emit("constant", (), (("value", _attr_value(value, {})), ("dtype", _dtype(dtype))), dtype)

    def load_seed(self, name: str, offset: Any) -> _Value:
        args = (offset,) if isinstance(offset, _Value) else ()
        attrs = (("buffer", self._real(name)),) + (() if args else (("offset", _attr_value(offset, self.state.rename)),))
        return self._emit("load_seed", args, attrs, torch.int64)

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> _Value:
        return self._emit("index_expr", (), (("expr", self._expr(expr)), ("dtype", _dtype(dtype))), dtype)

    def to_dtype(self, x: _Value, dtype: torch.dtype, src_dtype: torch.dtype | None = None,
                 use_compute_types: bool = True) -> _Value:
        return self._emit("to_dtype", (x,), (("dtype", _dtype(dtype)), ("src_dtype", _dtype(src_dtype))), dtype)

    def to_dtype_bitcast(self, x: _Value, dtype: torch.dtype, src_dtype: torch.dtype) -> _Value:
        return self._emit("to_dtype_bitcast", (x,), (("dtype", _dtype(dtype)), ("src_dtype", _dtype(src_dtype))),
                          dtype)

    def indirect_indexing(self, x: _Value, size: Any, check: bool = True, wrap_neg: bool = True) -> sympy.Symbol:
        name = f"ind{next(self.indirect)}"
        self.stmts.append(Stmt(name, "indirect_indexing", (x.name,),
                               (("size", self._expr(size)), ("check", bool(check)), ("wrap_neg", bool(wrap_neg))),
                               "int64"))
        return sympy.Symbol(name, integer=True)

    def check_bounds(self, expr: sympy.Expr, size: sympy.Expr, lower: bool, upper: bool) -> None:
        self._emit("check_bounds", (), (("expr", self._expr(expr)), ("size", self._expr(size)),
                                        ("lower", bool(lower)), ("upper", bool(upper))), None, define=False)

    def device_assert_async(self, cond: _Value, msg: str) -> None:
        """``torch._assert_async`` (``one_hot``'s class check): a ``device_assert`` statement that
        fails the kernel with ``msg`` where ``cond`` is false."""
        self._emit("device_assert", (cond,), (("msg", str(msg)),), None, define=False)

    def masked(self, mask: _Value, body: Callable[[], Any], other: Any) -> _Value:
        sub = _Recorder(self.state, self.counter, self.indirect)
        with compat.inductor().V.set_ops_handler(sub):
            result = body()
        if not isinstance(result, _Value):
            raise LoopIRUnsupported(f"masked sub-block returned {result!r}")
        sub.stmts.append(Stmt(None, "yield", (result.name,)))
        return self._emit("masked", (mask,), (("other", _attr_value(other, {})),), result.dtype, sub.stmts)

    def frexp(self, x: _Value) -> tuple[_Value, _Value]:
        out = self._emit("frexp", (x,), (), None)
        return (self._emit("getitem", (out,), (("index", 0),), x.dtype),
                self._emit("getitem", (out,), (("index", 1),), torch.int32))

    def scan(self, *args: Any, **kwargs: Any) -> Any:
        raise LoopIRUnsupported("ops.scan (cumsum/cumprod lowered to scans) is not expressible in the loop IR yet")

    def sort(self, *args: Any, **kwargs: Any) -> Any:
        raise LoopIRUnsupported("ops.sort is not expressible in the loop IR yet")

    def bucketize(self, *args: Any, **kwargs: Any) -> Any:
        raise LoopIRUnsupported("ops.bucketize is not expressible in the loop IR yet")

    def output(self, *args: Any) -> None:  # the LoopBody's root block returns its stores' None
        return None


_UNSUPPORTED_OPS = {"partial_accumulate", "inline_asm_elementwise", "dot", "halide_clamp"}


def _reduction_outputs(kind: str) -> int:
    return 3 if kind in ("welford_reduce", "welford_combine") else 2 if kind == "online_softmax_reduce" else 1


# ---- per-graph state -----------------------------------------------------------------------------
class _GraphState:
    """What the Scheduling and the wrapper share while one Inductor graph is generated."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.kernels: dict[str, Kernel] = {}     # first scheduler node name -> kernel
        self.kernel_counter = itertools.count()
        self.rename = self._size_symbol_names(graph)

    @staticmethod
    def _size_symbol_names(graph: Any) -> dict[Any, Any]:
        """Size symbols renamed s0, s1, ... in the order they appear in the graph's inputs."""
        order: dict[Any, None] = {}

        def visit(e: Any) -> None:
            if isinstance(e, sympy.Basic):
                for s in sorted(e.free_symbols, key=lambda s: s.name):
                    order.setdefault(s, None)

        for name in graph.graph_input_names:
            value = graph.graph_inputs[name]
            if isinstance(value, sympy.Basic):
                visit(value)
            elif hasattr(value, "get_size"):
                for e in (*value.get_size(), *value.get_stride()):
                    visit(e)
        out: dict[Any, Any] = {}
        for k, sym in enumerate(s for s in order if s.name.startswith("s")):
            out[sym] = sympy.Symbol(f"s{k}", integer=True, positive=True)
        return out

    def real_name(self, name: str) -> str:
        sched = getattr(self.graph, "scheduler", None)
        return sched.mutation_real_name.get(name, name) if sched is not None else name

    def dtype_of(self, name: str) -> torch.dtype | None:
        try:
            return self.graph.get_dtype(name)
        except Exception:
            return None


_STATES: "weakref.WeakKeyDictionary[Any, _GraphState]" = weakref.WeakKeyDictionary()


def _state() -> _GraphState:
    graph = compat.inductor().V.graph
    st = _STATES.get(graph)
    if st is None:
        st = _STATES[graph] = _GraphState(graph)
    return st


def convert_nodes(snodes: Sequence[Any], state: _GraphState, name: str) -> Kernel:
    """One kernel from the SchedulerNodes of a (possibly fused) scheduler node."""
    counter, indirect = itertools.count(), itertools.count()
    nests = []
    for snode in snodes:
        body, (iteration_sizes, reduction_sizes) = compat.loop_body_of(snode)
        if body is None:
            raise LoopIRUnsupported(f"scheduler node {snode.get_name()} has no LoopBody (a template?)")
        iteration_vars = [sympy.Symbol(f"i{k}", integer=True, nonnegative=True) for k in range(len(iteration_sizes))]
        reduction_vars = [sympy.Symbol(f"r{k}", integer=True, nonnegative=True) for k in range(len(reduction_sizes))]
        recorder = _Recorder(state, counter, indirect)
        with compat.inductor().V.set_ops_handler(recorder):
            body(iteration_vars, reduction_vars)
        nests.append(LoopNest(snode.get_name(), tuple(format_expr(s, state.rename) for s in iteration_sizes),
                              tuple(format_expr(s, state.rename) for s in reduction_sizes), tuple(recorder.stmts)))
    return Kernel(name, tuple(nests), _tiling_group(snodes[0], state))


def _tiling_group(snode: Any, state: _GraphState) -> tuple[tuple[str, ...], ...]:
    """The (pointwise, reduction) tiling Inductor's SIMD scheduling chose, if any (a hint)."""
    group = getattr(snode, "group", None)
    if not group:
        return ()
    try:
        return tuple(tuple(format_expr(e, state.rename) for e in (part if isinstance(part, (tuple, list)) else (part,)))
                     for part in group[1])
    except Exception:  # a hint only: a tiling we cannot print is left out
        return ()


# ---- Scheduling and wrapper ------------------------------------------------------------------------
def _emit_kernel_call(node: Any) -> None:
    """Convert a (fused) node into a kernel of the program; when the compiled function is to run
    (:func:`_capture_scope` with ``run=True``), also emit a call into the interpreter for it."""
    state = _state()
    snodes = list(node.get_nodes())
    kernel_name = f"loop_kernel{next(state.kernel_counter)}"
    kernel = convert_nodes(snodes, state, kernel_name)
    state.kernels[snodes[0].get_name()] = kernel
    for snode in snodes:  # OuterLoopFusedSchedulerNode has no mark_run of its own
        snode.mark_run()
    if _SCOPES and _SCOPES[-1].run:
        _emit_interpreter_call(kernel, state)


def _emit_interpreter_call(kernel: Kernel, state: _GraphState) -> None:
    """A line of Inductor's Python wrapper that runs ``kernel`` with the reference interpreter."""
    inductor = compat.inductor()
    wrapper = inductor.V.graph.wrapper_code
    wrapper.add_import_once("from torchvendor.ir.loop_ir.interpreter import load_kernel as _tv_load_kernel")
    wrapper.header.splice(f"{kernel.name} = _tv_load_kernel({kernel_json(kernel)!r})")
    buffers = list(dict.fromkeys((*kernel.reads(), *kernel.writes())))
    # the wrapper binds our renamed size symbols (s0, s1, ...) to Inductor's own
    inductor_symbol = {v: k for k, v in state.rename.items()}
    symbols = sorted({s for n in kernel.nests for e in (*n.ranges, *n.reduction_ranges) for s in _symbols_in(e)}
                     | {s for n in kernel.nests for st in n.stmts() for s in _symbols_in_stmt(st)})
    python_expr = inductor.common.PythonPrinter().doprint if hasattr(inductor.common, "PythonPrinter") else str
    ours = {s: sympy.Symbol(s, integer=True, positive=True) for s in symbols}
    sizes = ", ".join(f"{s}={python_expr(inductor_symbol.get(ours[s], sympy.Symbol(s)))}" for s in symbols)
    wrapper.writeline(f"{kernel.name}(dict({', '.join(f'{b}={b}' for b in buffers)}), dict({sizes}))")


def _symbols_in(text: str) -> set[str]:
    import re

    return {m for m in re.findall(r"\b(s\d+)\b", text)}


def _symbols_in_stmt(st: Stmt) -> set[str]:
    out: set[str] = set()
    for k, v in st.attrs:
        if isinstance(v, str) and k in ("index", "expr", "size"):
            out |= _symbols_in(v)
    return out


def kernel_json(kernel: Kernel) -> str:
    import json

    from .schema import operation_to_dict

    return json.dumps(operation_to_dict(kernel), separators=(",", ":"))


@functools.cache
def _cpu_scheduling_cls() -> type:
    ns = compat.inductor()

    class LoopIRCppScheduling(ns.CppScheduling):  # type: ignore[misc, valid-type]
        """``CppScheduling``'s fusion decisions, our kernels (calls into the loop IR interpreter)."""

        def codegen_node(self, node: Any) -> None:
            _emit_kernel_call(node)

        def codegen_template(self, *args: Any, **kwargs: Any) -> None:
            raise LoopIRUnsupported("Inductor templates (max-autotune GEMMs) are not captured at loop level")

        def flush(self) -> None:
            pass

        def ready_to_flush(self) -> bool:
            return False

    return LoopIRCppScheduling


@functools.cache
def _simd_scheduling_cls() -> type:
    ns = compat.inductor()
    OrderedSet = compat.ordered_set()

    class LoopIRScheduling(ns.BaseScheduling):  # type: ignore[misc, valid-type]
        """The Scheduling for a non-``cpu`` device: SIMD (Triton-style) grouping by
        ``(numel, reduction numel)``, which is what Inductor's scheduler assumes there."""

        @classmethod
        def get_backend_features(cls, device: Any) -> Any:
            return OrderedSet()

        def group_fn(self, sizes: Sequence[Sequence[Any]]) -> Any:
            sv = ns.V.graph.sizevars
            return tuple(sv.simplify(sympy.prod(s)) for s in sizes)

        def can_fuse_vertical(self, node1: Any, node2: Any) -> bool:
            return self._compatible(node1, node2)

        def can_fuse_horizontal(self, node1: Any, node2: Any) -> bool:
            return self._compatible(node1, node2)

        @staticmethod
        def _compatible(node1: Any, node2: Any) -> bool:
            (_, g1), (_, g2) = node1.group, node2.group
            return bool(g1 == g2)

        def codegen_node(self, node: Any) -> None:
            _emit_kernel_call(node)

        def codegen_template(self, *args: Any, **kwargs: Any) -> None:
            raise LoopIRUnsupported("Inductor templates are not captured at loop level")

        def codegen_sync(self) -> None:
            pass

        def flush(self) -> None:
            pass

        def ready_to_flush(self) -> bool:
            return False

    return LoopIRScheduling


@dataclasses.dataclass(frozen=True)
class _Scope:
    """One of our compiles: where its program goes, and whether Inductor's compiled function
    will run (then the wrapper calls the interpreter per kernel) or only the program is wanted
    (then no wrapper is generated at all: :data:`_LOWERED_ONLY` stands in for it)."""

    sink: Callable[[LoopProgram], None]
    run: bool


_SCOPES: list[_Scope] = []

#: the wrapper module of a graph lowered for its program only: Inductor imports it, nobody calls it
_LOWERED_ONLY = ("def call(args):\n"
                 "    raise RuntimeError('torchvendor: this graph was lowered to loop IR only; '\n"
                 "                       'run its LoopProgram instead of Inductor\\'s function')\n")


@functools.cache
def _wrapper_cls() -> type:
    ns = compat.inductor()

    class LoopIRWrapperCodegen(ns.PythonWrapperCodegen):  # type: ignore[misc, valid-type]
        """Inductor's Python wrapper, plus: assemble the LoopProgram when the wrapper is generated."""

        @staticmethod
        def create(is_subgraph: bool, subgraph_name: Any, parent_wrapper: Any, partition_signatures: Any = None) -> Any:
            if is_subgraph:
                raise LoopIRUnsupported("subgraphs (control flow, invoke_subgraph) are not captured at loop level")
            return LoopIRWrapperCodegen()

        def generate(self, is_inference: bool) -> Any:
            graph = ns.V.graph
            if not _SCOPES or graph.wrapper_code is not self:
                return super().generate(is_inference)
            scope = _SCOPES[-1]
            scope.sink(validate(build_program(graph, _state())))  # the loop IR lint, as torch.fx lints after a transform
            if scope.run:
                return super().generate(is_inference)
            return ns.ValueWithLineMap(_LOWERED_ONLY, []), ns.ValueWithLineMap("", [])

    return LoopIRWrapperCodegen


def _custom_pass() -> Any:
    ns = compat.inductor()

    class LoopIRCacheKey(ns.CustomGraphModulePass):  # type: ignore[misc, valid-type]
        """A no-op post-grad pass whose ``uuid()`` keys the FX-graph cache by our extractor."""

        def __call__(self, gm: torch.fx.GraphModule) -> None:
            return None

        def uuid(self) -> str:
            return EXTRACTOR_VERSION

    return LoopIRCacheKey()


# ---- program assembly ------------------------------------------------------------------------------
def build_program(graph: Any, state: _GraphState) -> LoopProgram:
    """Assemble the LoopProgram of a GraphLowering whose scheduler has generated code."""
    return _Assembler(graph, state).run()


class _Assembler:
    def __init__(self, graph: Any, state: _GraphState) -> None:
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
        self.views[name] = Buffer(name, _dtype(layout.dtype), size, stride, str(layout.device.type), "intermediate", off, base)
        return name

    def buffer_for(self, name: str) -> Buffer | None:
        ir, g = self.ir, self.g
        if name in self.views:
            return self.views[name]
        if name in self.extra_buffers:
            return self.extra_buffers[name]
        if name in g.graph_inputs and not isinstance(g.graph_inputs[name], sympy.Basic):
            t = g.graph_inputs[name]
            return Buffer(name, _dtype(t.get_dtype()), tuple(map(self.expr, t.get_size())),
                          tuple(map(self.expr, t.get_stride())), self.device(t), "input")
        if name in g.constants:
            c = g.constants[name]
            return Buffer(name, _dtype(c.dtype), tuple(map(str, c.shape)), tuple(map(str, c.stride())),
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
        return Buffer(name, _dtype(layout.dtype), tuple(map(self.expr, layout.size)), tuple(map(self.expr, layout.stride)),
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
                kernel = convert_nodes(snodes, state, f"loop_kernel{next(state.kernel_counter)}")
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
    from ..fx_view import op_key

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


# ---- the Dynamo backend -----------------------------------------------------------------------------
@contextlib.contextmanager
def _capture_scope(device: str, sink: Callable[[LoopProgram], None] | None, *, run: bool = True) -> Iterator[None]:
    """Inductor compiles inside this block use the loop IR Scheduling for ``device``; each
    graph's program goes to ``sink``. ``run=False``: the program is all that is wanted, no
    wrapper (nor interpreter call) is generated."""
    sched = _cpu_scheduling_cls() if device == "cpu" else _simd_scheduling_cls()
    if device != "cpu":
        compat.ensure_device_hooks(device)
    wrapper = _wrapper_cls()
    _SCOPES.append(_Scope(sink or (lambda p: None), run))
    try:
        with compat.scoped_inductor_backend(device, sched, wrapper, _custom_pass()), \
                compat.inductor_config_patch(**_CONFIG), compat.autograd_cache_patch(False):
            yield
    finally:
        _SCOPES.pop()


#: Inductor settings for our compiles: no caches (capture needs the lowering to run), one
#: wrapper per graph, no templates, Python wrapper.
_CONFIG = dict(fx_graph_cache=False, fx_graph_remote_cache=False, graph_partition=False, cpp_wrapper=False,
               max_autotune=False, max_autotune_gemm=False, combo_kernels=False, freezing=False,
               benchmark_kernel=False)


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
    bufs = tuple(Buffer(n, _dtype(ex.dtype), tuple(format_expr(e, rename) for e in size),
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
