"""torchvendor.sdk.compile: compile bring-up, a ``torch.compile`` backend at the vendor's level.

- ``backend``: :class:`Backend`, :class:`Level`, :func:`register_backend` (Dynamo, AOTAutograd,
  decomposition, matching, partitioning, fallback, the cache)
- ``patterns`` / ``fx_pattern`` / ``vendor_ops``: fusion patterns and the vendor ops they become
- ``fx_outline``: FX partitions outlined into submodules
- ``levels``: :class:`Level` and what each level decides (one :class:`LevelRules` object per level)
- ``loop_level`` / ``loop_runner``: the LOOP level: a partition lowered to a loop program,
  compiled (``Backend.compile_program``), run by the program runner
- ``c_renderer``: :class:`CStyleRenderer`, loop IR to C-family source by tables (both reference
  code generators subclass it)
- ``cache`` / ``warm``: compiled artifacts on disk, warm starts
- ``report``: what ran where (:func:`last_report`)

Example::

    >>> from torchvendor.sdk.compile import Backend, Level
    >>> Level.ATEN in Level
    True
"""
from __future__ import annotations

from torchvendor.ir.lazy import lazy_getattr

_API: dict[str, str] = {
    **dict.fromkeys(("Backend", "Level", "BackendError", "BackendDefinitionError", "BackendFallbackWarning",
                     "register_backend", "get_backend", "registered_backends", "op_key"), "backend"),
    **dict.fromkeys(("CompileReport", "GraphReport", "PartitionRecord", "last_report", "reports"), "report"),
    **dict.fromkeys(("ArtifactCache",), "cache"),
    **dict.fromkeys(("FusedOp", "fused_op"), "vendor_ops"),
    **dict.fromkeys(("LoopKernel", "loop_kernels", "ProgramRunner", "reference_kernel", "tensor_data_ptr_address"),
                    "loop_runner"),
    **dict.fromkeys(("CompiledProgram",), "loop_level"),
    **dict.fromkeys(("CStyleRenderer", "CodegenError"), "c_renderer"),
}

__all__ = sorted(_API)

__getattr__ = lazy_getattr(__name__, _API)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_API))
