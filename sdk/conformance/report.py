"""The conformance report a vendor acts on: JSON for machines, Markdown, one self-contained HTML
page (inline SVG charts, no scripts, opens offline) and a terminal summary.

Every human form opens on its **failures**, each with its whole reason (for a wrong answer the
greatest difference, where and the allowed tolerance; for an exception its type and the last
frame in the vendor's code). Beside the counts per status (``unsupported`` in its own column) it
gives two rates over the *claimed* cases (every case the run did not skip): the **pass rate**
(right answers, natively or through the CPU fallback) and the **native rate** (right answers with
no fallback at all). The fallback is **priced** per op (calls, bytes copied to the host and back,
seconds) and ranked as "implement next". ``diff`` between two runs lives in :mod:`.report_diff`.

    >>> from torchvendor.sdk.conformance.core import Result, Target
    >>> from torchvendor.sdk.conformance.runner import SuiteRun
    >>> results = [Result("device/rng", "device", "pass"), Result("ops/mul", "ops", "fallback", fallback={"mul.out": 2})]
    >>> doc = to_dict(SuiteRun(Target(device="acme"), "minimal", results, 1.0, "."))
    >>> doc["summary"]["pass"], doc["rates"]["total"]
    (1, {'claimed': 2, 'pass_rate': 1.0, 'native_rate': 0.5})
    >>> doc["implement_next"][0]["op"]
    'mul.out'
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
from .report_diff import diff
from .runtime_order import fix_first, order

__all__ = ["to_dict", "write_reports", "summary_table", "diff", "opdb_fingerprint", "rates", "implement_next",
           "fix_first_line"]

COLORS = {"pass": "#2ca02c", "fallback": "#e6a100", "fail": "#d62728", "unsupported": "#1f77b4", "skip": "#9e9e9e",
          "xfail": "#7b5ea7"}
#: background of the failures section (tests/test_report_page.py looks for it on the first screen)
FAILURE_BG = "#fde8e8"


def opdb_fingerprint() -> str:
    """A short hash of PyTorch's OpInfo database (op names and their CPU dtypes): two reports
    with the same fingerprint ran the same op corpus."""
    from torchvendor.ir import compat

    h = hashlib.sha256()
    for op in compat.opinfo_db():
        h.update(f"{op.full_name}:{sorted(map(str, op.supported_dtypes('cpu')))}\n".encode())
    return h.hexdigest()[:16]


def _counts(statuses: list[str]) -> dict[str, int]:
    c = Counter(statuses)
    return {s: c.get(s, 0) for s in STATUSES}


def rates(counts: dict[str, int]) -> dict[str, Any]:
    """Pass rate and native rate over the claimed cases (all but the skipped ones).

    >>> rates({"pass": 8, "fallback": 1, "fail": 1, "skip": 5})
    {'claimed': 10, 'pass_rate': 0.9, 'native_rate': 0.8}
    """
    claimed = sum(v for k, v in counts.items() if k != "skip")
    if not claimed:
        return {"claimed": 0, "pass_rate": None, "native_rate": None}
    return {"claimed": claimed, "pass_rate": (counts.get("pass", 0) + counts.get("fallback", 0)) / claimed,
            "native_rate": counts.get("pass", 0) / claimed}


def implement_next(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fallback per op, priced (calls, cases, bytes each way, seconds) and ranked by what
    implementing the op natively saves: time first, then bytes copied, then calls."""
    ops: dict[str, dict[str, float]] = {}
    for c in cases:
        for op, n in c.get("fallback", {}).items():
            row = ops.setdefault(op, {"calls": 0, "cases": 0, "to_host_bytes": 0, "to_device_bytes": 0, "seconds": 0.0})
            row["cases"] += 1
            cost = c.get("fallback_cost", {}).get(op)
            row["calls"] += cost["calls"] if cost else n
            if cost:
                for k in ("to_host_bytes", "to_device_bytes", "seconds"):
                    row[k] += cost[k]
        for op, cost in c.get("fallback_cost", {}).items():  # priced but keyed apart (eager ops in compile cases)
            if op not in c.get("fallback", {}):
                row = ops.setdefault(op, {"calls": 0, "cases": 0, "to_host_bytes": 0, "to_device_bytes": 0,
                                          "seconds": 0.0})
                row["cases"] += 1
                for k in ("calls", "to_host_bytes", "to_device_bytes", "seconds"):
                    row[k] += cost[k]
    ranked = sorted(ops.items(), key=lambda kv: (-kv[1]["seconds"], -(kv[1]["to_host_bytes"] + kv[1]["to_device_bytes"]),
                                                 -kv[1]["calls"], kv[0]))
    return [{"op": op, **{k: (round(v, 6) if k == "seconds" else int(v)) for k, v in row.items()}} for op, row in ranked]


def to_dict(run: Any) -> dict[str, Any]:
    """The JSON document of a run."""
    import torch

    cases = [r.to_dict() for r in run.results]
    areas = {a: _counts([c["status"] for c in cases if c["area"] == a]) for a in dict.fromkeys(c["area"] for c in cases)}
    summary = _counts([c["status"] for c in cases])
    fallback: Counter = Counter()
    for c in cases:
        fallback.update(c["fallback"])
    try:
        fingerprint = opdb_fingerprint()
    except Exception as e:  # noqa: BLE001 - the report still records why
        fingerprint = f"unavailable: {e}"
    return {
        "schema": 2, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
        "opdb_fingerprint": fingerprint, "target": run.target.describe(), "profile": run.profile,
        "manifest": run.manifest, "seconds": round(run.seconds, 2), "interrupted": run.interrupted,
        # a sampled profile's seed and every case that ran: two commits' reports compare case by case
        "seed": getattr(run, "seed", None), "ran": [c["id"] for c in cases],
        "summary": summary, "areas": areas,
        "rates": {"total": rates(summary), **{a: rates(c) for a, c in areas.items()}},
        "fix_first": fix_first(run.results),
        "failures": _root_causes_first([c for c in cases if c["status"] == "fail"]),
        "fallback": dict(fallback.most_common()), "implement_next": implement_next(cases),
        "cases": cases,
    }


def _root_causes_first(fails: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failures that nothing earlier explains first (runtime ones in the suite's dependency order),
    then those blocked by them (``tags["blocked_by"]``)."""
    rank = {f"runtime/{name}": i for i, name in enumerate(order(c["id"].removeprefix("runtime/") for c in fails
                                                                if c["id"].startswith("runtime/")))}
    return sorted(fails, key=lambda c: (bool(c["tags"].get("blocked_by")), not c["id"].startswith("runtime/"),
                                        rank.get(c["id"], 0)))


def fix_first_line(doc: dict[str, Any]) -> str:
    """The report's first line: the entry (or case) to fix first, or that nothing failed.

    >>> fix_first_line({"fix_first": {"case": "runtime/memcpy_exact_bytes", "entry": "memcpy", "reason": "x"}})
    'Fix first: memcpy (runtime/memcpy_exact_bytes)'
    >>> fix_first_line({"fix_first": {"case": "runtime/memcpy_exact_bytes", "entry": "memcpy", "reason": "x"},
    ...                 "failures": [{"id": "runtime/memcpy_exact_bytes"}, {"id": "models/gpt2/inference"}]})
    'Fix first: memcpy (runtime/memcpy_exact_bytes); 1 failure of other areas may follow from it'
    >>> fix_first_line({"fix_first": None})
    'Nothing to fix: no case failed'
    """
    first = doc.get("fix_first")
    if not first:
        return "Nothing to fix: no case failed"
    line = f"Fix first: {first['entry']} ({first['case']})" if first["entry"] else f"Fix first: {first['case']}"
    # a runtime entry underlies every other area: their failures may be its
    others = [c for c in doc.get("failures", []) if not c["id"].startswith("runtime/")]
    if first["case"].startswith("runtime/") and others:
        line += f"; {len(others)} failure{'s' if len(others) > 1 else ''} of other areas may follow from it"
    return line


def _seed(doc: dict[str, Any]) -> str:
    return f" (seed {doc['seed']}: `--seed {doc['seed']}` runs the same {len(doc['ran'])} cases)" \
        if doc.get("seed") is not None else ""


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _title(doc: dict[str, Any]) -> str:
    t = doc["target"]
    return f"{t['backend'] or 'no backend'} on {t['device']}"


def summary_table(doc: dict[str, Any]) -> str:
    """The terminal summary: counts per area (rich when available) with the two rates, the top of
    "implement next", and the failures with their whole reasons (the first ten; all in report.md)."""
    cols = ("area", *STATUSES, "pass rate", "native rate")
    rows = [(a, *(str(c[s]) for s in STATUSES), _pct(doc["rates"][a]["pass_rate"]), _pct(doc["rates"][a]["native_rate"]))
            for a, c in doc["areas"].items()]
    rows.append(("total", *(str(doc["summary"][s]) for s in STATUSES), _pct(doc["rates"]["total"]["pass_rate"]),
                 _pct(doc["rates"]["total"]["native_rate"])))
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        text = "\n".join(" ".join(f"{x:>11}" for x in row) for row in [cols, *rows])
    else:
        table = Table(title=f"conformance: {doc['profile']} profile, {_title(doc)} ({doc['seconds']:.0f} s)")
        for col in cols:
            table.add_column(col, justify="left" if col == "area" else "right")
        for row in rows:
            table.add_row(*row)
        console = Console(width=130, record=True)
        with console.capture() as cap:
            console.print(table)
        text = cap.get()
    lines = [fix_first_line(doc), text.rstrip()]
    if doc["implement_next"]:
        lines.append("implement next (CPU fallback, most costly first):")
        lines += [f"  {r['op']}: {r['calls']} calls, {_size(r['to_host_bytes'])} to host, "
                  f"{_size(r['to_device_bytes'])} back, {r['seconds']:.3f} s" for r in doc["implement_next"][:5]]
    for c in doc["failures"][:10]:
        lines.append(f"FAIL {c['id']}\n    " + c["reason"].replace("\n", "\n    "))
    if len(doc["failures"]) > 10:
        lines.append(f"... and {len(doc['failures']) - 10} more failures: see report.md")
    return "\n".join(lines) + "\n"


def _md_failures(doc: dict[str, Any]) -> list[str]:
    fails = doc["failures"]
    lines = [f"## Failures ({len(fails)})", ""]
    if not fails:
        return lines + ["No case failed.", ""]
    for c in fails:
        lines += [f"### `{c['id']}`", "", "```", c["reason"].replace("```", "'''"), "```", ""]
    return lines


def _markdown(doc: dict[str, Any]) -> str:
    r = doc["rates"]["total"]
    lines = [f"# {fix_first_line(doc)} — conformance report: {_title(doc)}", "",
             f"Profile `{doc['profile']}`{_seed(doc)}, torch {doc['torch']}, OpInfo database "
             f"`{doc['opdb_fingerprint']}`, {doc['seconds']:.0f} s, {doc['created']}.", "",
             f"**Pass rate {_pct(r['pass_rate'])}**, **native rate {_pct(r['native_rate'])}** (no fallback) "
             f"over {r['claimed']} claimed cases; {doc['summary']['fail']} failed, "
             f"{doc['summary']['unsupported']} unsupported.", ""]
    lines += _md_failures(doc)
    lines += ["## Per area", "", "| area | " + " | ".join(STATUSES) + " | pass rate | native rate |",
              "|---|" + "---:|" * (len(STATUSES) + 2)]
    for area, c in {**doc["areas"], "**total**": doc["summary"]}.items():
        rr = doc["rates"]["total" if area == "**total**" else area]
        lines.append(f"| {area} | " + " | ".join(str(c[s]) for s in STATUSES) +
                     f" | {_pct(rr['pass_rate'])} | {_pct(rr['native_rate'])} |")
    if doc["implement_next"]:
        lines += ["", "## Implement next: the CPU fallback, priced", "",
                  "| rank | op | calls | cases | to host | to device | seconds |", "|---:|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {i} | `{x['op']}` | {x['calls']} | {x['cases']} | {_size(x['to_host_bytes'])} | "
                  f"{_size(x['to_device_bytes'])} | {x['seconds']:.4f} |" for i, x in enumerate(doc["implement_next"][:40], 1)]
    unsupported = [c for c in doc["cases"] if c["status"] == "unsupported"]
    if unsupported:
        lines += ["", f"## Unsupported ({len(unsupported)}): the device does not implement these", ""]
        lines += [f"- `{c['id']}`: {c['reason'].splitlines()[0] if c['reason'] else ''}" for c in unsupported[:200]]
    if doc.get("seed") is not None:
        lines += ["", f"## What ran ({len(doc['ran'])} cases, seed {doc['seed']})", "",
                  ", ".join(f"`{i}`" for i in doc["ran"])]
    models = [c for c in doc["cases"] if c.get("metrics", {}).get("speedup")]
    if models:
        lines += ["", "## Models", "", "| case | eager ms | compiled ms | speedup | compile s |", "|---|---:|---:|---:|---:|"]
        lines += [f"| `{c['id']}` | {c['metrics']['eager_ms']:.2f} | {c['metrics']['compiled_ms']:.2f} | "
                  f"{c['metrics']['speedup']:.2f}x | {c['metrics']['compile_s']:.2f} |" for c in models]
    return "\n".join(lines) + "\n"


def _bars(title: str, rows: list[tuple[str, dict[str, int]]]) -> str:
    """Stacked horizontal bars (one per row) of status counts, as inline SVG, each with its pass
    rate and native rate over the claimed cases."""
    width, row_h, label_w, tail = 760, 22, 170, 110
    h = 30 + row_h * len(rows)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img">',
           f'<text x="0" y="16" font-weight="bold">{escape(title)}</text>',
           f'<text x="{width - tail + 4}" y="16" font-size="11">pass / native</text>']
    for i, (label, counts) in enumerate(rows):
        y = 26 + i * row_h
        total = sum(counts.values()) or 1
        out.append(f'<text x="0" y="{y + 14}" font-size="12">{escape(label[:26])}</text>')
        x = float(label_w)
        for status in STATUSES:
            w = (width - label_w - tail) * counts.get(status, 0) / total
            if w > 0:
                out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 6}" fill="{COLORS[status]}">'
                           f'<title>{status}: {counts[status]}</title></rect>')
                x += w
        r = rates(counts)
        out.append(f'<text x="{width - tail + 4}" y="{y + 14}" font-size="12">{_pct(r["pass_rate"])} / '
                   f'{_pct(r["native_rate"])}</text>')
    out.append("</svg>")
    return "".join(out)


def _html_failures(doc: dict[str, Any]) -> str:
    fails = doc["failures"]
    items = "".join(f'<div class="failure"><code>{escape(c["id"])}</code><pre>{escape(c["reason"])}</pre></div>'
                    for c in fails) or "<p>No case failed.</p>"
    return f'<section id="failures"><h2>Failures ({len(fails)})</h2>{items}</section>'


def _html_tables(doc: dict[str, Any]) -> str:
    head = "".join(f"<th>{s}</th>" for s in STATUSES)
    area_rows = "".join(
        f"<tr><td>{escape(a)}</td>" + "".join(f"<td>{c[s]}</td>" for s in STATUSES) +
        f"<td>{_pct(doc['rates'][k]['pass_rate'])}</td><td>{_pct(doc['rates'][k]['native_rate'])}</td></tr>"
        for a, c, k in [*((a, c, a) for a, c in doc["areas"].items()), ("total", doc["summary"], "total")])
    nxt = "".join(f"<tr><td>{i}</td><td><code>{escape(x['op'])}</code></td><td>{x['calls']}</td><td>{x['cases']}</td>"
                  f"<td>{_size(x['to_host_bytes'])}</td><td>{_size(x['to_device_bytes'])}</td><td>{x['seconds']:.4f}</td></tr>"
                  for i, x in enumerate(doc["implement_next"][:40], 1))
    return (f"<h2>Per area</h2><table><tr><th>area</th>{head}<th>pass rate</th><th>native rate</th></tr>{area_rows}"
            "</table><h2>Implement next: the CPU fallback, priced</h2><table><tr><th>rank</th><th>op</th><th>calls</th>"
            f"<th>cases</th><th>to host</th><th>to device</th><th>seconds</th></tr>{nxt}</table>")


def _html(doc: dict[str, Any]) -> str:
    families: dict[str, Counter] = {}
    for c in doc["cases"]:
        if c["area"] == "ops":
            op = c["tags"].get("op", "?")
            families.setdefault(op.split(".")[0] if "." in op else "core", Counter())[c["status"]] += 1
    legend = " ".join(f'<span style="background:{COLORS[s]};color:#fff;padding:2px 6px;border-radius:3px">{s}</span>'
                      for s in STATUSES)
    r = doc["rates"]["total"]
    slow = sorted(doc["cases"], key=lambda c: -c["seconds"])[:15]
    rows = "".join(f"<tr class='{escape(c['status'])}'><td><code>{escape(c['id'])}</code></td><td>{escape(c['status'])}"
                   f"</td><td>{c['seconds']:.2f}</td><td>{escape(c['reason'])}</td></tr>" for c in doc["cases"])
    models = [c for c in doc["cases"] if c.get("metrics", {}).get("speedup")]
    speed = "".join(f"<tr><td><code>{escape(c['id'])}</code></td><td>{c['metrics']['speedup']:.2f}x</td>"
                    f"<td>{c['metrics']['compile_s']:.2f} s</td></tr>" for c in models)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Conformance: {escape(_title(doc))}</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:1100px}} table{{border-collapse:collapse;margin:8px 0 20px}}
td,th{{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:left;vertical-align:top}}
tr.fail td{{background:{FAILURE_BG}}} tr.fallback td{{background:#fff6dd}} tr.unsupported td{{background:#e3eefa}}
h2{{margin-top:28px}} #failures{{background:{FAILURE_BG};padding:4px 16px 12px;border-radius:6px}}
.failure pre{{white-space:pre-wrap;font-size:12px;margin:4px 0 12px}} .rates{{font-size:18px}}</style></head><body>
<h1>{escape(fix_first_line(doc))} — conformance report: {escape(_title(doc))}</h1>
<p>Profile <b>{escape(doc['profile'])}</b> · torch {escape(doc['torch'])} · OpInfo database {escape(doc['opdb_fingerprint'])}
 · {doc['seconds']:.0f} s · {escape(doc['created'])}</p>
<p class="rates"><b>Pass rate {_pct(r['pass_rate'])}</b> · <b>native rate {_pct(r['native_rate'])}</b> (no fallback) over
{r['claimed']} claimed cases · {doc['summary']['fail']} failed · {doc['summary']['unsupported']} unsupported</p>
{_html_failures(doc)}
<p>{legend}</p>
{_bars("status per area", [(a, c) for a, c in doc["areas"].items()] + [("total", doc["summary"])])}
{_html_tables(doc)}
<h2>Operator families</h2>
{_bars("ops: status per family", sorted(((f, dict(c)) for f, c in families.items()), key=lambda x: x[0]))}
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
