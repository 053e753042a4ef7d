"""Root cause first: the runtime area's cases in the order of what they rely on, and the failures a
failed earlier entry explains marked as blocked by it.

Each case observes the entry it judges through others: a memset case reads the memory back
through memcpy, a stream case waits through stream_synchronize, every case allocates through
malloc. ``REQUIRES`` says which cases must pass for a case's observation to be trusted; the
suite runs the independent probes first (:func:`order`) and, after a run, :func:`explain` rewrites
a failure whose prerequisite failed as ``blocked by memcpy (see runtime/memcpy_exact_bytes)``
instead of naming suspects of its own. :func:`fix_first` is the entry a report names on its first
line: the first suspect of the first failure in that order that nothing explains.

    >>> order(["memset_value_and_size", "memcpy_exact_bytes", "abi_version"])
    ['memcpy_exact_bytes', 'memset_value_and_size', 'abi_version']
    >>> first_suspect('runtime.h, memcpy: "Copy n bytes": byte 3 differs. Suspect: memcpy, memset.')
    'memcpy'
    >>> from types import SimpleNamespace as R
    >>> rows = [R(id="runtime/memset_value_and_size", status="fail", tags={}, reason="byte 0 reads 0x0. Suspect: memset."),
    ...         R(id="runtime/memcpy_exact_bytes", status="fail", tags={}, reason="byte 64 is 0. Suspect: memcpy.")]
    >>> explain(rows)[0].reason
    'blocked by memcpy (see runtime/memcpy_exact_bytes); what it saw: byte 0 reads 0x0.'
    >>> fix_first(rows)["entry"]
    'memcpy'
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

__all__ = ["REQUIRES", "order", "explain", "fix_first", "first_suspect", "BLOCKED"]

#: the cases that come first: the table, devices, allocation, the blocking copy
_MEMORY = ("malloc_usable_size",)
_COPY = ("memcpy_exact_bytes",)
_SET = ("memset_value_and_size",)
#: async work is observed through stream_synchronize and a backlog of memset_async of 32 MiB
_STREAMS = ("stream_synchronize_waits", "memset_async_sizes")

#: case -> the cases whose failure explains its own (they run first)
REQUIRES: dict[str, tuple[str, ...]] = {
    "device_properties": ("device_count",),
    "set_device_range": ("device_count",),
    "current_device_per_thread": ("set_device_range",),
    "malloc_alignment": ("device_count",),
    "malloc_zero_size": ("device_count",),
    "malloc_errors": ("malloc_alignment",),
    "malloc_usable_size": ("malloc_alignment",),
    "free": ("malloc_alignment",),
    "memcpy_exact_bytes": _MEMORY,
    "memcpy_errors": _COPY,
    "memcpy_sizes": _COPY,
    "memset_value_and_size": _COPY,
    "memset_sizes": ("memset_value_and_size", "memcpy_sizes"),
    "allocations_disjoint": (*_COPY, *_SET),
    "memcpy_across_devices": (*_COPY, *_SET),
    "thread_safety": (*_SET, "free"),
    "stream_synchronize_waits": (*_COPY, *_SET, "memcpy_async_sizes"),
    "memcpy_async_sizes": ("memcpy_sizes",),
    "memset_async_sizes": ("memset_sizes", "stream_synchronize_waits"),
    "memset_async_value_and_size": ("memset_value_and_size", "stream_synchronize_waits"),
    **{case: _STREAMS for case in (
        "device_synchronize", "memcpy_orders_after_streams", "memset_orders_after_streams", "stream_order",
        "stream_query", "stream_destroy_finishes_work", "stream_priorities",
        "async_returns_promptly", "event_never_recorded", "event_completion", "stream_wait_event",
        "event_destroy_pending", "elapsed_time")},
    "default_stream": (*_STREAMS, "stream_query"),
    "event_rerecord": ("event_completion",),
    "module_functions": (*_STREAMS, "module_load_errors"),
    "collectives_single_rank": _STREAMS,
    "last_error_message": ("malloc_errors",),
}

BLOCKED = "blocked by"


def order(names: Iterable[str]) -> list[str]:
    """``names`` with every case after the cases it requires (otherwise in the given order)."""
    names = list(names)
    present, done, out = set(names), set(), []

    def visit(name: str, path: tuple[str, ...] = ()) -> None:
        if name in done or name in path:
            return
        for before in REQUIRES.get(name, ()):
            if before in present:
                visit(before, (*path, name))
        done.add(name)
        out.append(name)
    for name in names:
        visit(name)
    return out


def first_suspect(reason: str) -> str:
    """The first entry a failure's reason names to suspect ("" when it names none)."""
    if "Suspect:" not in reason:
        return ""
    first = reason.rsplit("Suspect:", 1)[1].split(",")[0].strip().rstrip(".")
    return re.sub(r"\s*\(.*", "", first).strip()


def _ancestors(name: str) -> list[str]:
    seen: list[str] = []
    stack = list(REQUIRES.get(name, ()))
    while stack:
        n = stack.pop(0)
        if n not in seen:
            seen.append(n)
            stack += REQUIRES.get(n, ())
    return seen


def explain(results: Sequence[Any]) -> list[Any]:
    """Mark the runtime failures a failed prerequisite explains: reason ``blocked by ENTRY (see
    runtime/CASE); what it saw: ...`` (its own suspects dropped), ``tags["blocked_by"]``.
    ``results``: objects with ``id``, ``status``, ``reason`` and ``tags`` (changed in place)."""
    runtime = {r.id.removeprefix("runtime/"): r for r in results if r.id.startswith("runtime/")}
    roots: dict[str, Any] = {}
    for name in order(runtime):
        r = runtime[name]
        if r.status != "fail" or r.tags.get("blocked_by"):
            continue
        failed = [a for a in order(_ancestors(name)) if a in roots]
        if not failed:
            roots[name] = r
            continue
        root = roots[failed[0]]
        entry = first_suspect(root.reason) or root.id
        seen = r.reason.rsplit(" Suspect:", 1)[0]
        r.reason = f"{BLOCKED} {entry} (see {root.id}); what it saw: {seen}"
        r.tags = {**r.tags, "blocked_by": root.id}
    return list(results)


def fix_first(results: Sequence[Any]) -> dict[str, str] | None:
    """The failure to fix first: the first runtime failure in dependency order that nothing
    explains, with the entry it suspects; else the first failure of the run (area order)."""
    fails = [r for r in results if r.status == "fail"]
    runtime = {r.id.removeprefix("runtime/"): r for r in fails if r.id.startswith("runtime/")}
    for name in order(runtime):
        r = runtime[name]
        if not r.tags.get("blocked_by"):
            return {"case": r.id, "entry": first_suspect(r.reason) or r.id, "reason": r.reason}
    if fails:
        return {"case": fails[0].id, "entry": "", "reason": fails[0].reason}
    return None
