"""torchvendor.partitioner: capability partitioning over any GraphView (torch-free).

The partitioner splits a graph into maximal convex groups of nodes a backend supports, leaves
the rest to fall back, reports what happened, outlines the groups into subgraphs and draws the
result. It never imports torch; FX outlining lives in :mod:`torchvendor.sdk.compile.fx_outline`.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.partitioner import partition, unsupported_ops
    >>> g = DictGraph(); x = g.add_input("x")
    >>> a = g.add_node("relu", [x]); s = g.add_node("sin", [a]); b = g.add_node("relu", [s])
    >>> _ = g.add_output([b])
    >>> result = partition(g, unsupported_ops({"sin"}))
    >>> [len(p) for p in result.partitions], result.report().num_fallback
    ([1, 1], 1)
"""
from __future__ import annotations

from .core import (Partition, PartitionError, PartitionOptions, PartitionResult, UnsupportedOperatorsError,
                   is_inplace_op, mutation_edges, partition)
from .outline import OutlinedGraph, emission_order, outline
from .picture import render_html
from .report import PartitionReport
from .support import (SupportRule, Unsupported, any_chain, as_oracle, chain, check, dtypes, op_matches, predicate,
                      supported_ops, unsupported_ops)

__all__ = ["partition", "PartitionOptions", "PartitionResult", "Partition", "PartitionError",
           "UnsupportedOperatorsError", "mutation_edges", "is_inplace_op", "PartitionReport", "outline", "emission_order",
           "OutlinedGraph", "render_html", "SupportRule", "Unsupported", "as_oracle", "check", "supported_ops",
           "unsupported_ops", "predicate", "dtypes", "chain", "any_chain", "op_matches"]
