"""The C versions of the partitioner's whole-graph integer loops, or ``None``.

``lib`` is :mod:`torchvendor.partitioner._partition_native` (``csrc/partitioner/partition_native.c``, built
with the package, torch-free): ``core._edges``, ``_waves``, ``_buckets`` and ``_crossings``,
:func:`~torchvendor.partitioner.boundary.refine_waves`,
:func:`~torchvendor.partitioner.boundary.boundary_total`, :func:`~torchvendor.partitioner.boundary.eject_cheap`,
:func:`~torchvendor.partitioner.cuts.pair_cuts`, :func:`~torchvendor.partitioner.cuts.min_cut`
and :func:`~torchvendor.partitioner.span.span_cut` hand their work to it. The Python
functions stay the specification, as ``heapq`` is for ``_heapq``: the C ones give the same results
(``tests/test_partitioner.py`` compares them on random DAGs), and a source tree without the build
runs the Python ones. Set ``lib = None`` to run the Python ones in a built tree.
"""
from __future__ import annotations

from typing import Any

lib: Any
try:
    from . import _partition_native as lib
except ImportError:
    lib = None
