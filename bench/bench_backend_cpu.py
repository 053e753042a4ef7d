"""Benchmark of the reference CPU compile backend ``torchvendor_cpu`` against eager PyTorch and
Inductor (``torch.compile(backend="inductor")``), side by side in one process; writes a Markdown table.

    .venv/bin/python bench/bench_backend_cpu.py            # default run (under ~10 minutes on 2 cores)
    .venv/bin/python bench/bench_backend_cpu.py --quick    # ~1 minute smoke run

Three parts, in this order (compile times first, so that "cold" really starts from empty caches):

1. **Compile time**, cold and warm, for a few kernels and one zoo model. Cold: an empty artifact
   cache (a fresh ``TORCHVENDOR_CACHE_DIR`` directory, passed as the backend's ``cache_dir``
   option) for torchvendor_cpu, a fresh ``TORCHINDUCTOR_CACHE_DIR`` for Inductor, Dynamo reset
   (``compat.dynamo_reset``) before each; warm: the same compile again after a Dynamo reset, disk
   caches kept. Both include the first call. Inductor and our toolchain are initialised once on an
   unrelated function before anything is timed (imports and compiler probes are not compile time).
2. **Kernel microbenchmarks**: pointwise chains, softmax, layer norm, reductions of several shapes;
   eager vs Inductor vs torchvendor_cpu under ``torch.no_grad()``; min-of-N wall time after
   warm-up; the ratio torchvendor_cpu / Inductor (target: at most 1.25x).
3. **Model zoo** (``torchvendor.sdk.conformance.zoo``): the fast tier at ``size="bench"``, the slow tier at
   ``size="test"`` while the time budget lasts (``--budget``); inference (``eval()``, no_grad)
   eager vs Inductor vs torchvendor_cpu, speedup over eager, geometric means (target: our geomean
   speedup at least 1.0).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

import torchvendor.reference_backends.cpu  # noqa: F401  (registers torchvendor_cpu)
from torchvendor.ir import compat
from torchvendor.sdk.conformance import zoo

ROOT = Path(__file__).resolve().parents[1]
OURS = "torchvendor_cpu"


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


#: (name, fn, make inputs)
KERNELS: list[tuple[str, Callable[..., Any], Callable[[], list[torch.Tensor]]]] = [
    ("pointwise ((x*2).sin()+y).relu() 4M", lambda x, y: ((x * 2).sin() + y).relu(), lambda: [_r(1 << 22), _r(1 << 22)]),
    ("pointwise x*y+x 4M", lambda x, y: x * y + x, lambda: [_r(1 << 22), _r(1 << 22)]),
    ("bias+gelu(tanh) 2048x1024", lambda x, b: F.gelu(x + b, approximate="tanh"), lambda: [_r(2048, 1024), _r(1024)]),
    ("softmax 4096x1024", lambda x: torch.softmax(x, -1), lambda: [_r(4096, 1024)]),
    ("softmax 128x32768", lambda x: torch.softmax(x, -1), lambda: [_r(128, 32768)]),
    ("layer_norm 4096x768", lambda x, w, b: F.layer_norm(x, (768,), w, b), lambda: [_r(4096, 768), _r(768), _r(768)]),
    ("sum rows 2048x2048", lambda x: x.sum(-1), lambda: [_r(2048, 2048)]),
    ("sum cols 2048x2048", lambda x: x.sum(0), lambda: [_r(2048, 2048)]),
    ("sum all 4M", lambda x: x.sum(), lambda: [_r(1 << 22)]),
    ("sum small rows 262144x16", lambda x: x.sum(-1), lambda: [_r(262144, 16)]),
    ("amax large rows 64x65536", lambda x: x.amax(-1), lambda: [_r(64, 65536)]),
    ("argmax rows 4096x1024", lambda x: x.argmax(-1), lambda: [_r(4096, 1024)]),
]
QUICK_KERNELS = ["pointwise ((x*2).sin()+y).relu() 4M", "softmax 4096x1024", "sum cols 2048x2048"]
COMPILE_KERNELS = ["pointwise ((x*2).sin()+y).relu() 4M", "softmax 4096x1024", "layer_norm 4096x768", "sum cols 2048x2048"]
COMPILE_MODELS = ["mlp", "gpt_block"]


def min_ms(fns: list[Callable[[], Any]], budget: float, warmup: int = 2, min_reps: int = 5,
           max_reps: int = 200) -> list[float]:
    """Minimum wall time in ms of each of ``fns`` after ``warmup`` calls each. The functions run
    interleaved (one call of each per round), so a burst of load from other processes hits all of
    them alike; at least ``min_reps`` rounds and as many as fit in ``budget`` seconds per function
    (at most ``max_reps``)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    best, start, n = [math.inf] * len(fns), time.perf_counter(), 0
    while n < min_reps or (n < max_reps and time.perf_counter() - start < budget * len(fns)):
        for k, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
        n += 1
    return [b * 1e3 for b in best]


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _flat(o)]
    if hasattr(out, "to_tuple"):
        return _flat(out.to_tuple())
    return []


def rel_err(got: Any, want: Any) -> float:
    errs = [0.0]
    for g, w in zip(_flat(got), _flat(want)):
        if not g.is_floating_point():
            errs.append(float((g != w).any()))
            continue
        errs.append(float((g.double() - w.double()).abs().max() / (w.double().abs().max() + 1e-6)))
    return max(errs)


def compiled(fn: Any, backend: str, cache_dir: str | None = None) -> Any:
    if backend == OURS:
        return torch.compile(fn, backend=OURS, options={"cache_dir": cache_dir or os.environ["TORCHVENDOR_CACHE_DIR"]})
    return torch.compile(fn, backend=backend)


def timed_first_call(fn: Any, backend: str, inputs: list[Any], cache_dir: str | None = None) -> float:
    """Seconds for ``torch.compile`` + the first call, after a Dynamo reset."""
    compat.dynamo_reset()
    t0 = time.perf_counter()
    with torch.no_grad():
        compiled(fn, backend, cache_dir)(*inputs)
    return time.perf_counter() - t0


def compile_times(work: list[tuple[str, Any, list[Any]]], tmp: str,
                  warm_reps: int = 3) -> list[tuple[str, float, float, float, float]]:
    """Cold and warm compile seconds per program; warm is the minimum of ``warm_reps`` warm
    compiles, Inductor's and ours interleaved (a load burst hits both)."""
    rows = []
    for name, fn, inputs in work:
        ours_dir = tempfile.mkdtemp(prefix="tvcpu-", dir=tmp)
        os.environ["TORCHVENDOR_CACHE_DIR"] = ours_dir
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-", dir=tmp)
        ind_cold = timed_first_call(fn, "inductor", inputs)
        ours_cold = timed_first_call(fn, OURS, inputs, ours_dir)
        ind_warm = ours_warm = math.inf
        for _ in range(max(1, warm_reps)):
            ind_warm = min(ind_warm, timed_first_call(fn, "inductor", inputs))
            ours_warm = min(ours_warm, timed_first_call(fn, OURS, inputs, ours_dir))
        rows.append((name, ours_cold, ours_warm, ind_cold, ind_warm))
        print(f"compile {name:40s} ours cold {ours_cold:6.2f} s warm {ours_warm:6.2f} s | "
              f"inductor cold {ind_cold:6.2f} s warm {ind_warm:6.2f} s", flush=True)
    return rows


def side_by_side(fn: Any, inputs: list[Any], budget: float) -> tuple[float, float, float, float, float]:
    """(eager ms, inductor ms, ours ms, inductor rel. err, ours rel. err)."""
    compat.dynamo_reset()
    with torch.no_grad():
        want = fn(*inputs)
        ind, ours = compiled(fn, "inductor"), compiled(fn, OURS)
        e_ind, e_ours = rel_err(ind(*inputs), want), rel_err(ours(*inputs), want)
        t_eager, t_ind, t_ours = min_ms([lambda: fn(*inputs), lambda: ind(*inputs), lambda: ours(*inputs)], budget)
    return t_eager, t_ind, t_ours, e_ind, e_ours


def geomean(xs: list[float]) -> float:
    return statistics.geometric_mean(xs) if xs else float("nan")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="~1 minute smoke run (3 kernels, 2 models, 1 compile row)")
    ap.add_argument("--only", default=None, help="kernels and models whose name contains this (comma-separated)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds after which no further slow-tier model is started (default 480; quick: 0)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for eager, Inductor and our kernels (torch.set_num_threads and OMP_NUM_THREADS; "
                         "default: torch's default). 1 avoids OpenMP barriers waiting on descheduled threads when "
                         "the machine is oversubscribed")
    ap.add_argument("--warm-reps", type=int, default=3, help="warm compiles per program; the minimum is reported")
    ap.add_argument("--compile-only", action="store_true",
                    help="only the compile-time rows; replaces that section of --out, keeping the rest")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench_backend_cpu.md"), help="Markdown file to write")
    args = ap.parse_args(argv)
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before our first kernel loads libgomp
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    quick = args.quick
    budget = args.budget if args.budget is not None else (0.0 if quick else 480.0)
    per_case = 0.15 if quick else 0.6
    only = [s for s in (args.only or "").split(",") if s]

    def wanted(name: str) -> bool:
        return not only or any(s in name for s in only)

    tmp = tempfile.mkdtemp(prefix="bench_backend_cpu_")
    os.environ["TORCHVENDOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="tvcpu-", dir=tmp)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-", dir=tmp)
    torch.manual_seed(0)

    # initialise Inductor and our toolchain (imports, compiler probes) on an unrelated function
    warm_fn = lambda x: (x + 1).cos()  # noqa: E731
    for backend in ("inductor", OURS):
        timed_first_call(warm_fn, backend, [torch.randn(8, 8)])

    kernels = [k for k in KERNELS if wanted(k[0]) and (not quick or k[0] in QUICK_KERNELS)]
    by_name = {k[0]: k for k in KERNELS}

    # 1. compile time
    work = [(n, by_name[n][1], by_name[n][2]()) for n in COMPILE_KERNELS if wanted(n)][: 1 if quick else None]
    for m in COMPILE_MODELS[: 0 if quick else None]:
        if wanted(m):
            model, inputs = zoo.build(m, size="bench")
            work.append((f"model {m}", model.eval(), list(inputs)))
    compile_rows = compile_times(work, tmp, args.warm_reps)
    if args.compile_only:
        return write_compile_section(args.out, compile_rows, argv)

    # 2. kernels
    kernel_rows = []
    for name, fn, make in kernels:
        row = side_by_side(fn, make(), per_case)
        kernel_rows.append((name, *row))
        e, i, o, ei, eo = row
        print(f"kernel {name:38s} eager {e:8.3f} ms inductor {i:8.3f} ms ours {o:8.3f} ms ours/inductor "
              f"{o / i:5.2f}x err {eo:.1e}", flush=True)

    # 3. model zoo
    models: list[tuple[str, str]] = [(m, "bench") for m in zoo.names(tier="fast")]
    models += [(m, "test") for m in zoo.names(tier="slow")]
    if quick:
        models = [("mlp", "bench"), ("embedding_bag", "bench")]
    model_rows, skipped = [], []
    for m, size in models:
        if not wanted(m):
            continue
        if size == "test" and time.perf_counter() - start > budget:
            skipped.append(m)
            continue
        try:
            model, inputs = zoo.build(m, size=size)
        except ImportError as e:  # transformers missing
            skipped.append(f"{m} ({e.name} not installed)")
            continue
        row = side_by_side(model.eval(), list(inputs), per_case)
        model_rows.append((m, size, *row))
        e, i, o, ei, eo = row
        print(f"model {m:14s} {size:5s} eager {e:8.3f} ms inductor {i:8.3f} ms ours {o:8.3f} ms "
              f"speedup inductor {e / i:5.2f}x ours {e / o:5.2f}x err {eo:.1e}", flush=True)

    total = time.perf_counter() - start
    text = render(kernel_rows, model_rows, skipped, compile_rows, quick, argv, total)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    return 0


def render(kernel_rows: list, model_rows: list, skipped: list, compile_rows: list, quick: bool,
           argv: list[str] | None, total: float) -> str:
    cmd = " ".join([".venv/bin/python", "bench/bench_backend_cpu.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip() or str(os.cpu_count())
    lines = ["# torchvendor_cpu benchmark (CPU, vs eager and Inductor)", "",
             f"Written by `{cmd}` in {total:.0f} s, one process{' (quick smoke run)' if quick else ''}. "
             "Method: see the docstring of `bench/bench_backend_cpu.py`.", "",
             f"- Machine: {cpu}, `nproc` = {nproc}, torch threads {torch.get_num_threads()}, OpenMP threads "
             f"{os.environ.get('OMP_NUM_THREADS', 'default')}; **shared with other agents that were loading it** "
             f"(load average at the end {os.getloadavg()[0]:.1f}): absolute times are noisy, compare columns within a row.",
             f"- torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}.",
             "- Times: minimum wall time over at least 5 rounds after 2 warm-up calls, eager / Inductor / ours "
             "interleaved in each round (a load burst hits all three), under `torch.no_grad()`; "
             "Inductor is `torch.compile(backend=\"inductor\")` (default mode), ours is "
             "`torch.compile(backend=\"torchvendor_cpu\")`. Max rel. err is ours against eager.", "",
             "## Kernels", "",
             "| kernel | eager ms | Inductor ms | torchvendor_cpu ms | ours / Inductor | ours / eager | max rel. err |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for n, e, i, o, _ei, eo in kernel_rows:
        flag = "" if o / i <= 1.25 else " **"
        lines.append(f"| {n} | {e:.3f} | {i:.3f} | {o:.3f} | {flag.strip()}{o / i:.2f}x{flag.strip()} | {o / e:.2f}x | {eo:.1e} |")
    if kernel_rows:
        lines.append(f"| **geometric mean** | | | | **{geomean([o / i for _, _, i, o, _, _ in kernel_rows]):.2f}x** | "
                     f"**{geomean([o / e for _, e, _, o, _, _ in kernel_rows]):.2f}x** | |")
        within = sum(o / i <= 1.25 for _, _, i, o, _, _ in kernel_rows)
        lines += ["", f"Target ours / Inductor <= 1.25x: {within} of {len(kernel_rows)} kernels (misses in bold)."]
    lines += ["", "## Model zoo (inference)", "",
              "| model | size | eager ms | Inductor ms | torchvendor_cpu ms | Inductor speedup | ours speedup | max rel. err |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for m, size, e, i, o, _ei, eo in model_rows:
        lines.append(f"| {m} | {size} | {e:.3f} | {i:.3f} | {o:.3f} | {e / i:.2f}x | {e / o:.2f}x | {eo:.1e} |")
    if model_rows:
        gi = geomean([r[2] / r[3] for r in model_rows])
        go = geomean([r[2] / r[4] for r in model_rows])
        lines.append(f"| **geometric mean** | | | | | **{gi:.2f}x** | **{go:.2f}x** | |")
        lines += ["", f"Speedup = eager time / compiled time. Target (ours geomean >= 1.00x): "
                  f"{'met' if go >= 1.0 else 'not met'} ({go:.2f}x; Inductor {gi:.2f}x)."]
    if skipped:
        lines += ["", "Not run (time budget or missing package): " + ", ".join(skipped) + "."]
    lines += [""] + compile_section(compile_rows)
    return "\n".join(lines) + "\n"


COMPILE_HEADING = "## Compile time (seconds, compile + first call)"


def compile_section(compile_rows: list, note: str = "") -> list[str]:
    lines = [COMPILE_HEADING, "",
             "Cold: empty artifact cache (fresh `TORCHVENDOR_CACHE_DIR`) / fresh `TORCHINDUCTOR_CACHE_DIR`, after "
             "`compat.dynamo_reset()`; warm: compiled again after `compat.dynamo_reset()`, disk caches kept (the "
             "minimum of `--warm-reps` warm compiles, Inductor's and ours interleaved). A warm inference compile "
             "of ours skips AOTAutograd: the ATen graph comes from the artifact cache (`docs/backend.md`, "
             "section 7)." + note, "",
             "| program | ours cold | ours warm | Inductor cold | Inductor warm | ours warm / Inductor warm |",
             "|---|---:|---:|---:|---:|---:|"]
    for n, oc, ow, ic, iw in compile_rows:
        flag = "" if ow / iw <= 1.5 else "**"
        lines.append(f"| {n} | {oc:.2f} | {ow:.3f} | {ic:.2f} | {iw:.3f} | {flag}{ow / iw:.2f}x{flag} |")
    within = sum(ow / iw <= 1.5 for *_, ow, _ic, iw in compile_rows)
    lines += ["", f"Target ours warm / Inductor warm <= 1.5x: {within} of {len(compile_rows)} programs (misses in bold)."]
    return lines


def write_compile_section(out: str, compile_rows: list, argv: list[str] | None) -> int:
    """``--compile-only``: replace the compile-time section of ``out`` (it is the file's last)."""
    cmd = " ".join([".venv/bin/python", "bench/bench_backend_cpu.py", *(sys.argv[1:] if argv is None else argv)])
    note = (f" This section was re-measured alone by `{cmd}` (load average at the end "
            f"{os.getloadavg()[0]:.1f}); the sections above come from the full run named at the top.")
    section = "\n".join(compile_section(compile_rows, note)) + "\n"
    print(section)
    path = Path(out)
    old = path.read_text() if path.exists() else ""
    head = old.split(COMPILE_HEADING)[0] if COMPILE_HEADING in old else old
    path.write_text(head + section)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
