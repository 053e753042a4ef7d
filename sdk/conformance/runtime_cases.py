"""The runtime ABI itself: each entry of ``runtime.h``'s table called directly (through ctypes on
the vendor's runtime library, no torch involved) against the contract its comment states:
results, error codes, ordering on a stream, events, modules, and thread safety.

    >>> import os
    >>> from torchvendor.sdk.conformance.core import Target
    >>> [c.id for c in cases(Target(device="cpu"), "minimal")]
    []
"""
from __future__ import annotations

import ctypes
import threading
from functools import cache
from typing import Any, Callable

from .core import Case, ConformanceError, Target

__all__ = ["cases", "load_runtime", "RuntimeTable"]

SUCCESS, INVALID_VALUE, INVALID_DEVICE, OUT_OF_MEMORY, NOT_READY, NOT_FOUND, INVALID_IMAGE = 0, 1, 2, 3, 4, 5, 6
INVALID_HANDLE = 9
H2D, D2H, D2D = 1, 2, 3

_st, _i32, _u32, _sz, _vp = ctypes.c_int32, ctypes.c_int32, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_void_p
_P = ctypes.POINTER


class DeviceProperties(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("name", ctypes.c_char * 256), ("total_memory", ctypes.c_uint64),
                ("capability_major", _i32), ("capability_minor", _i32), ("multiprocessor_count", _i32),
                ("reserved", _i32 * 9)]


def _fn(*args: Any) -> Any:
    return ctypes.CFUNCTYPE(_st, *args)


class RuntimeTable(ctypes.Structure):
    """``tv_runtime`` (ABI 1.0), field by field as ``runtime.h`` declares it."""

    _fields_ = [
        ("abi_major", _u32), ("abi_minor", _u32), ("struct_size", ctypes.c_uint64), ("name", ctypes.c_char_p),
        ("device_count", _fn(_P(_i32))), ("get_device_properties", _fn(_i32, _P(DeviceProperties))),
        ("set_device", _fn(_i32)), ("get_device", _fn(_P(_i32))), ("device_synchronize", _fn(_i32)),
        ("malloc", _fn(_i32, _sz, _P(_vp))), ("free", _fn(_i32, _vp)),
        ("host_malloc", _fn(_sz, _P(_vp))), ("host_free", _fn(_vp)),
        ("memcpy", _fn(_vp, _vp, _sz, _i32)), ("memcpy_async", _fn(_vp, _vp, _sz, _i32, _vp)),
        ("memset", _fn(_vp, ctypes.c_int, _sz)), ("memset_async", _fn(_vp, ctypes.c_int, _sz, _vp)),
        ("stream_create", _fn(_i32, _i32, _P(_vp))), ("stream_destroy", _fn(_vp)), ("stream_query", _fn(_vp)),
        ("stream_synchronize", _fn(_vp)), ("stream_priority_range", _fn(_P(_i32), _P(_i32))),
        ("event_create", _fn(_i32, _u32, _P(_vp))), ("event_destroy", _fn(_vp)), ("event_record", _fn(_vp, _vp)),
        ("event_query", _fn(_vp)), ("event_synchronize", _fn(_vp)), ("stream_wait_event", _fn(_vp, _vp)),
        ("event_elapsed_time", _fn(_vp, _vp, _P(ctypes.c_float))),
        ("module_load_file", _fn(_i32, ctypes.c_char_p, _P(_vp))), ("module_load_data", _fn(_i32, _vp, _sz, _P(_vp))),
        ("module_unload", _fn(_vp)), ("module_get_function", _fn(_vp, ctypes.c_char_p, _P(_vp))),
        ("launch", _fn(_vp, _vp, _vp, _sz, _vp)),
        ("get_error_string", ctypes.CFUNCTYPE(ctypes.c_char_p, _st)),
        ("last_error_message", ctypes.CFUNCTYPE(ctypes.c_char_p)),
    ]


@cache
def load_runtime(path: str | None) -> RuntimeTable:
    """The runtime table of the library at ``path`` (None: the reference simulator)."""
    if path is None:
        from torchvendor.sdk import default_runtime_path

        path = default_runtime_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ConformanceError(f"cannot load the runtime library {path}: {e}") from e
    try:
        entry = lib.torchvendor_get_runtime
    except AttributeError:
        raise ConformanceError(f"{path} exports no torchvendor_get_runtime: is it a torchvendor runtime?") from None
    entry.argtypes = [_u32, _P(_P(RuntimeTable))]
    entry.restype = _st
    table = _P(RuntimeTable)()
    status = entry(1, ctypes.byref(table))
    if status != SUCCESS or not table:
        raise ConformanceError(f"{path}: torchvendor_get_runtime(1) returned status {status}")
    load_runtime.libraries = getattr(load_runtime, "libraries", []) + [lib]  # keep it loaded
    return table.contents


def _ok(status: int, what: str, rt: RuntimeTable) -> None:
    if status != SUCCESS:
        raise AssertionError(f"{what} returned {rt.get_error_string(status).decode()} ({status}): "
                             f"{rt.last_error_message().decode()}")


def _expect(status: int, wanted: tuple[int, ...], what: str, rt: RuntimeTable) -> None:
    if status not in wanted:
        names = [rt.get_error_string(w).decode() for w in wanted]
        raise AssertionError(f"{what} returned {rt.get_error_string(status).decode()} ({status}), expected "
                             f"{' or '.join(names)}")


def _header(rt: RuntimeTable) -> None:
    assert rt.abi_major == 1, f"abi_major {rt.abi_major}"
    size = ctypes.sizeof(RuntimeTable)
    assert rt.struct_size >= size, f"struct_size {rt.struct_size} < {size}"
    assert rt.name, "the table has no name"
    missing = [name for name, _ in RuntimeTable._fields_[4:] if not getattr(rt, name)]
    assert not missing, f"NULL entries: {missing}"


def _devices(rt: RuntimeTable) -> None:
    n = _i32()
    _ok(rt.device_count(ctypes.byref(n)), "device_count", rt)
    assert n.value >= 1, "no device"
    props = DeviceProperties(struct_size=ctypes.sizeof(DeviceProperties))
    _ok(rt.get_device_properties(0, ctypes.byref(props)), "get_device_properties(0)", rt)
    assert props.name and props.total_memory > 0, "empty properties"
    _expect(rt.get_device_properties(n.value, ctypes.byref(props)), (INVALID_DEVICE,), "get_device_properties(count)", rt)
    _expect(rt.set_device(-1), (INVALID_DEVICE,), "set_device(-1)", rt)
    _ok(rt.set_device(0), "set_device(0)", rt)
    cur = _i32(-1)
    _ok(rt.get_device(ctypes.byref(cur)), "get_device", rt)
    assert cur.value == 0
    _expect(rt.device_count(None), (INVALID_VALUE,), "device_count(NULL)", rt)


def _memory(rt: RuntimeTable) -> None:
    ptr = _vp()
    _ok(rt.malloc(0, 4096, ctypes.byref(ptr)), "malloc", rt)
    src = (ctypes.c_uint8 * 4096)(*[i % 251 for i in range(4096)])
    dst = (ctypes.c_uint8 * 4096)()
    _ok(rt.memcpy(ptr, ctypes.addressof(src), 4096, H2D), "memcpy H2D", rt)
    _ok(rt.memcpy(ctypes.addressof(dst), ptr, 4096, D2H), "memcpy D2H", rt)
    assert bytes(dst) == bytes(src), "memcpy round trip changed the bytes"
    _ok(rt.memset(ptr, 7, 100), "memset", rt)
    _ok(rt.memcpy(ctypes.addressof(dst), ptr, 4096, D2H), "memcpy D2H", rt)
    assert bytes(dst[:100]) == b"\x07" * 100 and bytes(dst[100:]) == bytes(src[100:]), "memset wrote the wrong bytes"
    _ok(rt.free(0, ptr), "free", rt)
    # live blocks never overlap: two allocations keep their own contents
    a, b = _vp(), _vp()
    _ok(rt.malloc(0, 4096, ctypes.byref(a)), "malloc", rt)
    _ok(rt.malloc(0, 4096, ctypes.byref(b)), "malloc", rt)
    _ok(rt.memset(a, 1, 4096), "memset", rt)
    _ok(rt.memset(b, 2, 4096), "memset", rt)
    _ok(rt.memcpy(ctypes.addressof(dst), a, 4096, D2H), "memcpy D2H", rt)
    assert bytes(dst) == b"\x01" * 4096, "two live allocations share memory (writing one changed the other)"
    for p in (a, b):
        _ok(rt.free(0, p), "free", rt)
    _expect(rt.malloc(-5, 16, ctypes.byref(ptr)), (INVALID_DEVICE,), "malloc on device -5", rt)
    _expect(rt.malloc(0, 1 << 62, ctypes.byref(ptr)), (OUT_OF_MEMORY,), "malloc(2**62)", rt)
    _expect(rt.memcpy(ctypes.addressof(dst), ctypes.addressof(src), 16, 99), (INVALID_VALUE,), "memcpy kind 99", rt)
    host = _vp()
    _ok(rt.host_malloc(1024, ctypes.byref(host)), "host_malloc", rt)
    ctypes.memset(host, 1, 1024)  # pinned host memory is host-accessible
    _ok(rt.host_free(host), "host_free", rt)


#: a backlog of memsets on a stream, long enough (tens of milliseconds) that work which ignores the
#: stream's order or fires before it is reached reads bytes the backlog has not written yet
_BACKLOG_BYTES, _BACKLOG_DEPTH, _ROUNDS = 32 << 20, 8, 3


def _backlog(rt: RuntimeTable, ptr: _vp, stream: _vp, round_: int) -> int:
    """Queue the backlog on ``stream``; returns the value its last memset writes."""
    values = [(round_ * _BACKLOG_DEPTH + k) % 250 + 1 for k in range(_BACKLOG_DEPTH)]
    for value in values:
        _ok(rt.memset_async(ptr, value, _BACKLOG_BYTES, stream), "memset_async", rt)
    return values[-1]


def _read_tail(rt: RuntimeTable, ptr: _vp, out: Any, stream: _vp) -> None:
    """Copy the backlog buffer's last bytes into ``out`` on ``stream`` (its end is written last)."""
    tail = ctypes.c_void_p(ptr.value + _BACKLOG_BYTES - ctypes.sizeof(out))
    _ok(rt.memcpy_async(ctypes.addressof(out), tail, ctypes.sizeof(out), D2H, stream), "memcpy_async", rt)


def _stream_order(rt: RuntimeTable) -> None:
    """Later work on a stream sees all earlier work: a copy queued behind a backlog of memsets reads
    what the last memset wrote (a copy that ignores its stream reads earlier bytes)."""
    stream, ptr = _vp(), _vp()
    _ok(rt.stream_create(0, 0, ctypes.byref(stream)), "stream_create", rt)
    _ok(rt.malloc(0, _BACKLOG_BYTES, ctypes.byref(ptr)), "malloc", rt)
    out = (ctypes.c_uint8 * 4096)()
    for round_ in range(_ROUNDS):
        last = _backlog(rt, ptr, stream, round_)
        _read_tail(rt, ptr, out, stream)
        _ok(rt.stream_synchronize(stream), "stream_synchronize", rt)
        assert out[0] == last and out[-1] == last, \
            f"stream order broken: a copy queued after memset({last}) read {out[0]}"
    _ok(rt.stream_query(stream), "stream_query after synchronize", rt)
    _ok(rt.free(0, ptr), "free", rt)
    _ok(rt.stream_destroy(stream), "stream_destroy", rt)


def _event_orders_streams(rt: RuntimeTable, stream: _vp, other: _vp) -> None:
    """An event completes only when the work before it has: a stream that waits on it and then
    copies reads what that work wrote (an event that fires early lets the copy read earlier bytes)."""
    gate, ptr = _vp(), _vp()
    _ok(rt.event_create(0, 0, ctypes.byref(gate)), "event_create", rt)
    _ok(rt.malloc(0, _BACKLOG_BYTES, ctypes.byref(ptr)), "malloc", rt)
    out = (ctypes.c_uint8 * 4096)()
    for round_ in range(_ROUNDS):
        last = _backlog(rt, ptr, stream, round_)
        _ok(rt.event_record(gate, stream), "event_record", rt)
        _ok(rt.stream_wait_event(other, gate), "stream_wait_event", rt)
        _read_tail(rt, ptr, out, other)
        _ok(rt.stream_synchronize(other), "stream_synchronize", rt)
        assert out[0] == last, f"an event fired early: a stream waiting on it read {out[0]}, not {last}"
        _ok(rt.event_synchronize(gate), "event_synchronize", rt)
    _ok(rt.stream_synchronize(stream), "stream_synchronize", rt)
    _ok(rt.event_destroy(gate), "event_destroy", rt)
    _ok(rt.free(0, ptr), "free", rt)


def _events(rt: RuntimeTable) -> None:
    stream, start, end, plain = _vp(), _vp(), _vp(), _vp()
    _ok(rt.stream_create(0, 0, ctypes.byref(stream)), "stream_create", rt)
    _ok(rt.event_create(0, 1, ctypes.byref(start)), "event_create(timing)", rt)
    _ok(rt.event_create(0, 1, ctypes.byref(end)), "event_create(timing)", rt)
    _ok(rt.event_create(0, 0, ctypes.byref(plain)), "event_create(default)", rt)
    ptr = _vp()
    _ok(rt.malloc(0, 1 << 22, ctypes.byref(ptr)), "malloc", rt)
    _ok(rt.event_record(start, stream), "event_record", rt)
    _ok(rt.memset_async(ptr, 1, 1 << 22, stream), "memset_async", rt)
    _ok(rt.event_record(end, stream), "event_record", rt)
    _ok(rt.event_record(plain, stream), "event_record", rt)
    _ok(rt.event_synchronize(end), "event_synchronize", rt)
    _ok(rt.event_query(end), "event_query after synchronize", rt)
    ms = ctypes.c_float(-1)
    _ok(rt.event_elapsed_time(start, end, ctypes.byref(ms)), "event_elapsed_time", rt)
    assert ms.value >= 0, f"elapsed time {ms.value} < 0"
    _ok(rt.event_synchronize(plain), "event_synchronize", rt)
    _expect(rt.event_elapsed_time(start, plain, ctypes.byref(ms)), (INVALID_HANDLE, INVALID_VALUE),
            "event_elapsed_time with an event created without timing", rt)
    other = _vp()
    _ok(rt.stream_create(0, 0, ctypes.byref(other)), "stream_create", rt)
    _ok(rt.stream_wait_event(other, end), "stream_wait_event", rt)
    _ok(rt.stream_synchronize(other), "stream_synchronize", rt)
    _event_orders_streams(rt, stream, other)
    for e in (start, end, plain):
        _ok(rt.event_destroy(e), "event_destroy", rt)
    _ok(rt.free(0, ptr), "free", rt)
    for s in (stream, other):
        _ok(rt.stream_destroy(s), "stream_destroy", rt)


def _modules(rt: RuntimeTable) -> None:
    module = _vp()
    _expect(rt.module_load_file(0, b"/nonexistent/kernels.so", ctypes.byref(module)), (INVALID_IMAGE, NOT_FOUND),
            "module_load_file of a missing file", rt)
    _expect(rt.module_load_data(0, None, 0, ctypes.byref(module)), (INVALID_VALUE, INVALID_IMAGE),
            "module_load_data of an empty image", rt)


def _errors(rt: RuntimeTable) -> None:
    for status in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 999, 12345):
        assert rt.get_error_string(status) is not None, f"get_error_string({status}) is NULL"
    assert rt.last_error_message() is not None


def _threads(rt: RuntimeTable) -> None:
    errors: list[str] = []

    def work() -> None:
        for _ in range(200):
            p = _vp()
            if rt.malloc(0, 256, ctypes.byref(p)) != SUCCESS or rt.free(0, p) != SUCCESS:
                errors.append("malloc/free failed under concurrency")
                return

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


_CHECKS: dict[str, Callable[[RuntimeTable], None]] = {
    "header": _header, "devices": _devices, "memory": _memory, "stream_order": _stream_order, "events": _events,
    "modules": _modules, "errors": _errors, "thread_safety": _threads,
}


def cases(target: Target, profile: str) -> list[Case]:
    """Runtime-table cases for a torchvendor device (its runtime library, or the simulator)."""
    if target.device in ("cpu", "cuda", "meta"):
        return []
    return [Case(f"runtime/{name}", "runtime", (lambda f: lambda t: f(load_runtime(t.runtime)))(fn))
            for name, fn in _CHECKS.items()]
