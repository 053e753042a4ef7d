"""Bounds checks of generated CUDA kernels, reported as Python errors (Inductor's device asserts).

A generated module that indexes with a tensor's values (``gather``, ``scatter_add``,
``index_put``, embedding backward) checks each indirect index where Inductor asks for it: an
index outside ``[0, size)`` is replaced by 0, so the kernel never touches memory outside the
buffer (an illegal address would poison the CUDA context for the rest of the process), and
``tv_fail`` records the first failed check and the index in the module's ``tv_error``. After the
kernel's launches the host reads that record (a stream synchronization, only for kernels that
have checks) and raises ``IndexError`` naming the kernel, the buffer and the index, as eager
indexing does. On by default, as Inductor's ``assert_indirect_indexing``; inside a CUDA graph
capture the record is not read (the clamp still keeps the kernel inside its buffers).
"""
from __future__ import annotations

import ctypes
from typing import Any

import torch

from .codegen import ASSERTION, CudaKernel

__all__ = ["BoundsRecord"]

_CLEAR = (ctypes.c_longlong * 2)(-1, 0)


class BoundsRecord:
    """The ``tv_error`` record of one loaded module (``lib``: the CUDA driver library)."""

    def __init__(self, lib: Any, module: ctypes.c_void_p) -> None:
        self.lib, self.ptr, size = lib, ctypes.c_uint64(), ctypes.c_size_t()
        rc = lib.cuModuleGetGlobal_v2(ctypes.byref(self.ptr), ctypes.byref(size), module, b"tv_error")
        if rc:
            raise RuntimeError(f"cuModuleGetGlobal(tv_error) failed: {rc}")

    def check(self, kernel: CudaKernel, stream: int) -> None:
        """Raise ``IndexError`` if a launch on ``stream`` recorded a failed bounds check."""
        if torch.cuda.is_current_stream_capturing():
            return
        record = (ctypes.c_longlong * 2)()
        if self.lib.cuStreamSynchronize(ctypes.c_void_p(stream)) or \
                self.lib.cuMemcpyDtoH_v2(record, self.ptr, ctypes.c_size_t(16)):
            raise RuntimeError(f"kernel {kernel.name}: reading its bounds-check record failed")
        if record[0] < 0:
            return
        self.lib.cuMemcpyHtoD_v2(self.ptr, _CLEAR, ctypes.c_size_t(16))
        what = kernel.checks[record[0]] if 0 <= record[0] < len(kernel.checks) else f"check {record[0]}"
        if what.startswith(ASSERTION):
            raise RuntimeError(f"kernel {kernel.name}: {what}")
        raise IndexError(f"kernel {kernel.name}: index out of bounds: {what}, got {record[1]} "
                         "(as eager indexing raises; the generated kernel read nothing there)")
