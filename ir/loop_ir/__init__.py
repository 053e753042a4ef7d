"""torchvendor.ir.loop_ir: Inductor's loop-level IR as a stable, JSON-serializable schema.

The same module roles as every IR level (``torch_ir/``, ``aten_ir/``, ``loop_ir/``):

- :mod:`.capture`: the level's Dynamo backend hook (:func:`loop_ir_hook`, and
  :func:`loop_backend` on top of it), its capture (:func:`capture_loop`) and
  :func:`lower_graph`, which lowers one ATen graph to a program;
- :mod:`.program`: the captured program, :class:`LoopCapture` (forward and backward, or
  inference, :class:`LoopProgram` s behind the common contract);
- :mod:`.interpreter`: the reference interpreter (:func:`run_program`), the executable meaning
  of the schema;

and what only this level has: :mod:`.schema`, the dataclasses a vendor's code generator reads
(:class:`LoopProgram`, :class:`Kernel`, :class:`Stmt`, ...), their JSON and text forms;
:mod:`.index_expr`, the index expressions (:func:`parse_expr`); :mod:`.lowering`, the
translation from Inductor after lowering and fusion (everything that touches Inductor);
:mod:`.view`, GraphView adapters; :mod:`.invariants`, the invariant checker (:func:`validate`);
:mod:`.transforms`, program rewrites.

Example::

    >>> import torch
    >>> from torchvendor.ir.loop_ir import capture_loop
    >>> prog = capture_loop(torch.nn.Softmax(dim=-1), [torch.randn(4, 8)])
    >>> out = prog.run(torch.ones(4, 8))[0]
    >>> torch.allclose(out, torch.full((4, 8), 1 / 8))
    True
"""
from __future__ import annotations

from torchvendor.ir.lazy import lazy_getattr

_LAZY = {
    "LoopProgram": "schema", "Kernel": "schema", "ExternKernel": "schema", "LoopNest": "schema",
    "Stmt": "schema", "Buffer": "schema", "BufferRef": "schema", "SizeExpr": "schema",
    "TorchValue": "schema", "SCHEMA_VERSION": "schema", "parse_expr": "index_expr", "INDEX_FUNCTIONS": "index_expr",
    "STATEMENT_OPS": "schema", "COMPUTE_OPS": "schema", "REDUCTION_KINDS": "schema",
    "loop_backend": "capture", "LoopIRUnsupported": "lowering.unsupported",
    "run_program": "interpreter", "run_kernel": "interpreter", "LoopIRRuntimeError": "interpreter",
    "format_program": "schema", "validate": "invariants", "LoopIRValidationError": "invariants",
    "KernelBodyView": "view", "ProgramView": "view",
    "capture_loop": "capture", "loop_ir_hook": "capture", "lower_graph": "capture",
    "inductor_decompositions": "lowering.decompositions", "LoopCapture": "program",
    **dict.fromkeys(("merge_neighbours", "merge_epilogues", "host_onto_device", "apply_transforms"), "transforms"),
}
__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)
