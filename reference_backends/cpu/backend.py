"""``torchvendor_cpu``: the reference LOOP-level backend, built on the public SDK API only.

``compile`` turns one loop-IR kernel into C++ (:mod:`.codegen`), compiles it with the system
compiler into a shared library cached on disk by content hash (``self.cache``), and returns a
callable that runs it: through ctypes on ``cpu``, through the runtime table's module and launch
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

from typing import Any, Callable

from torchvendor.sdk import Backend, Level, LoopKernel

from .codegen import generate
from .toolchain import DeviceKernel, HostKernel, build, toolchain_id

__all__ = ["CpuBackend"]


class CpuBackend(Backend):
    """Loop IR -> C++ -> a shared library, run on the host or on the simulated device."""

    name = "torchvendor_cpu"
    level = Level.LOOP
    device = None  # the inputs' device: cpu, or a torchvendor device whose kernels are host code
    version = "1"

    def compile(self, kernel: LoopKernel) -> Callable[..., Any]:
        source = generate(kernel)
        library = self.cache.get_or_build(toolchain_id() + "\n" + source, lambda path: build(source, path), ".so")
        if kernel.device == "cpu":
            return HostKernel(library, kernel.name, len(kernel.buffers))
        return DeviceKernel(library, kernel.name, len(kernel.buffers), kernel.device)
