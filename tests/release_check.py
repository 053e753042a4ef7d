"""The checks of ``./dev.sh release-check VERSION``, run by the interpreter of that release's venv
(torchvendor built against its torch), and the row they give in docs/releases.md.

    python tests/release_check.py --out DIR --runtime LIBACME_TV --kernels LIBACME_KERNELS [--docs docs/releases.md]

1. The default tier (``pytest -n 2 --dist loadfile``, the ``-m 'not slow and not gpu'`` of
   pyproject), its summary line kept.
2. The conformance suite's ``minimal`` and ``inference`` profiles, torchvendor_cpu on the simulated
   device ``acme`` with the reference CPU backend's manifest; reports in DIR/<profile>/.
3. The vendor binaries built once against the oldest supported release (the runtime template and
   the stable-ABI kernel template, TORCH_TARGET 2.11), loaded unchanged: the device comes up from
   that runtime, the kernel library loads and each of its operators passes its OpInfo comparison
   (``stable_abi_release_check.py``).

Each step's output is in DIR; the row (release, tier counts, each profile's pass / fallback /
fail, the binaries' result) is printed and, with ``--docs``, replaces that release's row in the
table of docs/releases.md (or is added to it). Exits non-zero when any step failed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ("minimal", "inference")
TABLE_HEADER = "| torch | machine | default tier | minimal profile | inference profile | vendor binaries (built once) | date |"


def _run(cmd: list[str], log: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    """``cmd`` from the checkout root, its output in ``log`` as well."""
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    log.write_text(proc.stdout + proc.stderr)
    return proc


def default_tier(out: Path) -> tuple[bool, str]:
    """(passed, pytest's closing counts, e.g. "1210 passed, 20 skipped")."""
    proc = _run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider"],
                out / "tier.log", timeout=5400)
    lines = [ln for ln in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    counts = re.sub(r"=+|\s+in [\d.]+s.*$", "", lines[-1]).strip() if lines else f"no summary (exit {proc.returncode})"
    return proc.returncode == 0, counts


def profile(name: str, out: Path) -> tuple[bool, str]:
    """(no failure, "pass P / fallback F / fail X") of one conformance profile."""
    report = out / name
    _run([sys.executable, "-m", "torchvendor.sdk.cli", "conformance", "--backend", "torchvendor_cpu", "--device",
          "acme", "--profile", name, "--jobs", "2", "--manifest", "reference_backends/cpu/manifest.toml",
          "--report", str(report), "--no-progress"], out / f"{name}.log", timeout=5400)
    try:
        summary = json.loads((report / "report.json").read_text())["summary"]
    except (OSError, ValueError, KeyError) as e:
        return False, f"no report ({e})"
    return summary["fail"] == 0, f"{summary['pass']} pass / {summary['fallback']} fallback / {summary['fail']} fail"


def binaries(runtime: str, kernels: str, out: Path) -> tuple[bool, str]:
    """(all operators pass, what was loaded and how it did)."""
    proc = _run([sys.executable, str(ROOT / "tests" / "stable_abi_release_check.py"), "--runtime", runtime, kernels],
                out / "binaries.log", timeout=1800)
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return False, f"did not load (exit {proc.returncode}; see binaries.log)"
    passed = sum(v.startswith("pass") for v in report["results"].values())
    native = len(report["native_ops"])
    return proc.returncode == 0, (f"runtime ABI {report['runtime'].split(' ABI ')[1].split(' ')[0]} loads; "
                                  f"kernels: {passed}/{len(report['results'])} ops pass OpInfo, {native} served natively")


def update_docs(doc: Path, row: str) -> None:
    """Replace the row of this torch release in the table under TABLE_HEADER (or append it)."""
    lines = doc.read_text().splitlines()
    start = lines.index(TABLE_HEADER) + 2
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    key = row.split("|")[1].strip()
    rows = [r for r in lines[start:end] if r.split("|")[1].strip() != key] + [row]
    rows.sort(key=lambda r: [int(x) if x.isdigit() else 0 for x in re.findall(r"\d+", r.split("|")[1])[:3]])
    doc.write_text("\n".join(lines[:start] + rows + lines[end:]) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for the logs and reports")
    p.add_argument("--runtime", required=True, help="the runtime template's library, built once")
    p.add_argument("--kernels", required=True, help="the kernel template's library, built once")
    p.add_argument("--docs", help="docs/releases.md: update this release's row")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = {"tier": default_tier(out), **{name: profile(name, out) for name in PROFILES},
             "binaries": binaries(args.runtime, args.kernels, out)}
    machine = f"CPU ({platform.machine()}, {os.cpu_count()} cores)"
    cells = [torch.__version__, machine, steps["tier"][1], steps["minimal"][1], steps["inference"][1],
             steps["binaries"][1], datetime.date.today().isoformat()]
    row = "| " + " | ".join(cells) + " |"
    (out / "row.md").write_text(row + "\n")
    print(row)
    if args.docs:
        update_docs(Path(args.docs), row)
    failed = [name for name, (ok, _) in steps.items() if not ok]
    if failed:
        print(f"release-check {torch.__version__}: failed: {', '.join(failed)} (logs in {out})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
