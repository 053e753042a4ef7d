"""torchvendor.sdk: the vendor-facing API.

Device bring-up (``torchvendor.sdk.device``)::

    >>> import torch
    >>> from torchvendor.sdk import register_device
    >>> acme = register_device("acme")      # runtime=None: the reference simulated accelerator
    >>> torch.ones(2, 3, device="acme").sum().item()
    6.0

Compile bring-up (``torchvendor.sdk.compile``): subclass :class:`Backend`, declare the level,
the supported ops and the patterns, implement ``compile``, call :func:`register_backend`;
``torch.compile(model, backend=<name>)`` works and :func:`last_report` says what ran where.

Names are imported lazily, so ``import torchvendor.sdk`` loads neither torch nor the C++ layer,
and nothing claims PrivateUse1 until ``register_device`` is called.
"""
from __future__ import annotations

from torchvendor.ir.lazy import lazy_getattr

from .compile import _API as _COMPILE
from .device import _API as _DEVICE

# Each public name is served by its product's package: device bring-up, compile bring-up.
_API: dict[str, str] = {**{k: f"device.{v}" for k, v in _DEVICE.items()},
                        **{k: f"compile.{v}" for k, v in _COMPILE.items()}}

__all__ = sorted(_API)


__getattr__ = lazy_getattr(__name__, _API)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_API))
