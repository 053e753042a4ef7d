"""A torchvendor device in torch's profiler.

The device layer (``csrc/device/profiler.cpp``) serves both of torch's PrivateUse1 profiler
extension points with the runtime table's timing events:

- ``torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])``
  (Kineto): a Kineto activity profiler (``REGISTER_PRIVATEUSE1_PROFILER``) records a timing event
  on the current stream when each operator starts and ends, and puts each operator's own device
  time on the device's timeline, linked to the operator: its "Self ACME" column in
  ``key_averages()``, the device's row in ``export_chrome_trace``.
- the profiler's device-event mode, ``torch.autograd.profiler.profile(use_device=NAME,
  use_kineto=False)`` (what :func:`profile` opens; also where torch has no Kineto): torch's
  ``ProfilerStubs`` (``registerPrivateUse1Methods``), the same events around each operator.

On the simulator an operator's device time is the time its stream was busy with it, the CPU
fallback's copies and host kernel included. A runtime without ``event_elapsed_time`` cannot
time the device: profiling then records CPU time only, with one warning that says why.

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

import warnings
from typing import Any

import torch

__all__ = ["profile", "device_times", "times_device"]


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
    if not times_device():
        warnings.warn(f"torchvendor: the {name} runtime has no event_elapsed_time, so torch's profiler shows CPU "
                      f"time only for {name} (a runtime times operators on the device with timing events)",
                      RuntimeWarning, stacklevel=2)
        return torch.autograd.profiler.profile(**kwargs)
    return torch.autograd.profiler.profile(use_device=name, use_kineto=False, **kwargs)


def device_times(prof: Any) -> dict[str, float]:
    """Self device time per operator, in microseconds, of a finished :func:`profile`."""
    return {e.key: float(e.self_device_time_total) for e in prof.key_averages()}
