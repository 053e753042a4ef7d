"""``TritonCudaBackend``: the Triton level on a PrivateUse1 GPU device over the reference CUDA
runtime (``reference_backends/cuda/runtime``), with NVIDIA's Triton backend as the vendor's
Triton target: Inductor's Triton kernels, compiled to cubins by ``triton.compile`` for target
``cuda``, loaded by the runtime's ``module_load_data`` (``cuModuleLoadData``) and launched by its
``launch`` (``cuLaunchKernel`` on the device's current stream), each launch packed in C++
(``torchvendor._C.TritonLaunch``). Extern kernels (matmul, convolution) run by cuBLAS/cuDNN on
``cuda`` aliases of the device's memory, made in C++ (:meth:`TritonBackend.alias_extern`), or
in Python (:mod:`.externs`) where the device layer's build lacks that. Convolutions run with
TF32 off, and matmuls too where the matmul precision is lowered when they are compiled: the
device's eager kernels for them are full float32 (:func:`.externs.ieee_float32`).

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
    # the runtime's NULL stream is CUDA's legacy default stream, where cuBLAS/cuDNN run for the
    # externs (torch's default cuda stream): kernels and externs of a graph share that stream
    null_default_stream = True

    def extern_kernel(self, name: str, fn: Callable[..., Any], device: str) -> Callable[..., Any]:
        import torch

        from .externs import ieee_float32, is_convolution, is_matmul, on_cuda

        torch.cuda.init()  # the aliases' CUDA side (its allocator serves the library's results)
        run = self.alias_extern(fn, device, "cuda") or on_cuda(fn, device)
        # the device's eager convolution and matmul are full float32 (its CPU fallback): so are
        # the compiled ones (cuDNN would use TF32 by default; cuBLAS at a lowered matmul precision)
        if is_convolution(name):
            return ieee_float32(run, matmul=True)
        if is_matmul(name) and torch.get_float32_matmul_precision() != "highest":
            return ieee_float32(run, matmul=True)
        return run
