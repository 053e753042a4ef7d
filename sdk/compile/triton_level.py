"""``Level.TRITON``: :class:`TritonBackend`, each partition compiled by Inductor into Triton kernels
for the vendor's device, built by the vendor's Triton backend and launched through its runtime.

A vendor whose compiler is a Triton backend (a ``triton.backends`` entry: a compiler for its
``GPUTarget``) declares the target and the binary format its runtime's module loader takes.
One partition's path:

1. Inductor lowers the partition with its Triton code generation (``TritonScheduling``)
   registered for the vendor's PrivateUse1 device, inside this compile only (another
   ``torch.compile`` in the process sees Inductor as it was);
2. each kernel's Triton source goes through :meth:`TritonBackend.kernel_source` (inspect or
   rewrite it), then ``triton.compile`` builds each of Inductor's configurations for
   :attr:`~TritonBackend.triton_target` (architecture :meth:`~TritonBackend.triton_arch`); the
   TTIR goes through :meth:`~TritonBackend.kernel_ir` (return a rewrite to rebuild from it);
   binaries are cached on disk by content (the backend's :attr:`cache`);
3. the image (``asm[binary_format]``) is loaded with the runtime's module load and get function
   (``torch.<device>.load_module``/``get_function``, as ``torchvendor.sdk``'s) and each call
   launched with ``torch.<device>.launch`` on the device's current stream: block ``num_warps x warp_size``
   threads, Inductor's grid, the kernel's non-constexpr arguments packed at their C alignment
   (pointers as device addresses), then the scratch pointers the target's kernels take;
4. Inductor's extern kernels (matmul, convolution) go through :meth:`~TritonBackend.extern_kernel`.

Partitioning, fallback between partitions, training, the report and the warm cache work as at
every level. Without Triton, or with no installed backend for the target, the graph runs
eagerly and the report says why.

Example (no Triton needed to declare; compiling needs the target's backend)::

    >>> from torchvendor.sdk import TritonBackend, Level
    >>> class Acme(TritonBackend):
    ...     name = "doc_triton_level"
    ...     triton_target, binary_format = "acme", "acmebin"
    ...     def kernel_source(self, name, source):
    ...         return "# built for acme\\n" + source
    >>> Acme.level is Level.TRITON, Acme().kernel_source("k", "pass")
    (True, '# built for acme\\npass')
"""
from __future__ import annotations

import functools
import os
import types
from typing import Any, Callable, ClassVar, Mapping, Sequence

import torch
import torch.fx as fx

from torchvendor.ir import compat
from torchvendor.ir import decompositions as _decomp
from torchvendor.ir.compat import triton_api

from .aot_flow import AotFlow
from .cache import content_hash
from .levels import BackendDefinitionError, Level
from .report import GraphReport

__all__ = ["TritonBackend", "TRITON_LEVEL_VERSION"]

#: bump when the SDK's Triton path changes what it generates or how it launches (part of every key)
TRITON_LEVEL_VERSION = "1"

#: Inductor settings for the level's compiles: no FX-graph cache (the wrapper names this
#: process's runtime), one wrapper per graph, no templates, the Python wrapper, no compile
#: workers (they would build each kernel for Inductor's own launcher too); random ops stay ATen
#: calls (Inductor lowers them with its joint-graph passes, before partitioning).
_SETTINGS: Mapping[str, Any] = types.MappingProxyType(dict(
    fx_graph_cache=False, fx_graph_remote_cache=False, graph_partition=False, cpp_wrapper=False,
    max_autotune=False, max_autotune_gemm=False, combo_kernels=False, freezing=False, benchmark_kernel=False,
    fallback_random=True, compile_threads=1, **{"triton.cudagraphs": False}))


class TritonBackend(AotFlow):
    """Subclass for ``Level.TRITON``: name the Triton target and binary format; hooks optional."""

    level: ClassVar[Level] = Level.TRITON
    #: the ``GPUTarget`` backend name the vendor's ``triton.backends`` compiler accepts ("cuda" for NVIDIA's)
    triton_target: ClassVar[str] = ""
    #: the key of the compiled kernel's ``asm`` that the runtime's module loader accepts ("cubin")
    binary_format: ClassVar[str] = ""
    #: threads per warp of the target (the launch's block is ``num_warps * warp_size`` threads)
    warp_size: ClassVar[int] = 32
    #: more ``triton.compile`` options for every kernel (e.g. ``{"enable_fp_fusion": False}``)
    compile_options: ClassVar[Mapping[str, Any]] = {}
    #: Inductor config keys set while lowering (override :meth:`lowering_config` to decide per graph)
    lowering_options: ClassVar[Mapping[str, Any]] = {}
    #: AOTAutograd's forward/backward split: Inductor's own (min-cut, recomputing cheap ops)
    aot_partition: ClassVar[str] = "min_cut"
    #: launch on the runtime's NULL stream while the device's current stream is its default one:
    #: for a runtime whose NULL stream is ordered with all of the device's streams and is the
    #: stream the extern kernels' library runs on (the reference CUDA runtime: CUDA's legacy
    #: default stream, torch's default ``cuda`` stream), so kernels and externs share a stream
    null_default_stream: ClassVar[bool] = False

    # ---- what a vendor may override ------------------------------------------------------------

    def kernel_source(self, name: str, source: str) -> str:
        """Inspect or rewrite one kernel's Triton source (Inductor's whole kernel module: imports,
        the ``@triton_heuristics`` decorator, the ``@triton.jit`` function) before it is compiled;
        return the source to compile. Default: unchanged."""
        return source

    def kernel_ir(self, name: str, ttir: str) -> str | None:
        """Inspect one compiled configuration's TTIR; return a rewrite to rebuild the kernel from
        it, or None (default) to keep the binary as built."""
        return None

    def triton_arch(self, properties: Any) -> Any:
        """The ``GPUTarget`` architecture for a device with ``properties``
        (``torch.<device>.get_device_properties``); default ``major * 10 + minor``."""
        return int(properties.major) * 10 + int(properties.minor)

    def extern_kernel(self, name: str, fn: Callable[..., Any], device: str) -> Callable[..., Any]:
        """What runs Inductor's extern kernel ``name`` (``"mm"``, ``"convolution"``...: a library
        call in the generated wrapper, ``fn`` ATen's) on ``device``. Default ``fn``."""
        return fn

    @staticmethod
    def alias_extern(fn: Callable[..., Any], device: str, library: str) -> Callable[..., Any] | None:
        """``fn``, a function of torch device ``library`` (cuBLAS's ``torch.mm`` on ``"cuda"``), run
        on aliases of its ``device`` operands, for a device whose memory ``library`` addresses
        too; None where the device layer's build lacks it (``torchvendor._C.ExternCall``, C++)
        or ``TORCHVENDOR_TRITON_NATIVE=0``. Each tensor operand on ``device`` becomes a ``library``
        tensor over the same bytes (no copy); a result in an operand's memory comes back as that
        operand (or a view of it), another as a ``device`` tensor over the result's memory, which
        keeps it alive. Where either device's current stream is not its default, ``device`` is
        synchronized before the call and ``library``'s stream after.

        >>> f = TritonBackend.alias_extern(torch.add, "cpu", "cpu")
        >>> f is None or f(torch.ones(2), torch.ones(2)).tolist() == [2.0, 2.0]
        True
        """
        make = getattr(_device_layer(), "ExternCall", None)
        if make is None or not triton_api.native_launch_enabled():
            return None
        call = make(fn, device, library)
        return getattr(call, "function", call)  # a builtin: called without pybind11's argument matching

    def lowering_config(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Mapping[str, Any]:
        """The Inductor config keys set while lowering this partition (default :attr:`lowering_options`)."""
        return self.lowering_options

    # ---- the level's part of the flow ------------------------------------------------------------

    def _decompositions(self) -> Any:
        from torchvendor.ir.loop_ir import inductor_decompositions

        compat.inductor()  # imports Inductor's lowering, which some of its decompositions call (max_pool2d)
        return _decomp.resolve(inductor_decompositions())

    def _warm_key_parts(self) -> tuple[str, ...]:
        return (f"triton {TRITON_LEVEL_VERSION}",)

    def _refuses(self, device: str) -> str | None:
        if self.device is not None and device != self.device:
            return f"the graph's tensors are on {device}; backend {self.name!r} generates code for {self.device} only"
        if device != compat.privateuse1_backend_name():
            return (f"the graph's tensors are on {device}; the Triton level compiles for the PrivateUse1 device "
                    f"(torchvendor.sdk.register_device)")
        return triton_api.triton_unavailable(self.triton_target)

    def _compile_partition(self, sub: fx.GraphModule, examples: Sequence[Any], kind: str, device: str,
                           name: str, graph: GraphReport) -> Callable[..., Any]:
        key = self._runtime(device)
        copy, single = _lowerable_copy(sub)
        settings = {**_SETTINGS, **self.lowering_config(sub, examples)}
        props = _properties(device, self.warp_size)
        triton_api.start_build_workers(build_workers())  # they start while Inductor lowers
        with compat.outside_tracing_context(), \
                triton_api.scoped_triton_backend(device, key, _cache_key_pass(key), props), \
                compat.inductor_config_patch(**settings):
            try:
                compiled = compat.inductor().compile_fx_inner(copy, list(examples), is_backward=kind == "backward",
                                                              is_inference=kind == "inference")
            except BaseException:
                triton_api.finish_builds(strict=False)
                raise
            triton_api.finish_builds()  # the kernels' builds, in build workers, all done here
        return _Compiled(compiled, single)

    def _runtime(self, device: str) -> str:
        """Register this backend's kernel runtime (once) and return the key its wrappers name."""
        opts = ",".join(f"{k}={self.options[k]!r}" for k in sorted(self.options) if k not in ("strict", "cache_dir"))
        key = f"{type(self).__module__}.{type(self).__qualname__}/{self.version}/{content_hash(opts)[:16]}"
        if key not in _REGISTERED:
            triton_api.register_kernel_runtime(key, self._hooks(device))
            _REGISTERED.add(key)
        return key

    def _hooks(self, device: str) -> triton_api.TritonHooks:
        mod = getattr(torch, device)  # the device's module: its runtime table's modules and launches

        def load(image: bytes, index: int, function: str) -> Any:
            return mod.get_function(mod.load_module(image, device=index), function)

        def build(key: str, make: Callable[[], Any]) -> Any:
            return self.cache.get_or_build_value(content_hash(key, TRITON_LEVEL_VERSION), make,
                                                 triton_api.KernelBinary.encode, triton_api.KernelBinary.decode,
                                                 ".triton")

        arch = self.triton_arch(_properties(device, self.warp_size))
        return triton_api.TritonHooks(
            target=self.triton_target, arch=arch, warp_size=self.warp_size, binary_format=self.binary_format,
            source=self.kernel_source, ir=self.kernel_ir, load=load, launch=mod.launch,
            extern=lambda name, fn: self.extern_kernel(name, fn, device), build=build,
            options=dict(self.compile_options), native=_native_launcher(self.null_default_stream),
            workers=build_workers(),
            alloc=_allocator(device))

    @classmethod
    def _check_definition(cls) -> None:
        super()._check_definition()
        for attr in ("triton_target", "binary_format"):
            if not isinstance(getattr(cls, attr), str) or not getattr(cls, attr):
                raise BackendDefinitionError(f"{cls.__name__}.{attr} must name the vendor's Triton "
                                             f"{'target' if attr == 'triton_target' else 'binary (an asm key)'}, "
                                             f"e.g. 'cuda' / 'cubin'; got {getattr(cls, attr)!r}")
        if getattr(cls, "decompositions", None) is not None:
            raise BackendDefinitionError(f"{cls.__name__}.decompositions: the Triton level uses Inductor's table; "
                                         f"decompositions apply to AtenBackend and OnnxBackend only")

    @classmethod
    def _implements_compile(cls) -> bool:
        return True  # the target's Triton compiler compiles; the vendor's hooks are optional


_REGISTERED: set[str] = set()


def build_workers() -> int:
    """How many kernel configurations the level builds at once, each in a build worker process:
    ``TORCHVENDOR_TRITON_BUILD_WORKERS``, else the CPUs this process may use, at most 16 (1: one
    at a time, in the compiling process; so for processes that already compile side by side).

    >>> build_workers() >= 1
    True
    """
    env = os.environ.get("TORCHVENDOR_TRITON_BUILD_WORKERS")
    if env:
        return max(1, int(env))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(16, cpus))


def _device_layer() -> Any:
    """``torchvendor._C``, or None where it is not built."""
    try:
        from torchvendor import _C
    except ImportError:
        return None
    return _C


def _allocator(device: str) -> Callable[[Callable[..., Any]], Any] | None:
    """The device layer's allocation call for generated wrappers on ``device``, or None."""
    make = getattr(_device_layer(), "EmptyStrided", None)
    if make is None:
        return None
    return lambda fallback: getattr(make(fallback, device), "function", None) or make(fallback, device)


def _native_launcher(null_default_stream: bool = False) -> Callable[..., Any] | None:
    """The device layer's C++ Triton launcher, or None in a build without it."""
    make = getattr(_device_layer(), "TritonLaunch", None)
    if make is None or not null_default_stream:
        return make
    return functools.partial(make, null_default_stream=True)


class _Compiled:
    """Inductor's compiled graph as a partition callable (it takes a list, returns a list)."""

    def __init__(self, compiled: Any, single: bool) -> None:
        self.compiled, self.single = compiled, single

    def __call__(self, *args: Any) -> Any:
        out = self.compiled(list(args))
        return out[0] if self.single else tuple(out)


def _lowerable_copy(sub: fx.GraphModule) -> tuple[fx.GraphModule, bool]:
    """A copy of the partition that returns a tuple (Inductor's passes rewrite what they lower,
    and ``sub`` stays the partition's eager fallback); and whether ``sub`` returns one value."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(sub.graph, {}))
    copy = fx.GraphModule(sub, graph)
    out = copy.graph.output_node()
    single = not isinstance(out.args[0], (tuple, list))
    if single:
        out.args = ((out.args[0],),)
        copy.recompile()
    return copy, single


def _properties(device: str, warp_size: int) -> Any:
    """What ``torch.<device>`` reports of its current device, with the target's warp size."""
    mod = getattr(torch, device)
    p = mod.get_device_properties(mod.current_device())
    return types.SimpleNamespace(name=p.name, total_memory=p.total_memory, major=p.major, minor=p.minor,
                                 multi_processor_count=p.multi_processor_count, warp_size=warp_size,
                                 type=device)


def _cache_key_pass(key: str) -> Any:
    ns = compat.inductor()

    class TritonLevelKey(ns.CustomGraphModulePass):  # type: ignore[misc, valid-type]
        def __call__(self, gm: fx.GraphModule) -> None:
            return None

        def uuid(self) -> str:
            return f"torchvendor triton {TRITON_LEVEL_VERSION} {key}"

    return TritonLevelKey()
