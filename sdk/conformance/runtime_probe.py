"""The tools the runtime area calls a vendor's runtime table with: the table loaded through the
one ctypes mirror (:mod:`.runtime_abi`), calls that name their entry when they fail, a watchdog for
[blocks] entries, scratch buffers and streams released even when a case fails, a backlog of
memsets, and an unordered observer of device memory.

    >>> v = Violation("memset", "Set n bytes", "byte n was written", ("memset",))
    >>> str(v)
    'runtime.h, memset: "Set n bytes": byte n was written. Suspect: memset.'
"""

from __future__ import annotations

import ctypes
import os
import threading
from functools import cache
from typing import Any

from . import runtime_abi as abi
from .core import ConformanceError
from .runtime_abi import D2H, SUCCESS, RuntimeTable

__all__ = ["load_runtime", "Violation", "Missing", "Probe", "Scratch", "check", "need_devices", "mismatch", "settle"]

_vp, _i32 = ctypes.c_void_p, ctypes.c_int32
#: how long a [blocks] entry may take before its case fails (a backlog takes tens of ms)
WATCHDOG_S = float(os.environ.get("TORCHVENDOR_RUNTIME_WATCHDOG_S", "20"))


class Violation(AssertionError):
    """A broken statement of runtime.h: the sentence, what was seen, the entries to suspect."""

    def __init__(self, entry: str, statement: str, observed: str, suspects: tuple[str, ...]) -> None:
        self.suspects = suspects
        super().__init__(f'runtime.h, {entry}: "{statement}": {observed}. Suspect: {", ".join(suspects)}.')


class Missing(Exception):
    """An optional entry the runtime does not provide: the case is skipped."""


@cache
def _library(path: str) -> tuple[ctypes.CDLL, Any]:
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ConformanceError(f"cannot load the runtime library {path}: {e}") from e
    try:
        entry = abi.GetRuntime((abi.ENTRY_SYMBOL, lib))
    except AttributeError:
        raise ConformanceError(f"{path} exports no {abi.ENTRY_SYMBOL}: is it a torchvendor runtime?") from None
    return lib, entry


def load_runtime(path: str | None) -> RuntimeTable:
    """The runtime table of the library at ``path`` (None: the reference simulator)."""
    if path is None:
        from torchvendor.sdk import default_runtime_path

        path = default_runtime_path()
    _, entry = _library(path)
    table = ctypes.POINTER(RuntimeTable)()
    status = entry(abi.ABI_MAJOR, ctypes.byref(table))
    if status != SUCCESS or not table:
        raise ConformanceError(f"{path}: {abi.ENTRY_SYMBOL}({abi.ABI_MAJOR}) returned status {status}")
    return table.contents


class Probe:
    """The table with the calls a case needs: each failing status names its entry."""

    def __init__(self, table: RuntimeTable, path: str | None) -> None:
        self.t, self.path = table, path
        n = _i32(0)
        self.ndev = n.value if table.device_count(ctypes.byref(n)) == SUCCESS else 0

    def has(self, entry: str) -> bool:
        field = getattr(RuntimeTable, entry)
        return field.offset + field.size <= self.t.struct_size and bool(getattr(self.t, entry))

    def need(self, *entries: str) -> None:
        for e in entries:
            if not self.has(e):
                raise Missing(f"the runtime does not provide {e} (optional)")

    def name(self, status: int) -> str:
        if self.has("get_error_string"):
            s = self.t.get_error_string(status)
            if s:
                return f"{s.decode(errors='replace')} ({status})"
        return next((k for k, v in abi.STATUS.items() if v == status), "an unknown status") + f" ({status})"

    def detail(self) -> str:
        msg = self.t.last_error_message() if self.has("last_error_message") else b""
        return f": {msg.decode(errors='replace')}" if msg else ""

    def __call__(self, entry: str, *args: Any) -> int:
        self.need(entry)
        return getattr(self.t, entry)(*args)

    def ok(self, entry: str, *args: Any, statement: str = "returns TV_SUCCESS", why: str = "") -> None:
        status = self(entry, *args)
        if status != SUCCESS:
            raise Violation(entry, statement, f"{why or 'a valid call'} returned {self.name(status)}{self.detail()}",
                            (entry,))

    def expect(self, entry: str, args: tuple, wanted: tuple[int, ...], statement: str, why: str) -> None:
        status = self(entry, *args)
        if status not in wanted:
            names = " or ".join(self.name(w) for w in wanted)
            raise Violation(entry, statement, f"{why} returned {self.name(status)}, not {names}", (entry,))

    def new(self, entry: str, *args: Any) -> Any:
        out = _vp()
        self.ok(entry, *args, ctypes.byref(out))
        return out

    def blocking(self, entry: str, *args: Any, statement: str, suspects: tuple[str, ...]) -> int:
        """Call a [blocks] entry under the watchdog."""
        self.need(entry)
        box: list[int] = []
        worker = threading.Thread(target=lambda: box.append(getattr(self.t, entry)(*args)), daemon=True)
        worker.start()
        worker.join(WATCHDOG_S)
        if not box:
            raise Violation(entry, statement, f"it did not return within {WATCHDOG_S:.0f} s", suspects)
        return box[0]


def check(ok: bool, entry: str, statement: str, observed: str, *suspects: str) -> None:
    if not ok:
        raise Violation(entry, statement, observed, suspects or (entry,))


# ---- shared tools: buffers, the backlog, the unordered observer ------------------------------------------

#: a backlog of memsets on a stream: long enough (tens of ms) to see work that runs out of order
BACKLOG_BYTES, BACKLOG_DEPTH = 32 << 20, 8
_round = iter(range(1 << 30))


class Scratch:
    """Device buffers and streams a case uses, all released at the end (even when it fails)."""

    def __init__(self, rt: Probe) -> None:
        self.rt, self.ptrs, self.streams, self.events = rt, [], [], []

    def __enter__(self) -> "Scratch":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None:
            return  # a broken runtime may never finish the work: leave it rather than hang here
        t = self.rt.t
        for s in self.streams:
            self.rt.blocking("stream_synchronize", s, statement="wait for all work on the stream",
                             suspects=("stream_synchronize",))
            t.stream_destroy(s)
        for e in self.events:
            t.event_destroy(e)
        for dev, p in self.ptrs:
            t.free(dev, p)

    def alloc(self, n: int, dev: int = 0) -> _vp:
        p = self.rt.new("malloc", dev, n)
        self.ptrs.append((dev, p))
        return p

    def stream(self, dev: int = 0, prio: int = 0) -> _vp:
        s = self.rt.new("stream_create", dev, prio)
        self.streams.append(s)
        return s

    def event(self, flags: int = 0, dev: int = 0) -> _vp:
        e = self.rt.new("event_create", dev, flags)
        self.events.append(e)
        return e

    def backlog(self, ptr: _vp, stream: Any, depth: int = BACKLOG_DEPTH) -> int:
        """Queue memsets over ``ptr`` on ``stream``; returns the value the last one writes."""
        k = next(_round)
        # 1..127: the same byte whether a memset truncates or (wrongly) clamps to a signed char,
        # so only the ordering this backlog serves decides an ordering case
        values = [(k * depth + i) % 127 + 1 for i in range(depth)]
        for v in values:
            self.rt.ok("memset_async", ptr, v, BACKLOG_BYTES, stream)
        return values[-1]

    def peek(self, ptr: _vp) -> int:
        """The backlog buffer's last byte, read by a copy on an idle stream of its own (ordered
        after nothing): what the device holds now."""
        out = (ctypes.c_uint8 * 1)()
        obs = self.stream()
        tail = _vp(ptr.value + BACKLOG_BYTES - 1)
        self.rt.ok("memcpy_async", ctypes.addressof(out), tail, 1, D2H, obs)
        self.rt.blocking("stream_synchronize", obs, statement="wait for all work on the stream",
                         suspects=("stream_synchronize",))
        return out[0]

    def read(self, ptr: Any, n: int, kind: int = D2H) -> bytes:
        out = (ctypes.c_uint8 * n)()
        self.rt.ok("memcpy", ctypes.addressof(out), ptr, n, kind)
        return bytes(out)


def mismatch(got: bytes, expected: bytes, offset: int = 0) -> str:
    """Where ``got`` first differs from ``expected`` and how, in words (never "X, not X").

    >>> mismatch(b"abcd", b"abzd"), mismatch(b"ab", b"abc")
    ('byte 2 of 4 reads 0x63, expected 0x7a', 'it holds 2 bytes, expected 3')
    """
    if len(got) != len(expected):
        return f"it holds {len(got)} bytes, expected {len(expected)}"
    lo, step = 0, 1 << 16
    while lo < len(got) and got[lo:lo + step] == expected[lo:lo + step]:
        lo += step  # chunks first: tens of MiB are compared at C speed
    first = next((i for i in range(lo, min(lo + step, len(got))) if got[i] != expected[i]), None)
    if first is None:
        return "the bytes are equal"
    wrong = sum(1 for i in range(first, min(first + step, len(got))) if got[i] != expected[i])
    more = f" ({wrong} wrong byte(s) from there in the next {min(step, len(got) - first)})" if wrong > 1 else ""
    return f"byte {first - offset} of {len(got) - offset} reads {got[first]:#x}, expected {expected[first]:#x}{more}"


def settle(rt: Probe, stream: Any, seconds: float = 2.0) -> None:
    """Wait for ``stream`` without trusting stream_synchronize: poll stream_query, then a little
    more. A case that saw a wrong byte looks again after this: still wrong, the work itself is wrong;
    right now, the wait that came before returned early."""
    import time

    deadline = time.perf_counter() + seconds
    while rt.t.stream_query(stream) == abi.NOT_READY and time.perf_counter() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)


def need_devices(rt: Probe, n: int = 1) -> None:
    if rt.ndev < n:
        raise Missing(f"needs {n} device(s), the runtime has {rt.ndev}")
