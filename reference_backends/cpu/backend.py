"""``torchvendor_cpu``: the reference LOOP-level backend, built on the public SDK API only.

``compile`` turns one loop-IR kernel into C++ (:mod:`.codegen`), compiles it with the system
compiler into a shared library cached on disk by content hash (``self.cache``), and returns a
callable that runs it: through a small CPython extension on ``cpu`` (``host_call.c``), through the runtime table's module and launch
entries on a torchvendor device (the simulated accelerator). Everything else — Inductor's
lowering, partitions, the program runner, extern kernels, fallback, reports — is the SDK's.

Example::

    >>> import torch
    >>> import torchvendor.reference_backends.cpu
    >>> f = torch.compile(lambda x: torch.softmax(x, -1) * 2, backend="torchvendor_cpu")
    >>> x = torch.randn(4, 32)
    >>> torch.allclose(f(x), torch.softmax(x, -1) * 2, atol=1e-6)
    True
"""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx as fx

from torchvendor.ir.loop_ir import merge_neighbours
from torchvendor.sdk import CompiledProgram, LoopBackend, LoopKernel

from . import codegen
from .codegen import generate
from .toolchain import DeviceKernel, ToolchainError, build, host_kernel, toolchain_id

__all__ = ["CpuBackend"]

#: a digest of the code generator's source: a change to it makes new cache keys
_GENERATOR = hashlib.sha256(b"".join(p.read_bytes() for p in codegen.generator_sources())).hexdigest()
#: the compiler runs of one partition's kernels go in parallel (a transformer block has dozens)
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_BUILDS = ThreadPoolExecutor(max_workers=max(2, _CORES), thread_name_prefix="torchvendor_cpu_build")


class CpuBackend(LoopBackend):
    """Loop IR -> C++ -> a shared library, run on the host or on the simulated device."""

    name = "torchvendor_cpu"
    device = None  # the inputs' device: cpu, or a torchvendor device whose kernels are host code
    version = "2"
    #: every run of consecutive kernels (no extern kernel between them) merged into one kernel
    #: before compiling, as Inductor's own C++ backend groups them (one ``cpp_fused_*`` function
    #: per run): a call from Python costs microseconds, which on small models is most of a
    #: kernel, and the shared library of a run is built by one compiler process instead of several
    transforms = (merge_neighbours,)

    def lowering_config(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Mapping[str, Any]:
        # Inductor's layout optimization runs convolutions channels-last, converting every
        # weight on each call (weights are graph inputs, not frozen constants). That pays when
        # the activations outweigh the weights (the zoo's small CNN on 32 images: 1.6x of eager
        # with it), not when the weights dominate (ResNet-18 on two images: 0.6x of eager with
        # it, about 1.0x without).
        weights = activations = 0
        for node in gm.graph.nodes:
            if node.target is torch.ops.aten.convolution.default:
                x, w = (a.meta.get("val") if isinstance(a, fx.Node) else None for a in node.args[:2])
                if x is None or w is None or not isinstance(x.numel(), int) or not isinstance(w.numel(), int):
                    return {"layout_optimization": False}  # symbolic sizes: keep the model's layout
                activations, weights = activations + x.numel(), weights + w.numel()
        return {"layout_optimization": activations > weights}

    def compile(self, kernel: LoopKernel) -> Callable[..., Any]:
        # Keyed by the kernel itself and the code generator's own source, not by the generated
        # C++: a warm compile then skips code generation as well as the compiler.
        key = "\n".join((toolchain_id(), _GENERATOR, repr((kernel.kernel, kernel.buffers, kernel.size_vars))))
        if kernel.device == "cpu":
            compiled: Any = host_kernel(kernel.name, len(kernel.buffers))
        else:
            compiled = DeviceKernel(None, kernel.name, len(kernel.buffers), kernel.device)
        found = self.cache.lookup(key, ".so")
        if found is not None:
            compiled.load(str(found))  # a hit: nothing is built
            return compiled
        source = generate(kernel)  # here, so that an untranslatable op is named with its kernel
        # A miss: the compiler runs in the background (a partition's kernels build in parallel);
        # finish() loads the library into the kernel once it is there.
        return _Building(_BUILDS.submit(self.cache.get_or_build, key, lambda path: build(source, path), ".so"),
                         compiled)

    def finish(self, compiled: CompiledProgram) -> CompiledProgram:
        """The build barrier: wait for the libraries :meth:`compile` is building and load each
        into its kernel (a compiler error makes the partition fall back)."""
        if not any(isinstance(k, _Building) for k in compiled.kernels.values()):
            return compiled
        return CompiledProgram(compiled.program, {name: k.wait() if isinstance(k, _Building) else k
                                                  for name, k in compiled.kernels.items()})


class _Building:
    """A kernel whose library is being built: what :meth:`CpuBackend.compile` hands out on a
    cache miss, made the loaded kernel by :meth:`CpuBackend.finish` (not callable before)."""

    def __init__(self, future: Future, kernel: Any) -> None:
        self.future, self.kernel = future, kernel

    def wait(self) -> Any:
        try:
            self.kernel.load(self.future.result())
        except Exception as e:
            raise ToolchainError(f"kernel {self.kernel.name}: {type(e).__name__}: {e}") from e
        return self.kernel
