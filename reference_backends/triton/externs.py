"""Inductor's extern kernels (matmul, convolution) on the PrivateUse1 GPU device, by cuBLAS/cuDNN.

The device's memory is CUDA memory of the primary context torch's ``cuda`` uses, so an extern
runs ATen's CUDA kernel on ``cuda`` tensors that alias its operands (``__cuda_array_interface__``,
no copy); a result that is not an operand (or a view of one) is copied, on the GPU, into a
tensor of the device. The runtime's default stream and torch's default CUDA stream are both
CUDA's legacy default stream, so the extern is ordered with the kernels around it; on another
current CUDA stream both sides synchronize. (The CUDA LOOP backend's ``externs.py`` does the same;
a reference backend uses only its own package and the public SDK.)

    >>> import torch
    >>> on_cuda(torch.mm, "gpu") is not torch.mm
    True
"""
from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["on_cuda", "cuda_alias", "ieee_float32", "is_convolution", "is_matmul"]


class _Memory:
    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 2}


#: aliases already made, by (address, shape, strides, dtype, device): an alias owns nothing, so
#: one made for an earlier tensor at the same address and layout serves a later one
_ALIASES: dict[tuple, torch.Tensor] = {}


def cuda_alias(t: torch.Tensor) -> torch.Tensor:
    """A ``cuda`` tensor over the memory of ``t`` (same shape, strides and dtype)."""
    key = (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device.index)
    alias = _ALIASES.get(key)
    if alias is None:
        if len(_ALIASES) >= 4096:
            _ALIASES.clear()
        alias = _ALIASES[key] = _alias(t)
    return alias


def _alias(t: torch.Tensor) -> torch.Tensor:
    device = torch.device("cuda", t.device.index or 0)
    if t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    raw = torch.as_tensor(_Memory(t.data_ptr(), span * t.element_size()), device=device)
    return raw.view(t.dtype).as_strided(t.shape, t.stride(), 0)


def on_cuda(fn: Callable[..., Any], device_type: str) -> Callable[..., Any]:
    """``fn`` run by its CUDA kernel on aliases of its ``device_type`` operands."""

    def run(*args: Any, **kwargs: Any) -> Any:
        aliases: dict[int, torch.Tensor] = {}

        def to(v: Any) -> Any:
            if isinstance(v, torch.Tensor) and v.device.type == device_type:
                a = cuda_alias(v)
                aliases[a.untyped_storage().data_ptr()] = v
                return a
            return type(v)(to(x) for x in v) if isinstance(v, (list, tuple)) else v

        def back(v: Any) -> Any:
            if isinstance(v, torch.Tensor) and v.device.type == "cuda":
                op = aliases.get(v.untyped_storage().data_ptr())
                if op is not None and op.dtype == v.dtype:  # in place (out=), or a view of an operand
                    if v.data_ptr() == op.data_ptr() and v.shape == op.shape and v.stride() == op.stride():
                        return op
                    offset = op.storage_offset() + (v.data_ptr() - op.data_ptr()) // v.element_size()
                    return op.as_strided(v.shape, v.stride(), offset)
                out = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype,
                                          device=torch.device(device_type, v.device.index))
                cuda_alias(out).copy_(v)
                return out
            return type(v)(back(x) for x in v) if isinstance(v, (list, tuple)) else v

        cargs, ckwargs = to(args), {k: to(v) for k, v in kwargs.items()}
        if not aliases:
            return fn(*args, **kwargs)
        other = torch.cuda.current_stream().cuda_stream != 0
        if other:
            getattr(torch, device_type).synchronize()
        out = back(fn(*cargs, **ckwargs))
        if other:
            torch.cuda.current_stream().synchronize()
        return out

    return run


def is_convolution(name: str) -> bool:
    """Whether Inductor's extern kernel ``name`` is a convolution (cuDNN on ``cuda``).

    >>> is_convolution("convolution"), is_convolution("mm")
    (True, False)
    """
    return "conv" in name


def is_matmul(name: str) -> bool:
    """Whether Inductor's extern kernel ``name`` is a matrix product (cuBLAS on ``cuda``).

    >>> [is_matmul(n) for n in ("mm", "addmm", "bmm", "baddbmm", "_mm_plus_mm", "convolution")]
    [True, True, True, True, True, False]
    """
    return "mm" in name


def ieee_float32(fn: Callable[..., Any], matmul: bool = False) -> Callable[..., Any]:
    """``fn`` run with float32 math in full precision: cuDNN without TF32 (torch lets cuDNN
    convolutions use TF32 by default) and, with ``matmul``, cuBLAS at matmul precision
    ``"highest"``. The device's eager kernels for these operators are full float32 (the CPU
    fallback), and a compiled result must match its device's eager precision. Each switch is
    made only while it is on, so at torch's defaults a matmul runs as it is.

    >>> f = ieee_float32(lambda: torch.backends.cudnn.allow_tf32)
    >>> f(), torch.backends.cudnn.allow_tf32
    (False, True)
    """
    cudnn = torch.backends.cudnn

    def run(*args: Any, **kwargs: Any) -> Any:
        precision = torch.get_float32_matmul_precision() if matmul else "highest"
        if precision != "highest":
            torch.set_float32_matmul_precision("highest")
        try:
            if not cudnn.allow_tf32:
                return fn(*args, **kwargs)
            # cuDNN's flags() context: torch's test utilities forbid setting its flags directly
            with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                             allow_tf32=False):
                return fn(*args, **kwargs)
        finally:
            if precision != "highest":
                torch.set_float32_matmul_precision(precision)

    return run
