"""The model suite (``torchvendor.sdk.conformance.models``) as a benchmark: a torchvendor backend
beside eager and Inductor, a process per model; writes ``docs/bench_models/<run>.json`` and
regenerates ``docs/bench_models.md`` from every run there.

    .venv/bin/python bench/bench_models.py --backend torchvendor_cpu --device cpu            # whole suite
    .venv/bin/python bench/bench_models.py --backend torchvendor_cpu --device cpu --tier fast  # a few minutes
    .venv/bin/python bench/bench_models.py --backend torchvendor_ort,torchvendor_cpu --tier fast  # two side by side
    python bench/bench_models.py --backend torchvendor_cuda --device cuda --baseline inductor,cudagraphs
    python bench/bench_models.py --backend torchvendor_cuda --device gpu --runtime cuda --baseline none

Per model and backend: correct / fell back / wrong / error / crashed (the process died: the step
is named); vendor coverage (compute ops that ran in the vendor's compiled code, from the compile
reports); inference time beside eager's and Inductor's (interleaved, min of N, ``no_grad``);
compile time cold (fresh caches for every model) and warm (after a Dynamo reset, disk caches
kept). ``--render`` rewrites the Markdown from the JSON files without running anything.

``--size real`` runs the real-size tier instead (``bench/bench_models_real.py``: eight
architectures at published sizes, inference and a training step, fp32 and bf16, with its own
flags; ``--size real --help`` lists them); its runs live in ``docs/bench_models/real/`` and
make the first section of the page.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "bench_models"
BASELINES = {"inductor": "inductor", "cudagraphs": "inductor_cudagraphs"}


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _fmt(v: Any, spec: str = ".2f", unit: str = "") -> str:
    return "—" if v is None else f"{v:{spec}}{unit}"


def _vendors(run: dict[str, Any]) -> list[str]:
    """The run's torchvendor backends (several side by side, or the one of an older run)."""
    return run.get("vendors") or [run["backend"]]


def _vendor_coverage(rows: list[dict[str, Any]], vendor: str) -> tuple[float | None, float | None]:
    """A vendor backend's coverage over all models, and its lowest model's."""
    covered = [r["backends"].get(vendor, {}).get("coverage") or {} for r in rows]
    total = sum(c.get("compute_ops", 0) for c in covered)
    shares = [c["coverage"] for c in covered if c.get("coverage") is not None]
    return (sum(c.get("vendor_ops", 0) for c in covered) / total if total else None), (min(shares) if shares else None)


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """Counts per status, coverage and geomean speedups of one run (per vendor backend in
    ``coverage_of`` and ``vs``; ``coverage`` and ``geomean_vs_*`` are the first vendor's)."""
    rows, ours = run["rows"], run["backend"]
    out: dict[str, Any] = {"models": len(rows), "eager_failed": sum("eager_error" in r for r in rows),
                           "not_run": sum("not_run" in r for r in rows)}
    for b in run["backends"]:
        statuses = [r["backends"].get(b, {}).get("status") for r in rows if "eager_error" not in r]
        out[b] = {s: statuses.count(s) for s in sorted(set(statuses), key=str) if s}
    out["coverage_of"] = {v: _vendor_coverage(rows, v) for v in _vendors(run)}
    out["coverage"], out["coverage_lowest"] = out["coverage_of"][ours]
    fine = ("correct", "fell back")
    for b in run["backends"]:
        pairs = [r["ms"]["eager"] / r["ms"][b] for r in rows if b in r.get("ms", {}) and "eager" in r["ms"]
                 and r["backends"].get(b, {}).get("status") in fine]
        out.setdefault("geomean", {})[b] = _geomean(pairs)
    base = [b for b in run["backends"] if b not in _vendors(run)]
    for b in base:   # per baseline: each vendor's geomean of (baseline time / vendor time)
        vs = {v: _geomean([r["ms"][b] / r["ms"][v] for r in rows if all(k in r.get("ms", {}) for k in (v, b))])
              for v in _vendors(run)}
        out.setdefault("vs_each", {})[b] = vs
        out["geomean_vs_" + b] = vs[ours]
    if base:
        out["vs"] = out["vs_each"][base[0]]
    return out


def _row(r: dict[str, Any], run: dict[str, Any]) -> str:
    vendors = _vendors(run)
    others = [b for b in run["backends"] if b not in vendors]
    ms = r.get("ms", {})
    blank = " |" * (5 + len(vendors) + len(others))  # the row's remaining cells
    if "not_run" in r:
        return f"| {r['model']} | {r.get('family', '')} | not run: {r['not_run']} |" + blank
    if "eager_error" in r:
        return f"| {r['model']} | {r.get('family', '')} | eager fails: {r['eager_error'][:80]} |" + blank
    cov = [(r["backends"].get(v, {}).get("coverage") or {}).get("coverage") for v in vendors]
    speed = [ms["eager"] / ms[b] if b in ms and "eager" in ms else None for b in [*vendors, *others]]
    vs = [ms[others[0]] / ms[v] if others and v in ms and others[0] in ms else None for v in vendors]
    cold = [r["backends"].get(b, {}).get("compile_s", {}).get("inference") for b in [*vendors, *others[:1]]]
    warm = [r["backends"].get(b, {}).get("compile_s", {}).get("warm") for b in [*vendors, *others[:1]]]
    status = " / ".join(r["backends"].get(b, {}).get("status", "—") for b in [*vendors, *others])
    return (f"| {r['model']} | {r.get('family', '')} | {status} | {' / '.join(_fmt(c, '.1%') for c in cov)} | "
            f"{_fmt(ms.get('eager'), '.2f')} | " + " | ".join(_fmt(s, ".2f", "×") for s in speed)
            + f" | {' / '.join(_fmt(v, '.2f', '×') for v in vs)} | "
            + " / ".join(_fmt(c, ".1f") for c in cold) + " | " + " / ".join(_fmt(w, ".1f") for w in warm) + " |")


def _problems(run: dict[str, Any]) -> list[str]:
    lines = []
    for r in run["rows"]:
        for b, res in r["backends"].items():
            for part, p in res.get("parts", {}).items():
                if p.get("raised") or not p.get("ok", True):
                    lines.append(f"- **{r['model']}**, {b}, {part}: " + (p.get("raised") or
                                 f"error {p.get('error'):.2e} vs eager's {p.get('eager_error'):.2e}")[:300])
            for why in (res.get("coverage") or {}).get("fallback_reasons", [])[:3]:
                lines.append(f"- **{r['model']}**, {b}, partition fell back: {why[:300]}")
            outside = (res.get("coverage") or {}).get("outside") or {}
            if outside and not (res.get("coverage") or {}).get("fallback_reasons"):
                lines.append(f"- **{r['model']}**, {b}, ran outside the vendor's code: "
                             + ", ".join(f"{k} x{v}" for k, v in sorted(outside.items())[:8]))
        if "crash" in r:
            c = r["crash"]
            lines.append(f"- **{r['model']}**: the process died ({c['why']}) in {c['backend']} / {c['step']}: "
                         + " ".join(c["stderr"])[-300:])
    return lines


def render(runs: list[dict[str, Any]]) -> str:
    """The Markdown page for every run."""
    out = ["# Model suite benchmark", "", "Written by `bench/bench_models.py` from `docs/bench_models/*.json`. "
           "Each model runs in its own process: inference, a second input shape (a Dynamo recompile with "
           "dynamic shapes) and one SGD step against float64 truth (a backend is right when, per tensor, its "
           "relative or absolute RMS error is at most 3x eager's + 1e-5; float32 math in full precision, TF32 off for every backend: "
           "`check.full_float32`). Coverage: compute ops (views left out) that ran in the vendor's "
           "compiled code. Times: min of interleaved runs under `no_grad`, batch 2; cold compile with empty "
           "caches per model, warm after a Dynamo reset with the disk caches kept.", ""]
    for run in runs:
        s = summarize(run)
        vendors = _vendors(run)
        others = [b for b in run["backends"] if b not in vendors]
        out += [f"## {' and '.join(vendors)} on `{run['device']}` ({run['machine']})", "",
                f"torch {run['torch']}, {run['when']}, {run['threads']} thread(s), load average at start "
                f"{run['load']}; compile caches {run.get('caches', 'empty for every model')}; parts: {', '.join(run['parts'])} (baselines: {', '.join(run['baseline_parts'])}); "
                f"{run['seconds']:.0f} s.", "",
                f"- models: {s['models']} ({s['eager_failed']} where eager itself fails, {s['not_run']} not run)"]
        out += [f"- {b}: " + ", ".join(f"{n} {k}" for k, n in s[b].items()) for b in run["backends"]]
        out += [f"- vendor coverage of {v}, all models: {_fmt(c, '.2%')} (lowest model: {_fmt(low, '.1%')})"
                for v, (c, low) in s["coverage_of"].items()] + ([f"- note: {run['note']}"] if run.get("note") else [])
        out += [
                "- geomean speedup over eager: " + ", ".join(f"{b} {_fmt(s['geomean'].get(b), '.2f', '×')}"
                                                              for b in run["backends"])]
        out += [f"- {v} / {b} (geomean of time ratios): {_fmt(vs[v], '.2f', '×')}"
                for b, vs in s.get("vs_each", {}).items() for v in vendors]
        heads = " | ".join(f"{b} × eager" for b in [*vendors, *others])
        over = f"{' / '.join(vendors)} × {others[0]}" if others else "× —"
        timed = " / ".join([*vendors, *others[:1]])
        out += ["", f"| model | family | status ({' / '.join([*vendors, *others])}) | coverage ({' / '.join(vendors)}) "
                f"| eager ms | {heads} | {over} | cold s ({timed}) | warm s |",
                "|---|---|---|---|---|" + "---|" * (len(vendors) + len(others)) + "---|---|---|"]
        out += [_row(r, run) for r in run["rows"]]
        problems = _problems(run)
        out += ["", "### What did not run right", ""] + (problems or ["- nothing"]) + [""]
    return "\n".join(out) + "\n"


def from_conformance(report_dir: str, machine: str, load: str) -> dict[str, Any]:
    """A run record from a conformance report's ``models`` cases (``torchvendor conformance
    --only 'models/*'``): one backend, no baseline, the inference part."""
    doc = json.loads((Path(report_dir) / "report.json").read_text())
    status = {"pass": "correct", "fallback": "fell back", "fail": "error"}
    rows = []
    for c in doc["cases"]:
        if c["area"] != "models":
            continue
        m, name = c.get("metrics", {}), c["id"].split("/")[1]
        if c["status"] == "skip":
            rows.append({"model": name, "family": c["tags"].get("family", ""), "eager_error": c["reason"], "ms": {},
                         "backends": {}})
            continue
        res = {"status": status.get(c["status"], c["status"]), "parts": {}, "compile_s": {"inference": m.get("compile_s")},
               "coverage": {"coverage": m.get("coverage"), "compute_ops": m.get("compute_ops", 0),
                            "vendor_ops": m.get("vendor_ops", 0), "outside": c.get("fallback", {}),
                            "fallback_reasons": [c["reason"]] if c["status"] == "fallback" else []}}
        ms = {"eager": m["eager_ms"], doc["target"]["backend"]: m["compiled_ms"]} if "eager_ms" in m else {}
        rows.append({"model": name, "family": c["tags"].get("family", ""), "backends": {doc["target"]["backend"]: res},
                     "ms": ms})
    return {"backend": doc["target"]["backend"], "backends": [doc["target"]["backend"]], "device": doc["target"]["device"],
            "machine": machine, "torch": doc.get("torch", ""), "when": doc.get("created", ""),
            "threads": "default", "load": load, "caches": "shared by the run", "parts": ["inference"],
            "baseline_parts": ["none (conformance run)"], "seconds": doc.get("seconds", 0.0), "rows": rows}


def merge(shards: list[dict[str, Any]]) -> dict[str, Any]:
    """One run from the shards of one (``--shard I/N``, or a second call that ran the models the
    first did not reach, or reran some on a newer tree): same backends and device; rows joined in
    the order of the shards' lists interleaved; where two shards ran a model, the one listed first
    wins (a rerun is listed before the run it amends), and a "not run" row loses to a run one; the
    longest shard's seconds.

    >>> a = {"backends": ["x"], "device": "cpu", "seconds": 3.0, "rows": [{"model": "m1"}, {"model": "m3", "not_run": "x"}]}
    >>> [r["model"] for r in merge([a, {**a, "seconds": 5.0, "rows": [{"model": "m2"}, {"model": "m3"}]}])["rows"]]
    ['m1', 'm2', 'm3']
    >>> merge([{**a, "rows": [{"model": "m1", "ms": 2}]}, a])["rows"][0]
    {'model': 'm1', 'ms': 2}
    """
    first = shards[0]
    for s in shards[1:]:
        if (s["backends"], s["device"]) != (first["backends"], first["device"]):
            raise ValueError(f"shards of different runs: {s['backends']} on {s['device']} vs "
                             f"{first['backends']} on {first['device']}; merge the shards of one run only")
    best: dict[str, dict[str, Any]] = {}
    for s in shards:
        for r in s["rows"]:
            if r["model"] not in best or ("not_run" in best[r["model"]] and "not_run" not in r):
                best[r["model"]] = r
    order = (r["model"] for group in itertools.zip_longest(*(s["rows"] for s in shards)) for r in group if r)
    rows = {m: best[m] for m in order}
    return {**first, "seconds": max(s["seconds"] for s in shards), "rows": list(rows.values())}


def _write_markdown() -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_models_real

    runs = [json.loads(p.read_text()) for p in sorted(RUNS.glob("*.json"))]
    path = ROOT / "docs" / "bench_models.md"
    head, sep, rest = render(runs).partition("\n## ")  # the real-size section first, after the intro
    real = bench_models_real.render(bench_models_real.load_runs())
    path.write_text(head + "\n" + "\n".join(real) + "\n\n" + sep.lstrip("\n") + rest)
    return path


#: --runtime cuda: the reference CUDA table, built on first use (the suite takes module:function)
_CUDA_TABLE = "torchvendor.reference_backends.cuda.runtime:build_runtime"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="small", choices=("small", "real"),
                   help="real: the real-size tier (bench/bench_models_real.py, its own flags)")
    p.add_argument("--backend", default="torchvendor_cpu",
                   help="torchvendor backend(s), a comma list run side by side (the first heads the summary)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--runtime", help="runtime library for a PrivateUse1 device ('cuda': the reference CUDA table)")
    p.add_argument("--baseline", default="inductor", help="comma list of inductor, cudagraphs, or 'none'")
    p.add_argument("--tier", default="full", choices=("fast", "full"))
    p.add_argument("--models", help="comma list of model names (default: the tier)")
    p.add_argument("--parts", default="inference,dynamic,training")
    p.add_argument("--baseline-parts", default="inference,dynamic,training")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS of every child (default: torch's)")
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timing per backend and model")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    p.add_argument("--shared-cache", action="store_true",
                   help="one pair of compile caches for the whole run (cold = first compile in the run)")
    p.add_argument("--workdir", help="folder of the children's events and caches (default: a fresh temp folder)")
    p.add_argument("--interleave", action="store_true", help="order the models round-robin over families")
    p.add_argument("--deadline", type=float, help="start no model after this many seconds (they show as not run)")
    p.add_argument("--stop", type=float, help="end the models still running after this many seconds (not run), "
                                               "so the JSON is written before an outer time limit")
    p.add_argument("--name", help="run name (the JSON file's stem; default DEVICE_BACKEND)")
    p.add_argument("--out", default=str(RUNS), help="folder for the run's JSON")
    p.add_argument("--render", action="store_true", help="only rewrite docs/bench_models.md from the JSON files")
    p.add_argument("--note", help="a sentence about the run's conditions, shown with it")
    p.add_argument("--shard", metavar="I/N", help="run every N-th model of the list from the I-th (0-based): "
                   "N processes (e.g. one per GPU) split one run; --merge joins them")
    p.add_argument("--merge", nargs="+", metavar="JSON", help="join the shards of one run into --name, then render")
    p.add_argument("--from-conformance", metavar="REPORT_DIR",
                   help="turn a conformance report's models cases into a run JSON (--name), then render")
    return p


def main() -> None:
    size = argparse.ArgumentParser(add_help=False)
    size.add_argument("--size", choices=("small", "real"), default="small")
    known, rest = size.parse_known_args()
    if known.size == "real":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import bench_models_real

        return bench_models_real.main(rest)
    args = _parser().parse_args(rest)
    if args.from_conformance:
        run = from_conformance(args.from_conformance, f"{platform.node()} {os.cpu_count()} cores",
                               " ".join(f"{x:.1f}" for x in os.getloadavg()))
        run["note"] = args.note or ""
        (Path(args.out) / f"{args.name or 'conformance'}.json").write_text(json.dumps(run, indent=1, default=str))
    if args.merge:
        run = merge([json.loads(Path(f).read_text()) for f in args.merge])
        run["note"] = args.note or run["note"]
        (Path(args.out) / f"{args.name or 'merged'}.json").write_text(json.dumps(run, indent=1, default=str))
    if args.render or args.from_conformance or args.merge:
        print(_write_markdown())
        return
    import torch

    from torchvendor.sdk.conformance.models.catalog import names
    from torchvendor.sdk.conformance.models.suite import run_suite

    models = args.models.split(",") if args.models else names(args.tier)
    if args.interleave:  # round-robin over families: a run cut short by --deadline still spans them
        from torchvendor.sdk.conformance.models.catalog import SPECS

        by_family: dict[str, list[str]] = {}
        for m in models:
            by_family.setdefault(SPECS[m].family, []).append(m)
        models = [m for group in itertools.zip_longest(*by_family.values()) for m in group if m]
    if args.shard:
        i, n = map(int, args.shard.split("/"))
        models = models[i::n]
    baselines = [] if args.baseline == "none" else [BASELINES[b] for b in args.baseline.split(",")]
    vendors = args.backend.split(",")
    backends = [*baselines, *vendors]  # ours last: a crash then costs no baseline its result
    started = time.time()
    rows = run_suite(models, backends, device=args.device, parts=args.parts.split(","),
                     baseline_parts=args.baseline_parts.split(","), budget=args.budget, jobs=args.jobs,
                     threads=args.threads, runtime=_CUDA_TABLE if args.runtime == "cuda" else args.runtime, timeout=args.timeout, progress=True,
                     shared_cache=args.shared_cache, workdir=args.workdir, deadline=args.deadline,
                     stop=args.stop)
    run = {"backend": vendors[0], "vendors": vendors, "backends": [*vendors, *baselines], "device": args.device,
           "machine": f"{platform.node()} {os.cpu_count()} cores" + (f", {torch.cuda.get_device_name()}"
                                                                      if torch.cuda.is_available() else ""),
           "torch": torch.__version__, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
           "threads": args.threads or "default", "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
           "caches": "shared by the run" if args.shared_cache else "empty for every model",
           "parts": args.parts.split(","), "baseline_parts": args.baseline_parts.split(","),
           "seconds": time.time() - started, "note": args.note or "", "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name or args.device + '_' + '_'.join(vendors)}.json").write_text(json.dumps(run, indent=1, default=str))
    if out.resolve() == RUNS.resolve():
        print(_write_markdown())
    print(json.dumps(summarize(run), indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
