"""Partition reports: what went where and why, as text for humans and JSON for tools.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.partitioner import partition
    >>> g = DictGraph(); x = g.add_input("x"); s = g.add_node("sin", [x]); r = g.add_node("relu", [s])
    >>> _ = g.add_output([r])
    >>> rep = partition(g, {"relu"}).report()
    >>> rep.num_partitions, rep.num_fallback, rep.unsupported["sin"]["count"]
    (1, 1, 1)
    >>> print(rep.summary().splitlines()[0])
    4 nodes (2 ops): 1 partition(s) holding 1 op node(s); 1 op node(s) fall back
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = ["PartitionReport"]


@dataclass
class PartitionReport:
    """Counts, per-partition rows, and unsupported operators with counts and reasons."""

    num_nodes: int
    num_op_nodes: int
    num_partitions: int
    num_partitioned: int
    num_fallback: int
    num_boundary_inputs: int
    num_boundary_outputs: int
    partitions: list[dict[str, Any]]
    unsupported: dict[str, dict[str, Any]]
    options: dict[str, Any]
    stats: dict[str, Any] = field(default_factory=dict)
    #: distinct values that cross a partition boundary (read by another partition or written out)
    num_boundary_values: int = 0
    #: bytes moved across boundaries: every partition input once per reading partition plus
    #: every partition output once (sizes from ``view.meta``; values of unknown size count 0)
    boundary_bytes: int = 0
    #: boundary crossings whose value size is unknown (symbolic or missing metadata)
    num_boundary_unsized: int = 0

    @classmethod
    def from_result(cls, result: Any) -> "PartitionReport":
        """Build the report of a :class:`~torchvendor.partitioner.core.PartitionResult`."""
        view = result.view
        op_of = result.op_keys.get if result.op_keys else view.op
        name = view.name
        rows = []
        for p in result.partitions:
            ops = Counter(map(op_of, p.nodes))
            rows.append({"id": p.id, "nodes": len(p.nodes), "size": p.size,
                         "inputs": list(map(name, p.inputs)), "outputs": list(map(name, p.outputs)),
                         "ops": dict(ops.most_common())})
        unsupported: dict[str, dict[str, Any]] = {}
        for node in result.fallback:
            entry = unsupported.setdefault(op_of(node), {"count": 0, "reasons": {}})
            entry["count"] += 1
            why = result.reasons.get(node, "")
            entry["reasons"][why] = entry["reasons"].get(why, 0) + 1
        crossed, nbytes, unsized = _boundary(result)
        num_partitioned = sum(len(p.nodes) for p in result.partitions)
        opts = {f.name: (sorted(v) if isinstance(v := getattr(result.options, f.name), frozenset) else v)
                for f in fields(result.options)}
        stats = dict(result.stats)
        return cls(num_nodes=stats.get("nodes", 0), num_op_nodes=num_partitioned + len(result.fallback),
                   num_partitions=len(result.partitions), num_partitioned=num_partitioned,
                   num_fallback=len(result.fallback),
                   num_boundary_inputs=sum(len(r["inputs"]) for r in rows),
                   num_boundary_outputs=sum(len(r["outputs"]) for r in rows),
                   partitions=rows, unsupported=dict(sorted(unsupported.items(), key=lambda kv: (-kv[1]["count"], kv[0]))),
                   options=opts, stats=stats, num_boundary_values=crossed, boundary_bytes=nbytes,
                   num_boundary_unsized=unsized)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (stable key order)."""
        return asdict(self)

    def to_json(self, indent: int | None = 1) -> str:
        """The report as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, default=str)

    def summary(self, max_rows: int = 20) -> str:
        """A readable multi-line summary; at most ``max_rows`` partition rows."""
        lines = [f"{self.num_nodes} nodes ({self.num_op_nodes} ops): {self.num_partitions} partition(s) holding "
                 f"{self.num_partitioned} op node(s); {self.num_fallback} op node(s) fall back"]
        if self.partitions:
            lines.append(f"  {'part':>5} {'nodes':>7} {'compute':>7} {'ins':>4} {'outs':>4}  top ops")
            for row in self.partitions[:max_rows]:
                top = ", ".join(f"{op} x{c}" for op, c in list(row["ops"].items())[:3])
                lines.append(f"  {row['id']:>5} {row['nodes']:>7} {row['size']:>7} {len(row['inputs']):>4} "
                             f"{len(row['outputs']):>4}  {top}")
            if len(self.partitions) > max_rows:
                rest = self.partitions[max_rows:]
                lines.append(f"  ... {len(rest)} more partition(s), {sum(r['nodes'] for r in rest)} node(s)")
            lines.append(f"  boundary: {self.num_boundary_inputs} input value(s), "
                         f"{self.num_boundary_outputs} output value(s), {self.num_boundary_values} distinct, "
                         f"{self.boundary_bytes:,} bytes" + (f" (+{self.num_boundary_unsized} of unknown size)"
                                                           if self.num_boundary_unsized else ""))
        if self.unsupported:
            lines.append("fallback by operator:")
            for op, info in self.unsupported.items():
                reasons = "; ".join(f"{r} (x{c})" for r, c in info["reasons"].items())
                lines.append(f"  {op} x{info['count']}: {reasons}")
        s = self.stats
        if "seconds" in s:
            lines.append(f"({s['seconds'] * 1e3:.1f} ms, {s.get('waves', 0)} wave(s), {s.get('rounds', 0)} round(s)"
                         f"{', fast path' if s.get('fast_path') else ''})")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _boundary(result: Any) -> tuple[int, int, int]:
    """(distinct crossing values, bytes, crossings of unknown size) of a partition result."""
    from .boundary import size_reader

    size_of = size_reader(result.view)
    known = getattr(result, "value_sizes", None) or {}
    sizes: dict[Any, int | None] = {}
    nbytes = unsized = 0
    for p in result.partitions:
        for v in (*p.inputs, *p.outputs):
            if v not in sizes:
                b = known.get(v, -1)
                sizes[v] = size_of(v) if b == -1 else b
            b = sizes[v]
            if b is None:
                unsized += 1
            else:
                nbytes += b
    return len(sizes), nbytes, unsized
