"""``torchvendor_ort``: the reference ONNX-level backend, partitions run by ONNX Runtime;
registered on import and through the ``torch_dynamo_backends`` entry point
(``torch.compile(m, backend="torchvendor_ort")`` works without an import). Copy it to start a
backend whose compiler takes ONNX: ``backend.py`` is the whole of it.

    >>> import torchvendor.reference_backends.ort as tvort
    >>> tvort.OrtBackend.name, tvort.OrtBackend.level.value
    ('torchvendor_ort', 'onnx')
"""
from torchvendor.sdk import register_backend

from .backend import OrtBackend, OrtEngine

__all__ = ["OrtBackend", "OrtEngine", "dynamo_backend"]

#: the Dynamo compiler function (the entry point's target)
dynamo_backend = register_backend(OrtBackend)
