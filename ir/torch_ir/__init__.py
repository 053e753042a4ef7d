"""torchvendor.ir.torch_ir: the torch level, Dynamo's FX graph (moved here; see capture.py)."""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "TorchProgram": "capture", "OutputSlot": "capture", "torch_ir_hook": "capture", "capture_torch": "capture",
    "closure_modules": "capture",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'torchvendor.ir.torch_ir' has no attribute {name!r}")
