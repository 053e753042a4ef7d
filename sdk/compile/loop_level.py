"""``Level.LOOP``: :class:`LoopBackend`, each partition lowered by Inductor to a
:class:`~torchvendor.ir.loop_ir.LoopProgram` that the vendor compiles kernel by kernel.

One partition's path, every step a documented hook of :class:`LoopBackend`:

1. :func:`lower_partition`: Inductor lowers the partition (``lowering_config``), cached on disk
   as the program's JSON;
2. ``transforms``: public loop-IR rewrites (``torchvendor.ir.loop_ir.transforms``) applied in
   order, the program validated after each (always; the error names the transform);
3. ``compile_program(program)``: default ``compile`` kernel by kernel (:func:`compile_kernels`);
   a backend that fuses across kernels overrides it and returns a rewritten program (validated)
   with its kernels;
4. ``finish(compiled)``: the build barrier. ``compile`` may hand out kernels whose build is still
   running (the CPU reference builds a partition's libraries in parallel); ``finish`` waits for
   them and returns every kernel ready to call, so a build error makes this partition fall back;
5. :class:`~torchvendor.sdk.compile.loop_runner.ProgramRunner` runs the program with the
   kernels (``extern_kernel`` for library calls), wrapped by ``program_runner`` (e.g. CUDA
   graphs).

Nothing here is stateful: a backend sees each whole program once.

Example (kernels "compiled" to the reference interpreter)::

    >>> import torch
    >>> from torchvendor.sdk import LoopBackend, register_backend, reference_kernel
    >>> class Ref(LoopBackend):
    ...     name = "doc_loop_level"
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
from typing import Any, Callable, ClassVar, Mapping, Sequence

import torch.fx as fx

from torchvendor.ir import compat
from torchvendor.ir import decompositions as _decomp

from .aot_flow import AotFlow
from .levels import BackendDefinitionError, BackendError, Level
from .loop_kernel import loop_kernels
from .report import GraphReport

__all__ = ["LoopBackend", "CompiledProgram", "compile_kernels", "lower_partition", "LOWERING_VERSION"]

#: bump when the SDK's lowering to loop IR changes what it produces (part of the program cache key)
LOWERING_VERSION = "3"


@dataclass(frozen=True)
class CompiledProgram:
    """What ``LoopBackend.compile_program`` returns: the program to run (the one it was given,
    or a rewrite of it, e.g. with neighbouring kernels merged into one) and a callable per kernel
    of that program, ``fn(*buffers, *sizes)`` (see :mod:`.loop_runner`); until
    ``LoopBackend.finish`` returns, a kernel may also be whatever the backend's ``compile``
    handed out while it was still being built."""

    program: Any  #: a LoopProgram
    kernels: Mapping[str, Callable[..., Any]]


class LoopBackend(AotFlow):
    """Subclass for ``Level.LOOP``: ``compile(kernel: LoopKernel) -> fn(*buffers, *sizes)``."""

    level: ClassVar[Level] = Level.LOOP
    #: a loop backend fuses, so recomputing pointwise ops in the backward is cheap (see AotFlow)
    aot_partition: ClassVar[str] = "min_cut"
    #: Inductor config keys set while the SDK lowers a graph to loop IR, e.g.
    #: ``{"layout_optimization": False}`` to keep convolutions in the model's own memory format
    #: (override :meth:`lowering_config` to decide per graph)
    lowering_options: ClassVar[Mapping[str, Any]] = {}
    #: loop-IR program rewrites (``torchvendor.ir.loop_ir.transforms``, or the vendor's own
    #: ``LoopProgram -> LoopProgram``), applied in order to each partition's program before its
    #: kernels are compiled; the SDK validates the program after each one
    transforms: ClassVar[Sequence[Callable[[Any], Any]]] = ()

    # ---- what a vendor may override ------------------------------------------------------------

    def lowering_config(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Mapping[str, Any]:
        """The Inductor config keys set while lowering this partition (default
        :attr:`lowering_options`); part of the lowered program's cache key."""
        return self.lowering_options

    def compile_program(self, program: Any) -> CompiledProgram:
        """Compile one partition's whole :class:`~torchvendor.ir.loop_ir.LoopProgram` (after
        :attr:`transforms`). The default calls :meth:`compile` on each kernel
        (``loop_kernels(program)``); override it to see the program at once: return
        ``CompiledProgram(rewritten_program, {kernel name: callable})``, the rewrite built with
        ``dataclasses.replace`` on the public schema (the SDK validates it and runs it)."""
        return compile_kernels(self, program)

    def finish(self, compiled: CompiledProgram) -> CompiledProgram:
        """The build barrier, called once per partition after :meth:`compile_program` and before
        the SDK builds the partition's runner. A backend whose :meth:`compile` starts a build and
        returns at once (so that a partition's kernels build in parallel) waits for the builds
        here and returns ``compiled`` with every kernel callable; an exception makes the
        partition fall back (or raises in strict mode). The default returns ``compiled``."""
        return compiled

    def extern_kernel(self, extern: Any, aten: Callable[..., Any], device: str) -> Callable[..., Any]:
        """What runs one extern kernel of a program (a matmul, a convolution: the
        :class:`~torchvendor.ir.loop_ir.ExternKernel` the loop IR leaves to a library), given
        its ATen operator and the device type; called with the operator's arguments. The default
        returns ``aten`` (ATen on the device); override to call the vendor's library (the CUDA
        backend runs cuBLAS/cuDNN on a PrivateUse1 GPU device this way)."""
        return aten

    def program_runner(self, runner: Callable[..., Any], program: Any) -> Callable[..., Any]:
        """What runs one partition, given the SDK's runner of its compiled kernels and its loop
        program. The default returns ``runner``; override to wrap it, e.g. to replay the
        partition's launches from a recorded command list (the CUDA backend's CUDA graphs)."""
        return runner

    # ---- the level's part of the flow ------------------------------------------------------------

    def _decompositions(self) -> Any:
        from torchvendor.ir.loop_ir import inductor_decompositions

        return _decomp.resolve(inductor_decompositions())

    def _warm_key_parts(self) -> tuple[str, ...]:
        return (f"lowering {LOWERING_VERSION}",)

    def _refuses(self, device: str) -> str | None:
        if self.device is not None and device != self.device:
            return f"the graph's tensors are on {device}; backend {self.name!r} generates code for {self.device} only"
        return None

    def _partition_options(self, device: str) -> dict[str, Any]:
        # A view at a partition's edge is ejected to lower the bytes crossing the boundary (the
        # partitioner's cheap_ops); a loop program on the host reads a view for free, where
        # running it outside costs an ATen call on every call of the model.
        return {"cheap_ops": ()} if device == "cpu" else {}

    def _compile_partition(self, sub: fx.GraphModule, examples: Sequence[Any], kind: str, device: str,
                           name: str, graph: GraphReport) -> Callable[..., Any]:
        from torchvendor.ir.loop_ir import LoopIRValidationError, apply_transforms, validate

        from .loop_runner import ProgramRunner

        program = apply_transforms(lower_partition(self, sub, examples, kind, device), self.transforms)
        compiled = _checked(self.compile_program(program), "compile_program")
        if compiled.program is not program:  # the backend's own rewrite
            try:
                validate(compiled.program)
            except LoopIRValidationError as e:
                raise LoopIRValidationError(f"the program {type(self).__name__}.compile_program returned: {e}") from e
        compiled = _checked(self.finish(compiled), "finish")
        late = sorted(k for k, fn in compiled.kernels.items() if not callable(fn))
        if late:
            raise BackendError(f"kernel(s) {late} are not callable after finish(): a build still pending?")
        runner = ProgramRunner(compiled.program, compiled.kernels, device, extern=self.extern_kernel)
        return self.program_runner(runner, compiled.program)

    @classmethod
    def _check_definition(cls) -> None:
        super()._check_definition()
        if getattr(cls, "decompositions", None) is not None:
            raise BackendDefinitionError(f"{cls.__name__}.decompositions: the loop level uses Inductor's table; "
                                         f"decompositions apply to AtenBackend and OnnxBackend only")

    @classmethod
    def _implements_compile(cls) -> bool:
        return super()._implements_compile() or cls.compile_program is not LoopBackend.compile_program


def _checked(compiled: Any, hook: str) -> CompiledProgram:
    if not isinstance(compiled, CompiledProgram):
        raise BackendError(f"{hook}() returned {type(compiled).__name__}; return a "
                           f"torchvendor.sdk.CompiledProgram(program, {{kernel name: callable}})")
    return compiled


def compile_kernels(backend: Any, program: Any) -> CompiledProgram:
    """``backend.compile`` on every kernel of ``program`` (``LoopBackend.compile_program``'s
    default); a kernel that fails is named, with its ops, in the :class:`BackendError`."""
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
        # Inductor's passes rewrite the graph they lower in place (reinplacing makes a
        # ``_foreach_add`` a ``_foreach_add_`` returning None): lower a copy, as ``sub`` stays
        # the partition's eager fallback
        graph = fx.Graph()
        graph.output(graph.graph_copy(sub.graph, {}))
        copy = fx.GraphModule(sub, graph)
        out = copy.graph.output_node()
        if not isinstance(out.args[0], (tuple, list)):  # Inductor compiles graphs that return a tuple
            out.args = ((out.args[0],),)
            copy.recompile()
        # Several partitions of one graph are lowered, each outside the AOT tracing context;
        # random ops stay ATen calls (Inductor's own random lowering needs its joint-graph
        # passes, which run before partitioning). The backend's settings join the lowering's one
        # Inductor config patch.
        with compat.outside_tracing_context():
            return lower_graph(copy, examples, device=device, kind=kind, inductor_config=options)

    return backend.cache.get_or_build_value(key, lower, lambda p: p.to_json().encode(),
                                            lambda b: LoopProgram.from_json(b.decode()), ".loop.json")


def _kernel_ops(kernel: Any) -> str:
    ops = sorted({s.op for nest in kernel.nests for s in nest.body if s.op not in ("load", "store")})
    return ", ".join(ops[:6]) + (", ..." if len(ops) > 6 else "")
