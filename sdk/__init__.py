"""torchvendor.sdk: the vendor-facing API.

Device bring-up (``torchvendor.sdk.device``)::

    >>> from torchvendor.sdk import register_device
    >>> acme = register_device("acme")      # runtime=None: the reference simulated accelerator
    >>> torch.randn(2, 3, device="acme").sum().item()

Names are imported lazily, so ``import torchvendor.sdk`` loads neither torch nor the C++ layer,
and nothing claims PrivateUse1 until ``register_device`` is called.
"""
from __future__ import annotations

import importlib
from typing import Any

_DEVICE_API = (
    "register_device",
    "registered_device",
    "autoload_entry",
    "default_runtime_path",
    "DeviceRegistrationError",
    "RuntimeLoadError",
    "DeviceProperties",
    "load_module",
    "get_function",
    "launch",
    "unload_module",
)

__all__ = list(_DEVICE_API)


def __getattr__(name: str) -> Any:
    if name in _DEVICE_API:
        return getattr(importlib.import_module("torchvendor.sdk.device"), name)
    raise AttributeError(f"module 'torchvendor.sdk' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_DEVICE_API))
