"""``compat.dispatch``: operator objects, dispatch-key queries, autocast state, dispatch modes and
the private tensor ops, on the installed release."""
from __future__ import annotations

import torch

from torchvendor.ir import compat


def test_composite_implicit_detection() -> None:
    assert compat.is_composite_implicit(torch.ops.aten.linear.default)
    assert not compat.is_composite_implicit(torch.ops.aten.addmm.default)


def test_operator_names_and_kernels() -> None:
    names = compat.operator_names()
    assert "aten::add.Tensor" in names and "aten::silu_backward" in names
    assert compat.has_kernel("aten::silu_backward", "CPU")
    assert compat.has_kernel("aten::silu_backward", "CompositeImplicitAutograd")
    assert not compat.has_kernel("aten::linear", "CPU")


def test_operator_objects() -> None:
    assert isinstance(torch.ops.aten.add.Tensor, compat.OpOverload)
    assert isinstance(torch.ops.aten.add, compat.OpOverloadPacket)
    assert isinstance(torch.ops.higher_order.cond, compat.HigherOrderOperator)


def test_autocast_state() -> None:
    assert not compat.any_autocast_enabled()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compat.any_autocast_enabled()


def test_dispatch_mode_sees_aten_calls() -> None:
    seen = []

    class Record(compat.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Record():
        torch.ones(2) * 3
    assert torch.ops.aten.mul.Tensor in seen


def test_neg_view() -> None:
    x = torch.tensor([1.0, -2.0])
    v = compat.neg_view(x)
    assert v.is_neg() and v.tolist() == [-1.0, 2.0] and v.data_ptr() == x.data_ptr()


def test_direct_call_runs_the_operator_itself() -> None:
    """``direct_call`` of an OpOverload computes what the overload computes (with keyword
    arguments and ``out=``); other callables come back unchanged."""
    op = torch.ops.aten.addmm.default
    fast = compat.direct_call(op)
    b, x, w = torch.randn(3), torch.randn(2, 4), torch.randn(4, 3)
    torch.testing.assert_close(fast(b, x, w, beta=0.5, alpha=2.0), op(b, x, w, beta=0.5, alpha=2.0))
    out = torch.empty(2, 3)
    compat.direct_call(torch.ops.aten.addmm.out)(b, x, w, out=out)
    torch.testing.assert_close(out, torch.addmm(b, x, w))
    assert compat.direct_call(torch.sin) is torch.sin


def test_direct_call_of_a_default_overload_is_its_function_binding() -> None:
    """A default ATen overload runs through the public binding (unboxed, Inductor's extern
    path), with the schema's keyword arguments; one without a binding, or another overload,
    through its C++ operator."""
    conv = compat.direct_call(torch.ops.aten.convolution.default)
    assert conv is torch._C._VariableFunctions.convolution
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    kw = dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], transposed=False, output_padding=[0, 0], groups=1)
    torch.testing.assert_close(conv(x, w, bias=None, **kw), torch.ops.aten.convolution.default(x, w, None, **kw))
    cumsum = compat.direct_call(torch.ops.aten.cumsum.default)
    ids = torch.tensor([[1, 0, 1]])
    assert cumsum(ids, dim=-1, dtype=torch.int64).tolist() == [[1, 1, 2]]
    assert compat.direct_call(torch.ops.aten.add.Tensor) is torch.ops.aten.add.Tensor._op
    native = torch.ops.aten.native_layer_norm.default  # a binding exists: check it is that one
    assert compat.direct_call(native) is getattr(torch._C._VariableFunctions, "native_layer_norm", native._op)
