"""Pictures of a partitioned graph: one self-contained HTML file (inline SVG, no scripts).

Graphs up to ``max_nodes`` (default 3000) are drawn node by node: columns are longest-path
levels, nodes are coloured by partition, fallback op nodes are red, inputs/outputs/constants
white; hovering shows the name, operator and partition or fallback reason (SVG ``<title>``).
Larger graphs get a partition-level summary: a strip of the topological order coloured by
partition, a bar per partition, and the fallback operators with counts and reasons.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.partitioner import partition
    >>> g = DictGraph(); x = g.add_input("x"); s = g.add_node("sin", [x]); r = g.add_node("relu", [s])
    >>> _ = g.add_output([r])
    >>> page = render_html(partition(g, {"relu"}))
    >>> page.startswith("<!DOCTYPE html>") and "<svg" in page and "partition 0" in page
    True
"""
from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from .core import PartitionResult

__all__ = ["render_html", "partition_color"]

FALLBACK = "#d62728"
NON_OP = "#ffffff"


def partition_color(pid: int) -> str:
    """A distinct colour per partition id (golden-angle hues, never red).

    >>> partition_color(0)
    'hsl(120.0,60%,62%)'
    """
    hue = (120 + pid * 137.508) % 360
    if hue < 25 or hue > 335:  # keep red for fallback
        hue = (hue + 50) % 360
    return f"hsl({hue:.1f},60%,62%)"


def _tooltip(result: PartitionResult, node: Any) -> tuple[str, str]:
    view = result.view
    pid = result.assignment.get(node)
    kind = view.kind(node)
    head = f"{view.name(node)} = {view.op(node)}"
    meta = view.meta(node)
    if meta.get("dtype") or meta.get("shape") is not None:
        head += f" [{meta.get('dtype', '?')} {tuple(meta['shape']) if meta.get('shape') is not None else ''}]"
    if pid is not None:
        return f"{head}\npartition {pid}", partition_color(pid)
    if kind != "op":
        return f"{head}\n{kind}", NON_OP
    return f"{head}\nfallback: {result.reasons.get(node, '')}", FALLBACK


def _legend(result: PartitionResult) -> str:
    rep = result.report()
    rows = [f"<tr><td><span class='sw' style='background:{partition_color(r['id'])}'></span> partition {r['id']}</td>"
            f"<td>{r['nodes']}</td><td>{len(r['inputs'])}</td><td>{len(r['outputs'])}</td>"
            f"<td>{escape(', '.join(f'{o} x{c}' for o, c in list(r['ops'].items())[:3]))}</td></tr>"
            for r in rep.partitions[:200]]
    more = f"<p>... {len(rep.partitions) - 200} more partitions</p>" if len(rep.partitions) > 200 else ""
    fb = [f"<tr><td><span class='sw' style='background:{FALLBACK}'></span> {escape(op)}</td><td>{info['count']}</td>"
          f"<td colspan=3>{escape('; '.join(f'{r} (x{c})' for r, c in info['reasons'].items()))}</td></tr>"
          for op, info in rep.unsupported.items()]
    return (f"<pre>{escape(rep.summary(max_rows=0))}</pre>"
            "<table><tr><th>partition</th><th>nodes</th><th>inputs</th><th>outputs</th><th>top ops</th></tr>"
            + "".join(rows) + "</table>" + more
            + ("<h3>fallback</h3><table><tr><th>operator</th><th>count</th><th colspan=3>reasons</th></tr>"
               + "".join(fb) + "</table>" if fb else ""))


def _node_svg(result: PartitionResult) -> str:
    view = result.view
    nodes = list(view.nodes())
    index = {n: i for i, n in enumerate(nodes)}
    level = [0] * len(nodes)
    preds = []
    for i, n in enumerate(nodes):
        ps = [index[x] for x in view.inputs(n)]
        preds.append(ps)
        level[i] = 1 + max((level[p] for p in ps), default=-1)
    rank_in_level: dict[int, int] = {}
    pos = []
    for i in range(len(nodes)):
        r = rank_in_level.get(level[i], 0)
        rank_in_level[level[i]] = r + 1
        pos.append((30 + level[i] * 36, 24 + r * 22))
    width = 60 + 36 * (max(level, default=0) + 1)
    height = 48 + 22 * max(rank_in_level.values(), default=1)
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-size='9'>"]
    part = [result.assignment.get(n, -1) for n in nodes]
    for i, ps in enumerate(preds):
        x2, y2 = pos[i]
        for p in ps:
            x1, y1 = pos[p]
            cross = part[p] != part[i] or part[i] < 0
            out.append(f"<line x1='{x1}' y1='{y1}' x2='{x2}' y2='{y2}' stroke='{'#888' if cross else '#ccc'}' "
                       f"stroke-width='{1.2 if cross else 0.8}'/>")
    for i, n in enumerate(nodes):
        tip, color = _tooltip(result, n)
        x, y = pos[i]
        stroke = "#555" if view.kind(n) == "op" else "#999"
        out.append(f"<circle cx='{x}' cy='{y}' r='7' fill='{color}' stroke='{stroke}'>"
                   f"<title>{escape(tip)}</title></circle>")
    out.append("</svg>")
    return "".join(out)


def _summary_svg(result: PartitionResult) -> str:
    view = result.view
    nodes = list(view.nodes())
    n = max(len(nodes), 1)
    width = 1000
    strip = []
    # the topological order as a strip: one rect per run of nodes with the same owner
    run_start, run_owner = 0, None
    owners = [result.assignment.get(x, -2 if view.kind(x) != "op" else -1) for x in nodes] + [None]
    for i, owner in enumerate(owners):
        if owner != run_owner or i == len(nodes):
            if run_owner is not None and run_owner != -2:
                x0, x1 = 10 + width * run_start / n, 10 + width * i / n
                color = partition_color(run_owner) if run_owner >= 0 else FALLBACK
                label = f"partition {run_owner}" if run_owner >= 0 else "fallback"
                strip.append(f"<rect x='{x0:.2f}' y='20' width='{max(x1 - x0, 0.5):.2f}' height='30' fill='{color}'>"
                             f"<title>{label}: nodes {run_start}..{i - 1}</title></rect>")
            run_start, run_owner = i, owner
    bars = []
    biggest = max((len(p) for p in result.partitions), default=1)
    for k, p in enumerate(result.partitions[:400]):
        y = 80 + k * 14
        w = max(1.0, 800 * len(p) / biggest)
        bars.append(f"<rect x='110' y='{y}' width='{w:.1f}' height='11' fill='{partition_color(p.id)}'>"
                    f"<title>partition {p.id}: {len(p)} nodes, {len(p.inputs)} inputs, {len(p.outputs)} outputs"
                    f"</title></rect><text x='10' y='{y + 9}'>partition {p.id}</text>"
                    f"<text x='{115 + w:.1f}' y='{y + 9}'>{len(p)}</text>")
    height = 100 + 14 * min(len(result.partitions), 400)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width + 40}' height='{height}' font-size='10'>"
            f"<text x='10' y='14'>topological order ({len(nodes)} nodes), coloured by partition; red: fallback</text>"
            + "".join(strip) + "<text x='10' y='72'>partition sizes</text>" + "".join(bars) + "</svg>")


def render_html(result: PartitionResult, path: str | Path | None = None, *, max_nodes: int = 3000,
                title: str = "partitioned graph") -> str:
    """The picture as an HTML page; written to ``path`` when given. Node-level drawing up to
    ``max_nodes`` nodes, a partition-level summary above."""
    count = len(list(result.view.nodes()))
    body = _node_svg(result) if count <= max_nodes else _summary_svg(result)
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>"
            "body{font-family:sans-serif;margin:16px} table{border-collapse:collapse;font-size:12px}"
            "td,th{border:1px solid #ddd;padding:2px 6px;text-align:left} .sw{display:inline-block;width:10px;"
            "height:10px;border:1px solid #555} .pic{overflow:auto;border:1px solid #eee;max-height:80vh}"
            f"</style></head><body><h2>{escape(title)}</h2>{_legend(result)}<div class='pic'>{body}</div>"
            "</body></html>")
    if path is not None:
        Path(path).write_text(page, encoding="utf-8")
    return page
