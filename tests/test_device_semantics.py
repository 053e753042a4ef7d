"""Device semantics of a registered torchvendor device, at the level of PyTorch's OpenReg tests.

Every numeric check compares with CPU eager (torch.testing.assert_close at its default per-dtype
tolerances, or exact equality where the operation is a copy).  Runs on the session ``acme``
device (reference simulated runtime, 2 devices)."""
from __future__ import annotations

import copy
import io
import os
import warnings

import pytest
import torch

from device_utils import ALL_DTYPES, DEVICE, dev, make_cpu
from torchvendor.ir import compat

FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
COMPLEX_DTYPES = [torch.complex64, torch.complex128]


def _id(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


@pytest.fixture
def two_devices(acme):
    if acme.device_count() < 2:
        pytest.skip("needs 2 devices (TORCHVENDOR_SIM_DEVICES>=2)")
    return acme


@pytest.fixture(autouse=True)
def _restore_current_device(acme):
    before = acme.current_device()
    yield
    acme.set_device(before)


# ------------------------------------------------------------------------------------------
# registration and device management
# ------------------------------------------------------------------------------------------

def test_registration_surface(acme):
    assert torch.acme is acme
    assert torch._C._get_privateuse1_backend_name() == DEVICE
    assert acme.is_available()
    expected = int(os.environ.get("TORCHVENDOR_SIM_DEVICES", "2"))
    assert acme.device_count() == expected
    assert torch.device(DEVICE).type == DEVICE
    name = acme.get_device_name(0)
    assert isinstance(name, str) and name
    props = acme.get_device_properties(0)
    mb = int(os.environ.get("TORCHVENDOR_SIM_MEMORY_MB", "4096"))
    assert props.total_memory == mb * 1024 * 1024
    for fn in ("fallback_counts", "reset_fallback_counts", "diagnose"):
        assert callable(getattr(acme, fn))


def test_register_device_is_idempotent(acme):
    from torchvendor.sdk import register_device

    assert register_device(DEVICE) is acme


def test_set_device_and_device_context(two_devices):
    acme = two_devices
    acme.set_device(0)
    assert torch.empty(1, device=DEVICE).device == dev(0)
    with acme.device(1):
        assert acme.current_device() == 1
        assert torch.empty(1, device=DEVICE).device == dev(1)
        assert torch.ones(2, device=DEVICE).device == dev(1)
    assert acme.current_device() == 0
    acme.set_device(1)
    assert torch.zeros(1, device=DEVICE).device == dev(1)
    acme.set_device(0)
    with pytest.raises(Exception):
        acme.set_device(acme.device_count())


def test_torch_accelerator(two_devices):
    acme = two_devices
    acc = torch.accelerator
    assert acc.is_available()
    assert acc.current_accelerator().type == DEVICE
    assert acc.device_count() == acme.device_count()
    acc.set_device_index(1)
    assert acc.current_device_index() == 1
    assert acme.current_device() == 1
    assert torch.empty(1, device=DEVICE).device == dev(1)
    acc.set_device_index(0)
    assert acc.current_device_index() == 0
    with acc.device_index(1):
        assert acme.current_device() == 1
    assert acme.current_device() == 0
    s = acc.current_stream()
    assert isinstance(s, torch.Stream)
    assert s.device_type == acme.current_stream().device_type
    assert s.device.type == DEVICE
    x = torch.ones(1000, device=DEVICE) * 3
    acc.synchronize()
    assert x.sum().item() == 3000


def test_repr_and_item(acme):
    x = torch.arange(4, dtype=torch.float32, device=DEVICE)
    assert "device='acme:0'" in repr(x)
    assert x[2].item() == 2.0
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert bool((x > 2).any())


def test_tensor_and_module_methods(two_devices):
    t = torch.arange(6.0)
    d = t.acme()
    assert d.is_acme and not t.is_acme
    assert d.device == dev(0)
    d1 = t.acme(1)
    assert d1.device == dev(1)
    torch.testing.assert_close(d1.cpu(), t)
    m = torch.nn.Linear(3, 2)
    ref = copy.deepcopy(m)
    assert m.acme() is m
    assert all(p.is_acme for p in m.parameters())
    x = torch.randn(4, 3)
    torch.testing.assert_close(m(x.acme()).cpu(), ref(x))
    m.to("cpu")
    assert not any(p.is_acme for p in m.parameters())


# ------------------------------------------------------------------------------------------
# factories in every dtype
# ------------------------------------------------------------------------------------------

FACTORIES = {
    "zeros": lambda dt, d: torch.zeros(3, 5, dtype=dt, device=d),
    "ones": lambda dt, d: torch.ones(3, 5, dtype=dt, device=d),
    "full": lambda dt, d: torch.full((4, 2), True if dt == torch.bool else 3, dtype=dt, device=d),
    "arange": lambda dt, d: torch.arange(0, 10, dtype=dt, device=d),
    "tensor": lambda dt, d: torch.tensor([[1, 0], [2, 5]], dtype=dt, device=d),
    "eye": lambda dt, d: torch.eye(4, dtype=dt, device=d),
    "zeros_like": lambda dt, d: torch.zeros_like(torch.empty(2, 3, dtype=dt, device=d)),
    "full_like": lambda dt, d: torch.full_like(torch.empty(2, 3, dtype=dt, device=d), 1),
}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_id)
@pytest.mark.parametrize("factory", list(FACTORIES))
def test_factory_matches_cpu(acme, factory, dtype):
    make = FACTORIES[factory]
    try:
        expected = make(dtype, "cpu")
    except (RuntimeError, NotImplementedError):
        # Not valid on CPU either: the device must refuse it too.
        with pytest.raises((RuntimeError, NotImplementedError)):
            make(dtype, DEVICE)
        return
    actual = make(dtype, DEVICE)
    assert actual.device == dev(0)
    assert actual.dtype == dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_id)
def test_empty(acme, dtype):
    x = torch.empty(2, 7, dtype=dtype, device=DEVICE)
    assert (x.device, x.dtype, x.shape) == (dev(0), dtype, (2, 7))
    assert x.is_contiguous() and x.stride() == (7, 1)
    y = torch.empty_strided((3, 4), (1, 3), dtype=dtype, device=DEVICE)
    assert y.stride() == (1, 3)
    z = torch.empty(0, 3, dtype=dtype, device=DEVICE)
    assert z.numel() == 0 and z.cpu().shape == (0, 3)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_id)
def test_randn(acme, dtype):
    if not (dtype.is_floating_point or dtype.is_complex):
        with pytest.raises(RuntimeError):
            torch.randn(3, dtype=dtype, device="cpu")
        with pytest.raises(RuntimeError):
            torch.randn(3, dtype=dtype, device=DEVICE)
        return
    acme.manual_seed(1)
    x = torch.randn(4000, dtype=dtype, device=DEVICE)
    assert x.device == dev(0) and x.dtype == dtype
    xc = x.cpu().to(torch.complex128 if dtype.is_complex else torch.float64)
    assert torch.isfinite(xc).all()
    # standard normal: loose moments over 4000 draws (|mean| < 0.1, std in (0.9, 1.1))
    if dtype.is_complex:
        xc = torch.view_as_real(xc).flatten() * (2 ** 0.5)
    assert abs(xc.mean().item()) < 0.1
    assert 0.9 < xc.std().item() < 1.1


# ------------------------------------------------------------------------------------------
# copies
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_id)
def test_copy_round_trip_all_directions(two_devices, dtype):
    src = make_cpu((17, 5), dtype, seed=3)
    d0 = src.to(DEVICE)                     # H2D
    assert d0.device == dev(0)
    d0b = d0.clone()                        # D2D, same device
    d0c = torch.empty_like(d0)
    d0c.copy_(d0)                           # D2D copy_, same device
    d1 = d0.to(dev(1))                      # D2D, cross device
    assert d1.device == dev(1)
    back0 = torch.empty(17, 5, dtype=dtype, device=dev(0))
    back0.copy_(d1)                         # cross device into an existing tensor
    for t in (d0, d0b, d0c, d1, back0):
        assert t.dtype == dtype
        torch.testing.assert_close(t.cpu(), src, rtol=0, atol=0)  # D2H
    assert d0b.data_ptr() != d0.data_ptr()
    # the device copy is a separate buffer: changing the host source does not reach it
    src.fill_(0)
    torch.testing.assert_close(d0.cpu(), make_cpu((17, 5), dtype, seed=3), rtol=0, atol=0)


def _layouts():
    # name -> (source builder from a base CPU tensor, shape of the result)
    return {
        "contiguous": lambda b: b,
        "transposed": lambda b: b.t(),
        "sliced_steps": lambda b: b[1::2, ::3],
        "expanded": lambda b: b[:1].expand(9, 12),
        "permuted_3d": lambda b: b.reshape(3, 3, 12).permute(2, 0, 1),
        "offset_narrow": lambda b: b.narrow(1, 5, 4),
    }


DIRECTIONS = ["h2d", "d2h", "d2d", "d0_to_d1"]


@pytest.mark.parametrize("layout", list(_layouts()))
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_copy_noncontiguous_source(two_devices, direction, layout):
    base = torch.arange(9 * 12, dtype=torch.float32).reshape(9, 12)
    view = _layouts()[layout]
    expected = view(base).clone()
    src_dev = {"h2d": "cpu", "d2h": dev(0), "d2d": dev(0), "d0_to_d1": dev(0)}[direction]
    dst_dev = {"h2d": dev(0), "d2h": "cpu", "d2d": dev(0), "d0_to_d1": dev(1)}[direction]
    src = view(base.to(src_dev))
    assert src.shape == expected.shape and src.stride() == view(base).stride()
    out = src.to(dst_dev, copy=True)
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    # non-contiguous destination of the same shape: a strided, permuted window into a larger
    # buffer
    rev = list(reversed(expected.shape))
    big = torch.full([2 * n for n in rev], -1.0, device=dst_dev)
    window = tuple(slice(None, None, 2) for _ in rev)
    dst = big[window].permute(*reversed(range(len(rev))))
    assert dst.shape == expected.shape and not dst.is_contiguous()
    dst.copy_(src)
    torch.testing.assert_close(dst.cpu(), expected, rtol=0, atol=0)
    # the elements of `big` that `dst` does not cover are untouched
    mask = torch.ones(big.shape, dtype=torch.bool)
    mask[window] = False
    assert (big.cpu()[mask] == -1).all()


@pytest.mark.parametrize("src_dtype,dst_dtype", [
    (torch.float32, torch.int32), (torch.float64, torch.float16), (torch.int64, torch.float32),
    (torch.bool, torch.float32), (torch.float32, torch.bfloat16), (torch.float32, torch.complex64),
    (torch.uint8, torch.int64), (torch.complex128, torch.complex64),
], ids=lambda d: _id(d))
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_copy_converting_dtype(two_devices, direction, src_dtype, dst_dtype):
    src_cpu = make_cpu((6, 7), src_dtype, seed=5)
    expected = src_cpu.to(dst_dtype)
    src_dev = {"h2d": "cpu", "d2h": dev(0), "d2d": dev(0), "d0_to_d1": dev(0)}[direction]
    dst_dev = {"h2d": dev(0), "d2h": "cpu", "d2d": dev(0), "d0_to_d1": dev(1)}[direction]
    src = src_cpu.to(src_dev)
    out = src.to(dst_dev, dst_dtype)
    assert out.dtype == dst_dtype and out.device == torch.device(dst_dev)
    torch.testing.assert_close(out.cpu(), expected)
    dst = torch.empty(7, 6, dtype=dst_dtype, device=dst_dev).t()  # non-contiguous too
    dst.copy_(src)
    torch.testing.assert_close(dst.cpu(), expected)


@pytest.mark.parametrize("src_device", ["cpu", DEVICE])
def test_copy_into_expanded_destination_raises(acme, src_device):
    src = torch.randn(3, 4, device=src_device)
    for dst_device in ("cpu", DEVICE):
        dst = torch.zeros(1, 4, device=dst_device).expand(3, 4)
        with pytest.raises(RuntimeError, match="single memory location"):
            dst.copy_(src)


def test_copy_scalar_and_empty(two_devices):
    s = torch.tensor(2.5).to(DEVICE)
    assert s.dim() == 0 and s.item() == 2.5
    e = torch.empty(0, 4).to(dev(1))
    assert e.shape == (0, 4) and e.to(dev(0)).cpu().shape == (0, 4)
    # broadcasting copy_ from a scalar-like tensor
    x = torch.zeros(3, 3, device=DEVICE)
    x.copy_(torch.tensor(7.0))
    assert (x.cpu() == 7).all()


# ------------------------------------------------------------------------------------------
# views and in-place
# ------------------------------------------------------------------------------------------

def _same_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


VIEW_OPS = {
    "view": lambda x: x.view(6, 4),
    "slice_steps": lambda x: x[::2, 1::3],
    "transpose": lambda x: x.transpose(0, 1),
    "as_strided": lambda x: x.as_strided((3, 3), (5, 2), 1),
    "unsqueeze": lambda x: x.unsqueeze(0),
    "select": lambda x: x[2],
    "diagonal": lambda x: x.diagonal(),
    "expand": lambda x: x[:1].expand(3, 6),
    "unfold": lambda x: x.unfold(1, 2, 2),
    "view_as_real_of_complex": lambda x: torch.view_as_real(x.to(torch.complex64)),
}


@pytest.mark.parametrize("name", list(VIEW_OPS))
def test_views_match_cpu_and_share_storage(acme, name):
    base_cpu = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    base = base_cpu.to(DEVICE)
    fn = VIEW_OPS[name]
    v_cpu, v = fn(base_cpu), fn(base)
    assert v.shape == v_cpu.shape and v.stride() == v_cpu.stride()
    assert v.storage_offset() == v_cpu.storage_offset()
    torch.testing.assert_close(v.cpu(), v_cpu, rtol=0, atol=0)
    if name != "view_as_real_of_complex":  # .to(complex) is a copy
        assert v._is_view() and _same_storage(v, base)


INPLACE_ON_VIEW = {
    "slice_add_": lambda b: b[::2].add_(1),
    "view_mul_": lambda b: b.view(6, 4).mul_(2),
    "transpose_zero_": lambda b: b.t()[1:3].zero_(),
    "as_strided_fill_": lambda b: b.as_strided((2, 2), (6, 1), 7).fill_(-5),
    "unsqueeze_sub_": lambda b: b.unsqueeze(0)[:, 1].sub_(3),
    "column_sin_": lambda b: b[:, 2].sin_(),             # likely falls back to CPU
    "diag_copy_": lambda b: b.diagonal().copy_(b.new_tensor([9.0, 8.0, 7.0, 6.0])),
    "setitem_mask": lambda b: b.__setitem__(b > 20, 0.5),
    "index_put_": lambda b: b.index_put_((b.new_tensor([0, 3], dtype=torch.long),),
                                         b.new_tensor(1.5)),
    "clamp_on_step_view": lambda b: b[1::2, ::2].clamp_(3, 10),
}


@pytest.mark.parametrize("name", list(INPLACE_ON_VIEW))
def test_inplace_on_view_visible_in_base(acme, name):
    base_cpu = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    base = base_cpu.to(DEVICE)
    ptr = base.data_ptr()
    fn = INPLACE_ON_VIEW[name]

    r_cpu, r = fn(base_cpu), fn(base)
    assert base.data_ptr() == ptr, "in-place op reallocated its base"
    torch.testing.assert_close(base.cpu(), base_cpu, rtol=0, atol=0)
    if isinstance(r_cpu, torch.Tensor):
        torch.testing.assert_close(r.cpu(), r_cpu)


def test_out_variant_keeps_buffer_and_resizes(acme):
    x = torch.linspace(-3, 3, 12).reshape(3, 4)
    xd = x.to(DEVICE)
    out = torch.empty(3, 4, device=DEVICE)
    ptr = out.data_ptr()
    r = torch.sin(xd, out=out)
    assert r is out and out.data_ptr() == ptr
    torch.testing.assert_close(out.cpu(), torch.sin(x))
    small = torch.empty(0, device=DEVICE)
    torch.add(xd, 1, out=small)                   # out= resizes an empty tensor
    assert small.shape == (3, 4)
    torch.testing.assert_close(small.cpu(), x + 1)
    strided = torch.zeros(4, 3, device=DEVICE).t()  # non-contiguous out
    torch.mul(xd, 2, out=strided)
    torch.testing.assert_close(strided.cpu(), x * 2)


# Each case: (overlapping call, the same call writing to disjoint memory of the same storage), as
# functions of the device. The CPU kernels refuse an out= that overlaps an input; the fallback
# hands them separate copies, so it checks first (before this, the device computed garbage).
_OVERLAP_CASES = {
    "cat": lambda d: (lambda a=torch.arange(6.0, device=d): torch.cat([a[:3], a[3:]], out=a),
                      lambda a=torch.arange(12.0, device=d): torch.cat([a[:3], a[3:6]], out=a[6:])),
    "gather": lambda d: (
        lambda m=torch.arange(4.0, device=d).reshape(2, 2): torch.gather(
            m, 1, torch.tensor([[0, 1], [1, 0]], device=d), out=m),
        lambda m=torch.arange(8.0, device=d).reshape(4, 2): torch.gather(
            m[:2], 1, torch.tensor([[1, 0], [0, 1]], device=d), out=m[2:])),
    "take": lambda d: (
        lambda t=torch.arange(4.0, device=d): torch.take(t, torch.tensor([3, 2, 1, 0], device=d), out=t),
        lambda t=torch.arange(8.0, device=d): torch.take(t[:4], torch.tensor([3, 2, 1, 0], device=d), out=t[4:])),
    "index_select": lambda d: (
        lambda t=torch.arange(4.0, device=d): torch.index_select(t, 0, torch.tensor([1, 0], device=d), out=t[:2]),
        lambda t=torch.arange(4.0, device=d): torch.index_select(t[:2], 0, torch.tensor([1, 0], device=d), out=t[2:])),
}


@pytest.mark.parametrize("op", list(_OVERLAP_CASES))
def test_out_overlapping_an_input_raises_as_on_cpu(acme, op):
    (bad_cpu, ok_cpu), (bad_dev, ok_dev) = _OVERLAP_CASES[op]("cpu"), _OVERLAP_CASES[op](DEVICE)
    with pytest.raises(RuntimeError) as on_cpu:
        bad_cpu()
    with pytest.raises(RuntimeError) as on_dev:
        bad_dev()
    assert str(on_dev.value).split("\n")[0] == str(on_cpu.value).split("\n")[0]
    assert "refer to a single memory location" in str(on_dev.value)
    torch.testing.assert_close(ok_dev().cpu(), ok_cpu())  # disjoint parts of one storage: fine


@pytest.mark.parametrize("op", ["abs", "isnan", "isfinite", "isinf", "neg", "sign", "signbit"])
def test_fallback_composite_pointwise(acme, op):
    # pytorch#165549: abs/isfinite/isnan through cpu_fallback returned empty tensors.
    x = torch.tensor([1.0, -2.0, float("nan"), float("inf"), -float("inf"), 0.0, -0.0])
    fn = getattr(torch, op)
    torch.testing.assert_close(fn(x.to(DEVICE)).cpu(), fn(x), equal_nan=True)


def _cpu_kernel_beside_composite(name: str) -> bool:
    """The rule of csrc/device/fallback.cpp's register_cpu_kernel_fallbacks, read from the dispatcher."""
    has = compat.has_kernel
    if not has(name, "CPU"):
        return False
    return has(name, "CompositeExplicitAutograd") or (
        has(name, "CompositeImplicitAutograd") and has(name, "Autograd"))


def test_cpu_kernels_serve_ops_with_a_generic_composite(acme):
    # Without a device kernel torch runs the composite, whose numbers are not the CPU kernel's.
    ops = [n for n in compat.operator_names() if n.startswith("aten::") and _cpu_kernel_beside_composite(n)]
    assert "aten::silu_backward" in ops and "aten::native_layer_norm" in ops
    assert not [n for n in ops if not compat.has_kernel(n, "PrivateUse1")]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", ["silu", "mish"])
def test_activation_backward_is_the_cpu_kernels(acme, op, dtype):
    # silu_backward and mish_backward have a CompositeImplicitAutograd formula that rounds to the
    # dtype after each operator; the CPU kernel computes in float and rounds once (an ulp apart).
    fn = getattr(torch.nn.functional, op)
    x = torch.linspace(-6, 6, 4001, dtype=dtype)
    grad = torch.linspace(-3, 2, 4001, dtype=dtype)
    acme.reset_fallback_counts()
    xd = x.to(DEVICE).requires_grad_()
    (on_device,) = torch.autograd.grad(fn(xd), xd, grad.to(DEVICE))
    xc = x.clone().requires_grad_()
    (on_cpu,) = torch.autograd.grad(fn(xc), xc, grad)
    assert torch.equal(on_device.cpu(), on_cpu)
    assert acme.fallback_counts().get(f"{op}_backward", 0) == 1


def test_fallback_tensor_lists(acme):
    # pytorch#105209: TensorList arguments through the CPU fallback.
    xs = [torch.randn(3, 4) for _ in range(3)]
    ds = [x.to(DEVICE) for x in xs]
    torch.testing.assert_close(torch.cat(ds, 1).cpu(), torch.cat(xs, 1))
    torch.testing.assert_close(torch.stack(ds).cpu(), torch.stack(xs))
    outs = torch._foreach_add(ds, 1.5)
    for o, x in zip(outs, xs):
        assert o.is_acme
        torch.testing.assert_close(o.cpu(), x + 1.5)
    ptrs = [d.data_ptr() for d in ds]
    torch._foreach_mul_(ds, 2.0)
    assert [d.data_ptr() for d in ds] == ptrs
    for d, x in zip(ds, xs):
        torch.testing.assert_close(d.cpu(), x * 2)
    parts = torch.split(ds[0], [1, 3], dim=1)
    assert all(p.is_acme for p in parts) and parts[1].shape == (3, 3)


def test_dynamic_shape_ops(acme):
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    d = x.to(DEVICE)
    torch.testing.assert_close(d.nonzero().cpu(), x.nonzero())
    torch.testing.assert_close(d[d > 0].cpu(), x[x > 0])
    u, c = torch.unique(d, return_counts=True)
    uc, cc = torch.unique(x, return_counts=True)
    torch.testing.assert_close(u.cpu(), uc)
    torch.testing.assert_close(c.cpu(), cc)
    torch.testing.assert_close(torch.masked_select(d, d < 1).cpu(), torch.masked_select(x, x < 1))


def test_fallback_counts_and_diagnose(acme):
    acme.reset_fallback_counts()
    x = torch.randn(8, device=DEVICE)
    torch.special.erfcx(x)  # an op no vendor implements natively
    counts = acme.fallback_counts()
    assert isinstance(counts, dict)
    assert any("erfcx" in k for k in counts), counts
    assert all(isinstance(v, int) and v > 0 for v in counts.values())
    acme.reset_fallback_counts()
    assert not any(acme.fallback_counts().values())
    text = acme.diagnose()
    assert isinstance(text, str) and DEVICE in text


def test_mixed_device_op_raises(two_devices):
    a = torch.ones(3, device=dev(0))
    b = torch.ones(3, device=dev(1))
    with pytest.raises(RuntimeError):
        a + b
    with pytest.raises(RuntimeError):
        a + torch.ones(3)  # non-scalar CPU tensor
    # a 0-dim CPU tensor is allowed as a scalar, as on CUDA
    torch.testing.assert_close((a + torch.tensor(2.0)).cpu(), torch.full((3,), 3.0))


_CONJ_NEG_SCRIPT = r"""
import torch
from torchvendor.sdk import register_device
register_device("acme")
y = torch.tensor([1 + 2j, -3 - 0.5j, 0.25j], dtype=torch.complex64)
x = torch.tensor([1.5, -2.0, 0.0])
yd, xd = y.to("acme"), x.to("acme")
cases = {
    "conj_to_cpu": (lambda: yd.conj().cpu(), y.conj()),
    "conj_clone": (lambda: yd.conj().clone().cpu(), y.conj()),
    "conj_resolve": (lambda: yd.conj().resolve_conj().cpu(), y.conj()),
    "conj_copy_into_device": (lambda: torch.empty_like(yd).copy_(yd.conj()).cpu(), y.conj()),
    "conj_add": (lambda: (yd.conj() + 1).cpu(), y.conj() + 1),
    "neg_view_clone": (lambda: torch._neg_view(xd).clone().cpu(), -x),
    "conj_physical": (lambda: torch.conj_physical(yd).cpu(), y.conj()),
}
for name, (fn, expected) in cases.items():
    print("start", name, flush=True)
    got = fn()
    torch.testing.assert_close(got.resolve_conj(), expected.resolve_conj())
    print("ok", name, flush=True)
"""


def test_conj_and_neg_views_copy(acme):
    # Lazy conjugate / negative views (conj bit, neg bit) must be materialized correctly when
    # copied or computed on. Run in a child process: a crash here must not end the session.
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-W", "ignore", "-X", "faulthandler", "-c",
                           _CONJ_NEG_SCRIPT], capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    started = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("start ")]
    done = {ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("ok ")}
    failed = [n for n in started if n not in done]
    assert proc.returncode == 0, (
        f"child exited with {proc.returncode} in case {failed[:1]}: {out[-1500:]}")
    assert len(done) == 7


# ------------------------------------------------------------------------------------------
# autograd
# ------------------------------------------------------------------------------------------

def test_mlp_backward_matches_cpu(acme):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16), torch.nn.Tanh(),
        torch.nn.Linear(16, 3))
    model_d = copy.deepcopy(model).to(DEVICE)
    x = torch.randn(8, 10)
    target = torch.randint(0, 3, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_d = torch.optim.SGD(model_d.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        for m, o, xx, tt in ((model, opt, x, target),
                             (model_d, opt_d, x.to(DEVICE), target.to(DEVICE))):
            o.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(xx), tt)
            loss.backward()
            if m is model_d:
                assert loss.device == dev(0)
                for (n, p), (_, pc) in zip(model_d.named_parameters(), model.named_parameters()):
                    assert p.grad is not None and p.grad.device == dev(0), n
                    torch.testing.assert_close(p.grad.cpu(), pc.grad, msg=n)
            o.step()
    for p, pc in zip(model_d.parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), pc.detach())


def test_batchnorm_training_updates_running_stats(acme):
    # native_batch_norm mutates running_mean/running_var (Tensor(b!) arguments of a
    # functional op): a CPU fallback must write them back to the device tensors.
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(3)
    bn_d = copy.deepcopy(bn).to(DEVICE)
    x = torch.randn(4, 3, 5, 5) * 2 + 1
    for _ in range(2):
        y, yd = bn(x), bn_d(x.to(DEVICE))
    torch.testing.assert_close(yd.detach().cpu(), y.detach())
    torch.testing.assert_close(bn_d.running_mean.cpu(), bn.running_mean)
    torch.testing.assert_close(bn_d.running_var.cpu(), bn.running_var)
    assert bn_d.num_batches_tracked.item() == 2


def test_conv2d_module_forward_backward(acme):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    conv_d = copy.deepcopy(conv).to(DEVICE)
    x = torch.randn(2, 3, 8, 8)
    xd = x.to(DEVICE).requires_grad_(True)
    x.requires_grad_(True)
    y, yd = conv(x), conv_d(xd)
    torch.testing.assert_close(yd.detach().cpu(), y.detach())
    y.square().sum().backward()
    yd.square().sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    torch.testing.assert_close(conv_d.weight.grad.cpu(), conv.weight.grad)
    torch.testing.assert_close(conv_d.bias.grad.cpu(), conv.bias.grad)


def test_autograd_leaf_created_on_device(acme):
    x = torch.linspace(0.1, 2, 7, device=DEVICE, requires_grad=True)
    y = (x.sin() * x.exp()).sum()
    (g,) = torch.autograd.grad(y, x)
    xc = torch.linspace(0.1, 2, 7, requires_grad=True)
    (gc,) = torch.autograd.grad((xc.sin() * xc.exp()).sum(), xc)
    assert g.device == dev(0)
    torch.testing.assert_close(g.cpu(), gc)


# ------------------------------------------------------------------------------------------
# RNG
# ------------------------------------------------------------------------------------------

def test_manual_seed_reproducible(acme):
    acme.manual_seed(123)
    a = torch.randn(64, device=DEVICE)
    torch.randn(10)  # consuming the CPU generator must not disturb the device generator
    b = torch.rand(5, device=DEVICE)
    acme.manual_seed(123)
    a2 = torch.randn(64, device=DEVICE)
    b2 = torch.rand(5, device=DEVICE)
    assert torch.equal(a.cpu(), a2.cpu()) and torch.equal(b.cpu(), b2.cpu())
    assert acme.initial_seed() == 123
    acme.manual_seed(124)
    assert not torch.equal(torch.randn(64, device=DEVICE).cpu(), a.cpu())


@pytest.mark.parametrize("op", [
    "rand", "randint", "normal_", "uniform_", "bernoulli",
    "dropout",  # native_dropout takes no Generator: a plain CPU fallback drew CPU randoms
    "randperm", "multinomial", "exponential_"])
def test_random_ops_follow_device_seed(acme, op):
    fns = {
        "rand": lambda: torch.rand(50, device=DEVICE),
        "randint": lambda: torch.randint(0, 1000, (50,), device=DEVICE),
        "normal_": lambda: torch.empty(50, device=DEVICE).normal_(2, 3),
        "uniform_": lambda: torch.empty(50, device=DEVICE).uniform_(-1, 1),
        "bernoulli": lambda: torch.bernoulli(torch.full((50,), 0.5, device=DEVICE)),
        "dropout": lambda: torch.nn.functional.dropout(torch.ones(50, device=DEVICE), 0.5),
        "randperm": lambda: torch.randperm(50, device=DEVICE),
        "multinomial": lambda: torch.multinomial(torch.ones(50, device=DEVICE), 20),
        "exponential_": lambda: torch.empty(50, device=DEVICE).exponential_(),
    }
    fn = fns[op]
    acme.manual_seed(7)
    a = fn()
    torch.rand(3)  # CPU generator use in between
    acme.manual_seed(7)
    b = fn()
    assert a.device == dev(0)
    assert torch.equal(a.cpu(), b.cpu())
    c = fn()
    assert not torch.equal(a.cpu(), c.cpu()), "generator state did not advance"


def test_rng_state_round_trip(acme):
    acme.manual_seed(5)
    torch.randn(3, device=DEVICE)
    state = acme.get_rng_state()
    assert isinstance(state, torch.Tensor) and state.device.type == "cpu"
    assert state.dtype == torch.uint8
    a = torch.randn(100, device=DEVICE)
    acme.set_rng_state(state)
    b = torch.randn(100, device=DEVICE)
    assert torch.equal(a.cpu(), b.cpu())


def test_rng_devices_independent(two_devices):
    acme = two_devices
    acme.manual_seed_all(11)
    assert acme.initial_seed() == 11
    with acme.device(1):
        assert acme.initial_seed() == 11
    a0 = torch.randn(32, device=dev(0))
    acme.manual_seed_all(11)
    torch.randn(1000, device=dev(1))  # drawing on device 1 must not move device 0's stream
    b0 = torch.randn(32, device=dev(0))
    assert torch.equal(a0.cpu(), b0.cpu())
    # seeding device 1 only leaves device 0 alone
    acme.manual_seed(3)
    s0 = acme.get_rng_state(0)
    with acme.device(1):
        acme.manual_seed(99)
        assert acme.initial_seed() == 99
    assert acme.initial_seed() == 3
    assert torch.equal(acme.get_rng_state(0), s0)
    # states are per device
    acme.set_rng_state(acme.get_rng_state(1), 0)
    x0 = torch.randn(16, device=dev(0))
    x1 = torch.randn(16, device=dev(1))
    assert torch.equal(x0.cpu(), x1.cpu())


def test_generator_object_and_global_seed(acme):
    g = torch.Generator(device=DEVICE)
    assert g.device.type == DEVICE
    g.manual_seed(42)
    a = torch.randn(20, device=DEVICE, generator=g)
    g.manual_seed(42)
    b = torch.randn(20, device=DEVICE, generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    # torch.manual_seed seeds the custom device too, without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.manual_seed(2024)
    c = torch.randn(20, device=DEVICE)
    torch.manual_seed(2024)
    d = torch.randn(20, device=DEVICE)
    assert torch.equal(c.cpu(), d.cpu())
    acme.seed()  # a fresh random seed (returns None, as torch.cuda.seed does)
    s = acme.initial_seed()
    e = torch.randn(20, device=DEVICE)
    acme.manual_seed(s)
    assert torch.equal(torch.randn(20, device=DEVICE).cpu(), e.cpu())


# ------------------------------------------------------------------------------------------
# serialization
# ------------------------------------------------------------------------------------------

def _roundtrip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.bool, torch.complex64], ids=_id)
def test_save_load_tensor(two_devices, dtype):
    x = make_cpu((5, 6), dtype, seed=9)
    d0 = x.to(dev(0))
    d1 = x.to(dev(1))
    view = d0[1:, ::2]  # a view: storage sharing must survive
    out = _roundtrip({"a": d0, "b": d1, "v": view})
    assert out["a"].device == dev(0) and out["b"].device == dev(1)
    assert out["a"].dtype == dtype
    torch.testing.assert_close(out["a"].cpu(), x, rtol=0, atol=0)
    torch.testing.assert_close(out["b"].cpu(), x, rtol=0, atol=0)
    torch.testing.assert_close(out["v"].cpu(), x[1:, ::2], rtol=0, atol=0)
    assert _same_storage(out["v"], out["a"])
    cpu = _roundtrip(d1, map_location="cpu")
    assert cpu.device.type == "cpu"
    torch.testing.assert_close(cpu, x, rtol=0, atol=0)
    other = _roundtrip(d0, map_location=f"{DEVICE}:1")
    assert other.device == dev(1)
    torch.testing.assert_close(other.cpu(), x, rtol=0, atol=0)
    remap = _roundtrip(d0, map_location={f"{DEVICE}:0": f"{DEVICE}:1"})
    assert remap.device == dev(1)
    to_dev = _roundtrip(x, map_location=DEVICE)  # CPU checkpoint loaded onto the device
    assert to_dev.is_acme


def test_save_load_state_dict(two_devices):
    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    m.to(DEVICE)
    m.train()
    m(torch.randn(16, 4, device=DEVICE))  # populate running stats (buffers)
    sd = _roundtrip(m.state_dict())
    assert all(v.device == dev(0) for v in sd.values())
    sd_cpu = _roundtrip(m.state_dict(), map_location="cpu")
    sd_d1 = _roundtrip(m.state_dict(), map_location=f"{DEVICE}:1")
    for k, v in m.state_dict().items():
        torch.testing.assert_close(sd[k].cpu(), v.cpu(), rtol=0, atol=0)
        torch.testing.assert_close(sd_cpu[k], v.cpu(), rtol=0, atol=0)
        assert sd_d1[k].device == dev(1)
    m2 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8),
                             torch.nn.Linear(8, 2))
    m2.load_state_dict(sd_cpu)
    m.eval(), m2.eval()
    x = torch.randn(3, 4)
    torch.testing.assert_close(m(x.to(DEVICE)).cpu(), m2(x))


# ------------------------------------------------------------------------------------------
# pinned memory and non_blocking copies
# ------------------------------------------------------------------------------------------

def test_pin_memory_and_non_blocking(acme):
    x = torch.randn(256, 257)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned()
    torch.testing.assert_close(p, x, rtol=0, atol=0)
    e = torch.empty(10, pin_memory=True)
    assert e.is_pinned()
    d = p.to(DEVICE, non_blocking=True)
    acme.synchronize()
    torch.testing.assert_close(d.cpu(), x, rtol=0, atol=0)
    back = d.to("cpu", non_blocking=True)
    acme.synchronize()
    torch.testing.assert_close(back, x, rtol=0, atol=0)
    dst = torch.empty_like(x).pin_memory()
    dst.copy_(d * 2, non_blocking=True)
    acme.synchronize()
    torch.testing.assert_close(dst, x * 2, rtol=0, atol=0)
    # pageable non_blocking copies are still correct
    d2 = x.to(DEVICE, non_blocking=True)
    acme.synchronize()
    torch.testing.assert_close(d2.cpu(), x, rtol=0, atol=0)


def test_pinned_source_reuse_after_sync(acme):
    p = torch.zeros(1 << 16).pin_memory()
    outs = []
    for i in range(5):
        p.fill_(i)
        outs.append(p.to(DEVICE, non_blocking=True))
        acme.synchronize()  # the caller's contract before mutating the pinned buffer
    for i, o in enumerate(outs):
        assert (o.cpu() == i).all()


# ------------------------------------------------------------------------------------------
# autocast
# ------------------------------------------------------------------------------------------

def test_autocast(acme):
    supported = acme.get_amp_supported_dtype()
    assert torch.float32 not in supported
    if torch.bfloat16 not in supported:
        pytest.skip(f"device declares no bf16 autocast (supported: {supported})")
    assert torch.amp.is_autocast_available(DEVICE)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    ad, bd = a.to(DEVICE), b.to(DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        assert torch.is_autocast_enabled(DEVICE)
        c = ad @ bd
        c2 = torch.mm(ad, bd)
        add = ad + 1  # an op without an autocast policy keeps fp32
    assert c.dtype == torch.bfloat16 and c2.dtype == torch.bfloat16
    assert add.dtype == torch.float32
    expected = (a.bfloat16() @ b.bfloat16())
    torch.testing.assert_close(c.cpu(), expected)
    assert (ad @ bd).dtype == torch.float32  # off again outside the region
