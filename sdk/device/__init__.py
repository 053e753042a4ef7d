"""torchvendor.sdk.device: device bring-up from a C runtime table.

- ``registry``: :func:`register_device` (the PrivateUse1 hooks, autoload, the device's Python API)
- ``module``: the ``torch.<device>`` module (streams, events, memory, RNG, fallback counts)
- ``kernels``: eager kernel libraries on the LibTorch Stable ABI
- ``distributed``: the device's c10d process groups (native collectives or staged through host)
- ``build_config``: include and CMake folders for out-of-tree vendor libraries
- ``tour``: ``torchvendor tour``, a walk through a registered device

Example::

    >>> import torch
    >>> from torchvendor.sdk.device import register_device
    >>> acme = register_device("acme")
    >>> torch.ones(2, device="acme").sum().item()
    2.0
"""
from __future__ import annotations

from torchvendor.ir.lazy import lazy_getattr

_API: dict[str, str] = {
    **dict.fromkeys(("register_device", "registered_device", "autoload_entry", "default_runtime_path",
                     "DeviceRegistrationError", "RuntimeLoadError", "DeviceProperties", "load_module",
                     "get_function", "launch", "unload_module"), "registry"),
    **dict.fromkeys(("include_dir", "cmake_dir"), "build_config"),
    **dict.fromkeys(("load_kernel_library", "KernelLibrary", "KernelLibraryError", "native_counts",
                     "checked_mode"), "kernels"),
    **dict.fromkeys(("register_distributed", "collective_counts", "reset_collective_counts",
                     "DeviceProcessGroup", "StagedProcessGroup", "DeviceSavePlanner"), "distributed"),
}

__all__ = sorted(_API)

__getattr__ = lazy_getattr(__name__, _API)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_API))
