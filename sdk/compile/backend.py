"""The backend template: a vendor subclasses :class:`Backend`, declares, and ``torch.compile`` works.

A vendor declares *what* its compiler takes — the IR level, the device, the decomposition
table, the supported operators, the fusion patterns, the minimum partition size, its options —
and implements one ``compile`` hook for its level:

- ``Level.TORCH`` and ``Level.ATEN``: ``compile(gm, example_inputs) -> callable``, one
  partition's ``fx.GraphModule`` (torch IR from Dynamo, or ATen IR from AOTAutograd) with
  example inputs (fake tensors and SymInts describing shapes and dtypes); the callable takes
  the partition's inputs as tensors on the backend's device and returns its outputs.
- ``Level.LOOP``: ``compile(kernel: LoopKernel) -> callable``, one Inductor loop-IR kernel; the
  callable is launched as ``fn(*buffers, *sizes)`` by the SDK's program runner. A backend that
  wants the whole program (to fuse across kernels) overrides ``compile_program(program)``
  instead, whose default calls ``compile`` kernel by kernel (:mod:`.loop_level`).
- ``Level.ONNX``: ``compile(model: onnx.ModelProto, example_inputs) -> callable``, one ATen
  partition exported to ONNX (:mod:`.onnx_level`); the callable takes the partition's inputs.

The SDK does everything else, the same way for every vendor: Dynamo registration (by name and
through the ``torch_dynamo_backends`` entry point), AOTAutograd (forward, backward and
inference graphs), decomposition, pattern rewriting, partitioning, running the partitions and
the eager fallback between them, moving tensors to the backend's device and back, checking what
the vendor returns, one backend object per option set (no spurious recompiles), an on-disk
artifact cache (``self.cache``), error handling (a vendor exception makes that partition fall
back with one warning; ``strict=True`` raises instead) and a report (:func:`last_report`).

Example::

    >>> import torch
    >>> from torchvendor.sdk import Backend, Level, register_backend, last_report
    >>> class Doubler(Backend):
    ...     name = "doc_relu_backend"
    ...     level = Level.ATEN
    ...     supported_ops = {"aten.relu", "aten.mul"}
    ...     def compile(self, gm, example_inputs):
    ...         return gm          # a real vendor compiles gm.graph for its device here
    >>> _ = register_backend(Doubler)
    >>> f = torch.compile(lambda x: torch.relu(x).sin() * 2, backend="doc_relu_backend")
    >>> with torch.no_grad():
    ...     y = f(torch.randn(8))
    >>> rep = last_report()
    >>> [sorted(p.ops) for p in rep.partitions], rep.unsupported()
    ([['aten.relu.default'], ['aten.mul.Tensor']], {'aten.sin.default': 1})
"""
from __future__ import annotations

import operator
import time
import warnings
from collections import Counter
from functools import partial
from typing import Any, Callable, ClassVar, Collection, Mapping, Sequence

import torch
import torch.fx as fx

from torchvendor.ir import aten_ir_hook, compat
from torchvendor.ir.fx_view import op_key
from torchvendor.partitioner.support import SupportRule, predicate, supported_ops as _supported_ops, unsupported_ops

from . import warm
from .cache import ArtifactCache
from .cache import graph_key as _graph_key
from .fx_outline import partition_and_outline
from .levels import (AtenLevel, BackendDefinitionError, BackendError, BackendFallbackWarning, Level, LevelRules,
                     TorchLevel)
from .loop_level import LOWERING_VERSION, CompiledProgram, LoopLevel, compile_kernels
from .onnx_level import OnnxLevel
from .report import CompileReport, GraphReport, PartitionRecord, _record

__all__ = ["Level", "Backend", "BackendError", "BackendDefinitionError", "BackendFallbackWarning",
           "CompiledProgram", "register_backend", "get_backend", "registered_backends", "op_key", "LEVELS"]

#: What each level decides (one object per level; a new level adds its own here).
LEVELS: dict[Level, LevelRules] = {Level.TORCH: TorchLevel(), Level.ATEN: AtenLevel(), Level.LOOP: LoopLevel(),
                                   Level.ONNX: OnnxLevel()}


#: Options every backend accepts, besides its own ``default_options``.
SDK_OPTIONS: dict[str, Any] = {
    "strict": False,         # raise BackendError instead of falling back after a vendor error
    "check_outputs": True,   # check count, dtype, shape and device of what a partition returns
    "cache_dir": None,       # artifact cache root (default: $TORCHVENDOR_CACHE_DIR or ~/.cache)
    "fallback": "eager",     # what runs the ops the backend does not claim: "eager" or "inductor"
}
_FALLBACKS = ("eager", "inductor")


class Backend:
    """Subclass, declare, implement ``compile``, then :func:`register_backend` (module docstring)."""

    #: the ``torch.compile(backend=...)`` name
    name: ClassVar[str] = ""
    #: where partitions run: "cpu", "cuda", a registered device name, or None (the inputs' device)
    device: ClassVar[str | None] = None
    level: ClassVar[Level] = Level.ATEN
    #: ATen level: a table from ``torchvendor.ir.decompositions`` (None: ``core_aten()``)
    decompositions: ClassVar[Any] = None
    #: op keys ("aten.mm", "aten.add.Tensor"; a packet names every overload), a
    #: ``torchvendor.partitioner`` rule, or None for every op; or override :meth:`supports`
    supported_ops: ClassVar[Collection[str] | SupportRule | None] = None
    #: fusion rules (``torchvendor.sdk.compile.patterns`` / ``fx_pattern.fx_rule``), applied before partitioning
    patterns: ClassVar[Sequence[Any]] = ()
    min_partition_size: ClassVar[int] = 1
    #: the backend's own options and their defaults; ``torch.compile(options=...)`` may set them
    default_options: ClassVar[Mapping[str, Any]] = {}
    #: bump when generated code changes: part of every cache key
    version: ClassVar[str] = "0"
    #: LOOP level: Inductor config keys set while the SDK lowers a graph to loop IR, e.g.
    #: ``{"layout_optimization": False}`` to keep convolutions in the model's own memory format
    #: (override :meth:`lowering_config` to decide per graph)
    lowering_options: ClassVar[Mapping[str, Any]] = {}
    # ---- ONNX level (sdk/compile/onnx_level.py) ----
    #: pattern_matcher rules over each partition's ONNX graph (``OnnxView``), applied before compile
    onnx_patterns: ClassVar[Sequence[Any]] = ()
    #: the opset of the exported models (None: ``torchvendor.ir.onnx_ir.OPSET``)
    onnx_opset: ClassVar[int | None] = None

    def __init__(self, **options: Any) -> None:
        known = {**SDK_OPTIONS, **self.default_options}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise BackendError(f"backend {self.name!r}: unknown option(s) {unknown}; it accepts {sorted(known)}")
        self.options: dict[str, Any] = {**known, **options}
        if self.options["fallback"] not in _FALLBACKS:
            raise BackendError(f"backend {self.name!r}: option fallback={self.options['fallback']!r}; use one of "
                               f"{list(_FALLBACKS)}")
        self.strict = bool(self.options["strict"])
        self._cache: ArtifactCache | None = None
        self._warned: set[str] = set()
        self._rule = self._support_rule()
        self._table: Any = None

    # ---- what a vendor may override ------------------------------------------------------------

    def supports(self, node: fx.Node) -> bool | str:
        """Whether this backend runs ``node`` (True, False, or a reason string). The default
        answers from :attr:`supported_ops`; override for rules that look at dtypes or shapes."""
        raise NotImplementedError  # never called: _support_rule uses supported_ops unless overridden

    def lowering_config(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Mapping[str, Any]:
        """LOOP level: the Inductor config keys set while lowering this partition (default
        :attr:`lowering_options`); part of the lowered program's cache key."""
        return self.lowering_options

    def compile(self, *args: Any) -> Callable[..., Any]:
        """The vendor's compiler for one partition (TORCH/ATEN) or one kernel (LOOP)."""
        raise NotImplementedError(f"backend {self.name!r} must implement compile() for level {self.level.value}")

    def compile_program(self, program: Any) -> CompiledProgram:
        """LOOP level: compile one partition's whole :class:`~torchvendor.ir.loop_ir.LoopProgram`.
        The default calls :meth:`compile` on each kernel (``loop_kernels(program)``); override it
        to see the program at once, e.g. to merge neighbouring kernels into one launch: return
        ``CompiledProgram(rewritten_program, {kernel name: callable})``, the rewrite built with
        ``dataclasses.replace`` on the public schema (the SDK runs the program you return)."""
        return compile_kernels(self, program)

    def extern_kernel(self, extern: Any, aten: Callable[..., Any], device: str) -> Callable[..., Any]:
        """LOOP level: what runs one extern kernel of a program (a matmul, a convolution: the
        :class:`~torchvendor.ir.loop_ir.ExternKernel` the loop IR leaves to a library), given
        its ATen operator and the device type; called with the operator's arguments. The default
        returns ``aten`` (ATen on the device); override to call the vendor's library (the CUDA
        backend runs cuBLAS/cuDNN on a PrivateUse1 GPU device this way)."""
        return aten

    def program_runner(self, runner: Callable[..., Any], program: Any) -> Callable[..., Any]:
        """LOOP level: what runs one partition, given the SDK's runner of its compiled kernels and
        its loop program. The default returns ``runner``; override to wrap it, e.g. to replay the
        partition's launches from a recorded command list (the CUDA backend's CUDA graphs)."""
        return runner

    # ---- services the SDK gives every backend ----------------------------------------------------

    @property
    def rules(self) -> LevelRules:
        """What this backend's level decides (``LEVELS[self.level]``)."""
        return LEVELS[self.level]

    @property
    def cache(self) -> ArtifactCache:
        """The on-disk artifact cache of this backend, version, option set and torch release."""
        if self._cache is None:
            opts = ",".join(f"{k}={self.options[k]!r}" for k in sorted(self.options) if k not in ("strict", "cache_dir"))
            self._cache = ArtifactCache(self.options["cache_dir"],
                                        namespace=f"{self.name}/{self.version}/{opts}/torch {torch.__version__}")
        return self._cache

    @staticmethod
    def graph_key(gm: fx.GraphModule, example_inputs: Sequence[Any], *extra: str) -> str:
        """A content key for one partition: its code and its inputs' dtypes, shapes, strides and
        offsets (symbolic sizes by name). Hand it to :attr:`cache` to cache a compiled engine.

        >>> import torch
        >>> gm = torch.fx.symbolic_trace(lambda x: x.relu())
        >>> Backend.graph_key(gm, [torch.ones(2)]) == Backend.graph_key(gm, [torch.zeros(2)])
        True
        """
        return _graph_key(gm, example_inputs, *extra)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} level={self.level.value} options={self.options}>"

    # ---- Dynamo entry ----------------------------------------------------------------------------

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any], **_: Any) -> Callable[..., Any]:
        """Dynamo calls this with each captured graph (``torch.compile(backend=<this object>)`` works too)."""
        report = CompileReport(self.name, dict(self.options), torch_version=torch.__version__)
        _record(report)
        if not self.rules.through_aot:
            return self._compile_graph("torch", report, time.perf_counter(), gm, list(example_inputs))
        started = time.perf_counter()
        key = self._bypass_key(gm, example_inputs)
        if key is not None:
            fast = self._warm_compile(report, started, key, list(example_inputs))
            if fast is not None:
                return fast
        hook = aten_ir_hook(partial(self._compile_graph, "forward", report, started),
                            partial(self._compile_graph, "backward", report, started),
                            partial(self._inference_graph, report, started, key),
                            decompositions=self._decomposition_table())
        return hook(gm, example_inputs)

    # ---- warm compile without AOTAutograd (sdk/compile/warm.py) ------------------------------------------

    def _bypass_key(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
        if self.options["fallback"] != "eager":  # Inductor's fallback wants AOT's tracing context
            return None
        try:
            return warm.bypass_key(gm, example_inputs, self.level.value, f"lowering {LOWERING_VERSION}")[0]
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
            compiled = self._compile_graph("inference", report, started, gm, examples)
        except Exception:  # noqa: BLE001 - never worse than the normal path, which reports it
            del report.graphs[-1:]
            return None
        report.graphs[-1].from_cache = True
        return warm.inference_function(compiled)

    def _inference_graph(self, report: CompileReport, started: float, key: str | None, gm: fx.GraphModule,
                         example_inputs: list[Any]) -> Callable[..., Any]:
        """AOTAutograd's inference compiler: cache the ATen graph (before patterns rewrite it)
        for the next warm compile when that is safe, then compile it."""
        try:
            why = warm.store(self.cache, key, gm, example_inputs) if key is not None else "not eligible"
        except Exception as e:  # noqa: BLE001 - e.g. an unwritable cache: compile without storing
            why = f"{type(e).__name__}: {e}"
        compiled = self._compile_graph("inference", report, started, gm, example_inputs)
        report.graphs[-1].graph_cache = "stored" if why is None else f"not stored: {why}"
        return compiled

    def _decomposition_table(self) -> Any:
        """The resolved table, built once per backend object (a warm compile paid ~7 ms for it)."""
        if self._table is None:
            self._table = self.rules.decompositions(self)
        return self._table

    def _support_rule(self) -> SupportRule | None:
        if type(self).supports is not Backend.supports:
            return predicate(lambda view, node: self.supports(node))
        ops = self.supported_ops
        if ops is None:
            return None
        if isinstance(ops, SupportRule):
            return ops
        if isinstance(ops, str) or not isinstance(ops, Collection):
            raise BackendDefinitionError(f"backend {self.name!r}: supported_ops must be a collection of op keys "
                                         f"(e.g. {{'aten.mm', 'aten.add.Tensor'}}), a partitioner rule or None; "
                                         f"got {ops!r}")
        return _supported_ops(ops)

    # ---- one graph -------------------------------------------------------------------------------

    def _compile_graph(self, kind: str, report: CompileReport, started: float, gm: fx.GraphModule,
                       example_inputs: list[Any]) -> Callable[..., Any]:
        graph = GraphReport(kind=kind, backend=self.name, device=self.device or _device_of(example_inputs),
                            fallback=self.options["fallback"] if self.rules.through_aot else "eager")
        report.graphs.append(graph)
        times = graph.stage_times
        now = time.perf_counter()
        if kind in ("forward", "inference", "torch"):  # the backward's trace happened with the forward
            times["capture_and_decomposition"] = now - started
        refused = self.rules.refuses(self, _device_of(example_inputs))
        if refused is not None:
            graph.unsupported = dict(Counter(op_key(n.target) for n in gm.graph.nodes if n.op == "call_function"))
            for op in graph.unsupported:
                graph.reasons[op] = [refused]
            return gm
        if self.patterns:
            from .fx_pattern import rewrite_fx

            result = rewrite_fx(gm, list(self.patterns))
            graph.fusions = dict(getattr(result, "by_rule", {}) or ({"patterns": result.replaced} if result.replaced else {}))
            times["matching"] = time.perf_counter() - now
            now = time.perf_counter()
        rule = self.rules.support_rule(self._rule if self._rule is not None else unsupported_ops(()))
        # A view at a partition's edge is ejected to lower the bytes crossing the boundary (the
        # partitioner's cheap_ops); a loop program on the host reads a view for free, where
        # running it outside costs an ATen call on every call of the model.
        keep_views = {"cheap_ops": ()} if self.level is Level.LOOP and _device_of(example_inputs) == "cpu" else {}
        outlined, result = partition_and_outline(gm, rule, min_size=self.min_partition_size, **keep_views)
        graph.partition_result = result
        for op, info in result.report().unsupported.items():
            graph.unsupported[op] = info["count"]
            graph.reasons[op] = sorted(info["reasons"])
        times["partitioning"] = time.perf_counter() - now
        now = time.perf_counter()
        for part in result.partitions:
            name = f"fused_{part.id}"
            sub = getattr(outlined, name)
            setattr(outlined, name, self._partition_module(sub, name, kind, graph))
        times["vendor_compile"] = time.perf_counter() - now
        if self.options["fallback"] == "inductor" and result.fallback and self.rules.through_aot:
            now = time.perf_counter()
            outlined = _inductor_fallback(outlined)
            times["inductor_fallback"] = time.perf_counter() - now
        return outlined

    def _partition_module(self, sub: fx.GraphModule, name: str, kind: str, graph: GraphReport) -> torch.nn.Module:
        ops = Counter(op_key(n.target) for n in sub.graph.nodes if n.op == "call_function")
        record = PartitionRecord(name=name, ops=dict(ops))
        graph.partitions.append(record)
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        examples = [n.meta.get("val", n.meta.get("example_value")) for n in placeholders]
        outputs = _output_nodes(sub)
        device = _device_of([*examples, *map(_example_value, outputs)])
        started = time.perf_counter()
        compiled: Callable[..., Any] | None
        try:
            compiled = self.rules.compile_partition(self, sub, examples, kind, device, name, graph)
            if compiled is None:
                raise BackendError("compile() returned None; return a callable (e.g. the GraphModule itself)")
        except Exception as e:  # noqa: BLE001 - any vendor failure falls back (or raises in strict mode)
            self._vendor_failed(record, "compile", e)
            compiled = None
        record.compile_seconds = time.perf_counter() - started
        # an effect token carries no data: AOTAutograd passes None for it and compilers return it
        # as they got it, so it is not checked
        expected = [None if _is_effect_token(n) else _meta(_example_value(n)) for n in outputs]
        return PartitionCall(self, record, compiled, sub, expected, device)

    # ---- errors ----------------------------------------------------------------------------------

    def _vendor_failed(self, record: PartitionRecord, stage: str, error: BaseException) -> None:
        ops = ", ".join(sorted(record.ops)) or "no ops"
        message = (f"torchvendor backend {self.name!r}: {stage} of partition {record.name} ({ops}) failed: "
                   f"{type(error).__name__}: {error}")
        if self.strict:
            raise BackendError(message + " (strict=True; without it the partition falls back to eager)") from error
        record.status, record.reason = "fallback", f"{stage} failed: {type(error).__name__}: {error}"
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(message + "; the partition falls back to eager", BackendFallbackWarning, stacklevel=2)


class PartitionCall(torch.nn.Module):
    """Runs one partition: the vendor's callable on the backend's device, else the eager fallback.

    Moves tensors to the backend's device and results back, checks what the vendor returns
    against the graph's metadata, counts the device's CPU fallback on the first call, and turns
    a vendor exception into a fallback (or a :class:`BackendError` in strict mode).
    """

    def __init__(self, backend: Backend, record: PartitionRecord, compiled: Callable[..., Any] | None,
                 fallback: fx.GraphModule, expected: list[tuple | None], device: str) -> None:
        super().__init__()
        self.backend, self.record, self.compiled, self.fallback = backend, record, compiled, fallback
        self.expected = expected
        self.single = not isinstance(_output_arg(fallback), (tuple, list))
        target = backend.device
        self.to_device = torch.device(target) if target is not None and target != device else None
        self.check = bool(backend.options["check_outputs"])
        self.lost_backward_check = backend.rules.checks_backward
        #: per output: (dtype, shape, device type) where every size is static, for the quick check
        self._quick = [None if e is None else (e[0], e[1] if all(isinstance(s, int) for s in e[1]) else None,
                                               e[2].type) for e in expected]

    # A partition runs on every call of a small model: skip nn.Module's hook dispatch (nothing
    # registers hooks on this internal module), a microsecond or two per call.
    def __call__(self, *args: Any) -> Any:
        return self.forward(*args)

    def forward(self, *args: Any) -> Any:
        if self.compiled is None:
            return self.fallback(*args)
        moved = args if self.to_device is None else tuple(
            a.to(self.to_device) if isinstance(a, torch.Tensor) else a for a in args)
        watch = _device_module(moved) if self.record.calls == 0 else None
        before = watch.fallback_counts() if watch is not None else None
        try:
            out = self.compiled(*moved)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if self.to_device is not None:
                outs = [o.to(e[2]) if isinstance(o, torch.Tensor) and e is not None else o
                        for o, e in zip(outs, self.expected)]
            problem = self._problem(args, outs) if self.check and not self._fine(outs) else None
            if problem:
                raise BackendError(problem)
        except Exception as e:  # noqa: BLE001
            self.backend._vendor_failed(self.record, "run", e)
            self.compiled = None
            return self.fallback(*args)
        if before is not None:
            after = watch.fallback_counts()
            self.record.device_fallback = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
        self.record.calls += 1
        return outs[0] if self.single else tuple(outs)

    def _fine(self, outs: list[Any]) -> bool:
        """The common case of :meth:`_problem` at a fraction of its cost: as many outputs as
        expected, each tensor one of its dtype, static shape and device type, and no backward
        to check; anything else takes :meth:`_problem`."""
        if len(outs) != len(self._quick) or (self.lost_backward_check and torch.is_grad_enabled()):
            return False
        for o, q in zip(outs, self._quick):
            if q is not None and not (isinstance(o, torch.Tensor) and o.dtype == q[0] and q[1] is not None
                                      and o.shape == q[1] and o.device.type == q[2]):
                return False
        return True

    def _problem(self, args: Sequence[Any], outs: list[Any]) -> str | None:
        if len(outs) != len(self.expected):
            return f"returned {len(outs)} output(s), the graph has {len(self.expected)}"
        for i, (o, e) in enumerate(zip(outs, self.expected)):
            if e is None:
                continue
            if not isinstance(o, torch.Tensor):
                return f"output {i} is a {type(o).__name__}, expected a tensor"
            dtype, shape, device = e
            if o.dtype != dtype:
                return f"output {i} has dtype {o.dtype}, expected {dtype}"
            if o.dim() != len(shape) or any(isinstance(s, int) and s != t for s, t in zip(shape, o.shape)):
                return f"output {i} has shape {tuple(o.shape)}, expected {tuple(shape)}"
            if o.device.type != device.type and not _aten_cpu_scalar(o, device):
                return f"output {i} is on {o.device}, expected {device.type}"
        if self.lost_backward_check and torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            if not any(isinstance(o, torch.Tensor) and o.requires_grad for o in outs):
                return ("no output requires grad although an input does: the compiled partition loses the backward "
                        "(at the torch level the vendor's callable must be differentiable)")
        return None


# ---- registration ----------------------------------------------------------------------------------

_REGISTERED: dict[str, tuple[type[Backend], Callable[..., Any]]] = {}
_INSTANCES: dict[tuple[type[Backend], tuple], Backend] = {}


def _validate(cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendDefinitionError(f"register_backend expects a subclass of torchvendor.sdk.Backend, got {cls!r}")
    if not isinstance(cls.name, str) or not cls.name.isidentifier():
        raise BackendDefinitionError(f"{cls.__name__}.name must be a Python identifier such as 'acme' "
                                     f"(it becomes torch.compile(backend=...)); got {cls.name!r}")
    if not isinstance(cls.level, Level) or cls.level not in LEVELS:
        raise BackendDefinitionError(f"{cls.__name__}.level must be one of "
                                     f"{', '.join(f'Level.{level.name}' for level in LEVELS)}; got {cls.level!r}")
    if cls.compile is Backend.compile and cls.compile_program is Backend.compile_program:
        raise BackendDefinitionError(f"{cls.__name__} must implement compile() for level {cls.level.value}")
    if not isinstance(cls.min_partition_size, int) or cls.min_partition_size < 1:
        raise BackendDefinitionError(f"{cls.__name__}.min_partition_size must be an int >= 1; "
                                     f"got {cls.min_partition_size!r}")
    LEVELS[cls.level].check_definition(cls)


def _options_key(options: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in options.items()))


def get_backend(backend: str | type[Backend], **options: Any) -> Backend:
    """The one backend object for this class (or registered name) and option set.

    Dynamo guards on the backend's identity, so one object per option set keeps
    ``torch.compile`` from recompiling when two models use the same backend and options.

    >>> import torch
    >>> class Eager(Backend):
    ...     name = "doc_get_backend"
    ...     def compile(self, gm, example_inputs):
    ...         return gm
    >>> get_backend(Eager) is get_backend(Eager), get_backend(Eager, strict=True).strict
    (True, True)
    """
    if isinstance(backend, str):
        if backend not in _REGISTERED:
            raise BackendError(f"no torchvendor backend named {backend!r} is registered; registered: "
                               f"{sorted(_REGISTERED)} (import the vendor package or call register_backend)")
        backend = _REGISTERED[backend][0]
    _validate(backend)
    key = (backend, _options_key(options))
    if key not in _INSTANCES:
        _INSTANCES[key] = backend(**options)
    return _INSTANCES[key]


def register_backend(cls: type[Backend]) -> Callable[..., Any]:
    """Make ``torch.compile(model, backend=cls.name, options={...})`` use ``cls``; returns the
    Dynamo compiler function. Point a ``torch_dynamo_backends`` entry point at it (assign it to
    a module attribute) and ``torch.compile`` finds the backend without an import:

    .. code-block:: toml

        [project.entry-points.torch_dynamo_backends]
        acme = "acme_torch.backend:dynamo_backend"

    Registering the same class again returns the same function; another class under a name
    that is taken raises :class:`BackendDefinitionError`.

    >>> class Mine(Backend):
    ...     name = "doc_register_backend"
    ...     def compile(self, gm, example_inputs):
    ...         return gm
    >>> fn = register_backend(Mine)
    >>> fn is register_backend(Mine), "doc_register_backend" in registered_backends()
    (True, True)
    """
    _validate(cls)
    if cls.name in _REGISTERED:
        owner, fn = _REGISTERED[cls.name]
        if owner is cls or (owner.__qualname__ == cls.__qualname__ and owner.__module__ == cls.__module__):
            _REGISTERED[cls.name] = (cls, fn)  # a reloaded module: the newest class wins
            return fn
        raise BackendDefinitionError(f"backend name {cls.name!r} is already registered by "
                                     f"{owner.__module__}.{owner.__qualname__}; choose another name")

    def dynamo_backend(gm: fx.GraphModule, example_inputs: list[Any], *, options: Mapping[str, Any] | None = None,
                       mode: str | None = None, **_: Any) -> Callable[..., Any]:
        return get_backend(_REGISTERED[cls.name][0], **dict(options or {}))(gm, example_inputs)

    dynamo_backend.__name__ = cls.name
    dynamo_backend.__qualname__ = f"{cls.__qualname__}.dynamo_backend"
    state = compat.dynamo_backend_state(cls.name)
    if state == "loaded" and compat.dynamo_registered_backend(cls.name) is not dynamo_backend:
        raise BackendDefinitionError(f"torch.compile already has a backend named {cls.name!r} that is not "
                                     f"{cls.__qualname__}; choose another name")
    _REGISTERED[cls.name] = (cls, dynamo_backend)
    if state is None:
        compat.dynamo_register_backend(dynamo_backend, cls.name)
    # state == "entry_point": Dynamo loads the entry point (this function) on first use.
    return dynamo_backend


def registered_backends() -> list[str]:
    """Names of the torchvendor backends registered in this process.

    >>> isinstance(registered_backends(), list)
    True
    """
    return sorted(_REGISTERED)


# ---- helpers ---------------------------------------------------------------------------------------

def _inductor_fallback(gm: fx.GraphModule) -> fx.GraphModule:
    """Outline the maximal convex groups of ops between the vendor's partitions and compile each
    with Inductor (``fallback="inductor"``); the vendor's partitions stay as they are."""
    def not_vendor(view: Any, node: fx.Node) -> bool | str:
        return not isinstance(getattr(gm, str(node.target), None), PartitionCall) or "a vendor partition"

    outlined, result = partition_and_outline(gm, predicate(not_vendor), prefix="inductor_")
    for part in result.partitions:
        name = f"inductor_{part.id}"
        sub = getattr(outlined, name)
        setattr(outlined, name, _InductorPartition(sub))
    return outlined


class _InductorPartition(torch.nn.Module):
    """A fallback group compiled by Inductor (its ``compile_fx_inner`` takes a graph returning a tuple)."""

    def __init__(self, sub: fx.GraphModule) -> None:
        super().__init__()
        out = sub.graph.output_node()
        self.single = not isinstance(out.args[0], (tuple, list))
        if self.single:
            out.args = ((out.args[0],),)
            sub.recompile()
        examples = [n.meta.get("val") for n in sub.graph.nodes if n.op == "placeholder"]
        with compat.outside_tracing_context():
            self.compiled = compat.inductor().compile_fx_inner(sub, examples)

    def forward(self, *args: Any) -> Any:
        out = self.compiled(list(args))
        return out[0] if self.single else tuple(out)


def _device_of(values: Sequence[Any]) -> str:
    """The device type the work on ``values`` runs on: the first that is not ``cpu`` (a CPU
    tensor beside device tensors is a scalar or ATen's bookkeeping, e.g. the philox seed and
    offset of efficient attention), else ``cpu``."""
    types = [v.device.type for v in values if isinstance(v, torch.Tensor)]
    return next((t for t in types if t != "cpu"), "cpu")


def _output_arg(gm: fx.GraphModule) -> Any:
    return gm.graph.output_node().args[0]


def _output_nodes(gm: fx.GraphModule) -> list[Any]:
    out = _output_arg(gm)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _example_value(node: Any) -> Any:
    return node.meta.get("val", node.meta.get("example_value")) if isinstance(node, fx.Node) else None


def _is_effect_token(node: Any) -> bool:
    """Whether ``node`` is the token that ``higher_order.with_effects`` threads through
    side-effecting ops (element 0 of its result)."""
    if not (isinstance(node, fx.Node) and node.target is operator.getitem and node.args[1] == 0):
        return False
    producer = node.args[0]
    return (isinstance(producer, fx.Node) and producer.op == "call_function"
            and op_key(producer.target) == "higher_order.with_effects")


def _meta(value: Any) -> tuple | None:
    if not isinstance(value, torch.Tensor):
        return None
    shape = tuple(int(s) if isinstance(s, int) else s for s in value.shape)
    return value.dtype, shape, value.device


def _aten_cpu_scalar(value: torch.Tensor, expected: torch.device) -> bool:
    """A 0-d CPU tensor where the graph's metadata says a device tensor: ATen keeps some
    bookkeeping scalars on the host whatever its meta function says (efficient attention's philox
    seed and offset on ``cuda``: eager and Inductor return them on the CPU too)."""
    return value.dim() == 0 and value.device.type == "cpu" and expected.type != "cpu"


def _device_module(args: Sequence[Any]) -> Any:
    for a in args:
        if isinstance(a, torch.Tensor):
            module = getattr(torch, a.device.type, None)
            return module if hasattr(module, "fallback_counts") else None
    return None


