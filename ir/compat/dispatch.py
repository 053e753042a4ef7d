"""The dispatcher: operator objects (``torch._ops``), dispatch-key queries, autocast state,
Python dispatch modes (``torch.utils._python_dispatch``) and the private tensor ops.

    >>> import torch
    >>> isinstance(torch.ops.aten.add.Tensor, OpOverload)
    True
"""
from __future__ import annotations

import typing

import torch
from torch._ops import HigherOrderOperator, OpOverload, OpOverloadPacket
from torch.utils._python_dispatch import TorchDispatchMode  # no public alias

__all__ = ["OpOverload", "OpOverloadPacket", "HigherOrderOperator", "TorchDispatchMode", "is_composite_implicit",
           "any_autocast_enabled", "neg_view", "operator_names", "has_kernel", "direct_call"]


def is_composite_implicit(op: OpOverload) -> bool:
    """Whether ``op`` is CompositeImplicitAutograd: the dispatcher decomposes it during tracing,
    before any decomposition table is consulted (``aten.linear``, ``aten.scaled_dot_product_attention``)."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"))


def operator_names() -> list[str]:
    """Every operator the dispatcher knows, qualified with its overload (``aten::add.Tensor``)."""
    return sorted(torch._C._dispatch_get_all_op_names())


def has_kernel(name: str, key: str) -> bool:
    """Whether the operator ``name`` (``aten::silu_backward``) has a kernel registered for the dispatch
    key ``key`` (``"CPU"``, ``"PrivateUse1"``, or an alias such as ``"CompositeImplicitAutograd"``);
    a backend fallback does not count."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, key))


def any_autocast_enabled() -> bool:
    """Whether autocast is on for any device (AOTAutograd's ``disable_amp`` test)."""
    return bool(torch._C._is_any_autocast_enabled())


def neg_view(t: torch.Tensor) -> torch.Tensor:
    """``torch._neg_view``: a view with the negative bit set (to rebuild a neg-view sample)."""
    return torch._neg_view(t)


def direct_call(op: typing.Any) -> typing.Any:
    """What calling ``op`` runs: for an :class:`OpOverload`, the C++ operator its ``__call__``
    forwards every call to (``OpOverload._op``), without that Python frame (a runner calling
    dozens of extern kernels per model call saves a microsecond or two each); anything else as
    it is.

    >>> direct_call(torch.ops.aten.add.Tensor)(torch.ones(2), torch.ones(2))
    tensor([2., 2.])
    """
    return getattr(op, "_op", op) if isinstance(op, OpOverload) else op
