"""The zoo through ``torchvendor_ort`` beside eager PyTorch and Inductor, in one process.

For each zoo model (``torchvendor.sdk.conformance.zoo``: the fast tier at ``size="bench"``, the
slow tier at ``size="test"``), inference (``eval()``, ``no_grad``): the first call of
``torch.compile`` with each backend (compile + one run, Dynamo reset before), then the steady
state, eager vs Inductor vs torchvendor_ort, minimum wall time of interleaved calls (a burst of
load from other processes hits all three alike); the largest relative error against eager; and
the vendor coverage: the share of the ATen graph's compute ops that ran inside ONNX Runtime
partitions (from the compile report).

Usage: ``.venv/bin/python bench/bench_backend_ort.py [--quick] [--budget S]``; writes
``docs/bench_backend_ort.md``.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import torchvendor.reference_backends.ort  # noqa: E402,F401  (registers torchvendor_ort)
from bench_backend_cpu import min_ms, rel_err  # noqa: E402
from torchvendor.ir import compat  # noqa: E402
from torchvendor.sdk import last_report  # noqa: E402
from torchvendor.sdk.conformance import zoo  # noqa: E402

OURS = "torchvendor_ort"


THREADS = 1


def _first_call(model, inputs, backend: str):
    compat.dynamo_reset()
    t0 = time.perf_counter()
    with torch.no_grad():
        fn = torch.compile(model, backend=backend, options={"threads": THREADS} if backend == OURS else None)
        out = fn(*inputs)
    return fn, out, time.perf_counter() - t0


def _coverage() -> tuple[float, int]:
    rep = last_report()
    inside = sum(n for p in rep.partitions if p.status == "compiled" for k, n in p.ops.items()
                 if k != "operator.getitem")
    outside = sum(n for k, n in rep.unsupported().items() if k != "operator.getitem")
    outside += sum(n for p in rep.partitions if p.status != "compiled" for n in p.ops.values())
    return inside / max(inside + outside, 1), sum(p.status == "compiled" for p in rep.partitions)


def measure(name: str, size: str, budget: float) -> dict:
    model, inputs = zoo.build(name, size=size)
    model.eval()
    with torch.no_grad():
        want = model(*inputs)
    ind, ind_out, ind_s = _first_call(model, inputs, "inductor")
    ours, ours_out, ours_s = _first_call(model, inputs, OURS)
    coverage, parts = _coverage()
    with torch.no_grad():
        t_eager, t_ind, t_ours = min_ms([lambda: model(*inputs), lambda: ind(*inputs), lambda: ours(*inputs)], budget)
    row = dict(model=name, size=size, eager=t_eager, inductor=t_ind, ours=t_ours, ind_compile=ind_s,
               ours_compile=ours_s, err_ind=rel_err(ind_out, want), err_ours=rel_err(ours_out, want),
               coverage=coverage, partitions=parts)
    print(f"{name:14s} eager {t_eager:8.2f} ms  inductor {t_ind:8.2f} ms  ort {t_ours:8.2f} ms  "
          f"coverage {coverage:.0%} in {parts} partition(s)  err {row['err_ours']:.1e}", flush=True)
    return row


def write(rows: list[dict], path: Path, load: tuple) -> None:
    lines = ["# torchvendor_ort on the zoo: eager, Inductor and ONNX Runtime side by side", "",
             f"Written by `bench/bench_backend_ort.py` on {platform.machine()}, {os.cpu_count()} cores (shared; "
             f"load average {load[0]:.1f} at the start; {THREADS} thread(s) each for eager, Inductor and ONNX Runtime), torch {torch.__version__}, onnxruntime "
             f"{__import__('onnxruntime').__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
             "Inference (`eval()`, `no_grad`), minimum of interleaved calls; speedups over eager (>1: faster). "
             "Coverage: the share of the ATen graph's compute ops that ran inside ONNX Runtime partitions.", "",
             "| model | size | eager (ms) | Inductor (ms) | torchvendor_ort (ms) | Inductor speedup | ORT speedup | "
             "ORT coverage (partitions) | compile + 1st call Inductor / ORT (s) | max rel. err Inductor / ORT |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['size']} | {r['eager']:.2f} | {r['inductor']:.2f} | {r['ours']:.2f} | "
                     f"{r['eager'] / r['inductor']:.2f}x | {r['eager'] / r['ours']:.2f}x | {r['coverage']:.0%} "
                     f"({r['partitions']}) | {r['ind_compile']:.1f} / {r['ours_compile']:.1f} | "
                     f"{r['err_ind']:.1e} / {r['err_ours']:.1e} |")
    gm = {k: statistics.geometric_mean([r["eager"] / r[k] for r in rows]) for k in ("inductor", "ours")}
    lines += ["", f"Geometric mean speedup over eager: Inductor {gm['inductor']:.2f}x, torchvendor_ort "
              f"{gm['ours']:.2f}x ({len(rows)} models).", ""]
    path.write_text("\n".join(lines))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three fast models, short timing budget")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per model and backend")
    ap.add_argument("--models", nargs="*", help="zoo names (default: all)")
    ap.add_argument("--threads", type=int, default=1, help="threads of eager, Inductor and ONNX Runtime alike")
    args = ap.parse_args(argv)
    global THREADS
    THREADS = args.threads
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    todo = [(n, "bench") for n in zoo.names(tier="fast")] + [(n, "test") for n in zoo.names(tier="slow")]
    todo = [t for t in todo if not args.models or t[0] in args.models]
    if args.quick:
        todo = todo[:3]
    rows = []
    for name, size in todo:
        try:
            rows.append(measure(name, size, 0.5 if args.quick else args.budget))
        except Exception as e:  # noqa: BLE001 - a model that does not compile is reported, not fatal
            print(f"{name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    write(rows, ROOT / "docs" / "bench_backend_ort.md", load)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
