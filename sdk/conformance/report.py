"""The conformance report: JSON for machines, Markdown, one self-contained HTML page (inline SVG
charts, no scripts, opens offline), a terminal summary, and ``diff`` between two reports.

    >>> from torchvendor.sdk.conformance.core import Result, Target
    >>> from torchvendor.sdk.conformance.runner import SuiteRun
    >>> run = SuiteRun(Target(device="acme"), "minimal", [Result("device/rng", "device", "pass", seconds=0.1)], 1.0, ".")
    >>> doc = to_dict(run)
    >>> doc["summary"]["pass"], doc["areas"]["device"]["pass"]
    (1, 1)
"""
from __future__ import annotations

import hashlib
import json
import platform
from collections import Counter
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from .core import STATUSES

__all__ = ["to_dict", "write_reports", "summary_table", "diff", "opdb_fingerprint"]

COLORS = {"pass": "#2ca02c", "fallback": "#e6a100", "fail": "#d62728", "unsupported": "#1f77b4", "skip": "#9e9e9e", "xfail": "#7b5ea7"}


def opdb_fingerprint() -> str:
    """A short hash of PyTorch's OpInfo database (op names and their CPU dtypes): two reports
    with the same fingerprint ran the same op corpus."""
    from torchvendor.ir import compat

    h = hashlib.sha256()
    for op in compat.opinfo_db():
        h.update(f"{op.full_name}:{sorted(map(str, op.supported_dtypes('cpu')))}\n".encode())
    return h.hexdigest()[:16]


def _counts(results: list[Any]) -> dict[str, int]:
    c = Counter(r.status for r in results)
    return {s: c.get(s, 0) for s in STATUSES}


def to_dict(run: Any) -> dict[str, Any]:
    """The JSON document of a run."""
    import torch

    areas: dict[str, dict[str, int]] = {}
    for area in dict.fromkeys(r.area for r in run.results):
        areas[area] = _counts([r for r in run.results if r.area == area])
    fallback: Counter = Counter()
    for r in run.results:
        fallback.update(r.fallback)
    try:
        fingerprint = opdb_fingerprint()
    except Exception as e:  # noqa: BLE001 - the report still records why
        fingerprint = f"unavailable: {e}"
    return {
        "schema": 1, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
        "opdb_fingerprint": fingerprint, "target": run.target.describe(), "profile": run.profile,
        "manifest": run.manifest, "seconds": round(run.seconds, 2), "interrupted": run.interrupted,
        "summary": _counts(run.results), "areas": areas, "fallback": dict(fallback.most_common()),
        "cases": [r.to_dict() for r in run.results],
    }


def summary_table(doc: dict[str, Any]) -> str:
    """A terminal table (rich when available) of the counts per area."""
    rows = [(area, *(str(c[s]) for s in STATUSES)) for area, c in doc["areas"].items()]
    rows.append(("total", *(str(doc["summary"][s]) for s in STATUSES)))
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        return "\n".join(" ".join(f"{x:>10}" for x in row) for row in [("area", *STATUSES), *rows])
    table = Table(title=f"conformance: {doc['profile']} profile, {doc['target']['backend'] or '-'} on "
                        f"{doc['target']['device']} ({doc['seconds']:.0f} s)")
    for col in ("area", *STATUSES):
        table.add_column(col, justify="right" if col != "area" else "left")
    for row in rows:
        table.add_row(*row)
    console = Console(width=100, record=True)
    with console.capture() as cap:
        console.print(table)
    return cap.get()


def _markdown(doc: dict[str, Any]) -> str:
    t = doc["target"]
    lines = [f"# Conformance report: {t['backend'] or 'no backend'} on {t['device']}", "",
             f"Profile `{doc['profile']}`, torch {doc['torch']}, OpInfo database `{doc['opdb_fingerprint']}`, "
             f"{doc['seconds']:.0f} s, {doc['created']}.", "",
             "| area | " + " | ".join(STATUSES) + " |", "|---|" + "---:|" * len(STATUSES)]
    for area, c in {**doc["areas"], "**total**": doc["summary"]}.items():
        lines.append(f"| {area} | " + " | ".join(str(c[s]) for s in STATUSES) + " |")
    failures = [c for c in doc["cases"] if c["status"] == "fail"]
    if failures:
        lines += ["", "## Failures", "", "| case | reason |", "|---|---|"]
        lines += [f"| `{c['id']}` | {c['reason'].splitlines()[0][:160].replace('|', '/')} |" for c in failures]
    if doc["fallback"]:
        lines += ["", "## What fell back (op or partition: count)", "", "| op | count |", "|---|---:|"]
        lines += [f"| `{k}` | {v} |" for k, v in list(doc["fallback"].items())[:40]]
    models = [c for c in doc["cases"] if c.get("metrics", {}).get("speedup")]
    if models:
        lines += ["", "## Models", "", "| case | eager ms | compiled ms | speedup | compile s |", "|---|---:|---:|---:|---:|"]
        lines += [f"| `{c['id']}` | {c['metrics']['eager_ms']:.2f} | {c['metrics']['compiled_ms']:.2f} | "
                  f"{c['metrics']['speedup']:.2f}x | {c['metrics']['compile_s']:.2f} |" for c in models]
    return "\n".join(lines) + "\n"


def _bars(title: str, rows: list[tuple[str, dict[str, int]]]) -> str:
    """Stacked horizontal bars (one per row) of status counts, as inline SVG."""
    width, row_h, label_w = 720, 22, 170
    h = 30 + row_h * len(rows)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img">',
           f'<text x="0" y="16" font-weight="bold">{escape(title)}</text>']
    for i, (label, counts) in enumerate(rows):
        y = 26 + i * row_h
        total = sum(counts.values()) or 1
        out.append(f'<text x="0" y="{y + 14}" font-size="12">{escape(label[:26])}</text>')
        x = float(label_w)
        for status in STATUSES:
            w = (width - label_w - 60) * counts.get(status, 0) / total
            if w > 0:
                out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 6}" fill="{COLORS[status]}">'
                           f'<title>{status}: {counts[status]}</title></rect>')
                x += w
        rate = 100 * (counts.get("pass", 0) + counts.get("fallback", 0)) / total
        out.append(f'<text x="{width - 55}" y="{y + 14}" font-size="12">{rate:.0f}%</text>')
    out.append("</svg>")
    return "".join(out)


def _html(doc: dict[str, Any]) -> str:
    t = doc["target"]
    families: dict[str, Counter] = {}
    for c in doc["cases"]:
        if c["area"] == "ops":
            fam = c["tags"].get("op", "?").split(".")[0] if "." in c["tags"].get("op", "") else "core"
            families.setdefault(fam, Counter())[c["status"]] += 1
    legend = " ".join(f'<span style="background:{COLORS[s]};color:#fff;padding:2px 6px;border-radius:3px">{s}</span>'
                      for s in STATUSES)
    slow = sorted(doc["cases"], key=lambda c: -c["seconds"])[:15]
    rows = "".join(f"<tr class='{escape(c['status'])}'><td><code>{escape(c['id'])}</code></td><td>{escape(c['status'])}"
                   f"</td><td>{c['seconds']:.2f}</td><td>{escape(c['reason'][:200])}</td></tr>" for c in doc["cases"])
    fallback = "".join(f"<tr><td><code>{escape(k)}</code></td><td>{v}</td></tr>"
                       for k, v in list(doc["fallback"].items())[:40])
    models = [c for c in doc["cases"] if c.get("metrics", {}).get("speedup")]
    speed = "".join(f"<tr><td><code>{escape(c['id'])}</code></td><td>{c['metrics']['speedup']:.2f}x</td>"
                f"<td>{c['metrics']['compile_s']:.2f} s</td></tr>" for c in models)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Conformance: {escape(str(t['backend']))} on {escape(t['device'])}</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:1100px}} table{{border-collapse:collapse;margin:8px 0 20px}}
td,th{{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:left}} tr.fail td{{background:#fde8e8}}
tr.fallback td{{background:#fff6dd}} h2{{margin-top:28px}}</style></head><body>
<h1>Conformance report: {escape(str(t['backend'] or 'no backend'))} on {escape(t['device'])}</h1>
<p>Profile <b>{escape(doc['profile'])}</b> · torch {escape(doc['torch'])} · OpInfo database {escape(doc['opdb_fingerprint'])}
 · {doc['seconds']:.0f} s · {escape(doc['created'])}</p><p>{legend}</p>
{_bars("pass rate per area", [(a, c) for a, c in doc["areas"].items()] + [("total", doc["summary"])])}
<h2>Operator families</h2>
{_bars("ops: status per family", sorted(((f, dict(c)) for f, c in families.items()), key=lambda x: x[0]))}
<h2>What fell back</h2><table><tr><th>op or partition</th><th>count</th></tr>{fallback}</table>
<h2>Models</h2><table><tr><th>case</th><th>speedup</th><th>compile</th></tr>{speed}</table>
<h2>Slowest cases</h2><table><tr><th>case</th><th>seconds</th></tr>{"".join(f"<tr><td><code>{escape(c['id'])}</code></td><td>{c['seconds']:.2f}</td></tr>" for c in slow)}</table>
<h2>All cases</h2><table><tr><th>case</th><th>status</th><th>s</th><th>reason</th></tr>{rows}</table>
</body></html>
"""


def write_reports(run: Any) -> dict[str, str]:
    """Write ``report.json``, ``report.md`` and ``report.html`` into the run's report directory."""
    doc = to_dict(run)
    out = Path(run.report_dir)
    paths = {"json": out / "report.json", "markdown": out / "report.md", "html": out / "report.html"}
    paths["json"].write_text(json.dumps(doc, indent=1))
    paths["markdown"].write_text(_markdown(doc))
    paths["html"].write_text(_html(doc))
    return {k: str(v) for k, v in paths.items()}


def diff(old: str | Path, new: str | Path) -> tuple[list[str], list[str]]:
    """Regressions (passing before, failing now) and fixes (the reverse) between two report.json files.

    >>> import json, tempfile, os
    >>> d = tempfile.mkdtemp(); a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
    >>> _ = open(a, "w").write(json.dumps({"cases": [{"id": "x", "status": "pass", "reason": ""}]}))
    >>> _ = open(b, "w").write(json.dumps({"cases": [{"id": "x", "status": "fail", "reason": "boom"}]}))
    >>> diff(a, b)
    (['x: pass -> fail (boom)'], [])
    """
    def load(p: str | Path) -> dict[str, dict[str, Any]]:
        p = Path(p)
        if p.is_dir():
            p = p / "report.json"
        return {c["id"]: c for c in json.loads(p.read_text())["cases"]}

    before, after = load(old), load(new)
    good = {"pass", "fallback", "xfail"}
    regressions = [f"{k}: {before[k]['status']} -> {c['status']} ({c['reason'][:120]})" for k, c in after.items()
                   if k in before and before[k]["status"] in good and c["status"] == "fail"]
    fixes = [f"{k}: {before[k]['status']} -> {c['status']}" for k, c in after.items()
             if k in before and before[k]["status"] == "fail" and c["status"] in good]
    return regressions, fixes
