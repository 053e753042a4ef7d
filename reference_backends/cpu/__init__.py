"""``torchvendor_cpu``: the reference CPU backend (loop IR -> C++), registered on import and
through the ``torch_dynamo_backends`` entry point (``torch.compile(m, backend="torchvendor_cpu")``
works without an import). Read it as a LOOP-level backend on the public SDK API:
``codegen.py`` (a subclass of the SDK's ``CStyleRenderer``: tables and hooks), ``toolchain.py``
(compile and launch), ``backend.py`` (the ``LoopBackend`` subclass, with the public
``merge_neighbours`` transform). A vendor starts from ``torchvendor new NAME --level loop``.

    >>> import torchvendor.reference_backends.cpu as cpu
    >>> cpu.CpuBackend.name
    'torchvendor_cpu'
"""
from torchvendor.sdk import register_backend

from .backend import CpuBackend

__all__ = ["CpuBackend", "dynamo_backend"]

#: the Dynamo compiler function (the entry point's target)
dynamo_backend = register_backend(CpuBackend)
