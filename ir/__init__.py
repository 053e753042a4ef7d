"""torchvendor.ir: the three IR levels (torch, ATen/prim, loop), their capture, printing,
reference interpreters and serialization, and the GraphView adapters.

``capture(fn, example_inputs, level=...)`` is the one entry point (defined in ``levels.py``; no
module is named ``capture``, so the name always means the function). Submodules are imported
lazily so that ``torchvendor.ir.graph_view`` (the torch-free protocol
the pattern matcher and partitioner are written against) can be used without importing torch.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__: list[str] = []

# name -> submodule that defines it; filled in as the IR modules land.
_LAZY: dict[str, str] = {
    "GraphView": "graph_view",
    "MutableGraphView": "graph_view",
    "DictGraph": "graph_view",
    "FxView": "fx_view",
    # torch and ATen IR: capture, programs, hooks, decomposition tables, ONNX adapter
    "capture": "levels",
    "LEVELS": "levels",
    "Program": "program",
    "TorchProgram": "torch_ir",
    "torch_ir_hook": "torch_ir",
    "AtenProgram": "aten_ir",
    "aten_ir_hook": "aten_ir",
    "DecompositionTable": "decompositions",
    "OnnxView": "onnx_view",
    # loop IR (Inductor): schema, capture, backend hook
    "LoopProgram": "loop_ir",
    "LoopCapture": "loop_ir",
    "capture_loop": "loop_ir",
    "loop_ir_hook": "loop_ir",
}
__all__ += sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'torchvendor.ir' has no attribute {name!r}")
