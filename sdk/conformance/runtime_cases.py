"""The runtime ABI itself: one case per normative statement of ``runtime.h`` (every "must", every
range, every return value), each entry of the table called directly through ctypes on the vendor's
runtime library (no torch involved). A failure quotes the sentence of the header that was broken,
says what was observed, and names the entries to suspect::

    runtime.h, stream_synchronize: "[blocks] Wait for all work on the stream": it returned while
    the stream's work was still running (the last memset's byte was not written yet). Suspect:
    stream_synchronize.

Ordering checks queue a backlog of memsets (tens of milliseconds) and read device memory with an
*unordered* observer (a one-byte copy on an idle stream of its own): an entry that returned before
the work it must wait for shows as a byte the backlog has not written yet. An observation a very
fast device makes inconclusive passes; a wrong one never does. Blocking entries run under a
watchdog, so an event that never completes fails its case instead of hanging the suite. The
mutation harness (``tests/runtime_mutants.py``) proves each case can fail.

    >>> from torchvendor.sdk.conformance.core import Target
    >>> [c.id for c in cases(Target(device="cpu"), "minimal")]
    []
    >>> len(CHECKS) >= 35
    True
"""
from __future__ import annotations

import ctypes
import os
import tempfile
import threading
import time
from typing import Any, Callable

from . import runtime_abi as abi
from .core import Case, Target, run_case
from .runtime_abi import (D2D, D2H, H2D, H2H, INVALID_DEVICE, INVALID_HANDLE, INVALID_IMAGE, INVALID_VALUE,
                          NOT_FOUND, NOT_READY, NOT_SUPPORTED, OUT_OF_MEMORY, SUCCESS, DeviceProperties,
                          LaunchConfig)
from .runtime_order import explain, order
from .runtime_probe import (BACKLOG_BYTES, Missing, Probe, Scratch, check, load_runtime, mismatch, need_devices,
                            settle)

__all__ = ["cases", "CHECKS", "load_runtime"]

_vp, _i32, _u8 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint8
CHECKS: dict[str, Callable[[Probe], None]] = {}


def _case(fn: Callable[[Probe], None]) -> Callable[[Probe], None]:
    CHECKS[fn.__name__.lstrip("_")] = fn
    return fn


def _sync(rt: Probe, stream: Any, suspects: tuple[str, ...] = ("stream_synchronize",)) -> None:
    status = rt.blocking("stream_synchronize", stream, statement="[blocks] Wait for all work on the stream",
                         suspects=suspects)
    check(status == SUCCESS, "stream_synchronize", "Wait for all work on the stream",
          f"returned {rt.name(status)}{rt.detail()}")


# ---- the table and its entry point -----------------------------------------------------------------------

@_case
def _abi_version(rt: Probe) -> None:
    t = rt.t
    check(t.abi_major == abi.ABI_MAJOR, "abi_major", "TV_RUNTIME_ABI_MAJOR the library was built with",
          f"abi_major is {t.abi_major}, the suite speaks {abi.ABI_MAJOR}", "torchvendor_get_runtime")
    need = abi.minor_size(t.abi_minor)
    check(t.struct_size >= need, "struct_size", "sizeof(tv_runtime) the library was built with",
          f"struct_size {t.struct_size} is smaller than a minor-{t.abi_minor} table ({need} bytes)",
          "torchvendor_get_runtime")
    check(bool(t.name), "name", "runtime name for diagnostics", "the table's name is NULL or empty",
          "torchvendor_get_runtime")


@_case
def _entry_point(rt: Probe) -> None:
    from .runtime_probe import _library

    if rt.path is None:
        from torchvendor.sdk import default_runtime_path
    _, entry = _library(rt.path or default_runtime_path())
    table = ctypes.POINTER(abi.RuntimeTable)()
    status = entry(abi.ABI_MAJOR + 1, ctypes.byref(table))
    check(status == NOT_SUPPORTED, "torchvendor_get_runtime",
          "a library that cannot serve it returns TV_ERROR_NOT_SUPPORTED",
          f"asked for major {abi.ABI_MAJOR + 1}, it returned {rt.name(status)}")
    again = ctypes.POINTER(abi.RuntimeTable)()
    check(entry(abi.ABI_MAJOR, ctypes.byref(again)) == SUCCESS and
          ctypes.addressof(again.contents) == ctypes.addressof(rt.t), "torchvendor_get_runtime",
          "The table is static: valid until unload", "a second call returned another table")


@_case
def _required_entries(rt: Probe) -> None:
    entries = [name for name, _ in abi.RuntimeTable._fields_[4:]]
    in_table = [e for e in entries if getattr(abi.RuntimeTable, e).offset < rt.t.struct_size]
    missing = [e for e in in_table if e not in abi.OPTIONAL and not getattr(rt.t, e)]
    check(not missing, missing[0] if missing else "", "Every other entry is required",
          f"NULL: {', '.join(missing)}", *missing)
    # comm_create or the bootstrap pair makes communicators: "A runtime that has these may leave
    # comm_create NULL"; the other collective entries come together with either
    given = [e for e in abi.COLLECTIVES if e in in_table and getattr(rt.t, e)]
    boot = [e for e in abi.BOOTSTRAP if e in in_table and getattr(rt.t, e)]
    complete = len(given) == len(abi.COLLECTIVES) or (len(given) == len(abi.COLLECTIVES) - 1
                                                      and "comm_create" not in given and len(boot) == 2)
    absent = [e for e in abi.COLLECTIVES if e not in given and not (e == "comm_create" and len(boot) == 2)]
    check(not given or complete, "collectives", "provided together or not at all",
          f"{', '.join(absent)} NULL while {', '.join(given)} are set", *absent)
    check(len(boot) in (0, 2), "communicator bootstrap", "provided together",
          f"only {', '.join(boot)} of the bootstrap entries is set", *abi.BOOTSTRAP)


# ---- devices ---------------------------------------------------------------------------------------------

@_case
def _device_count(rt: Probe) -> None:
    n, m = _i32(-1), _i32(-1)
    rt.ok("device_count", ctypes.byref(n), statement="Must not fail once the library is loaded")
    rt.ok("device_count", ctypes.byref(m), statement="Must not fail once the library is loaded")
    check(n.value >= 0 and n.value == m.value, "device_count", "Number of devices; 0 is valid",
          f"it said {n.value}, then {m.value}")
    rt.expect("device_count", (None,), (INVALID_VALUE,), "a bad argument: NULL out-pointer", "device_count(NULL)")


@_case
def _device_properties(rt: Probe) -> None:
    need_devices(rt)
    for dev in range(rt.ndev):
        props = DeviceProperties(struct_size=ctypes.sizeof(DeviceProperties))
        rt.ok("get_device_properties", dev, ctypes.byref(props), why=f"device {dev}")
        check(0 < len(props.name) < 256 and props.total_memory > 0, "get_device_properties",
              "Fill props", f"device {dev}: name {props.name!r}, total_memory {props.total_memory}")
    props = DeviceProperties(struct_size=ctypes.sizeof(DeviceProperties))
    for bad in (rt.ndev, -1):
        rt.expect("get_device_properties", (bad, ctypes.byref(props)), (INVALID_DEVICE,),
                  "An out-of-range device is TV_ERROR_INVALID_DEVICE", f"device {bad} of {rt.ndev}")
    rt.expect("get_device_properties", (0, None), (INVALID_VALUE,), "a bad argument: NULL out-pointer",
              "props NULL")


@_case
def _set_device_range(rt: Probe) -> None:
    need_devices(rt)
    for bad in (-1, rt.ndev, 1 << 20):
        rt.expect("set_device", (bad,), (INVALID_DEVICE,), "An out-of-range index is TV_ERROR_INVALID_DEVICE",
                  f"set_device({bad}) with {rt.ndev} device(s)")
    for dev in range(rt.ndev):
        rt.ok("set_device", dev)
        cur = _i32(-1)
        rt.ok("get_device", ctypes.byref(cur))
        check(cur.value == dev, "get_device", "The calling host thread's current device",
              f"after set_device({dev}) it says {cur.value}", "get_device", "set_device")
    rt.expect("get_device", (None,), (INVALID_VALUE,), "a bad argument: NULL out-pointer", "get_device(NULL)")


@_case
def _current_device_per_thread(rt: Probe) -> None:
    need_devices(rt, 2)
    rt.ok("set_device", 1)
    seen: list[int] = []

    def other() -> None:
        cur = _i32(-1)
        seen.append(rt.t.get_device(ctypes.byref(cur)) == SUCCESS and cur.value)
        rt.t.set_device(0)
    worker = threading.Thread(target=other)
    worker.start()
    worker.join()
    check(seen == [0], "set_device", '"Current device" state is per host thread; get_device: 0 until set_device '
          'is called', f"a new thread's current device is {seen[0] if seen else 'unreadable'} after set_device(1) on "
          f"another thread", "set_device", "get_device")
    cur = _i32(-1)
    rt.ok("get_device", ctypes.byref(cur))
    check(cur.value == 1, "set_device", '"Current device" state is per host thread',
          f"set_device(0) on another thread changed this thread's device from 1 to {cur.value}",
          "set_device", "get_device")


@_case
def _device_synchronize(rt: Probe) -> None:
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s = sc.alloc(BACKLOG_BYTES), sc.stream()
        last = sc.backlog(ptr, s)
        status = rt.blocking("device_synchronize", 0, statement="[blocks] Wait for all work on all streams",
                             suspects=("device_synchronize",))
        check(status == SUCCESS, "device_synchronize", "Wait for all work on all streams of `device`",
              f"returned {rt.name(status)}")
        got = sc.peek(ptr)
        check(got == last, "device_synchronize", "Wait for all work on all streams of `device`",
              f"it returned while a stream's work was still running (the last memset's byte reads {got}, "
              f"not {last})")
    rt.expect("device_synchronize", (rt.ndev,), (INVALID_DEVICE,), "device index out of range",
              f"device_synchronize({rt.ndev})")


# ---- memory ----------------------------------------------------------------------------------------------

@_case
def _malloc_alignment(rt: Probe) -> None:
    need_devices(rt)
    with Scratch(rt) as sc:
        for size in (1, 3, 100, 255, 257, 4097, 1 << 20):
            p = sc.alloc(size)
            check(p.value is not None and p.value % 256 == 0, "malloc", "aligned to at least 256 bytes",
                  f"malloc({size}) returned {p.value and hex(p.value)}")


@_case
def _malloc_zero_size(rt: Probe) -> None:
    need_devices(rt)
    p = _vp(1)
    rt.ok("malloc", 0, 0, ctypes.byref(p), why="malloc(0)")
    check(p.value is None, "malloc", "size 0 yields *ptr == NULL", f"malloc(0) gave {p.value and hex(p.value)}")
    if rt.has("host_malloc"):
        rt.ok("host_malloc", 0, ctypes.byref(p), why="host_malloc(0)")
        check(p.value is None, "host_malloc", "size 0 yields NULL", f"host_malloc(0) gave {p.value}")


@_case
def _malloc_errors(rt: Probe) -> None:
    need_devices(rt)
    p = _vp()
    for bad in (-1, rt.ndev):
        rt.expect("malloc", (bad, 16, ctypes.byref(p)), (INVALID_DEVICE,), "device index out of range",
                  f"malloc on device {bad}")
    rt.expect("malloc", (0, 16, None), (INVALID_VALUE,), "a bad argument: NULL out-pointer", "malloc(ptr=NULL)")
    rt.expect("malloc", (0, 1 << 62, ctypes.byref(p)), (OUT_OF_MEMORY,),
              "Exhaustion is TV_ERROR_OUT_OF_MEMORY", "malloc(2**62)")
    with Scratch(rt) as sc:
        sc.alloc(4096)  # the failed allocation left the allocator usable


@_case
def _allocations_disjoint(rt: Probe) -> None:
    need_devices(rt)
    sizes = [4096, 1, 300, 256, 8191, 65536, 17, 1000]
    with Scratch(rt) as sc:
        blocks = [sc.alloc(n) for n in sizes]
        for k, (p, n) in enumerate(zip(blocks, sizes)):
            status = rt("memset", p, k + 1, n)
            check(status == SUCCESS, "malloc", "Device memory on `device`", f"memset of the whole {n}-byte block "
                  f"returned {rt.name(status)}{rt.detail()}", "malloc (a block smaller than asked)", "memset")
        for k, (p, n) in enumerate(zip(blocks, sizes)):
            got = sc.read(p, n)
            check(got == bytes([k + 1]) * n, "malloc", "Device memory on `device`",
                  f"block {k} ({n} bytes) reads {sorted(set(got))[:4]} after memset({k + 1}): two live "
                  f"allocations overlap", "malloc", "memset")


@_case
def _free(rt: Probe) -> None:
    need_devices(rt)
    rt.ok("free", 0, None, statement="NULL succeeds")
    p = rt.new("malloc", 0, 4096)
    rt.expect("free", (0, _vp(p.value + 256)), (INVALID_VALUE,), "a pointer that is not a live allocation of "
              "`device` is TV_ERROR_INVALID_VALUE", "free of an interior pointer")
    host = (_u8 * 16)()
    rt.expect("free", (0, ctypes.addressof(host)), (INVALID_VALUE,), "a pointer that is not a live allocation of "
              "`device` is TV_ERROR_INVALID_VALUE", "free of a host pointer")
    if rt.ndev >= 2:
        rt.expect("free", (1, p), (INVALID_VALUE,), "a pointer that is not a live allocation of `device` is "
                  "TV_ERROR_INVALID_VALUE", "free(1, a block of device 0)")
    rt.ok("free", 0, p)
    rt.expect("free", (0, p), (INVALID_VALUE,), "a pointer that is not a live allocation of `device` is "
              "TV_ERROR_INVALID_VALUE", "a second free of one block")


@_case
def _host_memory(rt: Probe) -> None:
    rt.need("host_malloc", "host_free")
    p = rt.new("host_malloc", 4096)
    check(p.value is not None, "host_malloc", "Page-locked host memory", "host_malloc(4096) gave NULL")
    ctypes.memset(p, 0x5A, 4096)  # host-accessible
    check(ctypes.string_at(p, 4096) == b"\x5a" * 4096, "host_malloc", "Page-locked host memory",
          "the host cannot write and read it back")
    rt.ok("host_free", None, statement="NULL succeeds")
    plain = (_u8 * 16)()
    rt.expect("host_free", (ctypes.addressof(plain),), (INVALID_VALUE,), "any other pointer is "
              "TV_ERROR_INVALID_VALUE", "host_free of memory host_malloc did not return")
    rt.ok("host_free", p)
    rt.expect("host_free", (p,), (INVALID_VALUE,), "any other pointer is TV_ERROR_INVALID_VALUE",
              "a second host_free of one block")


def _exact_copy(sc: Scratch, kind: int, n: int, offset: int) -> None:
    """Copy n bytes of ``kind`` to dst+offset, with sentinels around the destination range."""
    rt = sc.rt
    pattern = bytes((i * 7 + n) % 251 + 1 for i in range(n))
    size = n + offset + 64
    src_host, dst_host = (_u8 * size)(*([0] * offset + list(pattern))), (_u8 * size)(*([0xEE] * size))
    src_dev, dst_dev = sc.alloc(size), sc.alloc(size)
    rt.ok("memcpy", src_dev, ctypes.addressof(src_host), size, H2D)
    fill = (_u8 * size)(*([0xEE] * size))  # sentinels through memcpy itself: the probe needs no memset
    rt.ok("memcpy", dst_dev, ctypes.addressof(fill), size, H2D)
    src = ctypes.addressof(src_host) + offset if kind in (H2D, H2H) else src_dev.value + offset
    dst = ctypes.addressof(dst_host) + offset if kind in (D2H, H2H) else dst_dev.value + offset
    rt.ok("memcpy", dst, src, n, kind, why=f"memcpy of {n} bytes, kind {kind}")
    got = bytes(dst_host) if kind in (D2H, H2H) else sc.read(dst_dev, size)
    expected = b"\xee" * offset + pattern + b"\xee" * 64
    if got != expected:
        first = next(i for i in range(size) if got[i] != expected[i])
        where = "before" if first < offset else "after" if first >= offset + n else "inside"
        check(False, "memcpy", "Copy n bytes of the given kind", f"kind {kind}, n={n}: byte {first - offset} "
              f"({where} the copied range) is {got[first]}, expected {expected[first]}")


@_case
def _memcpy_exact_bytes(rt: Probe) -> None:
    need_devices(rt)
    with Scratch(rt) as sc:
        for kind in (H2D, D2H, D2D, H2H):
            for n, offset in ((1, 0), (255, 3), (4097, 1)):
                _exact_copy(sc, kind, n, offset)


#: sizes a driver may split copies and memsets on: both sides of powers of two from 4 KiB (a page,
#: inline command data) to 16 MiB (staging chunks, DMA descriptors), and 40 MiB past them all
SIZE_CLASSES = tuple(sorted({(1 << k) + d for k in (12, 16, 20, 22, 24) for d in (-1, 0, 1)} | {(40 << 20) + 3}))
_SENTINEL = b"\xee" * 64


def _pattern(n: int) -> bytes:
    """n bytes with a period (251) that no power-of-two chunking divides."""
    return (bytes(range(1, 252)) * (n // 251 + 1))[:n]


def _host(data: bytes | int) -> Any:
    """A host buffer (ctypes) holding ``data``, or ``data`` zero bytes."""
    return (_u8 * data)() if isinstance(data, int) else (_u8 * len(data)).from_buffer(bytearray(data))


@_case
def _malloc_usable_size(rt: Probe) -> None:
    """Every byte asked for is usable: a copy of exactly n bytes into a fresh n-byte block (its status
    only: what the copy wrote is memcpy's cases' business)."""
    need_devices(rt)
    for n in (1, 255, 4097, 1 << 20, (40 << 20) + 3):
        with Scratch(rt) as sc:
            p, src = sc.alloc(n), _host(n)
            status = rt("memcpy", p, ctypes.addressof(src), n, H2D)
            if status != SUCCESS:
                _copies_past_its_range(sc, n)
            check(status == SUCCESS, "malloc", "Device memory of `size` bytes", f"a copy of {n} bytes into a "
                  f"fresh {n}-byte block returned {rt.name(status)}{rt.detail()}: the block is smaller than asked",
                  "malloc", "memcpy")


def _copies_past_its_range(sc: Scratch, n: int) -> None:
    """A copy of n bytes into an n-byte block was refused: either the block is short or the copy
    touches more than n bytes. Copy n bytes into a roomier block and look past them."""
    rt = sc.rt
    room = sc.alloc(n + 64)  # used up to n + 32 only: a block a little short still holds it
    fill, src, out = _host(b"\xee" * (n + 32)), _host(_pattern(n)), _host(n + 128)
    rt.ok("memcpy", room, ctypes.addressof(fill), n + 32, H2D)
    rt.ok("memcpy", room, ctypes.addressof(src), n, H2D, why=f"memcpy of {n} bytes into an {n + 64}-byte block")
    rt.ok("memcpy", ctypes.addressof(out), room, n + 32, D2H)
    tail = ctypes.string_at(ctypes.addressof(out) + n, 32)
    check(tail == _SENTINEL[:32], "memcpy", "Copy n bytes of the given kind", f"a copy of {n} bytes wrote past them "
          f"({mismatch(tail, _SENTINEL[:32])} after the range); a copy of exactly a block's size is refused for it")


def _through(rt: Probe, entry: str, stream: Any, dst: Any, src: Any, n: int, kind: int) -> bool:
    """Copy through ``entry``; for memcpy_async, whether the stream still had work the moment
    stream_synchronize returned (stream_query, asked at once: later the work may have finished)."""
    if entry == "memcpy":
        rt.ok("memcpy", dst, src, n, kind, why=f"memcpy of {n} bytes, kind {kind}")
        return False
    rt.ok("memcpy_async", dst, src, n, kind, stream, why=f"memcpy_async of {n} bytes, kind {kind}")
    _sync(rt, stream, ("stream_synchronize", "memcpy_async"))
    return rt("stream_query", stream) == NOT_READY


def _copy_sizes(rt: Probe, entry: str) -> None:
    """Each size of SIZE_CLASSES host -> device -> device -> host through ``entry``, with sentinels
    after the range; a wrong byte is looked at again once the stream has surely finished (an
    async copy right then, wrong before: the wait returned early, not the copy)."""
    top = SIZE_CLASSES[-1]
    data = _pattern(top)
    with Scratch(rt) as sc:
        a, b, s = sc.alloc(top + 64), sc.alloc(top + 64), sc.stream()
        src, out, tail = _host(data), _host(top + 64), _host(_SENTINEL)
        for n in SIZE_CLASSES:
            for dev in (a, b):
                rt.ok("memcpy", _vp(dev.value + n), ctypes.addressof(tail), 64, H2D)
            pending = _through(rt, entry, s, a, ctypes.addressof(src), n, H2D)
            pending |= _through(rt, entry, s, b, a, n, D2D)
            pending |= _through(rt, entry, s, ctypes.addressof(out), b, n + 64, D2H)
            want = data[:n] + _SENTINEL
            got = ctypes.string_at(out, n + 64)
            if got != want and entry == "memcpy_async":
                def again() -> bytes:
                    rt.ok("memcpy", ctypes.addressof(out), b, n + 64, D2H)
                    return ctypes.string_at(out, n + 64)
                _judge_async(rt, entry, s, f"copies of {n} bytes", got, want, again, pending)
            check(got == want, entry, "Copy n bytes of the given kind", f"{n} bytes host -> device -> device -> "
                  f"host: {mismatch(got, want)}{' (past the range: a sentinel)' if got[:n] == want[:n] else ''}")


def _judge_async(rt: Probe, entry: str, s: Any, what: str, got: bytes, want: bytes, again: Callable[[], bytes],
                 pending: bool) -> None:
    """Async work on stream ``s`` read back wrong after stream_synchronize(s): was it the wait or the
    work? ``pending`` (stream_query right after the wait): the wait returned early. Idle, and right
    once every stream has finished (a blocking copy is ordered after all of them): the work ran on
    another stream."""
    settle(rt, s)
    later = again()
    if later != want:
        return  # the work itself is wrong: the caller says how
    check(not pending, "stream_synchronize", "[blocks] Wait for all work on the stream", f"after {what} it "
          f"returned while the stream still had work (stream_query said TV_ERROR_NOT_READY): "
          f"{mismatch(got, want)} then, right once the stream finished")
    check(False, entry, "streams: in-order queues of device work", f"{what} on a stream were not done when "
          f"that stream was (stream_query said TV_SUCCESS): {mismatch(got, want)} then, right only after every "
          f"stream finished: the work ran on another stream")


@_case
def _memcpy_sizes(rt: Probe) -> None:
    need_devices(rt)
    _copy_sizes(rt, "memcpy")


@_case
def _memcpy_async_sizes(rt: Probe) -> None:
    rt.need("memcpy_async")
    need_devices(rt)
    _copy_sizes(rt, "memcpy_async")


def _set_sizes(rt: Probe, entry: str) -> None:
    top = SIZE_CLASSES[-1]
    with Scratch(rt) as sc:
        p, s, out, tail = sc.alloc(top + 64), sc.stream(), _host(top + 64), _host(_SENTINEL)
        for k, n in enumerate(n for n in SIZE_CLASSES if n >= 1 << 20):
            value = 0x41 + k
            rt.ok("memcpy", _vp(p.value + n), ctypes.addressof(tail), 64, H2D)
            if entry == "memset":
                rt.ok("memset", p, value, n, why=f"memset of {n} bytes")
            else:
                rt.ok("memset_async", p, value, n, s, why=f"memset_async of {n} bytes")
                _sync(rt, s, ("stream_synchronize", "memset_async"))
                pending = rt("stream_query", s) == NOT_READY
            rt.ok("memcpy", ctypes.addressof(out), p, n + 64, D2H)
            want, got = bytes([value]) * n + _SENTINEL, ctypes.string_at(out, n + 64)
            if got != want and entry == "memset_async":
                def again() -> bytes:
                    rt.ok("memcpy", ctypes.addressof(out), p, n + 64, D2H)
                    return ctypes.string_at(out, n + 64)
                _judge_async(rt, entry, s, f"memset_async of {n} bytes", got, want, again, pending)
            check(got == want, entry, "Set n bytes of device memory to (unsigned char)value",
                  f"{entry}(p, {value:#x}, {n}): {mismatch(got, want)}"
                  f"{' (past the range: a sentinel)' if got[:n] == want[:n] else ''}")


@_case
def _memset_sizes(rt: Probe) -> None:
    rt.need("memset")
    need_devices(rt)
    _set_sizes(rt, "memset")


@_case
def _memset_async_sizes(rt: Probe) -> None:
    rt.need("memset_async")
    need_devices(rt)
    _set_sizes(rt, "memset_async")


@_case
def _memcpy_across_devices(rt: Probe) -> None:
    need_devices(rt, 2)
    with Scratch(rt) as sc:
        a, b = sc.alloc(4096, 0), sc.alloc(4096, 1)
        rt.ok("memset", a, 0x3C, 4096)
        rt.ok("memset", b, 0, 4096)
        rt.ok("memcpy", b, a, 4096, D2D, why="a device-to-device copy between devices 0 and 1")
        check(sc.read(b, 4096) == b"\x3c" * 4096, "memcpy", "TV_MEMCPY_DEVICE_TO_DEVICE: same or different "
              "devices", "a copy from device 0 to device 1 did not arrive")


@_case
def _memcpy_errors(rt: Probe) -> None:
    need_devices(rt)
    with Scratch(rt) as sc:
        dev, host = sc.alloc(4096), (_u8 * 8192)()
        h = ctypes.addressof(host)
        for kind in (0, 5, 99):
            rt.expect("memcpy", (h, dev, 16, kind), (INVALID_VALUE,), "a bad argument: ... kind", f"kind {kind}")
        rule = ("A host pointer where the kind says device (or the reverse), or a range outside a live "
                "allocation, is TV_ERROR_INVALID_VALUE")
        rt.expect("memcpy", (h, h + 4096, 16, H2D), (INVALID_VALUE,), rule, "H2D to a host pointer")
        rt.expect("memcpy", (dev, dev, 16, H2H), (INVALID_VALUE,), rule, "H2H between device pointers")
        rt.expect("memcpy", (dev, h, 4097, H2D), (INVALID_VALUE,), rule, "4097 bytes into a 4096-byte block")
        rt.expect("memcpy", (h, _vp(dev.value + 4000), 200, D2H), (INVALID_VALUE,), rule,
                  "200 bytes from 96 before the block's end")


@_case
def _memcpy_orders_after_streams(rt: Probe) -> None:
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s = sc.alloc(BACKLOG_BYTES), sc.stream()
        last = sc.backlog(ptr, s)
        got = sc.read(_vp(ptr.value + BACKLOG_BYTES - 64), 64)
        check(got == bytes([last]) * 64, "memcpy", "ordered after all work enqueued earlier on every stream",
              f"a blocking copy of the last 64 bytes behind a backlog of memsets on another stream: "
              f"{mismatch(got, bytes([last]) * 64)}", "memcpy", "memset_async")


def _memset_checks(sc: Scratch, entry: str, stream: Any) -> None:
    rt = sc.rt
    for value, byte in ((0x1AB, 0xAB), (-1, 0xFF), (0x100, 0x00), (0x7F, 0x7F)):
        p = sc.alloc(1024)
        fill = (_u8 * 1024)(*([0xEE] * 1024))
        rt.ok("memcpy", p, ctypes.addressof(fill), 1024, H2D)
        args = (_vp(p.value + 3), value, 513) + ((stream,) if entry == "memset_async" else ())
        rt.ok(entry, *args)
        if entry == "memset_async":
            _sync(rt, stream, ("stream_synchronize", "memset_async"))
        got = sc.read(p, 1024)
        expected = b"\xee" * 3 + bytes([byte]) * 513 + b"\xee" * 508
        if got != expected:
            first = next(i for i in range(1024) if got[i] != expected[i])
            check(False, entry, "Set n bytes of device memory to (unsigned char)value",
                  f"{entry}(p+3, {value:#x}, 513): byte {first - 3} is {got[first]:#x}, expected {expected[first]:#x}")


@_case
def _memset_value_and_size(rt: Probe) -> None:
    rt.need("memset")
    need_devices(rt)
    with Scratch(rt) as sc:
        _memset_checks(sc, "memset", None)


@_case
def _memset_async_value_and_size(rt: Probe) -> None:
    rt.need("memset_async")
    need_devices(rt)
    with Scratch(rt) as sc:
        _memset_checks(sc, "memset_async", sc.stream())


@_case
def _memset_orders_after_streams(rt: Probe) -> None:
    rt.need("memset", "memset_async")
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s = sc.alloc(BACKLOG_BYTES), sc.stream()
        sc.backlog(ptr, s)
        tail = _vp(ptr.value + BACKLOG_BYTES - 64)
        rt.ok("memset", tail, 0xFE, 64)
        _sync(rt, s)
        got = sc.read(tail, 64)
        check(got == b"\xfe" * 64, "memset", "[blocks] Set n bytes ..., ordered like memcpy",
              f"a blocking memset behind a backlog on another stream was overwritten by it (reads {got[0]})",
              "memset", "memset_async")


# ---- streams ---------------------------------------------------------------------------------------------

@_case
def _stream_order(rt: Probe) -> None:
    rt.need("memcpy_async", "memset_async")
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s = sc.alloc(BACKLOG_BYTES), sc.stream()
        out = (_u8 * 4096)()
        for _ in range(3):
            last = sc.backlog(ptr, s)
            rt.ok("memcpy_async", ctypes.addressof(out), _vp(ptr.value + BACKLOG_BYTES - 4096), 4096, D2H, s)
            _sync(rt, s)
            check(out[0] == last and out[-1] == last, "memcpy_async", "streams: in-order queues of device work",
                  f"a copy queued after memset({last}) on the same stream read {out[0]}",
                  "memcpy_async", "memset_async", "stream_synchronize")


@_case
def _stream_synchronize_waits(rt: Probe) -> None:
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s = sc.alloc(BACKLOG_BYTES), sc.stream()
        for _ in range(3):
            last = sc.backlog(ptr, s)
            _sync(rt, s)
            status, got = rt("stream_query", s), sc.peek(ptr)
            if got != last:  # the wait or the work? look again once every stream has surely finished
                settle(rt, s)
                later = sc.read(_vp(ptr.value + BACKLOG_BYTES - 1), 1)[0]  # blocking: after every stream
                check(later == last, "memset_async", "Set n bytes of device memory to (unsigned char)value",
                      f"a backlog of memset_async({last}) over {BACKLOG_BYTES >> 20} MiB left its last byte "
                      f"{later}, even after every stream finished")
                check(status != SUCCESS, "memset_async", "streams: in-order queues of device work", f"right after "
                      f"stream_synchronize the stream was idle (stream_query said TV_SUCCESS) while the last byte of "
                      f"its memsets read {got}; it read {last} only once every stream had finished: the memsets "
                      f"ran on another stream")
            check(got == last, "stream_synchronize", "[blocks] Wait for all work on the stream", f"it returned "
                  f"while the stream's work was still running (the last memset's byte read {got} then, {last} once "
                  f"the stream finished; stream_query said {rt.name(status)})")
            check(status == SUCCESS, "stream_query", "TV_SUCCESS if all work is done", f"the stream's work was "
                  f"done (its last byte reads {last}) after stream_synchronize, yet it says {rt.name(status)}")


@_case
def _stream_query(rt: Probe) -> None:
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s = sc.alloc(BACKLOG_BYTES), sc.stream()
        last = sc.backlog(ptr, s)
        status = rt("stream_query", s)
        check(status in (SUCCESS, NOT_READY), "stream_query", "TV_SUCCESS if all work is done, "
              "TV_ERROR_NOT_READY while work is pending", f"returned {rt.name(status)}")
        if status == SUCCESS:
            got = sc.peek(ptr)
            check(got == last, "stream_query", "TV_ERROR_NOT_READY while work is pending",
                  f"it said TV_SUCCESS while the last memset had not run (its byte reads {got}, not {last})")
        _sync(rt, s)
        status = rt("stream_query", s)
        check(status == SUCCESS, "stream_query", "TV_SUCCESS if all work is done",
              f"after stream_synchronize it says {rt.name(status)}", "stream_query", "stream_synchronize")


@_case
def _default_stream(rt: Probe) -> None:
    rt.need("memcpy_async", "memset_async")
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr = sc.alloc(BACKLOG_BYTES)
        out = (_u8 * 64)()
        last = sc.backlog(ptr, None)
        idle = rt("stream_query", None) == SUCCESS  # just after a backlog of tens of ms queued on it
        rt.ok("memcpy_async", ctypes.addressof(out), _vp(ptr.value + BACKLOG_BYTES - 64), 64, D2H, None)
        _sync(rt, None)
        check(out[0] == last or not idle, "memset_async", "a NULL `tv_stream` names the default stream of the "
              "calling thread's current device", f"right after memsets of {BACKLOG_BYTES >> 20} MiB were queued on "
              f"NULL, stream_query(NULL) said TV_SUCCESS, and a copy queued on NULL after them read {out[0]}, not "
              f"the last memset's {last}: they ran elsewhere")
        check(out[0] == last, "memcpy_async", "a NULL `tv_stream` names the default stream of the calling "
              "thread's current device", f"a copy queued on NULL after memsets on NULL read {out[0]}, not {last}",
              "memcpy_async", "memset_async", "stream_synchronize")


@_case
def _stream_destroy_finishes_work(rt: Probe) -> None:
    rt.need("memcpy_async")
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, out = sc.alloc(BACKLOG_BYTES), (_u8 * 64)()
        s = rt.new("stream_create", 0, 0)
        last = sc.backlog(ptr, s)
        rt.ok("memcpy_async", ctypes.addressof(out), _vp(ptr.value + BACKLOG_BYTES - 64), 64, D2H, s)
        rt.ok("stream_destroy", s)
        status = rt.blocking("device_synchronize", 0, statement="Wait for all work on all streams",
                             suspects=("device_synchronize", "stream_destroy"))
        check(status == SUCCESS and out[0] == last, "stream_destroy", "pending work on the stream still "
              "finishes", f"after destroying a busy stream and device_synchronize, its last copy read {out[0]}, "
              f"not {last}", "stream_destroy", "device_synchronize")


@_case
def _stream_priorities(rt: Probe) -> None:
    rt.need("memset_async")
    need_devices(rt)
    least, greatest = _i32(0), _i32(0)
    if rt.has("stream_priority_range"):
        rt.ok("stream_priority_range", ctypes.byref(least), ctypes.byref(greatest))
        check(greatest.value <= least.value, "stream_priority_range", "greatest <= least",
              f"least {least.value}, greatest {greatest.value}")
    with Scratch(rt) as sc:
        for prio in (greatest.value - 5, least.value + 5, 0):
            s = sc.stream(0, prio)  # outside the range: clamped, not refused
            p = sc.alloc(256)
            rt.ok("memset_async", p, 9, 256, s)
            _sync(rt, s)
            check(sc.read(p, 256) == b"\x09" * 256, "stream_create", "priorities outside stream_priority_range "
                  "are clamped", f"a stream of priority {prio} did not run its work", "stream_create")


@_case
def _async_returns_promptly(rt: Probe) -> None:
    """Entries not marked [blocks] enqueue and return: each, called behind a long backlog, must take
    much less than the backlog (a blocking one takes all of it)."""
    rt.need("memcpy_async", "memset_async")
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s, other = sc.alloc(BACKLOG_BYTES), sc.stream(), sc.stream()
        event, host = sc.event(), (_u8 * 64)()
        start = time.perf_counter()
        sc.backlog(ptr, s, depth=16)
        took = {"memset_async": time.perf_counter() - start}
        calls = {
            "memcpy_async": lambda: rt.t.memcpy_async(ctypes.addressof(host), ptr, 64, D2H, s),
            "event_record": lambda: rt.t.event_record(event, s),
            "stream_wait_event": lambda: rt.t.stream_wait_event(other, event),
            "stream_query": lambda: rt.t.stream_query(s),
            "event_query": lambda: rt.t.event_query(event),
        }
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            took[name] = time.perf_counter() - t0
        doomed = rt.new("stream_create", 0, 0)
        rt.ok("stream_wait_event", doomed, event)
        t0 = time.perf_counter()
        rt.ok("stream_destroy", doomed)
        took["stream_destroy"] = time.perf_counter() - t0
        _sync(rt, s)
        total = time.perf_counter() - start
    slow = [f"{k} took {v * 1e3:.0f} ms" for k, v in took.items() if v > 0.002 and v > total / 2]
    check(not slow, slow[0].split()[0] if slow else "", "all others must return promptly (enqueue and return)",
          f"{'; '.join(slow)} of a {total * 1e3:.0f} ms backlog", *(x.split()[0] for x in slow))


# ---- events ----------------------------------------------------------------------------------------------

@_case
def _event_create_flags(rt: Probe) -> None:
    need_devices(rt)
    e = _vp()
    for flags in (2, 0x80, 0x80000000):
        rt.expect("event_create", (0, flags, ctypes.byref(e)), (INVALID_VALUE,),
                  "any other bit is TV_ERROR_INVALID_VALUE", f"flags {flags:#x}")
    rt.expect("event_create", (0, 0, None), (INVALID_VALUE,), "a bad argument: NULL out-pointer",
              "event_create(event=NULL)")
    rt.expect("event_create", (rt.ndev, 0, ctypes.byref(e)), (INVALID_DEVICE,), "device index out of range",
              f"event_create on device {rt.ndev}")


@_case
def _event_never_recorded(rt: Probe) -> None:
    need_devices(rt)
    with Scratch(rt) as sc:
        e = sc.event()
        status = rt("event_query", e)
        check(status == SUCCESS, "event_query", "TV_SUCCESS if ... the event was never recorded",
              f"returned {rt.name(status)}")
        status = rt.blocking("event_synchronize", e, statement="returns at once if never recorded",
                             suspects=("event_synchronize",))
        check(status == SUCCESS, "event_synchronize", "returns at once if never recorded",
              f"returned {rt.name(status)}")


@_case
def _event_completion(rt: Probe) -> None:
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s, e = sc.alloc(BACKLOG_BYTES), sc.stream(), sc.event()
        last = sc.backlog(ptr, s)
        rt.ok("event_record", e, s)
        status = rt("event_query", e)
        check(status in (SUCCESS, NOT_READY), "event_query", "TV_SUCCESS if the captured work is done, "
              "TV_ERROR_NOT_READY otherwise", f"returned {rt.name(status)}")
        if status == SUCCESS:
            got = sc.peek(ptr)
            check(got == last, "event_record", "Capture the work enqueued so far on `stream`; event_query: "
                  "TV_ERROR_NOT_READY otherwise", f"event_query said TV_SUCCESS before the captured work ran (the "
                  f"last memset's byte reads {got}, the last memset writes {last}): the event did not capture it",
                  "event_record", "event_query")
        status = rt.blocking("event_synchronize", e, statement="[blocks] Wait for the captured work",
                             suspects=("event_synchronize", "event_record (the event never completes)"))
        got = sc.peek(ptr)
        check(status == SUCCESS and got == last, "event_synchronize", "[blocks] Wait for the captured work",
              f"it returned {rt.name(status)} while the captured work was still running (the last memset's "
              f"byte reads {got}, not {last})", "event_synchronize", "event_record")
        status = rt("event_query", e)
        check(status == SUCCESS, "event_query", "TV_SUCCESS if the captured work is done",
              f"after event_synchronize it says {rt.name(status)}", "event_query", "event_record")


@_case
def _event_rerecord(rt: Probe) -> None:
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, busy, idle, e = sc.alloc(BACKLOG_BYTES), sc.stream(), sc.stream(), sc.event()
        sc.backlog(ptr, busy, depth=16)
        rt.ok("event_record", e, busy)
        rt.ok("event_record", e, idle)
        status = rt.blocking("event_synchronize", e, statement="Wait for the captured work",
                             suspects=("event_record", "event_synchronize"))
        still_busy = rt("stream_query", busy) == NOT_READY
        check(status == SUCCESS, "event_synchronize", "Wait for the captured work", f"returned {rt.name(status)}")
        if not still_busy:
            return  # the device finished the backlog first: inconclusive
        check(rt("event_query", e) == SUCCESS, "event_record", "re-recording replaces the capture",
              "an event re-recorded on an idle stream still waits for the work of its first capture")


@_case
def _event_record_device(rt: Probe) -> None:
    need_devices(rt, 2)
    with Scratch(rt) as sc:
        e, s1 = sc.event(dev=0), sc.stream(dev=1)
        rt.expect("event_record", (e, s1), (INVALID_VALUE,), "The stream must belong to the event's device, else "
                  "TV_ERROR_INVALID_VALUE", "recording a device-0 event on a device-1 stream")


@_case
def _stream_wait_event(rt: Probe) -> None:
    rt.need("memcpy_async")
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s, other, gate = sc.alloc(BACKLOG_BYTES), sc.stream(), sc.stream(), sc.event()
        out = (_u8 * 64)()
        for _ in range(3):
            last = sc.backlog(ptr, s)
            rt.ok("event_record", gate, s)
            rt.ok("stream_wait_event", other, gate)
            rt.ok("memcpy_async", ctypes.addressof(out), _vp(ptr.value + BACKLOG_BYTES - 64), 64, D2H, other)
            _sync(rt, other)
            check(out[0] == last, "stream_wait_event", "Make future work on `stream` wait for the event's "
                  f"captured work", f"a copy queued after the wait read {out[0]}, not {last}",
                  "stream_wait_event", "event_record (completes early)")


@_case
def _event_destroy_pending(rt: Probe) -> None:
    rt.need("memcpy_async")
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s, other, out = sc.alloc(BACKLOG_BYTES), sc.stream(), sc.stream(), (_u8 * 64)()
        e = rt.new("event_create", 0, 0)
        last = sc.backlog(ptr, s)
        rt.ok("event_record", e, s)
        rt.ok("stream_wait_event", other, e)
        rt.ok("event_destroy", e, statement="May be called while the event is pending")
        rt.ok("memcpy_async", ctypes.addressof(out), _vp(ptr.value + BACKLOG_BYTES - 64), 64, D2H, other)
        _sync(rt, other)
        check(out[0] == last, "event_destroy", "May be called while the event is pending; waits on it stay valid",
              f"a wait on a destroyed pending event let a copy read {out[0]}, not {last}", "event_destroy")


def _timed_backlog(rt: Probe, sc: Scratch, s: Any, start: Any, end: Any, ptr: Any) -> float:
    t0 = time.perf_counter()
    rt.ok("event_record", start, s)
    sc.backlog(ptr, s)
    rt.ok("event_record", end, s)
    rt.blocking("event_synchronize", end, statement="Wait for the captured work",
                suspects=("event_record", "event_synchronize"))
    return (time.perf_counter() - t0) * 1e3


@_case
def _elapsed_time(rt: Probe) -> None:
    rt.need("event_elapsed_time")
    need_devices(rt)
    with Scratch(rt) as sc:
        ptr, s = sc.alloc(BACKLOG_BYTES), sc.stream()
        start, end, plain = sc.event(1), sc.event(1), sc.event(0)
        ms = ctypes.c_float(-1)
        rt.expect("event_elapsed_time", (start, end, ctypes.byref(ms)), (INVALID_HANDLE,),
                  "TV_ERROR_INVALID_HANDLE if either was never recorded", "two timing events never recorded")
        host_ms = _timed_backlog(rt, sc, s, start, end, ptr)
        rt.ok("event_elapsed_time", start, end, ctypes.byref(ms))
        check(0 <= ms.value <= host_ms * 1.5 + 2, "event_elapsed_time", "Milliseconds between two completed "
              "events", f"{ms.value:.4g} ms for work the host saw take {host_ms:.1f} ms (wrong units?)")
        if host_ms > 5:
            check(ms.value >= host_ms / 50, "event_elapsed_time", "Milliseconds between two completed events",
                  f"{ms.value:.4g} ms for a backlog that kept the host waiting {host_ms:.1f} ms (wrong units?)")
        rt.ok("event_record", plain, s)
        _sync(rt, s)
        rt.expect("event_elapsed_time", (start, plain, ctypes.byref(ms)), (INVALID_VALUE,),
                  "TV_ERROR_INVALID_VALUE if either was created without TV_EVENT_ENABLE_TIMING",
                  "an end event created without timing")
        sc.backlog(ptr, s)
        rt.ok("event_record", end, s)
        status = rt("event_elapsed_time", start, end, ctypes.byref(ms))
        pending = rt("event_query", end) == NOT_READY
        check(status == NOT_READY or (status == SUCCESS and not pending), "event_elapsed_time",
              "TV_ERROR_NOT_READY if either is still pending", f"with the end event pending it returned "
              f"{rt.name(status)}")


# ---- modules ---------------------------------------------------------------------------------------------

@_case
def _module_load_errors(rt: Probe) -> None:
    rt.need("module_load_file", "module_load_data")
    need_devices(rt)
    m = _vp()
    rt.expect("module_load_file", (0, b"/nonexistent/tv-conformance/kernels.bin", ctypes.byref(m)), (NOT_FOUND,),
              "A missing file is TV_ERROR_NOT_FOUND", "a path that does not exist")
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        f.write(b"this is not a module in any binary format\n" * 8)
    try:
        rt.expect("module_load_file", (0, f.name.encode(), ctypes.byref(m)), (INVALID_IMAGE,),
                  "one the runtime cannot load TV_ERROR_INVALID_IMAGE", "a text file")
    finally:
        os.unlink(f.name)
    junk = (_u8 * 256)(*range(256))
    rt.expect("module_load_data", (0, ctypes.addressof(junk), 256, ctypes.byref(m)), (INVALID_IMAGE,),
              "errors as module_load_file", "256 bytes of garbage")
    rt.expect("module_load_file", (rt.ndev, b"/nonexistent", ctypes.byref(m)), (INVALID_DEVICE, NOT_FOUND),
              "device index out of range", f"device {rt.ndev}")


def _sample_module(rt: Probe) -> Any:
    """The simulator's sample kernels, when the runtime loads modules in that format."""
    try:
        import importlib.resources

        path = os.fspath(importlib.resources.files("torchvendor") / "lib" / "libtorchvendor_sim_kernels.so")
    except (ImportError, TypeError):
        raise Missing("no sample module to load") from None
    m = _vp()
    if not os.path.exists(path) or rt("module_load_file", 0, path.encode(), ctypes.byref(m)) != SUCCESS:
        raise Missing("the runtime does not load the simulator's sample module (its own binary format): "
                      "module functions and launches are checked by the device and ops areas instead")
    return m


class _FillArgs(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int64), ("out", _vp), ("value", ctypes.c_float)]


@_case
def _module_functions(rt: Probe) -> None:
    rt.need("module_load_file", "module_get_function", "launch", "module_unload")
    need_devices(rt)
    m = _sample_module(rt)
    f, f2 = _vp(), _vp()
    rt.expect("module_get_function", (m, b"tv_no_such_kernel", ctypes.byref(f)), (NOT_FOUND,),
              "an unknown name is TV_ERROR_NOT_FOUND", "an unknown function name")
    rt.ok("module_get_function", m, b"tv_fill_f32", ctypes.byref(f))
    with Scratch(rt) as sc:
        out, s = sc.alloc(4 * 1000), sc.stream()
        offsets = (ctypes.c_uint32 * 1)(8)
        cfg = LaunchConfig((1, 1, 1), (1, 1, 1), 0, offsets, 1)
        args = _FillArgs(1000, out, 2.5)
        rt.ok("launch", f, ctypes.byref(cfg), ctypes.byref(args), ctypes.sizeof(args), s)
        args.value = -1.0  # copied before return: this change must not reach the kernel
        rt.ok("module_unload", m, statement="launches already enqueued still run")
        _sync(rt, s, ("stream_synchronize", "launch"))
        got = (ctypes.c_float * 1000).from_buffer_copy(sc.read(out, 4000))
        check(all(v == 2.5 for v in got), "launch", "a packed argument buffer, copied before return",
              f"the kernel wrote {sorted(set(got))[:3]}, not 2.5", "launch", "module_unload")


# ---- errors and threads ----------------------------------------------------------------------------------

@_case
def _error_strings(rt: Probe) -> None:
    rt.need("get_error_string")
    seen: dict[bytes, str] = {}
    for name, code in abi.STATUS.items():
        s = rt.t.get_error_string(code)
        check(s is not None, "get_error_string", "Never NULL", f"NULL for {name}")
        words = name.removeprefix("TV_ERROR_").removeprefix("TV_").replace("_", " ").lower()
        check(words in s.decode(errors="replace").replace("_", " ").lower(), "get_error_string",
              "A static string naming a status", f"{name} ({code}) is named {s!r}")
        check(s not in seen, "get_error_string", "A static string naming a status",
              f"{name} and {seen.get(s)} have the same string {s!r}")
        seen[s] = name
    for code in (-1, 10, 500, 12345):
        check(rt.t.get_error_string(code) is not None, "get_error_string", "Never NULL", f"NULL for {code}")


@_case
def _last_error_message(rt: Probe) -> None:
    rt.need("last_error_message")
    need_devices(rt)
    p = _vp()
    rt.t.malloc(-5, 16, ctypes.byref(p))
    mine = rt.t.last_error_message()
    check(mine is not None and mine != b"", "last_error_message", "The detailed message of the calling "
          "thread's last failing call", f"after a failing malloc it is {mine!r}")

    def fail_elsewhere() -> None:
        rt.t.event_create(0, 0x40, ctypes.byref(_vp()))
    worker = threading.Thread(target=fail_elsewhere)
    worker.start()
    worker.join()
    again = rt.t.last_error_message()
    check(again == mine, "last_error_message", "the calling thread's last failing call",
          f"a failure on another thread changed this thread's message from {mine!r} to {again!r}")


@_case
def _thread_safety(rt: Probe) -> None:
    need_devices(rt)
    errors: list[str] = []

    def work(k: int) -> None:
        buf = (_u8 * 512)()
        for _ in range(100):
            p = _vp()
            if rt.t.malloc(0, 512, ctypes.byref(p)) != SUCCESS:
                errors.append("malloc failed")
                return
            rt.t.memset(p, k, 512)
            rt.t.memcpy(ctypes.addressof(buf), p, 512, D2H)
            rt.t.free(0, p)
            if bytes(buf) != bytes([k]) * 512:
                errors.append(f"thread {k} read {buf[0]} from its own block")
                return
    threads = [threading.Thread(target=work, args=(k + 1,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, "malloc", "it may be called from any thread at any time, and concurrently with any other "
          "entry", errors[0] if errors else "", "malloc", "free", "memset", "memcpy")


# ---- collectives (minor 1) -------------------------------------------------------------------------------

@_case
def _collectives_single_rank(rt: Probe) -> None:
    if rt.t.abi_minor < 1 or not rt.has("comm_create"):
        raise Missing("the runtime provides no collectives (minor 1, optional)")
    need_devices(rt)
    comm = _vp()
    cid = f"tvconf-{os.getpid()}-{threading.get_ident() % 10000}".encode()
    for bad in (1, -1):
        rt.expect("comm_create", (cid, 1, bad, 0, ctypes.byref(comm)), (INVALID_VALUE,),
                  "a rank outside [0, nranks) is TV_ERROR_INVALID_VALUE", f"rank {bad} of 1")
    rt.ok("comm_create", cid, 1, 0, 0, ctypes.byref(comm))
    try:
        with Scratch(rt) as sc:
            buf, s = sc.alloc(16), sc.stream()
            host = (ctypes.c_float * 4)(1.5, -2.0, 3.0, 4.25)
            rt.ok("memcpy", buf, ctypes.addressof(host), 16, H2D)
            rt.ok("all_reduce", buf, buf, 4, abi.DTYPES["TV_FLOAT32"], abi.REDUCE_OPS["TV_REDUCE_SUM"], comm, s)
            _sync(rt, s, ("stream_synchronize", "all_reduce"))
            got = list((ctypes.c_float * 4).from_buffer_copy(sc.read(buf, 16)))
            check(got == list(host), "all_reduce", "the reduction over all ranks of `count` elements of sendbuf "
                  "into every rank's recvbuf (which may be sendbuf)", f"one rank's in-place sum gave {got}")
            if rt.ndev >= 2:
                rt.expect("all_reduce", (buf, buf, 4, 0, 0, comm, sc.stream(dev=1)), (INVALID_VALUE,),
                          "on `stream` (of the communicator's device, else TV_ERROR_INVALID_VALUE)",
                          "a stream of device 1 for a device-0 communicator")
    finally:
        rt.ok("comm_destroy", comm)


# ---- the area ----------------------------------------------------------------------------------------------

def _run(fn: Callable[[Probe], None]) -> Callable[[Target], Any]:
    def run(target: Target) -> Any:
        rt = Probe(load_runtime(target.runtime), target.runtime)
        try:
            fn(rt)
        except Missing as e:
            return {"skip": str(e)}
        finally:
            if rt.ndev and rt.has("set_device"):
                rt.t.set_device(0)
        return None
    return run


def cases(target: Target, profile: str) -> list[Case]:
    """Runtime-table cases for a torchvendor device (its runtime library, or the simulator)."""
    if target.device in ("cpu", "cuda", "meta"):
        return []
    # the independent probes first: a case comes after the cases whose entries it observes through
    return [Case(f"runtime/{name}", "runtime", _run(CHECKS[name])) for name in order(CHECKS)]


def main(argv: list[str] | None = None) -> int:
    """``python -m torchvendor.sdk.conformance.runtime_cases LIB [CASE...]``: the runtime area on a
    library, without torch, one JSON line per case (the mutation harness runs it)."""
    import json
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    import faulthandler

    faulthandler.enable()  # a runtime that crashes the process leaves the case's stack on stderr
    target = Target(device="runtime-only", runtime=args[0])
    done = []
    for case in cases(target, "minimal"):
        if len(args) > 1 and case.id.removeprefix("runtime/") not in args[1:]:
            continue
        print(json.dumps({"start": case.id}), flush=True)
        r = run_case(case, target)
        done.append(r)
        explain(done)  # its prerequisites ran before it: marked "blocked by" at once, before any crash
        print(json.dumps({"id": r.id, "status": r.status, "reason": r.reason, **r.tags}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
