"""A script that ends right after a backward on the device must exit cleanly.

A device's autograd worker drops a finished graph task after ``backward`` has returned, and the
task holds the caller's ``contextvars`` context, whose release needs the GIL; in interpreter
finalization that aborts the process ("terminate called without an active exception", seen in CI
in about 1 of 30 loaded runs). The device layer drains the workers at exit; this checks the
drain's guarantee directly, many times, where the race itself is too rare to hit on demand."""
from __future__ import annotations

import contextvars
import sys
import weakref

import torch

from torchvendor.sdk.device import registry as device


class _Marker:
    pass


def test_exit_drain_drops_every_finished_graph_task(acme):
    probe = contextvars.ContextVar("probe")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)  # the main thread keeps the GIL: a worker's release waits for it
    try:
        for _ in range(50):
            marker, dropped = _Marker(), []
            weakref.finalize(marker, dropped.append, True)
            token = probe.set(marker)  # the graph task's saved context now holds the marker
            x = torch.ones(4, device="acme:1", requires_grad=True)
            (x * 2).sum().backward()
            probe.reset(token)
            del marker
            device._drain_autograd_workers("acme", acme.device_count())
            assert dropped, "a graph task outlived the drain: its worker still holds it"
    finally:
        sys.setswitchinterval(interval)
