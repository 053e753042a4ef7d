"""How the ATen, LOOP and ONNX levels take Dynamo's graph: through AOTAutograd.

:class:`AotFlow` is the base those three level classes share (not a level: a vendor subclasses
:class:`~.aten_level.AtenBackend`, :class:`~.loop_level.LoopBackend` or
:class:`~.onnx_level.OnnxBackend`). Its part of the flow, per Dynamo graph:

1. the warm path (:mod:`.warm`): an inference graph whose ATen graph is in the artifact cache
   skips AOTAutograd;
2. else AOTAutograd, with the level's decomposition table (resolved once per backend object and
   handed to :func:`~torchvendor.ir.aten_ir_hook` resolved), calls the template's
   ``_compile_graph`` with each forward, backward or inference graph, storing the inference
   graph for the next warm compile;
3. with the option ``fallback="inductor"``, the ops outside the vendor's partitions are compiled
   by Inductor (:mod:`.inductor_fallback`).

In training, AOTAutograd splits the joint forward+backward graph into the forward and backward
graphs the vendor compiles; the option ``aot_partition`` (default: the class attribute
:attr:`AotFlow.aot_partition`) picks how. ``"min_cut"`` (Inductor's choice) saves for the backward a
minimum cut of what it needs and recomputes cheap pointwise ops there, so a backend that fuses
reads the saved inputs of a fused kernel instead of each intermediate: fewer bytes held between
forward and backward, fewer written by the forward. ``"default"`` saves what the forward
computed, each graph's kernels stay as written. The LOOP and TRITON levels default to ``"min_cut"``.
"""
from __future__ import annotations

import time
from functools import partial
from typing import Any, Callable, ClassVar

import torch.fx as fx

from torchvendor.ir import aten_ir_hook

from . import warm
from .backend import Backend, BackendError
from .inductor_fallback import inductor_fallback
from .partition_call import box_partition_calls, fast_attributes
from .report import CompileReport

__all__ = ["AotFlow"]

_AOT_PARTITIONS = ("default", "min_cut")


class AotFlow(Backend):
    """The AOTAutograd part of the flow, shared by the ATen, LOOP and ONNX level classes."""

    #: how AOTAutograd splits a training graph (the module docstring): ``"default"`` or
    #: ``"min_cut"``; the option ``aot_partition`` overrides it per backend object
    aot_partition: ClassVar[str] = "default"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self.options["aot_partition"] not in _AOT_PARTITIONS:
            raise BackendError(f"backend {self.name!r}: option aot_partition={self.options['aot_partition']!r}; "
                               f"use one of {list(_AOT_PARTITIONS)}")
        self._table: Any = None

    def _level_options(self) -> dict[str, Any]:
        return {"aot_partition": type(self).aot_partition}

    # ---- what the level class decides ----------------------------------------------------------

    def _decompositions(self) -> Any:
        """The level's decomposition table, resolved (a ``DecompositionTable``)."""
        raise NotImplementedError

    def _warm_key_parts(self) -> tuple[str, ...]:
        """What besides the graph and the level keys a warm compile's cached ATen graph."""
        return ()

    # ---- the flow --------------------------------------------------------------------------------

    def _take_graph(self, gm: fx.GraphModule, example_inputs: list[Any], report: CompileReport) -> Callable[..., Any]:
        started = time.perf_counter()
        key = self._bypass_key(gm, example_inputs)
        if key is not None:
            fast = self._warm_compile(report, started, key, example_inputs)
            if fast is not None:
                return fast
        direct: list[Callable[..., Any]] = []
        hook = aten_ir_hook(partial(self._boxed_graph, "forward", report, started),
                            partial(self._boxed_graph, "backward", report, started),
                            partial(self._inference_graph, report, started, key, direct),
                            decompositions=self._decomposition_table(), partition=self.options["aot_partition"])
        wrapped = hook(gm, example_inputs)
        # an inference graph AOTAutograd's runtime wrappers do nothing for: Dynamo calls it directly
        # (as a warm compile does), not through those wrappers, a few microseconds per call
        return warm.inference_function(direct[0]) if len(direct) == 1 else wrapped

    def _decomposition_table(self) -> Any:
        """The resolved table, built once per backend object (a warm compile paid ~7 ms for it)."""
        if self._table is None:
            self._table = self._decompositions()
        return self._table

    def _boxed_graph(self, kind: str, report: CompileReport, started: float, gm: fx.GraphModule,
                     example_inputs: list[Any]) -> Callable[..., Any]:
        """:meth:`_aot_graph`, in AOTAutograd's boxed calling convention (:func:`_boxed`)."""
        return self._boxed(self._aot_graph(kind, report, started, gm, example_inputs))

    def _boxed(self, compiled: Any) -> Any:
        """The compiled graph taking AOTAutograd's argument list and clearing it, with each
        partition freeing its inputs at their last use (:func:`.partition_call.box_partition_calls`),
        as Inductor's compiled graphs do: a backward's saved activations die as it runs, not at its
        end. Inductor's fallback keeps its own calling convention."""
        if self.options["fallback"] != "eager" or not isinstance(compiled, fx.GraphModule):
            return compiled
        return box_partition_calls(compiled)

    def _aot_graph(self, kind: str, report: CompileReport, started: float, gm: fx.GraphModule,
                   example_inputs: list[Any]) -> fx.GraphModule:
        """One AOTAutograd graph through the template, then the Inductor fallback if asked for."""
        outlined = self._compile_graph(kind, report, started, gm, example_inputs)
        graph = report.graphs[-1]
        if graph.partition_result is None:  # refused whole: it runs as it is
            return outlined
        graph.fallback = self.options["fallback"]
        if graph.fallback == "inductor" and graph.partition_result.fallback:
            now = time.perf_counter()
            outlined = inductor_fallback(outlined)
            graph.stage_times["inductor_fallback"] = time.perf_counter() - now
        return outlined

    # ---- warm compile without AOTAutograd (sdk/compile/warm.py) ----------------------------------

    def _bypass_key(self, gm: fx.GraphModule, example_inputs: list[Any]) -> str | None:
        if self.options["fallback"] != "eager":  # Inductor's fallback wants AOT's tracing context
            return None
        try:
            return warm.bypass_key(gm, example_inputs, self.level.value, *self._warm_key_parts())[0]
        except Exception:  # noqa: BLE001 - an input the key cannot describe: the normal path
            return None

    def _warm_compile(self, report: CompileReport, started: float, key: str,
                      example_inputs: list[Any]) -> Callable[..., Any] | None:
        """The graph AOTAutograd produced at a cold compile, from the cache, compiled as usual;
        None on a miss or any failure (the caller takes the normal path)."""
        gm = warm.load(self.cache, key, example_inputs)
        if gm is None:
            return None
        examples = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
        try:
            compiled = self._aot_graph("inference", report, started, gm, examples)
        except Exception:  # noqa: BLE001 - never worse than the normal path, which reports it
            del report.graphs[-1:]
            return None
        report.graphs[-1].from_cache = True
        return warm.inference_function(fast_attributes(compiled) if isinstance(compiled, fx.GraphModule) else compiled)

    def _inference_graph(self, report: CompileReport, started: float, key: str | None, direct: list,
                         gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        """AOTAutograd's inference compiler: cache the ATen graph (before patterns rewrite it)
        for the next warm compile when that is safe, then compile it; where AOTAutograd's
        wrappers around it do nothing (:func:`.warm.plain`), also into ``direct``."""
        try:
            why = warm.store(self.cache, key, gm, example_inputs) if key is not None else "not eligible"
        except Exception as e:  # noqa: BLE001 - e.g. an unwritable cache: compile without storing
            why = f"{type(e).__name__}: {e}"
        plain = why is None or (self.options["fallback"] == "eager" and warm.plain(gm, example_inputs) is None)
        compiled = self._boxed(self._aot_graph("inference", report, started, gm, example_inputs))
        report.graphs[-1].graph_cache = "stored" if why is None else f"not stored: {why}"
        if plain:
            direct.append(compiled)
        return compiled
