"""The reference simulated runtime (libtorchvendor_sim.so), driven directly through its C table.

The bindings are the SDK's one mirror of csrc/include/torchvendor/runtime.h
(torchvendor.sdk.conformance.runtime_abi, checked against the header by tests/test_runtime_abi.py).
The library keeps process-wide state (it may also be loaded by the device layer in this process),
so every test frees what it allocates,
destroys its streams, and leaves the thread's current device at 0. Gated tests use the sample
kernel ``tv_wait_flag``: its stream stays busy until the test opens a flag in host memory, which
makes "still running" observable without relying on timing.
"""
from __future__ import annotations

import ctypes as C
import glob
import importlib.resources
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from torchvendor.sdk.conformance import runtime_abi as abi

ROOT = Path(__file__).resolve().parents[1]

from torchvendor.sdk.conformance.runtime_abi import (D2D, D2H, H2D, H2H, INVALID_DEVICE,  # noqa: E402,F401
                                                     INVALID_HANDLE, INVALID_IMAGE, INVALID_VALUE, LAUNCH_FAILED,
                                                     NOT_FOUND, NOT_READY, NOT_SUPPORTED, OUT_OF_MEMORY, SUCCESS)

TIMING = abi.EVENT_ENABLE_TIMING

st, i32, u32, u64, sz, vp = C.c_int32, C.c_int32, C.c_uint32, C.c_uint64, C.c_size_t, C.c_void_p
P = C.POINTER


Props, LaunchConfig, Runtime = abi.DeviceProperties, abi.LaunchConfig, abi.RuntimeTable
FLOAT32, FLOAT64, FLOAT16, BFLOAT16, INT8, UINT8, INT32, INT64, BOOL = abi.DTYPES.values()
SUM, PROD, MAX, MIN, AVG = abi.REDUCE_OPS.values()


def lib_path(name: str) -> str:
    """The installed library, else one in a local build tree (TORCHVENDOR_SIM_LIB_DIR first)."""
    candidates = []
    if os.environ.get("TORCHVENDOR_SIM_LIB_DIR"):
        candidates.append(Path(os.environ["TORCHVENDOR_SIM_LIB_DIR"]) / name)
    try:
        candidates.append(importlib.resources.files("torchvendor") / "lib" / name)
    except ModuleNotFoundError:
        pass
    candidates += [Path(p) for p in glob.glob(str(ROOT / "build" / "*" / name))]
    for c in candidates:
        if c.is_file():
            return str(c)
    pytest.fail(f"{name} is not built: ./dev.sh (pip install -e .) builds it with the package")


class Sim:
    """The runtime table plus helpers that turn a failing status into an exception."""

    def __init__(self):
        self.lib = C.CDLL(lib_path("libtorchvendor_sim.so"))
        self.get_runtime = self.lib.torchvendor_get_runtime
        self.get_runtime.argtypes, self.get_runtime.restype = [u32, P(P(Runtime))], st
        table = P(Runtime)()
        status = self.get_runtime(1, C.byref(table))
        if status != SUCCESS:
            raise RuntimeError(f"torchvendor_get_runtime failed with status {status}")
        self.t = table.contents

    def msg(self) -> str:
        return self.t.last_error_message().decode()

    def __call__(self, entry: str, *args) -> None:
        status = getattr(self.t, entry)(*args)
        if status != SUCCESS:
            name = self.t.get_error_string(status).decode()
            raise RuntimeError(f"{entry}: {name}: {self.msg()}")

    def status(self, entry: str, *args) -> int:
        return getattr(self.t, entry)(*args)

    def new(self, entry: str, *args) -> int:
        out = vp()
        self(entry, *args, C.byref(out))
        return out.value

    def malloc(self, dev: int, n: int) -> int:
        return self.new("malloc", dev, n)

    def to_device(self, dev: int, values: list[float]) -> int:
        buf = (C.c_float * len(values))(*values)
        p = self.malloc(dev, C.sizeof(buf))
        self("memcpy", p, buf, C.sizeof(buf), H2D)
        return p

    def floats(self, p: int, n: int) -> list[float]:
        out = (C.c_float * n)()
        self("memcpy", out, p, C.sizeof(out), D2H)
        return list(out)

    def launch(self, fn, args: C.Structure, offsets=(), stream=None) -> int:
        offs = (u32 * max(1, len(offsets)))(*offsets)
        cfg = LaunchConfig((1, 1, 1), (1, 1, 1), 0, offs, len(offsets))
        return self.t.launch(fn, C.byref(cfg), C.byref(args), C.sizeof(args), stream)


class AddArgs(C.Structure):
    _fields_ = [("n", C.c_int64), ("a", vp), ("b", vp), ("out", vp)]


class FillArgs(C.Structure):
    _fields_ = [("n", C.c_int64), ("out", vp), ("value", C.c_float)]


class Int64Args(C.Structure):
    _fields_ = [("v", C.c_int64)]


class FlagArgs(C.Structure):
    _fields_ = [("flag", vp)]


@pytest.fixture(scope="module")
def sim() -> Sim:
    return Sim()


@pytest.fixture(scope="module")
def kernels(sim):
    """Sample kernels: name -> tv_function, from the module loaded with module_load_file."""
    mod = sim.new("module_load_file", 0, lib_path("libtorchvendor_sim_kernels.so").encode())
    names = ["tv_add_f32", "tv_fill_f32", "tv_sleep_ms", "tv_wait_flag", "tv_fail"]
    yield {n: sim.new("module_get_function", mod, n.encode()) for n in names}
    sim("module_unload", mod)


class Gate:
    """A tv_wait_flag launch that keeps a stream busy until open() is called."""

    def __init__(self, sim, kernels, stream):
        self.sim, self.flag = sim, sim.new("host_malloc", 4)
        C.c_int32.from_address(self.flag).value = 0
        assert sim.launch(kernels["tv_wait_flag"], FlagArgs(self.flag), stream=stream) == SUCCESS

    def open(self):
        C.c_int32.from_address(self.flag).value = 1

    def close(self):  # only once its stream has passed the gate
        self.sim("host_free", self.flag)


@pytest.fixture
def streams(sim):
    created = []

    def make(dev=0, prio=0):
        created.append(sim.new("stream_create", dev, prio))
        return created[-1]

    yield make
    for s in created:
        sim.t.stream_destroy(s)


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter that has this module's bindings as `t`."""
    prelude = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); " \
              "import test_reference_runtime as t\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env})


# ------------------------------------------------------------------------------------ table

def test_table_layout_and_version_negotiation(sim):
    assert (sim.t.abi_major, sim.t.abi_minor) == (1, 2)
    assert not sim.t.comm_token and not sim.t.comm_create_from_token
    assert sim.t.struct_size == C.sizeof(Runtime)
    assert sim.t.name.startswith(b"torchvendor-sim")
    table = P(Runtime)()
    assert sim.get_runtime(2, C.byref(table)) == NOT_SUPPORTED
    assert "major 1, not 2" in sim.msg()
    assert sim.get_runtime(1, None) == INVALID_VALUE


def test_error_strings(sim):
    names = {SUCCESS: "TV_SUCCESS", OUT_OF_MEMORY: "TV_ERROR_OUT_OF_MEMORY",
             INVALID_HANDLE: "TV_ERROR_INVALID_HANDLE", 999: "TV_ERROR_UNKNOWN"}
    for status, name in names.items():
        assert sim.t.get_error_string(status).decode() == name
    for status in list(range(10)) + [999, -3, 12345]:
        assert sim.t.get_error_string(status)  # never NULL
    assert sim.t.get_error_string(12345) == b"unrecognized tv_status"


# ---------------------------------------------------------------------------------- devices

def test_devices_properties_and_current_device(sim):
    n = i32()
    sim("device_count", C.byref(n))
    assert n.value == int(os.environ.get("TORCHVENDOR_SIM_DEVICES", "2"))
    props = Props(struct_size=C.sizeof(Props))
    sim("get_device_properties", 0, C.byref(props))
    assert props.name == b"torchvendor-sim" and (props.capability_major, props.capability_minor) == (1, 0)
    assert props.total_memory == int(os.environ.get("TORCHVENDOR_SIM_MEMORY_MB", "4096")) << 20
    assert sim.status("get_device_properties", n.value, C.byref(props)) == INVALID_DEVICE
    assert sim.status("set_device", n.value) == INVALID_DEVICE
    assert f"device {n.value} out of range [0, {n.value})" in sim.msg()
    assert sim.status("set_device", -1) == INVALID_DEVICE

    sim("set_device", 1)
    seen = []
    th = threading.Thread(target=lambda: (sim("get_device", C.byref(d := i32())), seen.append(d.value)))
    th.start(), th.join()
    cur = i32()
    sim("get_device", C.byref(cur))
    sim("set_device", 0)
    assert (cur.value, seen) == (1, [0])  # the current device is per host thread


def test_env_configuration_in_subprocess():
    code = """
s = t.Sim(); n = t.i32(); s('device_count', t.C.byref(n))
p = t.Props(struct_size=t.C.sizeof(t.Props)); s('get_device_properties', 4, t.C.byref(p))
whole = s.malloc(4, 64 << 20); s('free', 4, whole)         # the whole device, then coalesced
parts = [s.malloc(4, 1000) for _ in range(100)]
for q in parts[::2] + parts[1::2]: s('free', 4, q)
whole = s.malloc(4, 64 << 20); s('free', 4, whole)
out = t.vp(); st = s.status('malloc', 4, (64 << 20) + 1, t.C.byref(out))
print(n.value, p.total_memory, st, s.msg())
"""
    r = run_python(code, TORCHVENDOR_SIM_DEVICES="5", TORCHVENDOR_SIM_MEMORY_MB="64")
    assert r.returncode == 0, r.stderr
    count, total, status, msg = r.stdout.split(maxsplit=3)
    assert (int(count), int(total), int(status)) == (5, 64 << 20, OUT_OF_MEMORY)
    assert msg.strip() == (f"out of memory on device 4: requested {(64 << 20) + 1} bytes, "
                           f"{64 << 20} bytes free of {64 << 20} total")

    r = run_python("t.Sim()", TORCHVENDOR_SIM_DEVICES="many")
    assert f"failed with status {INVALID_VALUE}" in r.stderr
    # The table that holds last_error_message was not returned, so the library logs why.
    assert "TORCHVENDOR_SIM_DEVICES='many': expected an integer in [0, 64]" in r.stderr


def test_minor_zero_table_in_subprocess():
    # TORCHVENDOR_SIM_ABI_MINOR=0 serves the table a minor-0 library has: what the device layer
    # reads of it ends at struct_size, so the collectives are absent.
    r = run_python("s = t.Sim(); print(s.t.abi_minor, s.t.struct_size, t.Runtime.comm_create.offset)",
                   TORCHVENDOR_SIM_ABI_MINOR="0")
    assert r.returncode == 0, r.stderr
    minor, size, comm_offset = map(int, r.stdout.split())
    assert (minor, size) == (0, comm_offset)
    r = run_python("t.Sim()", TORCHVENDOR_SIM_ABI_MINOR="3")
    assert "TORCHVENDOR_SIM_ABI_MINOR='3': expected an integer in [0, 2]" in r.stderr


# ----------------------------------------------------------------------------------- memory

def test_malloc_free_and_oom(sim):
    out = vp(123)
    sim("malloc", 0, 0, C.byref(out))
    assert out.value is None
    sim("free", 0, None)
    a, b, c = sim.malloc(0, 1), sim.malloc(0, 1000), sim.malloc(1, 1)
    assert a % 256 == 0 and b % 256 == 0 and b - a >= 256
    assert sim.status("free", 0, c) == INVALID_VALUE  # each device has its own address range
    assert sim.status("free", 1, a) == INVALID_VALUE and "not an allocation of device 1" in sim.msg()
    assert sim.status("free", 0, a + 16) == INVALID_VALUE  # interior
    for p, d in ((a, 0), (b, 0), (c, 1)):
        sim("free", d, p)
    assert sim.status("free", 0, a) == INVALID_VALUE  # double free
    assert sim.status("free", 0, id(sim)) == INVALID_VALUE  # a host pointer
    assert sim.status("malloc", 7, 16, C.byref(out)) == INVALID_DEVICE

    props = Props(struct_size=C.sizeof(Props))
    sim("get_device_properties", 0, C.byref(props))
    assert sim.status("malloc", 0, props.total_memory + 1, C.byref(out)) == OUT_OF_MEMORY
    msg = sim.msg()
    assert msg.startswith(f"out of memory on device 0: requested {props.total_memory + 1} bytes")
    assert f"free of {props.total_memory} total" in msg
    assert sim.status("malloc", 0, (1 << 64) - 1, C.byref(out)) == OUT_OF_MEMORY


def test_pinned_host_memory(sim):
    h = sim.new("host_malloc", 10000)
    assert h % 256 == 0
    C.memset(h, 7, 10000)  # ordinary host memory
    sim("host_free", h)
    assert sim.status("host_free", h) == INVALID_VALUE
    sim("host_free", None)


def test_memcpy_all_kinds_round_trip(sim):
    src = (C.c_ubyte * 1000)(*(i % 251 for i in range(1000)))
    host, back = (C.c_ubyte * 1000)(), (C.c_ubyte * 1000)()
    d0, d0b, d1 = sim.malloc(0, 1000), sim.malloc(0, 1000), sim.malloc(1, 1000)
    sim("memcpy", host, src, 1000, H2H)
    sim("memcpy", d0, host, 1000, H2D)
    sim("memcpy", d0b, d0, 1000, D2D)
    sim("memcpy", d1, d0b, 1000, D2D)  # cross-device
    sim("memcpy", back, d1, 1000, D2H)
    assert bytes(back) == bytes(src)
    sim("memset", d1 + 10, 0xAB, 5)  # interior pointers are fine
    sim("memcpy", back, d1, 20, D2H)
    assert bytes(back[8:17]) == bytes(src[8:10]) + b"\xab" * 5 + bytes(src[15:17])
    sim("memcpy", back, d1, 0, D2H)  # empty copy

    assert sim.status("memcpy", back, d1 + 1, 1000, D2H) == INVALID_VALUE  # past the allocation
    assert "not inside a device allocation" in sim.msg()
    assert sim.status("memcpy", d0, host, 1000, D2H) == INVALID_VALUE  # wrong kind
    assert sim.status("memcpy", back, d0, 1000, H2H) == INVALID_VALUE
    assert sim.status("memcpy", back, host, 10, 9) == INVALID_VALUE and "unknown kind" in sim.msg()
    assert sim.status("memset", host, 0, 10) == INVALID_VALUE
    for p, d in ((d0, 0), (d0b, 0), (d1, 1)):
        sim("free", d, p)


def test_host_dereference_of_device_memory_faults():
    code = "s = t.Sim(); p = s.malloc(0, 64); s('memset', p, 1, 64); print('alive', flush=True); " \
           "t.C.string_at(p, 4)"
    r = run_python(code)
    assert "alive" in r.stdout, r.stderr
    assert r.returncode == -signal.SIGSEGV


# ---------------------------------------------------------------------- streams and events

def test_streams_run_asynchronously(sim, kernels, streams):
    s = streams()
    gate = Gate(sim, kernels, s)
    d = sim.malloc(0, 16)
    host = (C.c_float * 4)(1, 2, 3, 4)
    sim("memcpy_async", d, host, 16, H2D, s)  # returns while the stream is still gated
    assert sim.status("stream_query", s) == NOT_READY
    gate.open()
    sim("stream_synchronize", s)
    assert sim.status("stream_query", s) == SUCCESS
    gate.close()
    assert sim.floats(d, 4) == [1, 2, 3, 4]
    sim("free", 0, d)


def test_stream_order_and_default_stream(sim, kernels, streams):
    s = streams()
    gate = Gate(sim, kernels, s)
    x, y = sim.malloc(0, 4 * 100), sim.malloc(0, 4 * 100)
    sim("memset_async", x, 0, 400, s)
    assert sim.launch(kernels["tv_fill_f32"], FillArgs(100, x, 3.0), [8], s) == SUCCESS
    assert sim.launch(kernels["tv_add_f32"], AddArgs(100, x, x, y), [8, 16, 24], s) == SUCCESS
    sim("memcpy_async", x, y, 400, D2D, s)
    out = (C.c_float * 100)()
    sim("memcpy_async", out, x, 400, D2H, s)
    gate.open()
    sim("stream_synchronize", s)
    gate.close()
    assert list(out) == [6.0] * 100

    # NULL is the current device's default stream; a blocking memcpy orders after device work.
    assert sim.launch(kernels["tv_fill_f32"], FillArgs(100, y, 5.0), [8], None) == SUCCESS
    assert sim.floats(y, 100) == [5.0] * 100
    sim("stream_synchronize", None)
    sim("free", 0, x), sim("free", 0, y)


def test_an_idle_stream_runs_a_quick_launch_in_place(sim, kernels, streams):
    # No other work on the stream: the launch runs on this thread (no worker wake-up), so it is
    # complete when launch returns. Behind pending work it queues, and runs in stream order.
    s = streams()
    x = sim.malloc(0, 4 * 100)
    assert sim.launch(kernels["tv_fill_f32"], FillArgs(100, x, 1.0), [8], s) == SUCCESS
    assert sim.status("stream_query", s) == SUCCESS
    gate = Gate(sim, kernels, s)  # TV_SIM_KERNEL_WAITS: on the worker, launch returned at once
    out = (C.c_float * 100)()
    assert sim.launch(kernels["tv_fill_f32"], FillArgs(100, x, 2.0), [8], s) == SUCCESS
    sim("memcpy_async", out, x, 400, D2H, s)
    assert sim.status("stream_query", s) == NOT_READY and list(out) == [0.0] * 100  # queued
    gate.open()
    sim("stream_synchronize", s)
    gate.close()
    assert list(out) == [2.0] * 100
    sim("free", 0, x)


def test_stream_wait_event_across_streams_and_devices(sim, kernels, streams):
    a, b = streams(0), streams(1)
    gate = Gate(sim, kernels, a)
    buf = sim.malloc(0, 400)
    ev = sim.new("event_create", 0, 0)
    assert sim.launch(kernels["tv_fill_f32"], FillArgs(100, buf, 7.0), [8], a) == SUCCESS
    sim("event_record", ev, a)
    out = (C.c_float * 100)()
    sim("stream_wait_event", b, ev)  # does not block the host
    sim("memcpy_async", out, buf, 400, D2H, b)
    assert sim.status("event_query", ev) == NOT_READY
    assert sim.status("stream_query", b) == NOT_READY
    gate.open()
    sim("stream_synchronize", b)
    assert list(out) == [7.0] * 100
    sim("event_synchronize", ev)
    assert sim.status("event_query", ev) == SUCCESS
    assert sim.status("event_record", ev, b) == INVALID_VALUE  # event of device 0, stream of 1
    sim("event_destroy", ev)
    gate.close()
    sim("free", 0, buf)


def test_event_timing_and_errors(sim, kernels, streams):
    s = streams()
    e = [sim.new("event_create", 0, TIMING) for _ in range(3)]
    plain = sim.new("event_create", 0, 0)
    ms = C.c_float()
    assert sim.status("event_query", e[0]) == SUCCESS  # never recorded
    assert sim.status("event_elapsed_time", e[0], e[1], C.byref(ms)) == INVALID_HANDLE
    sim("event_record", e[0], s)
    assert sim.launch(kernels["tv_sleep_ms"], Int64Args(20), stream=s) == SUCCESS
    sim("event_record", e[1], s)
    assert sim.launch(kernels["tv_sleep_ms"], Int64Args(5), stream=s) == SUCCESS
    sim("event_record", e[2], s)
    sim("event_record", plain, s)
    sim("event_synchronize", e[2])
    t = []
    for x, y in ((0, 1), (1, 2), (0, 2)):
        sim("event_elapsed_time", e[x], e[y], C.byref(ms))
        t.append(ms.value)
    assert t[0] >= 20 and t[1] >= 5 and abs(t[0] + t[1] - t[2]) < 1e-2
    assert sim.status("event_elapsed_time", e[0], plain, C.byref(ms)) == INVALID_VALUE
    assert "TV_EVENT_ENABLE_TIMING" in sim.msg()

    gate = Gate(sim, kernels, s)
    sim("event_record", e[1], s)  # re-recording replaces the capture
    assert sim.status("event_elapsed_time", e[0], e[1], C.byref(ms)) == NOT_READY
    assert sim.status("event_query", e[1]) == NOT_READY
    gate.open()
    sim("event_synchronize", e[1])
    gate.close()
    for ev in e + [plain]:
        sim("event_destroy", ev)
    assert sim.status("event_create", 0, 4, C.byref(vp())) == INVALID_VALUE


def test_stream_priorities_and_destroy_lets_work_finish(sim, kernels, streams):
    least, greatest = i32(), i32()
    sim("stream_priority_range", C.byref(least), C.byref(greatest))
    assert (least.value, greatest.value) == (0, -1)
    streams(0, -100), streams(0, 100)  # clamped, not refused
    s = sim.new("stream_create", 0, -1)
    gate = Gate(sim, kernels, s)
    d = sim.malloc(1, 400)  # kernels may touch any device's memory (peer access)
    out = (C.c_float * 100)()
    assert sim.launch(kernels["tv_fill_f32"], FillArgs(100, d, 2.5), [8], s) == SUCCESS
    sim("memcpy_async", out, d, 400, D2H, s)
    sim("stream_destroy", s)  # returns at once; the work still runs
    assert sim.status("stream_query", s) == INVALID_HANDLE
    gate.open()
    sim("device_synchronize", 0)
    gate.close()
    assert list(out) == [2.5] * 100
    sim("free", 1, d)


# ---------------------------------------------------------------------------------- modules

def test_module_load_file_data_and_launch(sim, streams):
    path = lib_path("libtorchvendor_sim_kernels.so")
    s = streams()
    mod = sim.new("module_load_data", 0, Path(path).read_bytes(), os.path.getsize(path))
    add = sim.new("module_get_function", mod, b"tv_add_f32")
    assert sim.new("module_get_function", mod, b"tv_add_f32") == add  # looked up once
    a, b = sim.to_device(0, [1, 2, 3]), sim.to_device(0, [10, 20, 30.5])
    out = sim.malloc(0, 12)
    assert sim.launch(add, AddArgs(3, a, b, out), [8, 16, 24], s) == SUCCESS
    sim("stream_synchronize", s)
    assert sim.floats(out, 3) == [11, 22, 33.5]

    assert sim.status("module_get_function", mod, b"tv_nope", C.byref(vp())) == NOT_FOUND
    assert "tv_nope" in sim.msg()
    host = (C.c_float * 3)()
    assert sim.launch(add, AddArgs(3, a, b, C.addressof(host)), [8, 16, 24], s) == INVALID_VALUE
    assert "offset 24" in sim.msg() and "not device memory" in sim.msg()
    assert sim.launch(add, AddArgs(3, a, b, out), [8, 30], s) == INVALID_VALUE
    cfg = LaunchConfig((0, 1, 1), (1, 1, 1), 0, None, 0)
    assert sim.t.launch(add, C.byref(cfg), None, 0, s) == INVALID_VALUE
    other = streams(1)
    assert sim.launch(add, AddArgs(3, a, b, out), [8, 16, 24], other) == INVALID_VALUE
    sim("module_unload", mod)

    m = vp()
    assert sim.status("module_load_file", 0, b"/nonexistent/k.so", C.byref(m)) == NOT_FOUND
    assert "/nonexistent/k.so" in sim.msg()
    junk = b"not an ELF file"
    assert sim.status("module_load_data", 0, junk, len(junk), C.byref(m)) == INVALID_IMAGE
    for p in (a, b, out):
        sim("free", 0, p)


def test_unload_with_pending_launch_and_launch_failure(sim, kernels, streams):
    s = streams()
    gate = Gate(sim, kernels, s)
    mod = sim.new("module_load_file", 0, lib_path("libtorchvendor_sim_kernels.so").encode())
    fill = sim.new("module_get_function", mod, b"tv_fill_f32")
    d = sim.malloc(0, 40)
    assert sim.launch(fill, FillArgs(10, d, 4.0), [8], s) == SUCCESS
    sim("module_unload", mod)  # the pending launch keeps the code loaded
    assert sim.launch(fill, FillArgs(10, d, 5.0), [8], s) == INVALID_HANDLE  # but not usable
    assert sim.status("module_unload", mod) == INVALID_HANDLE
    gate.open()
    sim("stream_synchronize", s)
    gate.close()
    assert sim.floats(d, 10) == [4.0] * 10

    bad = streams()
    assert sim.launch(kernels["tv_fail"], C.c_int32(42), stream=bad) == SUCCESS  # enqueued fine
    assert sim.status("stream_synchronize", bad) == LAUNCH_FAILED
    assert sim.msg() == "kernel 'tv_fail' failed with status 42 on device 0"
    assert sim.status("stream_query", bad) == LAUNCH_FAILED  # sticky for the stream
    assert sim.status("device_synchronize", 0) == LAUNCH_FAILED
    assert sim.launch(kernels["tv_add_f32"], C.c_int32(0), stream=s) == SUCCESS  # args too short
    assert sim.status("stream_synchronize", s) == LAUNCH_FAILED
    sim("free", 0, d)


# -------------------------------------------------------------------------------- threading

def test_concurrent_allocation_from_eight_threads(sim):
    errors = []

    def work(seed):
        try:
            for i in range(150):
                dev, n = (seed + i) % 2, 1 + (seed * 7919 + i * 104729) % 50000
                p = sim.malloc(dev, n)
                sim("memset", p, seed, n)
                back = (C.c_ubyte * n)()
                sim("memcpy", back, p, n, D2H)
                assert back[0] == back[n - 1] == seed
                sim("free", dev, p)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# ------------------------------------------------------------------------------ collectives

def _typed(sim, dev: int, ctype, values) -> int:
    buf = (ctype * len(values))(*values)
    p = sim.malloc(dev, C.sizeof(buf))
    sim("memcpy", p, buf, C.sizeof(buf), H2D)
    return p


def _read(sim, p: int, ctype, n: int) -> list:
    out = (ctype * n)()
    sim("memcpy", out, p, C.sizeof(out), D2H)
    return list(out)


def test_collectives_of_one_rank(sim, streams):
    comm = sim.new("comm_create", b"test-one-rank", 1, 0, 0)
    s = streams(0)
    a, out = sim.to_device(0, [1.0, -2.0, 3.0, 4.0]), sim.malloc(0, 16)
    for op in (SUM, PROD, MAX, MIN, AVG):  # one rank: every reduction is the identity
        sim("memset", out, 0, 16)
        sim("all_reduce", a, out, 4, FLOAT32, op, comm, s)
        sim("stream_synchronize", s)
        assert sim.floats(out, 4) == [1.0, -2.0, 3.0, 4.0]
    sim("broadcast", a, out, 2, FLOAT32, 0, comm, s)
    sim("all_gather", a, out, 3, FLOAT32, comm, s)
    sim("reduce_scatter", a, out, 2, FLOAT32, SUM, comm, s)
    sim("send", a, 4, FLOAT32, 0, comm, s)  # to itself: the mailbox holds it until recv
    sim("recv", out, 4, FLOAT32, 0, comm, s)
    sim("stream_synchronize", s)
    assert sim.floats(out, 4) == [1.0, -2.0, 3.0, 4.0]
    sim("comm_destroy", comm)
    sim("free", 0, a), sim("free", 0, out)


def test_collective_errors(sim, streams):
    p = vp()
    assert sim.status("comm_create", b"bad/id", 1, 0, 0, C.byref(p)) == INVALID_VALUE
    assert "not 1 to 63 characters of [A-Za-z0-9_.-]" in sim.msg()
    assert sim.status("comm_create", b"test-rank", 2, 2, 0, C.byref(p)) == INVALID_VALUE
    assert "rank 2 of 2" in sim.msg()
    assert sim.status("comm_create", b"test-dev", 1, 0, 9, C.byref(p)) == INVALID_DEVICE
    comm = sim.new("comm_create", b"test-errors", 1, 0, 0)
    s0, s1 = streams(0), streams(1)
    a = sim.malloc(0, 64)
    assert sim.status("all_reduce", a, a, 4, INT32, AVG, comm, s0) == NOT_SUPPORTED
    assert "tv_reduce_op 4 is not supported for tv_dtype 6" in sim.msg()
    assert sim.status("all_reduce", a, a, 4, 99, SUM, comm, s0) == NOT_SUPPORTED
    assert "unknown tv_dtype 99" in sim.msg()
    assert sim.status("all_reduce", a, a, 4, FLOAT32, 7, comm, s0) == NOT_SUPPORTED
    assert sim.status("broadcast", a, a, 4, FLOAT32, 1, comm, s0) == INVALID_VALUE
    assert "rank 1 is outside [0, 1)" in sim.msg()
    assert sim.status("all_reduce", a, a, 17, FLOAT32, SUM, comm, s0) == INVALID_VALUE  # 68 > 64 bytes
    assert "is not inside a device 0 allocation" in sim.msg()
    host = (C.c_float * 4)()
    assert sim.status("send", C.addressof(host), 4, FLOAT32, 0, comm, s0) == INVALID_VALUE
    assert sim.status("all_reduce", a, a, 4, FLOAT32, SUM, comm, s1) == INVALID_VALUE
    assert "communicator of device 0, stream of device 1" in sim.msg()
    sim("comm_destroy", comm)
    sim("free", 0, a)


_TWO_RANKS = """
import ctypes as C, struct, sys
rank = int(sys.argv[1]); s = t.Sim(); dev = rank
comm = s.new('comm_create', b'test-two-' + sys.argv[2].encode(), 2, rank, dev)
stream = s.new('stream_create', dev, 0)
n = (6 << 20) // 4 + 3                      # 6 MiB of float32: two chunks of a 4 MiB slot, and a tail
x = t._typed(s, dev, C.c_float, [float(i % 1000 + rank) for i in range(n)])
s('all_reduce', x, x, n, t.FLOAT32, t.SUM, comm, stream)
rs = s.malloc(dev, n // 2 * 4)
s('reduce_scatter', x, rs, n // 2, t.FLOAT32, t.MAX, comm, stream)
h = t._typed(s, dev, C.c_uint16, [0x3c00 + rank] * 5)      # float16 1.0 and 1.0009765625
b = t._typed(s, dev, C.c_uint16, [0x3f80 + rank] * 5)      # bfloat16 1.0 and 1.0078125
s('all_reduce', h, h, 5, t.FLOAT16, t.AVG, comm, stream)
s('all_reduce', b, b, 5, t.BFLOAT16, t.SUM, comm, stream)
g = s.malloc(dev, 2 * 8)
i64 = t._typed(s, dev, C.c_int64, [10 * rank + 1])
s('all_gather', i64, g, 1, t.INT64, comm, stream)
m = (3 << 20) // 8                          # 3 MiB point to point: three mailbox chunks
p = t._typed(s, dev, C.c_double, [float(i) for i in range(m)]) if rank == 0 else s.malloc(dev, m * 8)
s('send' if rank == 0 else 'recv', p, m, t.FLOAT64, 1 - rank, comm, stream)
s('stream_synchronize', stream)
xs = t._read(s, x, C.c_float, n)
ok_sum = all(v == 2 * (i % 1000) + 1 for i, v in enumerate(xs))
ok_rs = t._read(s, rs, C.c_float, n // 2) == xs[rank * (n // 2):(rank + 1) * (n // 2)]
ok_p2p = t._read(s, p, C.c_double, m) == [float(i) for i in range(m)]
print(ok_sum, ok_rs, ok_p2p, hex(t._read(s, h, C.c_uint16, 5)[0]), hex(t._read(s, b, C.c_uint16, 5)[0]),
      t._read(s, g, C.c_int64, 2))
s('comm_destroy', comm)
"""


def test_collectives_across_two_processes():
    prelude = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_reference_runtime as t\n"
    tag = str(os.getpid())
    procs = [subprocess.Popen([sys.executable, "-c", prelude + _TWO_RANKS, str(r), tag], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        # every rank: the same sum; float16 (1 + 1.0009765625) / 2 rounds to 1.0 (0x3c00),
        # bfloat16 1 + 1.0078125 = 2.0078125 (0x4000 + 1); all ranks' int64 gathered in order
        assert out.split() == ["True", "True", "True", "0x3c00", "0x4000", "[1,", "11]"], out
    assert not glob.glob(f"/dev/shm/tvsim-test-two-{tag}*")  # rank 0 unlinked the segment


def test_a_rank_that_never_joins_times_out():
    code = "s = t.Sim(); p = t.vp(); print(s.status('comm_create', b'test-alone', 2, 0, 0, t.C.byref(p)), s.msg())"
    r = run_python(code, TORCHVENDOR_SIM_COMM_TIMEOUT_S="1")
    assert r.returncode == 0, r.stderr
    status, msg = r.stdout.split(maxsplit=1)
    assert int(status) == NOT_READY and "only 1 of 2 ranks joined 'test-alone' within 1 s" in msg
    assert not os.path.exists("/dev/shm/tvsim-test-alone")
