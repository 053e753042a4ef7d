"""torchvendor.sdk.compile: compile bring-up, a ``torch.compile`` backend at the vendor's level.

- ``backend``: :class:`Backend`, the level-agnostic template (options, the cache, one graph's
  matching, partitioning and per-partition compile); it names no level
- one class per level, each owning its hooks and its part of the flow: ``torch_level``
  (:class:`TorchBackend`), ``aten_level`` (:class:`AtenBackend`), ``loop_level``
  (:class:`LoopBackend`: lowering, ``transforms``, ``compile_program``, the ``finish`` build
  barrier, the program runner), ``onnx_level`` (:class:`OnnxBackend`), ``triton_level``
  (:class:`TritonBackend`: Inductor's Triton kernels launched through the device's runtime);
  ``aot_flow``: the AOTAutograd part the ATen, LOOP, ONNX and TRITON levels share; ``levels``: :class:`Level`, the errors
- ``registry``: :func:`register_backend`, :func:`get_backend`; ``partition_call``: one partition
  at run time; ``inductor_fallback``: the ``fallback="inductor"`` option
- ``patterns`` / ``fx_pattern`` / ``vendor_ops``: fusion patterns and the vendor ops they become
- ``fx_outline``: FX partitions outlined into submodules
- ``loop_kernel``: one kernel as ``LoopBackend.compile`` receives it; ``loop_runner``: the LOOP
  level's runtime (:class:`ProgramRunner`)
- ``c_renderer``: :class:`CStyleRenderer`, loop IR to C-family source by tables (both reference
  code generators subclass it)
- ``cache`` / ``warm``: compiled artifacts on disk, warm starts
- ``report``: what ran where (:func:`last_report`)

Example::

    >>> from torchvendor.sdk.compile import AtenBackend, Level
    >>> AtenBackend.level is Level.ATEN
    True
"""
from __future__ import annotations

from torchvendor.ir.lazy import lazy_getattr

_API: dict[str, str] = {
    **dict.fromkeys(("Backend", "op_key"), "backend"),
    **dict.fromkeys(("Level", "BackendError", "BackendDefinitionError", "BackendFallbackWarning"), "levels"),
    **dict.fromkeys(("TorchBackend",), "torch_level"),
    **dict.fromkeys(("AtenBackend",), "aten_level"),
    **dict.fromkeys(("LoopBackend", "CompiledProgram"), "loop_level"),
    **dict.fromkeys(("LoopKernel", "loop_kernels"), "loop_kernel"),
    **dict.fromkeys(("OnnxBackend",), "onnx_level"),
    **dict.fromkeys(("TritonBackend",), "triton_level"),
    **dict.fromkeys(("register_backend", "get_backend", "registered_backends"), "registry"),
    **dict.fromkeys(("CompileReport", "GraphReport", "PartitionRecord", "last_report", "reports"), "report"),
    **dict.fromkeys(("ArtifactCache",), "cache"),
    **dict.fromkeys(("FusedOp", "fused_op"), "vendor_ops"),
    **dict.fromkeys(("ProgramRunner", "reference_kernel", "tensor_data_ptr_address"), "loop_runner"),
    **dict.fromkeys(("NativeKernel", "NativeLaunch"), "runner_replay"),
    **dict.fromkeys(("CStyleRenderer", "CodegenError"), "c_renderer"),
}

__all__ = sorted(_API)

__getattr__ = lazy_getattr(__name__, _API)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_API))
