"""torchvendor.reference_backends.cuda: the reference CUDA backend and runtime.

- :mod:`.codegen`: loop IR kernels -> CUDA C (pointwise with vector loads, warp/block per row
  reductions with shuffles, split long reductions, tiling from the shapes);
- :mod:`.launch`: NVRTC through ``ctypes``, and launches on torch's ``cuda`` (CUDA driver, current
  stream) or a PrivateUse1 GPU (``torchvendor.sdk.launch``);
- :mod:`.backend`: :class:`CudaBackend`, registered as ``torch.compile(backend="torchvendor_cuda")``;
- :mod:`.runtime`: ``torchvendor/runtime.h`` over the CUDA driver API, a plain C library.

Importing needs no GPU::

    >>> import torchvendor.reference_backends.cuda as tvc
    >>> tvc.CudaBackend.name
    'torchvendor_cuda'
"""
from __future__ import annotations

from torchvendor.sdk import register_backend

from .backend import CudaBackend

__all__ = ["CudaBackend", "dynamo_backend"]

#: the Dynamo compiler function (for a ``torch_dynamo_backends`` entry point)
dynamo_backend = register_backend(CudaBackend)
