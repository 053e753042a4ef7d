"""The backend template: a vendor subclasses one level class, declares, and ``torch.compile`` works.

A vendor declares *what* its compiler takes — the device, the supported operators, the fusion
patterns, the minimum partition size, its options — and implements one ``compile`` hook for its
level, by subclassing that level's class (each owns its hooks and its part of the flow):

- :class:`~.torch_level.TorchBackend` and :class:`~.aten_level.AtenBackend`:
  ``compile(gm, example_inputs) -> callable``, one partition's ``fx.GraphModule`` (torch IR from
  Dynamo, or ATen IR from AOTAutograd) with example inputs (fake tensors and SymInts describing
  shapes and dtypes); the callable takes the partition's inputs as tensors on the backend's
  device and returns its outputs.
- :class:`~.loop_level.LoopBackend`: ``compile(kernel: LoopKernel) -> callable``, one Inductor
  loop-IR kernel, launched as ``fn(*buffers, *sizes)`` by the SDK's program runner (and the
  program-level hooks: ``transforms``, ``compile_program``, ``finish``, ...).
- :class:`~.onnx_level.OnnxBackend`: ``compile(model: onnx.ModelProto, example_inputs) ->
  callable``, one ATen partition exported to ONNX.

The SDK does everything else, the same way for every vendor: Dynamo registration (by name and
through the ``torch_dynamo_backends`` entry point, :mod:`.registry`), AOTAutograd (forward,
backward and inference graphs, :mod:`.aot_flow`), decomposition, pattern rewriting,
partitioning, running the partitions and the eager fallback between them (:mod:`.partition_call`),
moving tensors to the backend's device and back, checking what the vendor returns, one backend
object per option set (no spurious recompiles), an on-disk artifact cache (``self.cache``),
error handling (a vendor exception makes that partition fall back with one warning;
``strict=True`` raises instead) and a report (:func:`last_report`).

This module is the part every level shares and names no level: the options, the cache, one
graph's matching, partitioning and per-partition compile (:meth:`Backend._compile_graph`), and
the few questions it asks the level class (``_take_graph``, ``_compile_partition``, ...).

Example::

    >>> import torch
    >>> from torchvendor.sdk import AtenBackend, register_backend, last_report
    >>> class Doubler(AtenBackend):
    ...     name = "doc_relu_backend"
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
from typing import Any, Callable, ClassVar, Collection, Mapping, Sequence

import torch
import torch.fx as fx

from torchvendor.ir.fx_view import op_key
from torchvendor.partitioner.support import SupportRule, check, predicate, supported_ops as _supported_ops, \
    unsupported_ops

from .cache import ArtifactCache
from .cache import graph_key as _graph_key
from .fx_outline import partition_and_outline
from .levels import BackendDefinitionError, BackendError, BackendFallbackWarning, Level
from .partition_call import PartitionCall, device_of_values, example_value, output_nodes, value_meta
from .report import CompileReport, GraphReport, PartitionRecord, _record

__all__ = ["Backend", "BackendError", "BackendDefinitionError", "BackendFallbackWarning", "op_key", "SDK_OPTIONS"]


#: Options every backend accepts, besides its own ``default_options``.
SDK_OPTIONS: dict[str, Any] = {
    "strict": False,         # raise BackendError instead of falling back after a vendor error
    "check_outputs": True,   # check count, dtype, shape and device of what a partition returns
    "cache_dir": None,       # artifact cache root (default: $TORCHVENDOR_CACHE_DIR or ~/.cache)
    "fallback": "eager",     # what runs the ops the backend does not claim: "eager" or "inductor"
}
_FALLBACKS = ("eager", "inductor")


class Backend:
    """The level-agnostic template; a vendor subclasses a level class instead (module docstring).

    A level class sets :attr:`level` and answers the template's questions (the methods under
    "what the level class decides"); the vendor overrides only the hooks it documents.
    """

    #: the ``torch.compile(backend=...)`` name
    name: ClassVar[str] = ""
    #: where partitions run: "cpu", "cuda", a registered device name, or None (the inputs' device)
    device: ClassVar[str | None] = None
    #: the IR level, set by the level class (``TorchBackend``, ``AtenBackend``, ``LoopBackend``, ``OnnxBackend``)
    level: ClassVar[Level | None] = None
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

    def __init__(self, **options: Any) -> None:
        known = {**SDK_OPTIONS, **self._level_options(), **self.default_options}
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

    # ---- what a vendor may override ------------------------------------------------------------

    def supports(self, node: fx.Node) -> bool | str:
        """Whether this backend runs ``node`` (True, False, or a reason string). The default
        answers from :attr:`supported_ops`; override for rules that look at dtypes or shapes."""
        raise NotImplementedError  # never called: _support_rule uses supported_ops unless overridden

    def compile(self, *args: Any) -> Callable[..., Any]:
        """The vendor's compiler for one partition (TORCH/ATEN/ONNX) or one kernel (LOOP)."""
        raise NotImplementedError(f"backend {self.name!r} must implement compile()")

    # ---- what the level class decides (level-neutral defaults) ---------------------------------

    #: check that a partition that takes inputs requiring grad returns outputs that do
    _checks_backward: ClassVar[bool] = False

    def _take_graph(self, gm: fx.GraphModule, example_inputs: list[Any], report: CompileReport) -> Callable[..., Any]:
        """How Dynamo's graph reaches :meth:`_compile_graph` (directly, or through AOTAutograd)."""
        raise NotImplementedError(f"{type(self).__name__} subclasses no level class")

    def _refuses(self, device: str) -> str | None:
        """Why this backend cannot take a graph whose inputs are on ``device`` (None: it can)."""
        return None

    def _level_rule(self, rule: SupportRule) -> SupportRule:
        """The rule the partitioner applies: the backend's own, narrowed to what the level can express."""
        return rule

    def _level_options(self) -> dict[str, Any]:
        """Options the level class adds to :data:`SDK_OPTIONS`, with their defaults."""
        return {}

    def _partition_options(self, device: str) -> dict[str, Any]:
        """Extra :class:`~torchvendor.partitioner.PartitionOptions` for a graph on ``device``."""
        return {}

    def _compile_partition(self, sub: fx.GraphModule, examples: Sequence[Any], kind: str, device: str,
                           name: str, graph: GraphReport) -> Callable[..., Any]:
        """The callable that runs one partition (``kind``: inference, forward, backward, torch)."""
        return self.compile(sub, examples)

    @classmethod
    def _check_definition(cls) -> None:
        """Raise :class:`BackendDefinitionError` if ``cls`` declares what the SDK cannot use."""
        if not isinstance(cls.name, str) or not cls.name.isidentifier():
            raise BackendDefinitionError(f"{cls.__name__}.name must be a Python identifier such as 'acme' "
                                         f"(it becomes torch.compile(backend=...)); got {cls.name!r}")
        if not isinstance(cls.min_partition_size, int) or cls.min_partition_size < 1:
            raise BackendDefinitionError(f"{cls.__name__}.min_partition_size must be an int >= 1; "
                                         f"got {cls.min_partition_size!r}")
        if not cls._implements_compile():
            raise BackendDefinitionError(f"{cls.__name__} must implement compile() for level {cls.level.value}")

    @classmethod
    def _implements_compile(cls) -> bool:
        return cls.compile is not Backend.compile

    # ---- services the SDK gives every backend ----------------------------------------------------

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
        level = self.level.value if self.level is not None else None
        return f"<{type(self).__name__} {self.name!r} level={level} options={self.options}>"

    # ---- Dynamo entry ----------------------------------------------------------------------------

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any], **_: Any) -> Callable[..., Any]:
        """Dynamo calls this with each captured graph (``torch.compile(backend=<this object>)`` works too)."""
        report = CompileReport(self.name, dict(self.options), torch_version=torch.__version__)
        _record(report)
        return self._take_graph(gm, list(example_inputs), report)

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
                       example_inputs: list[Any]) -> fx.GraphModule:
        """Match, partition and compile one graph; returns it with each partition a :class:`PartitionCall`."""
        # the outputs too: an input-less graph (arange, eye, a window) has its device only there
        inputs_on = device_of_values([*example_inputs, *map(example_value, output_nodes(gm))])
        graph = GraphReport(kind=kind, backend=self.name, device=self.device or inputs_on)
        report.graphs.append(graph)
        times = graph.stage_times
        now = time.perf_counter()
        if kind in ("forward", "inference", "torch"):  # the backward's trace happened with the forward
            times["capture_and_decomposition"] = now - started
        refused = self._refuses(inputs_on)
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
        rule = self._level_rule(self._rule if self._rule is not None else unsupported_ops(()))
        outlined, result = partition_and_outline(gm, rule, min_size=self.min_partition_size,
                                                 **self._partition_options(inputs_on))
        graph.partition_result = result
        _record_outside(graph, result, rule)
        times["partitioning"] = time.perf_counter() - now
        now = time.perf_counter()
        for part in result.partitions:
            name = f"fused_{part.id}"
            sub = getattr(outlined, name)
            setattr(outlined, name, self._partition_module(sub, name, kind, graph))
        times["vendor_compile"] = time.perf_counter() - now
        return outlined

    def _partition_module(self, sub: fx.GraphModule, name: str, kind: str, graph: GraphReport) -> torch.nn.Module:
        ops = Counter(op_key(n.target) for n in sub.graph.nodes if n.op == "call_function")
        record = PartitionRecord(name=name, ops=dict(ops))
        graph.partitions.append(record)
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        examples = [n.meta.get("val", n.meta.get("example_value")) for n in placeholders]
        outputs = output_nodes(sub)
        device = device_of_values([*examples, *map(example_value, outputs)])
        started = time.perf_counter()
        compiled: Callable[..., Any] | None
        try:
            compiled = self._compile_partition(sub, examples, kind, device, name, graph)
            if compiled is None:
                raise BackendError("compile() returned None; return a callable (e.g. the GraphModule itself)")
        except Exception as e:  # noqa: BLE001 - any vendor failure falls back (or raises in strict mode)
            self._vendor_failed(record, "compile", e)
            compiled = None
        record.compile_seconds = time.perf_counter() - started
        # an effect token carries no data: AOTAutograd passes None for it and compilers return it
        # as they got it, so it is not checked
        expected = [None if _is_effect_token(n) else value_meta(example_value(n)) for n in outputs]
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


def _record_outside(graph: GraphReport, result: Any, rule: SupportRule) -> None:
    """Sort the op nodes outside every partition into the graph's report: those the support rule
    refused (``unsupported``) and those it claimed but the partitioner left outside
    (``left_outside``: a view at a partition's edge, a partition below ``min_partition_size``)."""
    view, op_of = result.view, (result.op_keys.get if result.op_keys else result.view.op)
    for node in result.fallback:
        op, why = op_of(node), result.reasons.get(node, "")
        if check(rule.evaluate(view, node, op)) is None:  # claimed: the partitioner's own choice
            reasons = graph.left_outside.setdefault(op, {})
            reasons[why] = reasons.get(why, 0) + 1
            continue
        graph.unsupported[op] = graph.unsupported.get(op, 0) + 1
        if why not in graph.reasons.setdefault(op, []):
            graph.reasons[op].append(why)
    for op in graph.reasons:
        graph.reasons[op].sort()


def _is_effect_token(node: Any) -> bool:
    """Whether ``node`` is the token that ``higher_order.with_effects`` threads through
    side-effecting ops (element 0 of its result)."""
    if not (isinstance(node, fx.Node) and node.target is operator.getitem and node.args[1] == 0):
        return False
    producer = node.args[0]
    return (isinstance(producer, fx.Node) and producer.op == "call_function"
            and op_key(producer.target) == "higher_order.with_effects")
