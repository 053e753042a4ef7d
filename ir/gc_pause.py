"""``paused_gc``: pause Python's cyclic garbage collector during a pass over a large graph.

The pattern matcher and the partitioner (which import nothing of ours but the GraphView
protocol and this module) allocate many small containers per pass: matches, bindings, index
lists. Each allocation burst can trigger a full collection, which walks the whole (large) IR heap
again and again; pausing the collector for the pass avoids that. This module imports no torch.

Example::

    >>> import gc
    >>> with paused_gc():
    ...     gc.isenabled()
    False
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator

__all__ = ["paused_gc"]


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector for the ``with`` block and restore it after; a no-op if it is
    already off (so passes nest).

    >>> import gc
    >>> with paused_gc():
    ...     with paused_gc():
    ...         pass
    ...     gc.isenabled()
    False
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
