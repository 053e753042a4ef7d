"""The conformance tier: every profile of the reference path, one run after another, a table of
target x profile with counts and times, exit status 1 on any failure (``./dev.sh profiles``).

On any machine: ``torchvendor_cpu`` on the simulated device ``acme`` (every profile) and on
``cpu`` (``--targets acme,cpu``), with ``reference_backends/cpu/manifest.toml``. Where
``torch.cuda.is_available()``, also ``torchvendor_cuda`` on ``cuda`` (inference, training) and the
device profile on the PrivateUse1 GPU device ``gpu`` over ``runtime/tv_cuda_runtime.c``, with
``reference_backends/cuda/manifest.toml``.

    .venv/bin/python tests/profiles.py [--targets acme,cpu] [--profiles minimal,device] [--jobs 2]
                                       [--out DIR] [--markdown FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ("minimal", "ci", "device", "inference", "training", "full")
COLUMNS = ("pass", "fallback", "fail", "unsupported", "xfail", "skip")
CPU_MANIFEST = "reference_backends/cpu/manifest.toml"
CUDA_MANIFEST = "reference_backends/cuda/manifest.toml"


@dataclass
class Run:
    label: str
    profile: str
    args: list[str]


def _runs(targets: list[str], profiles: list[str]) -> list[Run]:
    out = []
    for device in targets:
        for profile in profiles:
            out.append(Run(f"torchvendor_cpu on {device}", profile,
                           ["--device", device, "--backend", "torchvendor_cpu", "--manifest", CPU_MANIFEST]))
    import torch

    if torch.cuda.is_available():
        for profile in ("inference", "training"):
            if profile in profiles:
                out.append(Run("torchvendor_cuda on cuda", profile,
                               ["--device", "cuda", "--backend", "torchvendor_cuda", "--manifest", CUDA_MANIFEST]))
        if "device" in profiles:
            from torchvendor.reference_backends.cuda.runtime import build_runtime

            out.append(Run("PrivateUse1 device gpu (CUDA runtime)", "device",
                           ["--device", "gpu", "--runtime", str(build_runtime()), "--manifest", CUDA_MANIFEST]))
    return out


def _load() -> str:
    try:
        return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "load ?"


def run_one(run: Run, out: Path, jobs: int) -> dict:
    report = out / f"{run.label.split()[-1]}-{run.profile}"
    cmd = [sys.executable, "-m", "torchvendor.sdk.cli", "conformance", *run.args, "--profile", run.profile,
           "--jobs", str(jobs), "--no-progress", "--report", str(report)]
    load_before, start = _load(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    try:
        summary = json.loads((report / "report.json").read_text())["summary"]
    except (OSError, ValueError, KeyError):
        summary = {}
    if proc.returncode == 2 or not summary:  # a bad request: the CLI's message says what
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    return {"label": run.label, "profile": run.profile, "rc": proc.returncode, "seconds": seconds,
            "load": f"{load_before} -> {_load()}", "report": str(report),
            **{c: summary.get(c, 0) for c in COLUMNS}}


def table(rows: list[dict]) -> str:
    head = "| target | profile | " + " | ".join(COLUMNS) + " | time | load (1/5/15 min, start -> end) |"
    lines = [head, "|---|---|" + "---:|" * len(COLUMNS) + "---:|---|"]
    for r in rows:
        m, s = divmod(round(r["seconds"]), 60)
        lines.append(f"| {r['label']} | {r['profile']} | " + " | ".join(str(r[c]) for c in COLUMNS)
                     + f" | {m} min {s:02d} s | {r['load']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", default="acme", help="devices for torchvendor_cpu, comma-separated (default: acme)")
    p.add_argument("--profiles", default=",".join(PROFILES))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default="conformance-profiles", help="report directories go here")
    p.add_argument("--markdown", help="also write the table to this file")
    args = p.parse_args(argv)
    profiles = [x for x in args.profiles.split(",") if x]
    unknown = sorted(set(profiles) - set(PROFILES))
    if unknown:
        p.error(f"unknown profile(s) {unknown}; choose from {list(PROFILES)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for run in _runs([t for t in args.targets.split(",") if t], profiles):
        rows.append(run_one(run, out, args.jobs))
        r = rows[-1]
        print(f"{r['label']:<40} {r['profile']:<10} " + " ".join(f"{c} {r[c]}" for c in COLUMNS)
              + f"  {r['seconds']:.0f} s  rc {r['rc']}", flush=True)
    text = table(rows)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    (out / "profiles.json").write_text(json.dumps(rows, indent=1))
    bad = [f"{r['label']} / {r['profile']}" for r in rows if r["fail"] or r["rc"] != 0]
    if bad:
        print(f"FAILED: {', '.join(bad)} (reports under {out}/)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
