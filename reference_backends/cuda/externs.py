"""Extern kernels (matmul, convolution, ...) on a PrivateUse1 GPU device, through cuBLAS and cuDNN.

The loop IR leaves matmuls and convolutions to a library (extern kernels). On torch's ``cuda`` the
SDK's runner calls ATen there, i.e. cuBLAS and cuDNN. On a PrivateUse1 GPU device registered on
the reference CUDA runtime (``runtime/``), ATen's operator for that device is the CPU fallback:
the operands copied to the host and back on every call. That device's memory is CUDA memory of
the primary context torch's ``cuda`` uses too, so :func:`on_cuda` runs ATen's CUDA operator on
``cuda`` tensors that alias the operands (``__cuda_array_interface__``, no copy) and copies the
results, on the GPU, into tensors of the device: what a GPU vendor does with its own BLAS.

Ordering: the runtime's default stream and torch's default CUDA stream are both CUDA's legacy
default stream, and the runtime's created streams are blocking streams, which the legacy stream
waits for and which wait for it; so work queued on the device before an extern is done before
it, and work after it starts after it. Only when torch's current CUDA stream is another stream
does an extern synchronize both sides.

Random operators stay ATen's on the device (their generator is the device's, not CUDA's), and so
do operators given a device argument (factories).

    >>> import torch
    >>> f = on_cuda(torch.ops.aten.mm.default, "gpu")
    >>> f is not torch.ops.aten.mm.default
    True
    >>> on_cuda(torch.ops.aten.bernoulli.default, "gpu") is torch.ops.aten.bernoulli.default
    True
"""
from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["on_cuda", "cuda_alias"]


class _Memory:
    """``__cuda_array_interface__`` of ``n`` bytes at ``ptr`` (version 2: no stream to wait on)."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 2}


def cuda_alias(t: torch.Tensor) -> torch.Tensor:
    """A ``cuda`` tensor over the memory of ``t`` (a tensor of a GPU device on the CUDA runtime):
    same shape, strides and dtype; writes to one are writes to the other."""
    device = torch.device("cuda", t.device.index or 0)
    if t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    raw = torch.as_tensor(_Memory(t.data_ptr(), span * t.element_size()), device=device)
    return raw.view(t.dtype).as_strided(t.shape, t.stride())


def _takes_device(value: Any) -> bool:
    if isinstance(value, torch.device):
        return True
    return isinstance(value, (list, tuple)) and any(_takes_device(v) for v in value)


def on_cuda(aten: Callable[..., Any], device_type: str) -> Callable[..., Any]:
    """``aten`` (an ATen operator) run by its CUDA kernel on aliases of its operands on
    ``device_type``; its results come back as tensors of that device. Random operators and
    operators given a device are returned unchanged."""
    tags = getattr(aten, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags:
        return aten

    def to_cuda(value: Any, aliases: dict[int, torch.Tensor]) -> Any:
        if isinstance(value, torch.Tensor) and value.device.type == device_type:
            alias = cuda_alias(value)
            aliases[alias.untyped_storage().data_ptr()] = value
            return alias
        if isinstance(value, (list, tuple)):
            return type(value)(to_cuda(v, aliases) for v in value)
        return value

    def back(value: Any, aliases: dict[int, torch.Tensor]) -> Any:
        if isinstance(value, torch.Tensor) and value.device.type == "cuda":
            operand = aliases.get(value.untyped_storage().data_ptr())
            if operand is not None and operand.dtype == value.dtype:  # in place, or a view of an operand
                offset = operand.storage_offset() + (value.data_ptr() - operand.data_ptr()) // value.element_size()
                return operand.as_strided(value.shape, value.stride(), offset)
            out = torch.empty_like(value, device=torch.device(device_type, value.device.index))
            cuda_alias(out).copy_(value)
            return out
        if isinstance(value, (list, tuple)):
            return type(value)(back(v, aliases) for v in value)
        return value

    def run(*args: Any, **kwargs: Any) -> Any:
        if _takes_device(args) or _takes_device(tuple(kwargs.values())):
            return aten(*args, **kwargs)
        aliases: dict[int, torch.Tensor] = {}
        cargs = to_cuda(args, aliases)
        ckwargs = {k: to_cuda(v, aliases) for k, v in kwargs.items()}
        if not aliases:
            return aten(*args, **kwargs)
        other_stream = torch.cuda.current_stream().cuda_stream != 0
        if other_stream:
            getattr(torch, device_type).synchronize()
        out = back(aten(*cargs, **ckwargs), aliases)
        if other_stream:
            torch.cuda.current_stream().synchronize()
        return out

    return run
