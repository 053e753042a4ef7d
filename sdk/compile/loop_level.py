"""The LOOP level, SDK side: a partition lowered by Inductor to a :class:`LoopProgram`, compiled
by the vendor, run by :class:`~torchvendor.sdk.compile.loop_runner.ProgramRunner`.

One partition's path: :func:`lower_partition` (Inductor through ``ir/loop_ir``, cached on disk
as the program's JSON) -> ``backend.compile_program(program)`` (default: ``backend.compile``
kernel by kernel; a backend that fuses across kernels overrides it and returns a rewritten
program with its kernels) -> :class:`ProgramRunner` -> ``backend.program_runner`` (e.g. CUDA
graphs). Nothing here is stateful: a backend sees each whole program once.

Example (kernels "compiled" to the reference interpreter)::

    >>> import torch
    >>> from torchvendor.sdk import Backend, Level, register_backend, reference_kernel
    >>> class Ref(Backend):
    ...     name = "doc_loop_level"
    ...     level = Level.LOOP
    ...     def compile(self, kernel):
    ...         return reference_kernel(kernel)
    >>> _ = register_backend(Ref)
    >>> with torch.no_grad():
    ...     y = torch.compile(lambda x: torch.softmax(x, -1), backend="doc_loop_level")(torch.ones(2, 4))
    >>> y
    tensor([[0.2500, 0.2500, 0.2500, 0.2500],
            [0.2500, 0.2500, 0.2500, 0.2500]])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch.fx as fx

from torchvendor.ir import compat
from torchvendor.ir import decompositions as _decomp

from .levels import BackendError, Level, LevelRules

__all__ = ["LoopLevel", "CompiledProgram", "compile_kernels", "lower_partition", "LOWERING_VERSION"]

#: bump when the SDK's lowering to loop IR changes what it produces (part of the program cache key)
LOWERING_VERSION = "3"


@dataclass(frozen=True)
class CompiledProgram:
    """What ``Backend.compile_program`` returns: the program to run (the one it was given, or a
    rewrite of it, e.g. with neighbouring kernels merged into one) and a callable per kernel
    of that program, ``fn(*buffers, *sizes)`` (see :mod:`.loop_runner`)."""

    program: Any  #: a LoopProgram
    kernels: Mapping[str, Callable[..., Any]]


def compile_kernels(backend: Any, program: Any) -> CompiledProgram:
    """``backend.compile`` on every kernel of ``program`` (``Backend.compile_program``'s default);
    a kernel that fails is named, with its ops, in the :class:`BackendError`."""
    from .loop_runner import loop_kernels

    compiled: dict[str, Callable[..., Any]] = {}
    for lk in loop_kernels(program):
        try:
            compiled[lk.name] = backend.compile(lk)
        except Exception as e:
            raise BackendError(f"kernel {lk.name} ({_kernel_ops(lk.kernel)}): {type(e).__name__}: {e}") from e
    return CompiledProgram(program, compiled)


def lower_partition(backend: Any, sub: fx.GraphModule, examples: Sequence[Any], kind: str, device: str) -> Any:
    """One partition's loop program: from the backend's artifact cache, else lowered by Inductor
    (and stored). A cold compile uses the program it lowered; only a warm one decodes JSON."""
    from torchvendor.ir.loop_ir import LoopProgram, lower_graph

    options = {"fallback_random": True, **backend.lowering_config(sub, examples)}
    key = backend.graph_key(sub, examples, kind, device, f"lowering {LOWERING_VERSION} {sorted(options.items())}")

    def lower() -> LoopProgram:
        out = sub.graph.output_node()
        single = not isinstance(out.args[0], (tuple, list))
        if single:  # Inductor compiles graphs that return a tuple
            out.args = ((out.args[0],),)
            sub.recompile()
        try:
            # Several partitions of one graph are lowered, each outside the AOT tracing context;
            # random ops stay ATen calls (Inductor's own random lowering needs its joint-graph
            # passes, which run before partitioning).
            with compat.outside_tracing_context(), compat.inductor_config_patch(**options):
                return lower_graph(sub, examples, device=device, kind=kind)
        finally:
            if single:
                out.args = (out.args[0][0],)
                sub.recompile()

    return backend.cache.get_or_build_value(key, lower, lambda p: p.to_json().encode(),
                                            lambda b: LoopProgram.from_json(b.decode()), ".loop.json")


class LoopLevel(LevelRules):
    """``Level.LOOP``: each partition lowered by Inductor, the vendor compiles its program."""

    level = Level.LOOP

    def decompositions(self, backend: Any) -> Any:
        from torchvendor.ir.loop_ir import inductor_decompositions

        return _decomp.resolve(inductor_decompositions())

    def refuses(self, backend: Any, device: str) -> str | None:
        if backend.device is not None and device != backend.device:
            return f"the inputs are on {device}; backend {backend.name!r} generates code for {backend.device} only"
        return None

    def compile_partition(self, backend: Any, sub: fx.GraphModule, examples: Sequence[Any], kind: str,
                          device: str, name: str = "", graph: Any = None) -> Callable[..., Any]:
        from .loop_runner import ProgramRunner

        program = lower_partition(backend, sub, examples, kind, device)
        compiled = backend.compile_program(program)
        if not isinstance(compiled, CompiledProgram):
            raise BackendError(f"compile_program() returned {type(compiled).__name__}; return a "
                               f"torchvendor.sdk.CompiledProgram(program, {{kernel name: callable}})")
        runner = ProgramRunner(compiled.program, compiled.kernels, device, extern=backend.extern_kernel)
        return backend.program_runner(runner, compiled.program)


def _kernel_ops(kernel: Any) -> str:
    ops = sorted({s.op for nest in kernel.nests for s in nest.body if s.op not in ("load", "store")})
    return ", ".join(ops[:6]) + (", ..." if len(ops) > 6 else "")
