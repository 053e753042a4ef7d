"""A torchvendor device in torch's profiler.

The device layer (``csrc/device/profiler.cpp``) serves torch's profiler extension points with the
runtime table's timing events (``event_create``, ``event_record``, ``event_elapsed_time``):

- ``torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])``
  (Kineto): while the trace records, every kernel launch, copy, memset and collective that goes
  through the runtime table (the loop runner's compiled kernels, a kernel library's eager kernels,
  the device layer's copies) is timed by two events on its stream and put on the device's
  timeline, named (the kernel's function name, ``Memcpy HtoD (Host -> acme)``, ``Memset (acme)``)
  and linked to the operator that issued it: the operator's device time in ``key_averages()``
  ("Self ACME", "ACME total"), the device's rows (one per stream) in ``export_chrome_trace``.
  torch 2.12 and later take this profiler through their PrivateUse1 registry; torch 2.11 through
  Kineto's own child-profiler API (the registry's route in later releases).
- the profiler's device-event mode, ``torch.autograd.profiler.profile(use_device=NAME,
  use_kineto=False)`` (what :func:`profile` opens): torch's ``ProfilerStubs`` put a timing event
  around each operator, the time between them its device time (no device rows in the trace).

A runtime without ``event_elapsed_time`` cannot time the device: profiling then records CPU time
only, with one warning that says why. :mod:`torchvendor.sdk.device.trace_view` draws an exported
trace as an HTML page (and a PNG through headless Chromium).

Example::

    >>> import torch
    >>> from torchvendor.sdk import register_device
    >>> acme = register_device("acme")
    >>> x = torch.randn(64, 64, device="acme")
    >>> with profile() as prof:
    ...     y = x @ x
    >>> device_times(prof)["aten::mm"] > 0
    True
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from torchvendor.sdk.device.trace_view import DEVICE_CATEGORIES

__all__ = ["profile", "device_times", "times_device", "device_activities"]


def _device_name() -> str:
    from torchvendor.ir import compat

    name = compat.privateuse1_backend_name()
    if name == "privateuseone":
        raise RuntimeError("no torchvendor device is registered: call torchvendor.sdk.register_device(name) first")
    return name


def times_device() -> bool:
    """Whether the registered device's runtime has timing events (``event_elapsed_time``).

    >>> times_device()  # the reference simulator has them
    True
    """
    from torchvendor import _C

    _device_name()
    return "event_elapsed_time" not in _C.runtime_info()["missing_optional"]


def profile(**kwargs: Any) -> torch.autograd.profiler.profile:
    """torch's profiler with device time for the registered torchvendor device (keyword
    arguments as ``torch.autograd.profiler.profile``'s: ``record_shapes``, ``with_stack``, ...).
    Without timing events in the runtime: a CPU-only profiler, and one warning."""
    name = _device_name()
    if not times_device():  # the device layer's words (csrc/device/profiler.cpp)
        from torchvendor import _C

        runtime = _C.runtime_info()["name"]
        warnings.warn(f"torchvendor: the {name} runtime '{runtime}' has no event_elapsed_time, so torch's profiler "
                      f"shows CPU time only for {name} (a runtime times operators on the device with timing events)",
                      RuntimeWarning, stacklevel=2)
        return torch.autograd.profiler.profile(**kwargs)
    return torch.autograd.profiler.profile(use_device=name, use_kineto=False, **kwargs)


def device_times(prof: Any) -> dict[str, float]:
    """Self device time per operator (and per kernel or copy, in a Kineto trace), in microseconds,
    of a finished :func:`profile` or ``torch.profiler.profile``."""
    return {e.key: float(e.self_device_time_total) for e in prof.key_averages()}


def device_activities(trace: dict[str, Any] | str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The device's kernels, copies and memsets in an exported Chrome trace (a path or the loaded
    dict), in time order: each a trace event with ``name``, ``cat``, ``ts`` and ``dur``
    (microseconds), ``pid`` (device index), ``tid`` (stream row) and ``args`` (``External id``: the
    operator's; ``bytes`` for copies and memsets).

    >>> device_activities({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2},
    ...                                    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}]})
    [{'ph': 'X', 'cat': 'kernel', 'name': 'k', 'ts': 1, 'dur': 2}]
    """
    if not isinstance(trace, dict):
        trace = json.loads(Path(trace).read_text())
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES]
    return sorted(events, key=lambda e: e["ts"])
