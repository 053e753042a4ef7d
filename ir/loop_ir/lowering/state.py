"""The state of one lowering: :class:`Lowering` (one graph lowered under our Scheduling: where
its program goes, whether Inductor's function will run) and, per Inductor graph it generates,
the :class:`GraphState` its Scheduling and its wrapper share.

Each lowering owns its state: the Scheduling and wrapper classes registered for it are bound to
it (:mod:`.inductor_hooks`), so no module keeps a stack of active compiles.

    >>> lowering = Lowering("cpu")
    >>> lowering.run, lowering.states
    (True, [])
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable

import sympy
import torch

from ... import compat
from ..schema import Kernel, LoopProgram

__all__ = ["Lowering", "GraphState"]


class GraphState:
    """What the Scheduling and the wrapper share while one Inductor graph is generated."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.kernels: dict[str, Kernel] = {}     # first scheduler node name -> kernel
        self._kernel_counter = itertools.count()
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

    def next_kernel_name(self) -> str:
        """``loop_kernel0``, ``loop_kernel1``, ...: the kernels' names in the order they are made."""
        return f"loop_kernel{next(self._kernel_counter)}"

    def real_name(self, name: str) -> str:
        """The buffer a (mutation) name stands for."""
        sched = getattr(self.graph, "scheduler", None)
        return sched.mutation_real_name.get(name, name) if sched is not None else name

    def dtype_of(self, name: str) -> torch.dtype | None:
        try:
            return self.graph.get_dtype(name)
        except Exception:  # dtype metadata is best effort
            return None


@dataclasses.dataclass
class Lowering:
    """One of our compiles: the device whose Scheduling is ours, where each graph's program goes
    (``sink``), and whether Inductor's compiled function will run (``run``: then the wrapper
    calls the interpreter per kernel) or only the program is wanted (then no wrapper is made)."""

    device: str
    sink: Callable[[LoopProgram], None] = lambda program: None
    run: bool = True
    states: list[GraphState] = dataclasses.field(default_factory=list)

    def state(self) -> GraphState:
        """The state of the graph Inductor is generating now (``V.graph``)."""
        graph = compat.inductor().V.graph
        for st in self.states:
            if st.graph is graph:
                return st
        self.states.append(GraphState(graph))
        return self.states[-1]
