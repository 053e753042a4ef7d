"""PrivateUse1 registration (the device layer, ``sdk/device/registry.py``): the key's current
name and ``torch._register_device_module``.

    >>> isinstance(privateuse1_backend_name(), str)
    True
"""
from __future__ import annotations

from typing import Any as _Any

import torch

__all__ = ["privateuse1_backend_name", "register_device_module"]


def privateuse1_backend_name() -> str:
    """The name PrivateUse1 has in this process (``"privateuseone"`` while nobody renamed it).

    >>> isinstance(privateuse1_backend_name(), str)
    True
    """
    return torch._C._get_privateuse1_backend_name()


def register_device_module(name: str, module: _Any) -> None:
    """``torch._register_device_module``: make ``module`` available as ``torch.<name>``."""
    torch._register_device_module(name, module)
