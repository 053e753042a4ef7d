"""The CPU fallback's direct path (csrc/device/fallback.cpp, direct_fallback): dense device
tensors move with one runtime copy each instead of torch's cpu_fallback dispatches. Checked here
against CPU eager where it could go wrong: stream ordering behind work still queued on the
device, permuted and gapped inputs (the CPU kernel sees their layout), out= and in-place writes (resized, returned
as the caller's tensor), CPU scalar operands, several outputs, a second device, and errors."""
from __future__ import annotations

import importlib.resources
import os
import struct

import pytest
import torch

DEVICE = "acme"


@pytest.fixture(scope="module")
def sample_kernels(acme):
    """tv_sleep_ms and tv_fill_f32 of the simulator's sample kernels, per device."""
    path = os.fspath(importlib.resources.files("torchvendor") / "lib" /
                     "libtorchvendor_sim_kernels.so")
    out = {}
    for d in range(min(2, acme.device_count())):
        mod = acme.load_module(path, device=d)
        out[d] = {n: acme.get_function(mod, n) for n in ("tv_sleep_ms", "tv_fill_f32")}
    return out


def busy_fill(acme, kernels, t: torch.Tensor, value: float, stream=None) -> None:
    """Queue a 30 ms sleep, then a fill of `t` (contiguous float32) on `stream` (default: the
    current one): `t` holds `value` only once the stream has run both."""
    k = kernels[t.device.index]
    acme.launch(k["tv_sleep_ms"], (1,), (1,), struct.pack("<q", 30), stream=stream)
    acme.launch(k["tv_fill_f32"], (1,), (1,), struct.pack("<qQf4x", t.numel(), t.data_ptr(), value),
                pointer_offsets=(8,), stream=stream)


def test_reads_wait_for_queued_work(acme, sample_kernels):
    x = torch.zeros(16, device=DEVICE)
    busy_fill(acme, sample_kernels, x, 7.0)
    y = x + 1                            # falls back: its host copy must wait for the fill
    assert torch.equal(y.cpu(), torch.full((16,), 8.0))


def test_in_place_write_lands_after_queued_work(acme, sample_kernels):
    x = torch.zeros(16, device=DEVICE)
    busy_fill(acme, sample_kernels, x, 2.0)
    r = x.mul_(3)                        # reads after the fill, writes back before returning
    assert r is x
    assert torch.equal(x.cpu(), torch.full((16,), 6.0))


def test_ordering_on_a_side_stream(acme, sample_kernels):
    s = acme.Stream()
    x = torch.zeros(16, device=DEVICE)
    acme.synchronize()
    with acme.stream(s):
        busy_fill(acme, sample_kernels, x, 5.0)
        y = torch.sub(x, 1)
    s.synchronize()
    assert torch.equal(y.cpu(), torch.full((16,), 4.0))


def test_permuted_and_gapped_inputs(acme):
    torch.manual_seed(0)
    a, b = torch.randn(4, 6), torch.randn(6, 4)
    ad, bd = a.to(DEVICE), b.to(DEVICE)
    # permuted (dense, direct path), the output keeps the CPU kernel's strides
    got = torch.sub(ad.t(), bd)
    assert torch.equal(got.cpu(), a.t() - b) and got.stride() == (a.t() - b).stride()
    # gaps between elements: the span of storage comes over, viewed with the same strides
    got = torch.sub(ad[:, ::2], bd.t()[:, ::2])
    assert torch.equal(got.cpu(), a[:, ::2] - b.t()[:, ::2])
    # a view at a storage offset
    assert torch.equal(torch.sub(ad[1:], ad[:-1]).cpu(), a[1:] - a[:-1])


def test_the_cpu_kernel_sees_a_gapped_inputs_layout(acme):
    # The CPU's reduced-precision batch norm picks its kernel by layout; a contiguous host copy
    # of a strided input rounded differently (up to 16 bfloat16 ulps). The same layout gives the
    # CPU's bits.
    torch.manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16):
        base = torch.randn(3, 8, 4, dtype=dtype)
        x = base[:, ::2]                                              # (3, 4, 4) with gaps
        stats = [torch.randn(4, dtype=dtype), torch.rand(4, dtype=dtype) + 0.5,
                 torch.randn(4, dtype=dtype), torch.randn(4, dtype=dtype)]
        want = torch.nn.functional.batch_norm(x, *stats, training=False, momentum=-1.2)
        xd = base.to(DEVICE)[:, ::2]
        assert not xd.is_contiguous()
        got = torch.nn.functional.batch_norm(xd, *[t.to(DEVICE) for t in stats], training=False, momentum=-1.2)
        assert torch.equal(got.cpu(), want), dtype


def test_out_argument(acme):
    a, b = torch.arange(6.0), torch.ones(6)
    out = torch.empty(6, device=DEVICE)
    r = torch.sub(a.to(DEVICE), b.to(DEVICE), out=out)
    assert r is out and torch.equal(out.cpu(), a - b)
    small = torch.empty(2, device=DEVICE)  # resized by the CPU kernel, written back resized
    with pytest.warns(UserWarning, match="resized"):
        torch.sub(a.to(DEVICE), b.to(DEVICE), out=small)
    assert small.shape == (6,) and torch.equal(small.cpu(), a - b)
    # out= is not copied to the host (the CPU kernel overwrites it): an out= that is also an
    # input must still be read as that input
    x = a.to(DEVICE)
    torch.sub(x, b.to(DEVICE), out=x)
    assert torch.equal(x.cpu(), a - b)
    strided = torch.zeros(6, 2, device=DEVICE)[:, 0]  # an out= view with gaps
    torch.sub(a.to(DEVICE), b.to(DEVICE), out=strided)
    assert torch.equal(strided.cpu(), a - b)


def test_cpu_scalar_operand_and_several_outputs(acme):
    x = torch.tensor([[1.0, 5.0], [4.0, 2.0]])
    got = torch.sub(torch.tensor(10.0), x.to(DEVICE))  # first tensor on the CPU (0-dim)
    assert got.device.type == DEVICE and torch.equal(got.cpu(), 10.0 - x)
    values, indices = torch.max(x.to(DEVICE), dim=1)
    assert values.device.type == DEVICE and indices.device.type == DEVICE
    assert torch.equal(values.cpu(), torch.tensor([5.0, 4.0]))
    assert torch.equal(indices.cpu(), torch.tensor([1, 0]))


def test_second_device(acme):
    if acme.device_count() < 2:
        pytest.skip("one device")
    a = torch.arange(4.0).to(f"{DEVICE}:1")
    got = torch.sub(a, 1)
    assert got.device == torch.device(DEVICE, 1) and acme.current_device() == 0
    assert torch.equal(got.cpu(), torch.arange(4.0) - 1)


def test_errors_are_the_cpu_kernels(acme):
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.sub(torch.ones(3, device=DEVICE), torch.ones(4, device=DEVICE))
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'|Subtraction, the `-` operator"):
        torch.sub(torch.ones(3, dtype=torch.bool, device=DEVICE),
                  torch.ones(3, dtype=torch.bool, device=DEVICE))
    # the device is still usable, and the failed calls were counted as fallbacks
    assert torch.equal(torch.sub(torch.ones(2, device=DEVICE), 1).cpu(), torch.zeros(2))


def test_host_staging_blocks_are_reused_safely(acme):
    # Small host copies reuse staging blocks: a reused block's old values must never show, an
    # out= staged in a small block may grow past it, and large tensors take the CPU allocator.
    torch.manual_seed(0)
    for n in (1, 16, 1000, 1024, 1025, 5000):
        a, b = torch.randn(n), torch.randn(n)
        for _ in range(3):
            assert torch.equal(torch.sub(a.to(DEVICE), b.to(DEVICE)).cpu(), a - b), n
            assert torch.equal(torch.relu(a.to(DEVICE)).cpu(), torch.relu(a)), n
    a, b = torch.randn(4000), torch.randn(4000)
    out = torch.empty(4, device=DEVICE)      # staged in a small block, resized to 16 KB
    with pytest.warns(UserWarning, match="resized"):
        torch.sub(a.to(DEVICE), b.to(DEVICE), out=out)
    assert out.shape == (4000,) and torch.equal(out.cpu(), a - b)


def test_arguments_sharing_a_storage_share_it_on_the_host(acme):
    """Each device argument got a host copy of its own, so the CPU kernel never saw two arguments
    alias: an out= overlapping an input ran (the CPU raises), and torch 2.15's aminmax check on
    out=(shared, shared) ("must not overlap", a ValueError) passed on the device. Arguments of
    one storage now share one host buffer at the same offsets."""
    cpu = torch.arange(6.0)
    with pytest.raises(RuntimeError, match="single memory location") as want:
        torch.add(cpu[:-1], 1, out=cpu[1:])
    dev = torch.arange(6.0).to(DEVICE)
    with pytest.raises(RuntimeError, match="single memory location") as got:
        torch.add(dev[:-1], 1, out=dev[1:])
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]
    # aliasing that the kernel allows still computes what the CPU computes: an in-place add of a
    # tensor and a disjoint view of the same buffer (both halves travel in one span)
    base, dbase = torch.arange(8.0), torch.arange(8.0).to(DEVICE)
    torch.add(base[:4], base[4:], out=base[:4])
    torch.add(dbase[:4], dbase[4:], out=dbase[:4])
    assert torch.equal(dbase.cpu(), base)
