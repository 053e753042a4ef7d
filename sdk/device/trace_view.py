"""A self-contained picture of a Chrome trace: torch's profiler output as one HTML page.

``export_chrome_trace`` writes JSON that Perfetto or ``chrome://tracing`` opens; on a machine
without either (no network, no browser UI) this module draws the same timeline as an SVG inside
one HTML file: a row per CPU thread (operators nested by depth) and a row per device stream
(kernels, copies, memsets, collectives), a time axis, faint links from each device activity to
the operator that issued it, and a table of the device work by name. Headless Chromium turns
the page into a PNG (:func:`screenshot`), which is how docs/profiler.md's pictures are made.

Example::

    >>> trace = {"traceEvents": [
    ...     {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 50,
    ...      "args": {"External id": 7}},
    ...     {"ph": "X", "cat": "kernel", "name": "mm_kernel", "pid": 0, "tid": 0, "ts": 10, "dur": 30,
    ...      "args": {"External id": 7}}]}
    >>> page = trace_html(trace, device="acme")
    >>> "mm_kernel" in page and "acme 0 · stream 0" in page
    True

Command line: ``python -m torchvendor.sdk.device.trace_view trace.json page.html [--png p.png]``.
"""
from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DEVICE_CATEGORIES", "trace_html", "screenshot", "main"]

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")  # Kineto's names for device activity
_CPU_CATEGORIES = ("cpu_op", "user_annotation", "python_function")
_ROW_H, _LABEL_W, _AXIS_H = 15, 190, 26


@dataclass
class _Row:
    label: str
    device: bool
    bars: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (depth, event)


def _color(event: dict[str, Any]) -> str:
    name, cat = event["name"], event.get("cat", "")
    if cat == "gpu_memcpy":
        return {"HtoD": "#2b8cbe", "DtoH": "#e6550d", "DtoD": "#756bb1"}.get(name.split()[1:2][0] if " " in name else "",
                                                                         "#969696")
    if cat == "gpu_memset":
        return "#31a354"
    hue = int(hashlib.md5(name.encode()).hexdigest()[:4], 16) % 360  # stable per name
    return f"hsl({hue},55%,{62 if cat == 'kernel' else 78}%)"


def _stack(events: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Depth of each event in its row: nested events (operators calling operators) stack."""
    out, open_ends = [], []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while open_ends and open_ends[-1] <= e["ts"]:
            open_ends.pop()
        out.append((len(open_ends), e))
        open_ends.append(e["ts"] + e["dur"])
    return out


def _rows(events: list[dict[str, Any]], device: str) -> list[_Row]:
    cpu: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    dev: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in events:
        (dev if e.get("cat") in DEVICE_CATEGORIES else cpu).setdefault((e["pid"], e["tid"]), []).append(e)
    rows = [_Row(f"CPU thread {tid}", False, _stack(evs)) for (pid, tid), evs in sorted(cpu.items(), key=str)]
    rows += [_Row(f"{device} {pid} · stream {tid}", True, _stack(evs)) for (pid, tid), evs in sorted(dev.items(), key=str)]
    return rows


def _window(events: list[dict[str, Any]], start: float | None, end: float | None) -> tuple[float, float]:
    t0 = min(e["ts"] for e in events) if start is None else start
    t1 = max(e["ts"] + e["dur"] for e in events) if end is None else end
    return t0, max(t1, t0 + 1e-3)


def _axis(t0: float, t1: float, x: Any, width: int) -> list[str]:
    span, step = t1 - t0, 1.0
    while span / step > 12:
        step *= 10 if span / (step * 10) >= 4 else (5 if span / (step * 5) >= 4 else 2)
    unit, scale = ("ms", 1e3) if step >= 100 else ("us", 1.0)
    out, t = [], t0 + step
    while t < t1:
        out.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{_AXIS_H - 6}" y2="100%" class="tick"/>'
                   f'<text x="{x(t) + 2:.1f}" y="{_AXIS_H - 9}" class="ax">{(t - t0) / scale:g} {unit}</text>')
        t += step
    return out


def _svg(rows: list[_Row], t0: float, t1: float, width: int, links: bool) -> str:
    plot = width - _LABEL_W - 10
    x = lambda t: _LABEL_W + (t - t0) / (t1 - t0) * plot  # noqa: E731
    parts, y, where = _axis(t0, t1, x, width), _AXIS_H, {}
    for row in rows:
        row.bars = [(d, e) for d, e in row.bars if e["ts"] + e["dur"] >= t0 and e["ts"] <= t1]  # in the window
        h = (1 + max((d for d, _ in row.bars), default=0)) * _ROW_H + 6
        parts.append(f'<rect x="0" y="{y}" width="{width}" height="{h}" class="{"dev" if row.device else "cpu"}"/>'
                     f'<text x="6" y="{y + 13}" class="lbl">{html.escape(row.label)}</text>')
        for depth, e in row.bars:
            bx, bw, by = x(max(e["ts"], t0)), max(0.8, (min(e["ts"] + e["dur"], t1) - max(e["ts"], t0)) / (t1 - t0) * plot), y + 3 + depth * _ROW_H
            tip = html.escape(f'{e["name"]}  {e["dur"]:.1f} us' + (f'  ({e["args"]["bytes"]} bytes)' if "bytes" in e.get("args", {}) else ""))
            text = html.escape(e["name"][: int(bw / 6.2)]) if bw > 30 else ""
            parts.append(f'<g><title>{tip}</title><rect x="{bx:.2f}" y="{by}" width="{bw:.2f}" height="{_ROW_H - 2}" '
                         f'fill="{_color(e)}" class="bar"/><text x="{bx + 2:.1f}" y="{by + 10}" class="bt">{text}</text></g>')
            corr = e.get("args", {}).get("External id")
            if corr is not None:
                where.setdefault(corr, []).append((row.device, bx, by))
        y += h
    if links:  # device activity -> the operator that issued it (innermost CPU bar with that id)
        for ends in where.values():
            cpu = [p for p in ends if not p[0]]
            for _, bx, by in (p for p in ends if p[0] and cpu):
                cx, cy = cpu[-1][1], cpu[-1][2]
                parts.append(f'<line x1="{cx:.1f}" y1="{cy + _ROW_H - 2}" x2="{bx:.1f}" y2="{by}" class="link"/>')
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y + 4}">{"".join(parts)}</svg>'


def _table(events: list[dict[str, Any]], limit: int = 15) -> str:
    total: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") in DEVICE_CATEGORIES:
            total.setdefault(e["name"], [0.0, 0])[0] += e["dur"]
            total[e["name"]][1] += 1
    rows = sorted(total.items(), key=lambda kv: -kv[1][0])[:limit]
    body = "".join(f"<tr><td>{html.escape(n)}</td><td>{c}</td><td>{t:.1f}</td></tr>" for n, (t, c) in rows)
    return f"<table><tr><th>device activity (whole trace)</th><th>calls</th><th>total us</th></tr>{body}</table>" if rows else ""


_CSS = """body{font:12px sans-serif;margin:10px;background:#fff}h1{font-size:15px;margin:0 0 6px}
.cpu{fill:#f7f7f7;stroke:#ddd}.dev{fill:#eef4fb;stroke:#ccd}.lbl{font-size:11px;font-weight:bold;fill:#333}
.bar{stroke:#555;stroke-width:.3}.bt{font-size:9px;fill:#111;pointer-events:none}.ax{font-size:10px;fill:#555}
.tick{stroke:#ddd;stroke-width:.5}.link{stroke:#888;stroke-width:.4;opacity:.45}
table{border-collapse:collapse;margin-top:8px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
td:first-child,th:first-child{text-align:left}.note{color:#555;margin:4px 0}"""


def trace_html(trace: dict[str, Any] | str | os.PathLike[str], *, device: str = "device", title: str | None = None,
                start_us: float | None = None, end_us: float | None = None, width: int = 1600,
                links: bool = True) -> str:
    """One HTML page (inline SVG, no script, no network) with the timeline of a Chrome trace.

    ``trace`` is the trace (a dict) or the path of ``export_chrome_trace``'s JSON; ``device`` names
    the device rows; ``start_us``/``end_us`` cut a window (the trace's own microseconds; default:
    everything); ``links`` draws a line from each device activity to its operator.

    >>> page = trace_html({"traceEvents": [{"ph": "X", "cat": "gpu_memcpy", "pid": 0, "tid": 0,
    ...     "name": "Memcpy HtoD (Host -> acme)", "ts": 5, "dur": 2, "args": {"bytes": 64}}]})
    >>> page.startswith("<!DOCTYPE html>") and "64 bytes" in page
    True
    """
    if not isinstance(trace, dict):
        trace = json.loads(Path(trace).read_text())
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e
              and e.get("cat") in DEVICE_CATEGORIES + _CPU_CATEGORIES]
    if not events:
        raise ValueError("the trace has no CPU operators and no device activity to draw")
    t0, t1 = _window(events, start_us, end_us)
    rows, width = _rows(events, device), width - 24  # the page's margins
    n_dev = sum(e.get("cat") in DEVICE_CATEGORIES for e in events)
    head = html.escape(title or "torch.profiler trace")
    note = (f"{len(events) - n_dev} CPU events, {n_dev} {html.escape(device)} activities; "
            f"window {t1 - t0:.1f} us. Blue: copies to the device, orange: copies to the host, green: memsets; "
            "lines link device work to the operator that issued it.")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{head}</title><style>{_CSS}</style></head>"
            f"<body><h1>{head}</h1><div class='note'>{note}</div>{_svg(rows, t0, t1, width, links)}"
            f"{_table(events)}</body></html>")


def screenshot(page: str | os.PathLike[str], png: str | os.PathLike[str], *, width: int = 1600,
               height: int = 900, browser: str | None = None) -> Path:
    """A PNG of an HTML page by headless Chromium (``chromium --headless --screenshot``).

    Raises FileNotFoundError when no Chromium is installed (Debian: ``apt-get install chromium``).
    """
    exe = browser or shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        raise FileNotFoundError("no chromium to take the screenshot (apt-get install chromium)")
    png = Path(png).resolve()
    with tempfile.TemporaryDirectory() as profile_dir:
        subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={profile_dir}", f"--window-size={width},{height}",
                        f"--screenshot={png}", Path(page).resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
    return png


def main(argv: list[str] | None = None) -> int:
    """``python -m torchvendor.sdk.device.trace_view TRACE.json PAGE.html [--png PNG] ...``"""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace"), p.add_argument("page")
    p.add_argument("--png"), p.add_argument("--device", default="device"), p.add_argument("--title")
    p.add_argument("--start-us", type=float), p.add_argument("--end-us", type=float)
    p.add_argument("--width", type=int, default=1600), p.add_argument("--height", type=int, default=900)
    a = p.parse_args(argv)
    Path(a.page).write_text(trace_html(a.trace, device=a.device, title=a.title, start_us=a.start_us,
                                        end_us=a.end_us, width=a.width))
    if a.png:
        screenshot(a.page, a.png, width=a.width, height=a.height)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
