"""``torchvendor_triton``: the reference Triton-level backend, Inductor's Triton kernels built by
NVIDIA's Triton backend and launched through the reference CUDA runtime table on a PrivateUse1
GPU device; registered on import and through the ``torch_dynamo_backends`` entry point. Copy it
to start a backend whose compiler is a Triton backend: ``backend.py`` is the whole of it.

    >>> import torchvendor.reference_backends.triton as tvt
    >>> tvt.TritonCudaBackend.name, tvt.TritonCudaBackend.level.value
    ('torchvendor_triton', 'triton')
"""
from torchvendor.sdk import register_backend

from .backend import TritonCudaBackend

__all__ = ["TritonCudaBackend", "dynamo_backend"]

#: the Dynamo compiler function (the entry point's target)
dynamo_backend = register_backend(TritonCudaBackend)
