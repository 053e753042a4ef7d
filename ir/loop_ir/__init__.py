"""torchvendor.ir.loop_ir: Inductor's loop-level IR as a stable, JSON-serializable schema.

- :mod:`.schema`: the dataclasses (:class:`LoopProgram`, :class:`Kernel`, :class:`Stmt`, ...);
- :mod:`.extract`: capture from Inductor after lowering and fusion (:func:`loop_backend`);
- :mod:`.interpreter`: the reference interpreter (:func:`run_program`);
- :mod:`.printer`: readable text; :mod:`.view`: GraphView adapters;
- :func:`capture_loop`: capture a function's forward (and backward) programs.

Example::

    >>> import torch
    >>> from torchvendor.ir.loop_ir import capture_loop
    >>> prog = capture_loop(torch.nn.Softmax(dim=-1), [torch.randn(4, 8)])
    >>> out = prog.run(torch.ones(4, 8))[0]
    >>> torch.allclose(out, torch.full((4, 8), 1 / 8))
    True
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "LoopProgram": "schema", "Kernel": "schema", "ExternKernel": "schema", "LoopNest": "schema",
    "Stmt": "schema", "Buffer": "schema", "BufferRef": "schema", "SizeExpr": "schema",
    "TorchValue": "schema", "SCHEMA_VERSION": "schema", "parse_expr": "schema",
    "loop_backend": "extract", "LoopIRUnsupported": "extract",
    "run_program": "interpreter", "run_kernel": "interpreter", "LoopIRRuntimeError": "interpreter",
    "format_program": "printer",
    "KernelBodyView": "view", "ProgramView": "view",
    "capture_loop": "capture", "LoopCapture": "capture", "loop_ir_hook": "capture", "lower_graph": "capture", "inductor_decompositions": "capture",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'torchvendor.ir.loop_ir' has no attribute {name!r}")
