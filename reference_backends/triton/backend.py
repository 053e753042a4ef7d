"""``TritonCudaBackend``: the Triton level on a PrivateUse1 GPU device over the reference CUDA
runtime (``reference_backends/cuda/runtime``), with NVIDIA's Triton backend as the vendor's
Triton target: Inductor's Triton kernels, compiled to cubins by ``triton.compile`` for target
``cuda``, loaded by the runtime's ``module_load_data`` (``cuModuleLoadData``) and launched by its
``launch`` (``cuLaunchKernel`` on the device's current stream), each launch packed in C++
(``torchvendor._C.TritonLaunch``). Extern kernels (matmul, convolution) run by cuBLAS/cuDNN on
``cuda`` aliases of the device's memory, made in C++ (:meth:`TritonBackend.alias_extern`), or
in Python (:mod:`.externs`) where the device layer's build lacks that.

    >>> TritonCudaBackend.triton_target, TritonCudaBackend.binary_format
    ('cuda', 'cubin')
"""
from __future__ import annotations

from typing import Any, Callable

from torchvendor.sdk import TritonBackend

__all__ = ["TritonCudaBackend"]


class TritonCudaBackend(TritonBackend):
    """The reference Triton-level backend: NVIDIA's Triton compiler, the CUDA runtime table."""

    name = "torchvendor_triton"
    triton_target = "cuda"      # NVIDIA's triton.backends entry compiles GPUTarget("cuda", cc, 32)
    binary_format = "cubin"     # what cuModuleLoadData, behind the table's module_load_data, takes
    warp_size = 32
    version = "2"
    # convolutions keep the model's memory format: Inductor's channels-last choice expects the
    # output strides of its fake convolution for the device, which cuDNN's need not match
    lowering_options = {"layout_optimization": False}

    def extern_kernel(self, name: str, fn: Callable[..., Any], device: str) -> Callable[..., Any]:
        import torch

        from .externs import on_cuda

        torch.cuda.init()  # the aliases' CUDA side (its allocator serves the library's results)
        return self.alias_extern(fn, device, "cuda") or on_cuda(fn, device)
