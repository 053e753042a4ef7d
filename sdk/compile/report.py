"""Compile reports: what a backend compiled, where each part ran, and what silently fell back.

One :class:`CompileReport` per graph Dynamo hands a backend (one ``torch.compile`` frame); it
holds a :class:`GraphReport` per graph the backend saw (``inference``, or ``forward`` and
``backward`` for training; the backward arrives at the first backward pass), and each graph
report holds a :class:`PartitionRecord` per partition. A partition's ``device_fallback``
counts the operators that the vendor claimed but that ran through the device's CPU fallback
while the partition ran (measured on its first call) — the "on the device" that was not.

An op outside every partition is one of two kinds, kept apart: **not claimed**
(:meth:`CompileReport.unsupported`: the backend's support rule, or its level, refused it) or
**claimed but left outside by the partitioner** (:meth:`CompileReport.left_outside`, with the
partitioner's reason: a view at a partition's edge, free in eager, that would only add boundary
traffic inside; a partition below ``min_partition_size``).

``last_report()`` returns the newest report; a report prints as a table, exports as JSON and
draws as the partitioner's HTML picture.

Example::

    >>> r = GraphReport(kind="inference", backend="demo", device="cpu")
    >>> r.partitions.append(PartitionRecord(name="fused_0", ops={"aten.mm.default": 1}, status="compiled"))
    >>> r.unsupported["aten.sort.default"] = 1
    >>> r.left_outside["aten.t.default"] = {"a view at a partition's edge": 1}
    >>> report = CompileReport(backend="demo", options={}, graphs=[r])
    >>> print(str(report).splitlines()[0])
    demo: 1 graph(s), 1 partition(s) compiled, 0 fell back; 1 op(s) not claimed; 1 claimed op(s) left outside
    >>> report.unsupported(), report.left_outside()
    ({'aten.sort.default': 1}, {'aten.t.default': {"a view at a partition's edge": 1}})
    >>> report.to_dict()["graphs"][0]["partitions"][0]["status"]
    'compiled'
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PartitionRecord", "GraphReport", "CompileReport", "last_report", "reports", "STAGES"]

#: the compile stages a graph report times (``GraphReport.stage_times`` keys), in flow order:
#: Dynamo's capture and AOTAutograd's decomposition (forward and inference graphs only: the
#: backward's trace happens with the forward), pattern matching (with patterns only),
#: partitioning, the vendor's compile of every partition, the Inductor fallback (when asked for)
STAGES = ("capture_and_decomposition", "matching", "partitioning", "vendor_compile", "inductor_fallback")

_HISTORY: list["CompileReport"] = []
_HISTORY_LIMIT = 64


@dataclass
class PartitionRecord:
    """One partition: its ops, how it ran (``compiled``, ``fallback`` after a vendor error, or
    ``eager`` when it was never handed to the vendor), why, and what fell back on the device."""

    name: str
    ops: dict[str, int]
    status: str = "compiled"
    reason: str = ""
    device_fallback: dict[str, int] = field(default_factory=dict)
    compile_seconds: float = 0.0
    calls: int = 0


@dataclass
class GraphReport:
    """One graph the backend compiled: partitions, unclaimed ops, stage timings."""

    kind: str
    backend: str
    device: str
    partitions: list[PartitionRecord] = field(default_factory=list)
    #: operator key -> count of nodes the backend did not claim (run by ``fallback``)
    unsupported: dict[str, int] = field(default_factory=dict)
    #: what ran the ops outside the partitions: "eager" or "inductor"
    fallback: str = "eager"
    #: operator key -> the reasons the support rule (or the level) gave for not claiming it
    reasons: dict[str, list[str]] = field(default_factory=dict)
    #: operator key -> {the partitioner's reason: count} for nodes the backend claimed but the
    #: partitioner left outside every partition (a view at an edge, a partition too small)
    left_outside: dict[str, dict[str, int]] = field(default_factory=dict)
    #: stage -> seconds, keys from :data:`STAGES`
    stage_times: dict[str, float] = field(default_factory=dict)
    #: pattern rule name -> number of matches rewritten into vendor ops
    fusions: dict[str, int] = field(default_factory=dict)
    partition_result: Any = field(default=None, repr=False, compare=False)
    #: True when the ATen graph came from the artifact cache and AOTAutograd did not run
    from_cache: bool = False
    #: inference graphs: whether the ATen graph was stored for the next warm compile, and why not
    graph_cache: str = ""

    @property
    def fell_back(self) -> list[PartitionRecord]:
        """Partitions that were claimed but ran through the fallback (a vendor error)."""
        return [p for p in self.partitions if p.status == "fallback"]

    def device_fallback(self) -> dict[str, int]:
        """Ops claimed by the backend that ran through the device's CPU fallback, summed."""
        total: dict[str, int] = {}
        for p in self.partitions:
            for op, n in p.device_fallback.items():
                total[op] = total.get(op, 0) + n
        return total

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "backend": self.backend, "device": self.device,
                "partitions": [asdict(p) for p in self.partitions], "unsupported": dict(self.unsupported),
                "left_outside": {k: dict(v) for k, v in self.left_outside.items()}, "fallback": self.fallback,
                "reasons": {k: list(v) for k, v in self.reasons.items()}, "stage_times": dict(self.stage_times),
                "fusions": dict(self.fusions), "from_cache": self.from_cache, "graph_cache": self.graph_cache}

    def picture(self, path: str | Path | None = None) -> str:
        """The partitioner's HTML picture of this graph (nodes coloured by partition)."""
        if self.partition_result is None:
            raise ValueError("this graph report has no partition result to draw (it was built by hand)")
        from torchvendor.partitioner.picture import render_html

        return render_html(self.partition_result, path)


@dataclass
class CompileReport:
    """Everything one backend compiled for one Dynamo graph."""

    backend: str
    options: dict[str, Any]
    graphs: list[GraphReport] = field(default_factory=list)
    torch_version: str = ""

    @property
    def partitions(self) -> list[PartitionRecord]:
        return [p for g in self.graphs for p in g.partitions]

    def unsupported(self) -> dict[str, int]:
        """Ops that ran outside the partitions because the backend did not claim them, summed
        over graphs (not the claimed ops the partitioner left outside: :meth:`left_outside`)."""
        total: dict[str, int] = {}
        for g in self.graphs:
            for op, n in g.unsupported.items():
                total[op] = total.get(op, 0) + n
        return total

    def left_outside(self) -> dict[str, dict[str, int]]:
        """Ops the backend claimed but the partitioner left outside every partition, each with
        ``{reason: count}``, summed over graphs: a view at a partition's edge (free in eager,
        boundary traffic inside), a group below ``min_partition_size``."""
        total: dict[str, dict[str, int]] = {}
        for g in self.graphs:
            for op, reasons in g.left_outside.items():
                mine = total.setdefault(op, {})
                for why, n in reasons.items():
                    mine[why] = mine.get(why, 0) + n
        return total

    def device_fallback(self) -> dict[str, int]:
        """Claimed ops that ran through the device's CPU fallback, summed over graphs."""
        total: dict[str, int] = {}
        for g in self.graphs:
            for op, n in g.device_fallback().items():
                total[op] = total.get(op, 0) + n
        return total

    def claimed_ops(self) -> dict[str, int]:
        """Ops inside partitions the vendor compiled (and that did not fall back)."""
        total: dict[str, int] = {}
        for p in self.partitions:
            if p.status == "compiled":
                for op, n in p.ops.items():
                    total[op] = total.get(op, 0) + n
        return total

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "options": {k: repr(v) if not isinstance(v, (int, float, str, bool, type(None)))
                                                     else v for k, v in self.options.items()},
                "torch_version": self.torch_version, "graphs": [g.to_dict() for g in self.graphs]}

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    def __str__(self) -> str:
        parts = self.partitions
        compiled = sum(p.status == "compiled" for p in parts)
        fell = [p for p in parts if p.status == "fallback"]
        unsupported = self.unsupported()
        outside = sum(n for reasons in self.left_outside().values() for n in reasons.values())
        lines = [f"{self.backend}: {len(self.graphs)} graph(s), {compiled} partition(s) compiled, {len(fell)} fell back; "
                 f"{sum(unsupported.values())} op(s) not claimed"
                 + (f"; {outside} claimed op(s) left outside" if outside else "")]
        for g in self.graphs:
            times = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in g.stage_times.items())
            source = ", ATen graph from the artifact cache (AOTAutograd skipped)" if g.from_cache else ""
            lines.append(f"  graph {g.kind} on {g.device}{source}" + (f" ({times})" if times else ""))
            if g.fusions:
                lines.append("    fusions: " + ", ".join(f"{k} x{v}" for k, v in g.fusions.items()))
            for p in g.partitions:
                ops = ", ".join(f"{op} x{n}" for op, n in sorted(p.ops.items(), key=lambda kv: -kv[1])[:4])
                more = f" (+{len(p.ops) - 4} more)" if len(p.ops) > 4 else ""
                lines.append(f"    {p.name:<12} {p.status:<9} {ops}{more}" + (f"  [{p.reason}]" if p.reason else ""))
                if p.device_fallback:
                    lines.append("      ran through the device's CPU fallback: "
                                 + ", ".join(f"{op} x{n}" for op, n in sorted(p.device_fallback.items())))
            for op, n in sorted(g.unsupported.items(), key=lambda kv: (-kv[1], kv[0])):
                why = "; ".join(sorted(set(g.reasons.get(op, []))))
                lines.append(f"    {g.fallback:<12} {op} x{n}  not claimed" + (f" [{why}]" if why else ""))
            for op, reasons in sorted(g.left_outside.items()):
                why = "; ".join(sorted(reasons))
                lines.append(f"    {g.fallback:<12} {op} x{sum(reasons.values())}  claimed, left outside by the "
                             f"partitioner [{why}]")
        return "\n".join(lines)


def _record(report: CompileReport) -> None:
    _HISTORY.append(report)
    del _HISTORY[:-_HISTORY_LIMIT]


def last_report() -> CompileReport | None:
    """The report of the newest graph a torchvendor backend compiled in this process (None if none).

    >>> isinstance(last_report(), (CompileReport, type(None)))
    True
    """
    return _HISTORY[-1] if _HISTORY else None


def reports() -> list[CompileReport]:
    """The newest reports (up to 64), oldest first.

    >>> isinstance(reports(), list)
    True
    """
    return list(_HISTORY)
