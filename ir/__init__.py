"""torchvendor.ir: the three IR levels (torch, ATen/prim, loop), their capture, printing,
reference interpreters and serialization, and the GraphView adapters.

``capture(fn, example_inputs, level=...)`` is the one entry point (defined in ``levels.py``; no
module of this package is named ``capture``, so ``torchvendor.ir.capture`` always means the
function). Layout: one package per level, each with the same module roles,

- ``torch_ir/``, ``aten_ir/``, ``loop_ir/``: ``capture.py`` (the level's Dynamo backend hook
  and ``capture_<level>``) and ``program.py`` (the level's :class:`Program` subclass); the loop
  level adds ``interpreter.py``, ``schema.py``, ``index_expr.py``, ``view.py`` and ``lowering/``;

and the pieces the levels share at the top: ``program.py`` (the contract and the JSON
envelope), ``fx_graph.py`` (running, binding and serializing the FX graphs of the torch and
ATen levels), ``decompositions.py``, ``graph_view.py`` (the torch-free protocol),
``fx_view.py``/``onnx_view.py`` (adapters) and ``compat/`` (every private torch API, one module per torch subsystem).
Submodules are imported lazily so that ``torchvendor.ir.graph_view`` (the torch-free protocol
the pattern matcher and partitioner are written against) can be used without importing torch.
"""
from __future__ import annotations

from .lazy import lazy_getattr

__all__: list[str] = []

# name -> submodule that defines it; filled in as the IR modules land.
_LAZY: dict[str, str] = {
    "GraphView": "graph_view",
    "MutableGraphView": "graph_view",
    "DictGraph": "graph_view",
    "FxView": "fx_view",
    # torch and ATen IR: capture, programs, hooks, decomposition tables, ONNX adapter
    "capture": "levels",
    "CAPTURE_LEVELS": "levels",
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


__getattr__ = lazy_getattr(__name__, _LAZY)
