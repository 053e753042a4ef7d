"""What the loop level registers with Inductor for a device (``register_backend_for_device``),
each class bound to one :class:`~.state.Lowering`:

- a ``Scheduling`` (:func:`scheduling_for`): Inductor's fusion decisions (``CppScheduling``'s on
  ``cpu``, SIMD grouping elsewhere), each fused node converted into a kernel of the program
  (:func:`emit_kernel`) instead of generated code;
- a Python wrapper codegen (:func:`wrapper_for`) that assembles the program when Inductor generates
  the wrapper and hands it, validated, to the lowering's sink; with ``run`` it also calls the
  reference interpreter per kernel (:func:`emit_interpreter_call`), otherwise no wrapper is made;
- a no-op post-grad pass (:func:`cache_key_pass`) whose ``uuid()`` keys the FX-graph cache by
  :data:`EXTRACTOR_VERSION`.

    >>> from torchvendor.ir.loop_ir.lowering.state import Lowering
    >>> cls = scheduling_for(Lowering("cpu"))
    >>> cls.__name__, cls.lowering.device
    ('LoopIRCppScheduling', 'cpu')
"""
from __future__ import annotations

import functools
import json
import re
from typing import Any, Sequence

import sympy
import torch

from ... import compat
from ..invariants import validate
from ..schema import SCHEMA_VERSION, Kernel, Stmt, operation_to_dict
from .assembly import build_program
from .recorder import convert_nodes
from .state import GraphState, Lowering
from .unsupported import LoopIRUnsupported

__all__ = ["EXTRACTOR_VERSION", "scheduling_for", "wrapper_for", "cache_key_pass", "emit_kernel",
           "emit_interpreter_call"]

#: Part of the FX-graph cache key of everything compiled under our Scheduling.
EXTRACTOR_VERSION = f"torchvendor.loop_ir/{SCHEMA_VERSION}.1"

#: the wrapper module of a graph lowered for its program only: Inductor imports it, nobody calls it
_LOWERED_ONLY = ("def call(args):\n"
                 "    raise RuntimeError('torchvendor: this graph was lowered to loop IR only; '\n"
                 "                       'run its LoopProgram instead of Inductor\\'s function')\n")


def scheduling_for(lowering: Lowering) -> type:
    """The Scheduling class to register for ``lowering.device``, bound to ``lowering``."""
    base = _cpu_scheduling() if lowering.device == "cpu" else _simd_scheduling()
    return type(base.__name__, (base,), {"lowering": lowering})


def wrapper_for(lowering: Lowering) -> type:
    """The wrapper codegen class to register, bound to ``lowering``."""
    base = _wrapper()
    return type(base.__name__, (base,), {"lowering": lowering})


def emit_kernel(lowering: Lowering, node: Any) -> None:
    """Convert a (fused) node into a kernel of the program; when the compiled function is to run
    (``lowering.run``), also emit a call into the interpreter for it."""
    state = lowering.state()
    snodes = list(node.get_nodes())
    kernel = convert_nodes(snodes, state, state.next_kernel_name())
    state.kernels[snodes[0].get_name()] = kernel
    for snode in snodes:  # OuterLoopFusedSchedulerNode has no mark_run of its own
        snode.mark_run()
    if lowering.run:
        emit_interpreter_call(kernel, state)


def emit_interpreter_call(kernel: Kernel, state: GraphState) -> None:
    """A line of Inductor's Python wrapper that runs ``kernel`` with the reference interpreter."""
    inductor = compat.inductor()
    wrapper = inductor.V.graph.wrapper_code
    wrapper.add_import_once("from torchvendor.ir.loop_ir.interpreter import load_kernel as _tv_load_kernel")
    text = json.dumps(operation_to_dict(kernel), separators=(",", ":"))
    wrapper.header.splice(f"{kernel.name} = _tv_load_kernel({text!r})")
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
    return set(re.findall(r"\b(s\d+)\b", text))


def _symbols_in_stmt(st: Stmt) -> set[str]:
    out: set[str] = set()
    for k, v in st.attrs:
        if isinstance(v, str) and k in ("index", "expr", "size"):
            out |= _symbols_in(v)
    return out


@functools.cache
def _cpu_scheduling() -> type:
    ns = compat.inductor()

    class LoopIRCppScheduling(ns.CppScheduling):  # type: ignore[misc, valid-type]
        """``CppScheduling``'s fusion decisions, our kernels (calls into the loop IR interpreter)."""

        lowering: Lowering

        def codegen_node(self, node: Any) -> None:
            emit_kernel(self.lowering, node)

        def codegen_template(self, *args: Any, **kwargs: Any) -> None:
            raise LoopIRUnsupported("Inductor templates (max-autotune GEMMs) are not captured at loop level")

        def flush(self) -> None:
            pass

        def ready_to_flush(self) -> bool:
            return False

    return LoopIRCppScheduling


@functools.cache
def _simd_scheduling() -> type:
    ns = compat.inductor()
    OrderedSet = compat.ordered_set()

    class LoopIRScheduling(ns.BaseScheduling):  # type: ignore[misc, valid-type]
        """The Scheduling for a non-``cpu`` device: SIMD (Triton-style) grouping by
        ``(numel, reduction numel)``, which is what Inductor's scheduler assumes there."""

        lowering: Lowering

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
            emit_kernel(self.lowering, node)

        def codegen_template(self, *args: Any, **kwargs: Any) -> None:
            raise LoopIRUnsupported("Inductor templates are not captured at loop level")

        def codegen_sync(self) -> None:
            pass

        def flush(self) -> None:
            pass

        def ready_to_flush(self) -> bool:
            return False

    return LoopIRScheduling


@functools.cache
def _wrapper() -> type:
    ns = compat.inductor()

    class LoopIRWrapperCodegen(ns.PythonWrapperCodegen):  # type: ignore[misc, valid-type]
        """Inductor's Python wrapper, plus: assemble the LoopProgram when the wrapper is generated."""

        lowering: Lowering

        @classmethod
        def create(cls, is_subgraph: bool, subgraph_name: Any, parent_wrapper: Any,
                   partition_signatures: Any = None) -> Any:
            if is_subgraph:
                raise LoopIRUnsupported("subgraphs (control flow, invoke_subgraph) are not captured at loop level")
            return cls()

        def generate(self, is_inference: bool) -> Any:
            graph = ns.V.graph
            if graph.wrapper_code is not self:
                return super().generate(is_inference)
            lowering = self.lowering
            # the loop IR lint, as torch.fx lints after a transform
            lowering.sink(validate(build_program(graph, lowering.state())))
            if lowering.run:
                return super().generate(is_inference)
            return ns.ValueWithLineMap(_LOWERED_ONLY, []), ns.ValueWithLineMap("", [])

    return LoopIRWrapperCodegen


def cache_key_pass() -> Any:
    """A no-op post-grad pass whose ``uuid()`` keys the FX-graph cache by our extractor, so code
    generated under our Scheduling is never served to compiles outside it, nor the reverse."""
    ns = compat.inductor()

    class LoopIRCacheKey(ns.CustomGraphModulePass):  # type: ignore[misc, valid-type]
        def __call__(self, gm: torch.fx.GraphModule) -> None:
            return None

        def uuid(self) -> str:
            return EXTRACTOR_VERSION

    return LoopIRCacheKey()
