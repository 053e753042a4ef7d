"""Streams and events of a registered torchvendor device.

The reference simulated runtime runs each stream on its own worker thread, so work enqueued
with ``non_blocking=True`` really overlaps the host and other streams: a missing wait shows up
as partially copied data.  The ordering tests therefore use large asynchronous copies from
pinned host memory (the operation every runtime runs asynchronously) and check the bytes."""
from __future__ import annotations

import pytest
import torch

from device_utils import DEVICE, dev

N = 8 * 1024 * 1024  # float32 elements: 32 MiB per buffer, long enough to overlap


@pytest.fixture(autouse=True)
def _sync_after(acme):
    yield
    for i in range(acme.device_count()):
        acme.synchronize(i)


@pytest.fixture(scope="module")
def pinned_src(acme):
    return torch.arange(N, dtype=torch.float32).pin_memory()


def _fresh(value, device=None):
    t = torch.full((N,), value, dtype=torch.float32, device=device or dev(0))
    torch.acme.synchronize()
    return t


def test_current_and_default_stream(acme):
    s0 = acme.current_stream()
    assert s0 == acme.default_stream()
    assert s0.device == dev(0)
    assert isinstance(s0, torch.Stream)
    s = acme.Stream()
    assert s != s0 and s.device == dev(0)
    with acme.stream(s):
        assert acme.current_stream() == s
        assert torch.accelerator.current_stream() == s
    assert acme.current_stream() == s0
    with s:  # a Stream is its own context manager
        assert acme.current_stream() == s
    assert acme.current_stream() == s0


def test_stream_priority(acme):
    lo, hi = acme.Stream(priority=0), acme.Stream(priority=-1)
    assert lo.priority == 0
    assert hi.priority <= 0  # clamped to the runtime's range; CUDA convention: lower = higher
    assert acme.Stream(priority=-1000).priority <= hi.priority


def test_generic_torch_stream_and_event(acme):
    # pytorch#195528: torch.Stream / torch.Event silently no-op on some PrivateUse1 backends.
    s = torch.Stream(DEVICE)
    assert s.device_type == acme.current_stream().device_type
    e = torch.Event(DEVICE, enable_timing=True)
    start = torch.Event(DEVICE, enable_timing=True)
    start.record(s)
    x = torch.empty(N, device=DEVICE)
    torch.accelerator.set_stream(s)
    try:
        assert acme.current_stream() == s
        x.copy_(torch.ones(N).pin_memory(), non_blocking=True)
    finally:
        torch.accelerator.set_stream(acme.default_stream())
    e.record(s)
    e.synchronize()
    assert e.query() and s.query()
    assert start.elapsed_time(e) >= 0
    assert x.sum().item() == N


def test_in_order_on_one_stream(acme, pinned_src):
    s = acme.Stream()
    d = _fresh(-1.0)
    out = torch.empty(N).pin_memory()
    ones = torch.ones(N).pin_memory()
    with acme.stream(s):
        d.copy_(ones, non_blocking=True)
        d.copy_(pinned_src, non_blocking=True)     # the last writer wins, in order
        out.copy_(d, non_blocking=True)
    s.synchronize()
    assert s.query()
    assert torch.equal(out, pinned_src)


def test_cross_stream_wait_event(acme, pinned_src):
    s1, s2 = acme.Stream(), acme.Stream()
    for _ in range(3):
        d = _fresh(-1.0)
        out = torch.full((N,), -2.0).pin_memory()
        with acme.stream(s1):
            d.copy_(pinned_src, non_blocking=True)
            e = s1.record_event()
        s2.wait_event(e)
        with acme.stream(s2):
            out.copy_(d, non_blocking=True)
        s2.synchronize()
        assert torch.equal(out, pinned_src), "s2 read the buffer before s1 finished writing"


def test_cross_stream_event_wait_method(acme, pinned_src):
    s1, s2 = acme.Stream(), acme.Stream()
    d = _fresh(-1.0)
    out = torch.full((N,), -2.0).pin_memory()
    e = acme.Event()
    with acme.stream(s1):
        d.copy_(pinned_src, non_blocking=True)
    e.record(s1)
    e.wait(s2)
    with acme.stream(s2):
        out.copy_(d, non_blocking=True)
    e2 = acme.Event()
    e2.record(s2)
    e2.synchronize()
    assert e2.query()
    assert torch.equal(out, pinned_src)


def test_cross_stream_wait_stream(acme, pinned_src):
    s1, s2 = acme.Stream(), acme.Stream()
    d = _fresh(-1.0)
    out = torch.full((N,), -2.0).pin_memory()
    with acme.stream(s1):
        d.copy_(pinned_src, non_blocking=True)
    s2.wait_stream(s1)
    with acme.stream(s2):
        out.copy_(d, non_blocking=True)
    s2.synchronize()
    assert torch.equal(out, pinned_src)


def test_default_stream_waits_for_side_stream_before_compute(acme, pinned_src):
    # the usual prefetch pattern: copy on a side stream, compute on the current stream
    s = acme.Stream()
    d = _fresh(0.0)
    with acme.stream(s):
        d.copy_(pinned_src, non_blocking=True)
    acme.current_stream().wait_stream(s)
    assert torch.equal(d[-10:].cpu(), pinned_src[-10:])
    assert torch.equal(d.cpu(), pinned_src)


def test_event_query_and_synchronize(acme, pinned_src):
    e = acme.Event()
    assert e.query()  # never recorded: complete, as in CUDA
    s = acme.Stream()
    d = torch.empty(N, device=DEVICE)
    with acme.stream(s):
        for _ in range(4):
            d.copy_(pinned_src, non_blocking=True)
        e.record()
    e.synchronize()
    assert e.query()
    assert s.query()
    e.synchronize()  # idempotent


def test_stream_query_reports_pending_work(acme, pinned_src):
    # Queue ~0.5 GB of copies; the stream cannot be idle right after enqueueing them unless
    # non_blocking copies were performed synchronously. Either way it must be idle after sync.
    s = acme.Stream()
    d = torch.empty(N, device=DEVICE)
    seen_busy = False
    with acme.stream(s):
        for _ in range(16):
            d.copy_(pinned_src, non_blocking=True)
        seen_busy = not s.query()
    s.synchronize()
    assert s.query()
    if not seen_busy:
        pytest.xfail("non_blocking H2D copy from pinned memory completed synchronously")


def _timed_events(acme, make_event, pinned_src):
    s = acme.Stream()
    start, mid, end = (make_event() for _ in range(3))
    d = torch.empty(N, device=DEVICE)
    with acme.stream(s):
        start.record(s)
        d.copy_(pinned_src, non_blocking=True)
        mid.record(s)
        d.copy_(pinned_src, non_blocking=True)
        d.copy_(pinned_src, non_blocking=True)
        end.record(s)
    end.synchronize()
    return s, start, mid, end


def test_elapsed_time_positive_and_increasing(acme, pinned_src):
    # torch.Event on the device (the generic accelerator event)
    s, start, mid, end = _timed_events(
        acme, lambda: torch.Event(DEVICE, enable_timing=True), pinned_src)
    t1, t2 = start.elapsed_time(mid), start.elapsed_time(end)
    assert t1 > 0 and t2 > t1
    assert mid.elapsed_time(end) > 0
    no_timing = torch.Event(DEVICE)
    no_timing.record(s)
    no_timing.synchronize()
    with pytest.raises((RuntimeError, ValueError)):
        start.elapsed_time(no_timing)


def test_device_module_event_elapsed_time(acme, pinned_src):
    # the same with torch.acme.Event, the device module's class (a Python subclass of
    # torch.Event failed here: torch.Event.elapsed_time accepts only exact torch.Event objects)
    s, start, mid, end = _timed_events(acme, lambda: acme.Event(enable_timing=True), pinned_src)
    t1, t2 = start.elapsed_time(mid), start.elapsed_time(end)
    assert t1 > 0 and t2 > t1


def test_non_blocking_round_trip_on_side_stream(acme):
    s = acme.Stream()
    host = torch.randn(1 << 20).pin_memory()
    back = torch.empty_like(host).pin_memory()
    with acme.stream(s):
        d = host.to(DEVICE, non_blocking=True)
        d2 = torch.empty_like(d)
        d2.copy_(d, non_blocking=True)
        back.copy_(d2, non_blocking=True)
    s.synchronize()
    assert torch.equal(back, host)
    acme.synchronize()


def test_stream_context_switches_device(acme):
    # As torch.cuda.stream and torch.accelerator.set_stream do: a stream of another device
    # makes that device current inside the context, and the previous one is restored after.
    if acme.device_count() < 2:
        pytest.skip("needs 2 devices")
    s = acme.Stream(device=1)
    assert acme.current_device() == 0
    with acme.stream(s):
        assert acme.current_device() == 1
        assert torch.empty(1, device=DEVICE).device == dev(1)
    assert acme.current_device() == 0


def test_streams_on_device_1(acme, pinned_src):
    if acme.device_count() < 2:
        pytest.skip("needs 2 devices")
    s = acme.Stream(device=1)
    assert s.device == dev(1)
    assert acme.default_stream(1).device == dev(1)
    assert acme.current_stream(1) == acme.default_stream(1)
    with acme.device(1), acme.stream(s):
        assert acme.current_stream(1) == s
        assert acme.current_stream(0) == acme.default_stream(0)
        d = torch.full((N,), -1.0, device=dev(1))
        d.copy_(pinned_src, non_blocking=True)
        e = acme.Event(device=1)
        e.record(s)
    assert acme.current_device() == 0
    assert acme.current_stream(1) == acme.default_stream(1)
    s0 = acme.Stream(device=0)
    s0.wait_event(e)  # cross-device wait, no host synchronization
    with acme.stream(s0):
        out = torch.empty(N, device=dev(0))
        out.copy_(d, non_blocking=True)
    s0.synchronize()
    assert torch.equal(out.cpu(), pinned_src)
    acme.synchronize(1)


def test_device_synchronize_waits_for_all_streams(acme, pinned_src):
    streams = [acme.Stream() for _ in range(3)]
    outs = [torch.full((N,), -2.0).pin_memory() for _ in streams]
    keep = []
    for s, o in zip(streams, outs):
        with acme.stream(s):
            d = torch.empty(N, device=DEVICE)
            d.copy_(pinned_src, non_blocking=True)
            o.copy_(d, non_blocking=True)
            keep.append(d)
    acme.synchronize()
    assert all(s.query() for s in streams)
    for o in outs:
        assert torch.equal(o, pinned_src)


def test_record_stream_delays_reuse(acme, pinned_src):
    # A block freed on the current stream while a side stream still reads it must not be
    # handed out again until that stream's work is done.
    s = acme.Stream()
    out = torch.full((N,), -2.0).pin_memory()
    d = torch.empty(N, device=DEVICE)
    d.copy_(pinned_src)  # synchronous: d holds 0..N-1
    acme.synchronize()
    s.wait_stream(acme.current_stream())
    with acme.stream(s):
        for _ in range(4):
            out.copy_(d, non_blocking=True)
    d.record_stream(s)
    del d
    clobber = torch.empty(N, device=DEVICE)  # likely the same block if reuse is not delayed
    clobber.fill_(7.0)
    s.synchronize()
    assert torch.equal(out, pinned_src)
    del clobber
