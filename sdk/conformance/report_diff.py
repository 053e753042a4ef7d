"""``diff`` between two conformance runs: every case whose status changed, between pass, fallback,
fail, unsupported, xfail and skip.

Statuses are ranked from best to worst: ``pass`` (native), ``fallback`` (right, through the CPU
fallback), ``xfail`` (a failure the manifest admits), ``unsupported``, ``fail``. A move down the
ranking is a **regression** (``pass -> fallback`` is labelled *lost native*: a kernel stopped
being used), a move up is a **fix** (``fallback -> pass``: *now native*). A move into or out of
``skip`` changes what was checked, not how well: it is listed as coverage, as are cases only one
run has.

    >>> import json, tempfile, os
    >>> d = tempfile.mkdtemp(); a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
    >>> _ = open(a, "w").write(json.dumps({"cases": [{"id": "x", "status": "pass", "reason": ""}]}))
    >>> _ = open(b, "w").write(json.dumps({"cases": [{"id": "x", "status": "fallback", "reason": "mul.out"}]}))
    >>> diff(a, b).regressions
    ['x: pass -> fallback (lost native: mul.out)']
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core import STATUSES, ConformanceError

__all__ = ["diff", "ReportDiff", "RANK"]

#: best first; skip is not ranked (it says what ran, not how well)
RANK = {"pass": 0, "fallback": 1, "xfail": 2, "unsupported": 3, "fail": 4}
_LABELS = {("pass", "fallback"): "lost native", ("fallback", "pass"): "now native"}


@dataclass
class ReportDiff:
    """The changes from one run to the next, each a line ``id: old -> new (label: reason)``."""

    regressions: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    coverage: list[str] = field(default_factory=list)
    transitions: Counter = field(default_factory=Counter)

    @property
    def lost_native(self) -> list[str]:
        return [r for r in self.regressions if "(lost native" in r]


def _load(path: str | Path) -> dict[str, dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        raise ConformanceError(f"{p} does not exist: give a report directory (with report.json) or a report.json")
    if p.is_dir():
        if not (p / "report.json").exists():
            raise ConformanceError(f"{p} holds no report.json: is it a conformance report directory? "
                                   f"(`torchvendor conformance --report {p}` writes one)")
        p = p / "report.json"
    try:
        doc = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConformanceError(f"{p} is not a conformance report (not JSON: {e})") from None
    cases = doc.get("cases") if isinstance(doc, dict) else None
    if not isinstance(cases, list) or not all(isinstance(c, dict) and {"id", "status"} <= c.keys() for c in cases):
        raise ConformanceError(f"{p} is not a conformance report: it has no list of cases with ids and statuses")
    unknown = sorted({c["status"] for c in cases} - set(STATUSES))
    if unknown:
        raise ConformanceError(f"{p}: unknown status(es) {unknown}; known: {list(STATUSES)}")
    return {c["id"]: c for c in cases}


def _line(case_id: str, old: str, new: str, case: dict[str, Any]) -> str:
    label = _LABELS.get((old, new))
    why = (case.get("reason") or "").strip()
    if new == "fallback" and case.get("fallback"):
        why = ", ".join(sorted(case["fallback"]))
    detail = ": ".join(x for x in (label, why) if x)
    return f"{case_id}: {old} -> {new}" + (f" ({detail})" if detail else "")


def diff(old: str | Path, new: str | Path) -> ReportDiff:
    """Every status change between two runs (report directories or report.json files); raises
    :class:`ConformanceError` naming the path when one is missing or is not a report."""
    before, after = _load(old), _load(new)
    out = ReportDiff()
    for case_id, case in after.items():
        if case_id not in before:
            out.coverage.append(f"{case_id}: new case ({case['status']})")
            continue
        a, b = before[case_id]["status"], case["status"]
        if a == b:
            continue
        out.transitions[(a, b)] += 1
        line = _line(case_id, a, b, case)
        if a == "skip" or b == "skip":
            out.coverage.append(line)
        elif RANK[b] > RANK[a]:
            out.regressions.append(line)
        else:
            out.fixes.append(line)
    out.coverage += [f"{k}: gone (was {c['status']})" for k, c in before.items() if k not in after]
    return out
