"""torchvendor.sdk: the vendor-facing API.

Device bring-up (``torchvendor.sdk.device``)::

    >>> import torch
    >>> from torchvendor.sdk import register_device
    >>> acme = register_device("acme")      # runtime=None: the reference simulated accelerator
    >>> torch.ones(2, 3, device="acme").sum().item()
    6.0

Compile bring-up (``torchvendor.sdk.backend``): subclass :class:`Backend`, declare the level,
the supported ops and the patterns, implement ``compile``, call :func:`register_backend`;
``torch.compile(model, backend=<name>)`` works and :func:`last_report` says what ran where.

Names are imported lazily, so ``import torchvendor.sdk`` loads neither torch nor the C++ layer,
and nothing claims PrivateUse1 until ``register_device`` is called.
"""
from __future__ import annotations

from torchvendor.ir.lazy import lazy_getattr

_API: dict[str, str] = {
    **dict.fromkeys(("register_device", "registered_device", "autoload_entry", "default_runtime_path",
                     "DeviceRegistrationError", "RuntimeLoadError", "DeviceProperties", "load_module",
                     "get_function", "launch", "unload_module"), "device"),
    **dict.fromkeys(("Backend", "Level", "BackendError", "BackendDefinitionError", "BackendFallbackWarning",
                     "register_backend", "get_backend", "registered_backends", "op_key"), "backend"),
    **dict.fromkeys(("CompileReport", "GraphReport", "PartitionRecord", "last_report", "reports"), "report"),
    **dict.fromkeys(("ArtifactCache",), "cache"),
    **dict.fromkeys(("FusedOp", "fused_op"), "fused"),
    **dict.fromkeys(("include_dir", "cmake_dir"), "build_config"),
    **dict.fromkeys(("load_kernel_library", "KernelLibrary", "KernelLibraryError", "native_counts",
                     "checked_mode"), "kernels"),
    **dict.fromkeys(("register_distributed", "collective_counts", "reset_collective_counts",
                     "DeviceProcessGroup", "StagedProcessGroup"), "distributed"),
    **dict.fromkeys(("LoopKernel", "loop_kernels", "ProgramRunner", "reference_kernel"), "loop_runner"),
}

__all__ = sorted(_API)


__getattr__ = lazy_getattr(__name__, _API)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_API))
