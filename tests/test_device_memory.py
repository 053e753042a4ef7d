"""Memory: the caching device allocator's statistics, empty_cache, out-of-memory errors and
thread safety, on the session ``acme`` device (2 simulated devices, 4096 MB each by default)."""
from __future__ import annotations

import gc
import os
import re
import threading

import pytest
import torch

from device_utils import DEVICE, dev

MB = 1024 * 1024
CAPACITY = int(os.environ.get("TORCHVENDOR_SIM_MEMORY_MB", "4096")) * MB


def _sync(acme):
    for i in range(acme.device_count()):
        acme.synchronize(i)


def _settle(acme):
    gc.collect()
    _sync(acme)


@pytest.fixture(autouse=True)
def no_leaks(acme):
    """memory_allocated on every device is back to (at most) its starting value after each
    test. "At most": a tensor an earlier failing test left alive in its traceback may be freed
    meanwhile. (A full gc.collect runs only when the fast check fails: it is slow with op_db
    loaded in the same process.)"""
    _sync(acme)
    n = acme.device_count()
    before = [acme.memory_allocated(i) for i in range(n)]
    yield
    _sync(acme)
    after = [acme.memory_allocated(i) for i in range(n)]
    if any(a > b for a, b in zip(after, before)):
        _settle(acme)
        after = [acme.memory_allocated(i) for i in range(n)]
    assert all(a <= b for a, b in zip(after, before)), (
        f"device memory leaked: {before} -> {after}")


def test_memory_allocated_tracks_live_tensor(acme):
    # the measurement the autouse leak check relies on sees a live tensor, exactly
    base = acme.memory_allocated()
    keep = torch.empty(MB, dtype=torch.uint8, device=DEVICE)
    assert acme.memory_allocated() >= base + MB
    del keep
    assert acme.memory_allocated() == base


def test_alloc_free_moves_stats(acme):
    a0, r0 = acme.memory_allocated(), acme.memory_reserved()
    x = torch.empty(3 * MB + 100, dtype=torch.uint8, device=DEVICE)
    a1, r1 = acme.memory_allocated(), acme.memory_reserved()
    assert 3 * MB + 100 <= a1 - a0 <= 3 * MB + 100 + 4096  # rounded up only a little
    assert r1 >= a1 and r1 >= r0
    assert acme.max_memory_allocated() >= a1
    assert acme.max_memory_reserved() >= r1
    stats = acme.memory_stats()
    assert stats["allocated_bytes.all.current"] == a1
    assert stats["reserved_bytes.all.current"] == r1
    assert stats["allocation.all.current"] >= 1
    del x
    assert acme.memory_allocated() == a0
    assert acme.memory_reserved() == r1  # cached, not returned to the runtime
    assert acme.memory_stats()["allocated_bytes.all.freed"] >= 3 * MB


def test_stats_agree_with_torch_accelerator(acme):
    x = torch.empty(MB, device=DEVICE)
    assert torch.accelerator.memory_allocated(0) == acme.memory_allocated(0)
    assert torch.accelerator.memory_reserved(0) == acme.memory_reserved(0)
    assert torch.accelerator.max_memory_allocated(0) == acme.max_memory_allocated(0)
    s = torch.accelerator.memory_stats(0)
    assert s["allocated_bytes.all.current"] == acme.memory_allocated(0)
    del x


def test_stats_are_per_device(acme):
    if acme.device_count() < 2:
        pytest.skip("needs 2 devices")
    a0, a1 = acme.memory_allocated(0), acme.memory_allocated(1)
    x = torch.empty(2 * MB, dtype=torch.uint8, device=dev(1))
    assert acme.memory_allocated(0) == a0
    assert acme.memory_allocated(1) >= a1 + 2 * MB
    with acme.device(1):
        assert acme.memory_allocated() == acme.memory_allocated(1)
    assert acme.memory_allocated(dev(1)) == acme.memory_allocated(1)
    del x
    assert acme.memory_allocated(1) == a1


def test_views_do_not_allocate(acme):
    x = torch.empty(MB, device=DEVICE)
    a = acme.memory_allocated()
    v = x.view(1024, 1024).t()[::2]
    v.add_(1)  # in place on a view: no new storage survives
    assert acme.memory_allocated() == a
    del v, x


def test_peak_and_reset_peak(acme):
    base = acme.memory_allocated()
    acme.reset_peak_memory_stats()
    assert acme.max_memory_allocated() == base
    x = torch.empty(8 * MB, dtype=torch.uint8, device=DEVICE)
    y = torch.empty(4 * MB, dtype=torch.uint8, device=DEVICE)
    peak = acme.max_memory_allocated()
    assert peak >= base + 12 * MB
    del x
    assert acme.max_memory_allocated() == peak  # the peak stays after a free
    acme.reset_peak_memory_stats()
    assert acme.max_memory_allocated() == acme.memory_allocated()
    assert acme.max_memory_allocated() < peak
    assert acme.max_memory_reserved() == acme.memory_reserved()
    del y


def test_reset_accumulated_stats(acme):
    x = torch.empty(MB, device=DEVICE)
    del x
    s = acme.memory_stats()
    assert s["allocation.all.allocated"] > 0 and s["allocated_bytes.all.freed"] > 0
    acme.reset_accumulated_memory_stats()
    s = acme.memory_stats()
    assert s["allocation.all.allocated"] == 0
    assert s["allocated_bytes.all.allocated"] == 0
    assert s["allocated_bytes.all.freed"] == 0
    assert s["allocated_bytes.all.current"] == acme.memory_allocated()  # current untouched


def test_empty_cache_lowers_reserved(acme):
    acme.empty_cache()
    r0 = acme.memory_reserved()
    x = torch.empty(64 * MB, dtype=torch.uint8, device=DEVICE)
    del x
    r1 = acme.memory_reserved()
    assert r1 >= r0 + 64 * MB  # freed memory is cached
    acme.empty_cache()
    r2 = acme.memory_reserved()
    assert r2 < r1 and r2 <= r0
    assert r2 >= acme.memory_allocated()
    torch.accelerator.empty_cache()  # the generic entry point works too


def test_cache_reuses_blocks(acme):
    x = torch.empty(16 * MB, dtype=torch.uint8, device=DEVICE)
    ptr = x.data_ptr()
    del x
    r = acme.memory_reserved()
    y = torch.empty(16 * MB, dtype=torch.uint8, device=DEVICE)
    assert acme.memory_reserved() == r  # served from the cache
    assert y.data_ptr() == ptr
    del y


def _numbers(msg):
    return [float(n) for n in re.findall(r"\d+(?:\.\d+)?", msg)]


def test_out_of_memory_error(acme):
    a0 = acme.memory_allocated()
    ooms = acme.memory_stats().get("num_ooms", 0)
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(CAPACITY + 512 * MB, dtype=torch.uint8, device=DEVICE)
    msg = str(info.value)
    assert DEVICE in msg.lower()
    req, cap = CAPACITY + 512 * MB, CAPACITY
    nums = _numbers(msg)
    # the request and the capacity are stated, in bytes, MiB or GiB (2 decimals)
    def stated(nbytes):
        return any(abs(n - v) <= 0.01 * max(v, 1) for n in nums
                   for v in (nbytes, nbytes / MB, nbytes / (1024 * MB)))
    assert stated(req), msg
    assert stated(cap), msg
    assert isinstance(info.value, RuntimeError)  # OutOfMemoryError subclasses RuntimeError
    assert acme.memory_allocated() == a0
    if "num_ooms" in acme.memory_stats():
        assert acme.memory_stats()["num_ooms"] == ooms + 1
    # the device still works afterwards
    y = torch.ones(1000, device=DEVICE)
    assert y.sum().item() == 1000
    del y


def test_out_of_memory_frees_cache_and_retries(acme):
    # 60 % of the device cached, then a 60 % request: only fits if the cache is released.
    big = int(CAPACITY * 0.6) // MB * MB
    x = torch.empty(big, dtype=torch.uint8, device=DEVICE)
    del x
    assert acme.memory_reserved() >= big
    y = torch.empty(big + MB, dtype=torch.uint8, device=DEVICE)
    assert y.numel() == big + MB
    del y
    acme.empty_cache()


def test_out_of_memory_on_device_1_names_it(acme):
    if acme.device_count() < 2:
        pytest.skip("needs 2 devices")
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(CAPACITY * 2, dtype=torch.uint8, device=dev(1))
    assert re.search(rf"(device\s*1\b|{DEVICE}:1)", str(info.value)), str(info.value)


def test_pinned_host_memory_counts_nothing_on_device(acme):
    a = acme.memory_allocated()
    p = torch.empty(4 * MB, dtype=torch.uint8, pin_memory=True)
    assert p.is_pinned()
    assert acme.memory_allocated() == a
    del p


def test_concurrent_allocation_8_threads(acme):
    n_threads, iters = 8, 150
    errors: list[BaseException] = []
    barrier = threading.Barrier(n_threads)
    ndev = acme.device_count()

    def work(tid):
        try:
            device = dev(tid % ndev)
            acme.set_device(tid % ndev)  # current device is per thread
            barrier.wait()
            for i in range(iters):
                n = 1 + (tid * 7919 + i * 104729) % 50000
                a = torch.full((n,), float(tid), device=device)
                b = torch.empty(n * 2, dtype=torch.uint8, device=device)  # churn sizes
                c = a + i
                if i % 25 == 0:
                    assert c.device == device
                    host = c.cpu()
                    assert host.numel() == n and bool((host == tid + i).all()), (tid, i)
                del a, b, c
            assert acme.current_device() == tid % ndev
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    _settle(acme)  # frees tensors an earlier failing test's traceback kept alive
    base = [acme.memory_allocated(i) for i in range(ndev)]
    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "allocation threads hung"
    assert not errors, errors[0]
    _settle(acme)
    assert [acme.memory_allocated(i) for i in range(ndev)] == base
    for i in range(ndev):
        s = acme.memory_stats(i)
        assert s["allocated_bytes.all.current"] == base[i]
        assert s["reserved_bytes.all.current"] >= s["allocated_bytes.all.current"]
        assert s["allocation.all.current"] >= 0
        assert acme.max_memory_allocated(i) >= base[i]
