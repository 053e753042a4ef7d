"""The ``torchvendor_cuda`` backend: LOOP level, loop IR kernels -> CUDA C -> NVRTC cubins, cached on
disk by content hash, launched on torch's ``cuda`` device or on a PrivateUse1 GPU device.

>>> from torchvendor.reference_backends.cuda.backend import CudaBackend
>>> CudaBackend.name, CudaBackend.level.value
('torchvendor_cuda', 'loop')
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from torchvendor.sdk import Backend, BackendError, Level

from .codegen import generate
from .launch import CompiledKernel, nvrtc_compile

__all__ = ["CudaBackend", "device_arch"]


def device_arch(device: str) -> tuple[str, int]:
    """(``sm_XY``, multiprocessor count) of device ``device`` (``cuda`` or a PrivateUse1 GPU device).

    >>> device_arch("cuda") if torch.cuda.is_available() else ("sm_90", 132)  # doctest: +ELLIPSIS
    ('sm_...', ...)
    """
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}", torch.cuda.get_device_properties().multi_processor_count
    mod = getattr(torch, device, None)
    if mod is None or not hasattr(mod, "get_device_properties"):
        raise BackendError(f"torchvendor_cuda generates code for 'cuda' or a registered PrivateUse1 GPU device; "
                           f"the kernel's device is {device!r}")
    props = mod.get_device_properties(mod.current_device())
    return f"sm_{props.major}{props.minor}", props.multi_processor_count


class CudaBackend(Backend):
    """Loop IR kernels as CUDA C (see :mod:`.codegen`), compiled with NVRTC at run time."""

    name = "torchvendor_cuda"
    level = Level.LOOP
    device = None            # wherever the inputs are: torch's cuda, or a PrivateUse1 GPU device
    supported_ops = None     # every op: what the code generator cannot do falls back per partition
    default_options: dict[str, Any] = {}
    version = "1"

    def compile(self, kernel: Any) -> Callable[..., None]:
        """One :class:`torchvendor.sdk.LoopKernel` -> ``fn(*buffers, *sizes)``."""
        if kernel.device == "cpu":
            raise BackendError("torchvendor_cuda runs on a GPU; this kernel's buffers are on cpu "
                               "(move the model and inputs to 'cuda')")
        arch, sms = device_arch(kernel.device)
        mine = {b.name for b in kernel.buffers}
        elsewhere = {n for op in kernel.program.ops if op is not kernel.kernel
                     for n in (*op.reads(), *op.writes())}
        elsewhere |= {getattr(o, "name", o) for o in kernel.program.outputs if o is not None}
        views = {b.name: b.view_of for b in kernel.program.buffers if b.view_of}
        for name in list(elsewhere):   # a view used elsewhere makes its base used elsewhere
            while name in views:
                name = views[name]
                elsewhere.add(name)
        code = generate(kernel.kernel, kernel.buffers, kernel.size_vars, frozenset(elsewhere & mine), sms)

        def build(path: str) -> None:
            Path(path).write_bytes(nvrtc_compile(code.source, f"{code.name}.cu", arch))

        cubin = self.cache.get_or_build(f"{arch}\n{code.source}", build, suffix=".cubin")
        return CompiledKernel(code, Path(cubin).read_bytes())
