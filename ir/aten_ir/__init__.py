"""torchvendor.ir.aten_ir: the ATen/prim level, AOTAutograd's graphs (moved here; see program.py)."""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"AtenProgram": "program", "aten_ir_hook": "program", "capture_aten": "program"}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'torchvendor.ir.aten_ir' has no attribute {name!r}")
