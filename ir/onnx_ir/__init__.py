"""The ONNX level's conversion: an ATen FX graph (one partition) as an ``onnx.ModelProto``.

- :func:`to_onnx`: the model (opset :data:`OPSET`; symbolic sizes as ``dim_param``; constants as
  initializers; value and node names taken from the FX nodes);
- :func:`unsupported_reason`: why a node has no ONNX form (None when it has one), which the ONNX
  level's partitioner asks so that such nodes stay in eager PyTorch;
- :data:`CONVERTERS`: the operator table (:mod:`.ops`), one converter per ATen op.

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> from torchvendor.ir.onnx_ir import to_onnx
    >>> p = capture(torch.nn.Linear(4, 2), [torch.randn(3, 4)], level="aten")
    >>> [n.op_type for n in to_onnx(p.graphs()["inference"]).graph.node]
    ['Transpose', 'Gemm']
"""
from __future__ import annotations

from .builder import ExportError, onnx_dtype
from .export import IR_VERSION, OPSET, to_onnx
from .ops import CONVERTERS, unsupported_reason
from . import reductions  # noqa: E402,F401,I001 - registers its converters into CONVERTERS

__all__ = ["to_onnx", "unsupported_reason", "CONVERTERS", "OPSET", "IR_VERSION", "ExportError", "onnx_dtype"]
