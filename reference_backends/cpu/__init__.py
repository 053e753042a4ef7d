"""``torchvendor_cpu``: the reference CPU backend (loop IR -> C++), registered on import and
through the ``torch_dynamo_backends`` entry point (``torch.compile(m, backend="torchvendor_cpu")``
works without an import). Copy it to start a LOOP-level backend: ``codegen.py`` (the kernel
translator), ``toolchain.py`` (compile and launch), ``backend.py`` (the ``Backend`` subclass).

    >>> import torchvendor.reference_backends.cpu as cpu
    >>> cpu.CpuBackend.name
    'torchvendor_cpu'
"""
from torchvendor.sdk import register_backend

from .backend import CpuBackend

__all__ = ["CpuBackend", "dynamo_backend"]

#: the Dynamo compiler function (the entry point's target)
dynamo_backend = register_backend(CpuBackend)
