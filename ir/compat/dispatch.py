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
    """What calling ``op`` runs, at the least cost per call (a runner makes dozens of extern
    calls per model call): for the ``default`` overload of an ATen operator with a function
    binding, that binding (``torch._C._VariableFunctions.<name>``, what ``torch.convolution``
    and Inductor's ``extern_kernels`` call: generated C++ argument parsing and an unboxed call,
    about 5 us less per convolution than the boxed path); for another :class:`OpOverload`, the
    C++ operator its ``__call__`` forwards to (``OpOverload._op``), without that Python frame;
    anything else as it is. With the arguments of the default overload's schema the binding
    picks that overload.

    >>> direct_call(torch.ops.aten.convolution.default) is torch._C._VariableFunctions.convolution
    True
    >>> direct_call(torch.ops.aten.add.Tensor)(torch.ones(2), torch.ones(2))
    tensor([2., 2.])
    """
    if not isinstance(op, OpOverload):
        return op
    namespace, _, name = op._schema.name.partition("::")
    if namespace == "aten" and op._schema.overload_name in ("", "default"):
        binding = getattr(torch._C._VariableFunctions, name, None)
        if binding is not None:
            return binding
    return getattr(op, "_op", op)
