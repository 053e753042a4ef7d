"""The Triton level's cost of the vendor's runtime, measured: the model suite with Inductor on
``cuda`` (its own launcher) and with ``torchvendor_triton`` on the PrivateUse1 GPU device over
the reference CUDA runtime (the same kind of kernels, built by the same Triton, launched through
the runtime table), each model in a process of its own (``sdk/conformance/models``).

For each model: both statuses over the parts run (correct against float64 truth, as the suite
judges) and both inference times; ``ratio`` is Inductor's time over ours (1.0: the same speed).

    python bench/bench_triton_level.py --tier fast --parts inference --jobs 8 --out triton_level.json
    python bench/bench_triton_level.py --profile gpt2,t5 --out profile.json   # where the time goes

Needs an NVIDIA GPU, Triton and the CUDA toolkit's headers (the runtime is built on first use).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

RUNTIME = "torchvendor.reference_backends.cuda.runtime:build_runtime"


def _row(model: str, ind: dict[str, Any], tri: dict[str, Any]) -> dict[str, Any]:
    """One model: each side's status over the parts run (``correct``, ``fell back``, ``wrong``,
    ``error``...), its inference time (ms, the suite's min over its timing budget) and its compile
    time (s, the first part's: compile and first call, cold caches)."""
    def side(rec: dict[str, Any], backend: str) -> tuple[str, float | None, float | None]:
        b = rec.get("backends", {}).get(backend, {})
        status = b.get("status") or rec.get("not_run") or rec.get("eager_error") or "missing"
        compile_s = next(iter(b.get("compile_s", {}).values()), None)
        return str(status), rec.get("ms", {}).get(backend), compile_s

    (s_i, ms_i, c_i), (s_t, ms_t, c_t) = side(ind, "inductor"), side(tri, "torchvendor_triton")
    ratio = ms_i / ms_t if ms_i and ms_t else None
    return {"model": model, "inductor": s_i, "triton": s_t, "inductor_ms": ms_i, "triton_ms": ms_t, "ratio": ratio,
            "inductor_compile_s": c_i, "triton_compile_s": c_t}


def wrapper_counts(fn: Any, kwargs: dict[str, Any]) -> dict[str, int]:
    """What one call runs, read from the Inductor wrappers it goes through (their ``call``
    functions, found by a cProfile of one call): Triton launches, extern kernels (library calls),
    allocations and ATen fallbacks, each counted per line of source."""
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    fn(**kwargs)
    prof.disable()
    prof.create_stats()
    counts = {"launches": 0, "externs": 0, "allocations": 0, "aten_calls": 0}
    for filename, line, name in prof.stats:  # type: ignore[attr-defined]
        if name != "call" or "torchinductor" not in filename:
            continue
        with open(filename) as f:
            lines = f.read().splitlines()[line - 1:]
        indent = len(lines[0]) - len(lines[0].lstrip())  # the body: what follows, indented deeper
        end = next((i for i, t in enumerate(lines[1:], 1) if t.strip() and len(t) - len(t.lstrip()) <= indent),
                   len(lines))
        body = "\n".join(lines[1:end])
        counts["launches"] += body.count(".run(")
        counts["externs"] += body.count("extern_kernels.")
        counts["allocations"] += body.count("empty_strided")
        counts["aten_calls"] += body.count("torch.ops.")
    return counts


def host_and_device(fn: Any, kwargs: dict[str, Any], device: str, calls: int = 10,
                    sleep: Any = None) -> dict[str, float]:
    """ms per call on each side of the launch queue. ``host``: the calls' host time (Python,
    launches, allocations, externs) with no wait for the device; ``device``: the device's time for
    the same calls, from timing events on the device's current stream around calls enqueued
    behind a ``cuda`` sleep kernel long enough that the device runs them back to back; ``wall``:
    the calls with a synchronize at the end. ``host`` > ``device``: host bound."""
    import torch

    from torchvendor.ir.compat import triton_api

    mod = getattr(torch, device)
    mod.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(**kwargs)
    host = (time.perf_counter() - start) / calls
    mod.synchronize()
    wall = (time.perf_counter() - start) / calls
    # enqueue behind a sleep on CUDA's legacy default stream (ordered with the device's streams)
    begin, end = torch.Event(device=device, enable_timing=True), torch.Event(device=device, enable_timing=True)
    (sleep or triton_api.cuda_sleep)(int(host * calls * 3 * 2e9) + 10**6)  # about 3x the enqueue time at 2 GHz
    begin.record()
    for _ in range(calls):
        fn(**kwargs)
    end.record()
    end.synchronize()
    return {"host_ms": host * 1e3, "device_ms": begin.elapsed_time(end) / calls, "wall_ms": wall * 1e3}


def entry_costs(device: str, library: str = "cuda", reps: int = 300) -> dict[str, float]:
    """Host microseconds per call of the wrapper's C++ entries on ``device`` beside torch's own
    on ``cuda``: an allocation (EmptyStrided vs torch.empty_strided) and a 64x64 matmul extern
    (ExternCall on aliases vs torch.mm on cuda tensors), no synchronize inside the loop."""
    import torch

    from torchvendor import _C

    def us(f: Any, sync: Any) -> float:
        for _ in range(10):
            f()
        sync()
        t = time.perf_counter()
        for _ in range(reps):
            f()
        dt = time.perf_counter() - t
        sync()
        return dt / reps * 1e6

    mod, lib = getattr(torch, device), getattr(torch, library)
    empty = _C.EmptyStrided(torch.empty_strided, device)
    mm = _C.ExternCall(torch.mm, device, library)
    empty, mm = getattr(empty, "function", empty), getattr(mm, "function", mm)  # as the wrapper calls them
    a, c = torch.ones(64, 64, device=device), torch.ones(64, 64, device=library)
    out, cout = torch.empty(64, 64, device=device), torch.empty(64, 64, device=library)
    return {
        "empty_strided_us": us(lambda: empty((16, 96), (96, 1), device=device, dtype=torch.float32), mod.synchronize),
        f"{library}_empty_strided_us": us(lambda: torch.empty_strided((16, 96), (96, 1), device=library),
                                          lib.synchronize),
        "extern_mm_us": us(lambda: mm(a, a, out=out), mod.synchronize),
        f"{library}_mm_us": us(lambda: torch.mm(c, c, out=cout), lib.synchronize),
    }


def _safe(f: Any, *args: Any) -> dict[str, Any]:
    """``f(*args)``, or its error as ``{"<name>_error": ...}``: one measurement's failure leaves the others."""
    try:
        return f(*args)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return {f"{f.__name__}_error": f"{type(e).__name__}: {str(e)[:300]}"}


def _summary(r: dict[str, Any], calls: int) -> str:
    """One side's line: ms per call, host and device ms, which bounds it, what a call runs."""
    line = f"{r['ms']:.3f} ms per call"
    if "host_ms" in r:
        bound = "host" if r["host_ms"] > r["device_ms"] else "device"
        line += (f": host {r['host_ms']:.3f} ms, device {r['device_ms']:.3f} ms, wall {r['wall_ms']:.3f} ms "
                 f"({bound} bound)")
    if "launches" in r:
        line += (f"; {r['launches']} launches, {r['externs']} externs, {r['allocations']} allocations, "
                 f"{r['aten_calls']} ATen calls per call")
    if "runtime_mallocs" in r:
        line += f"; {r['runtime_mallocs']} runtime mallocs in {2 * calls} calls"
    errors = [f"{k}: {v}" for k, v in r.items() if k.endswith("_error")]
    return line + "".join(f"; {e}" for e in errors)


def profile(model: str, calls: int = 200, top: int = 25, out: str | None = None) -> dict[str, Any]:
    """Where one model's inference time goes: ms per call with Inductor on ``cuda`` and with the
    Triton level on the PrivateUse1 GPU (a loop of ``calls``, then a synchronize), each split into
    host and device time (:func:`host_and_device`), what a call runs (:func:`wrapper_counts`),
    the device allocator's runtime mallocs during the loop, the C++ entries' host cost
    (:func:`entry_costs`), then a cProfile of ours (host time by function)."""
    import copy
    import cProfile
    import pstats

    import torch

    import torchvendor.reference_backends.triton  # noqa: F401 - registers torchvendor_triton
    from torchvendor.reference_backends.cuda.runtime import build_runtime
    from torchvendor.sdk import register_device
    from torchvendor.sdk.conformance.models.catalog import SPECS

    gpu = register_device("gpu", runtime=build_runtime())
    net, inputs = SPECS[model].build()
    net.eval()

    def on(device: str) -> tuple[Any, dict[str, Any]]:  # a copy per device: no direct cuda -> gpu copy
        return copy.deepcopy(net).to(device), {k: v.to(device) if isinstance(v, torch.Tensor) else v
                                               for k, v in inputs.items()}

    def per_call(fn: Any, kwargs: dict[str, Any], sync: Any) -> float:
        for _ in range(3):
            fn(**kwargs)
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn(**kwargs)
        sync()
        return (time.perf_counter() - start) / calls * 1e3

    result: dict[str, Any] = {"model": model, "calls": calls}
    with torch.no_grad():
        m, kw = on("cuda")
        ind_fn = torch.compile(m, backend="inductor")
        ind = per_call(ind_fn, kw, torch.cuda.synchronize)
        result["inductor"] = {"ms": ind, **_safe(host_and_device, ind_fn, kw, "cuda"),
                              **_safe(wrapper_counts, ind_fn, kw)}
        m, kw = on("gpu")
        ours = torch.compile(m, backend="torchvendor_triton")
        tri = per_call(ours, kw, gpu.synchronize)
        mallocs = gpu.memory_stats().get("num_device_alloc", 0)
        per_call(ours, kw, gpu.synchronize)
        result["triton"] = {"ms": per_call(ours, kw, gpu.synchronize), **_safe(host_and_device, ours, kw, "gpu"),
                            **_safe(wrapper_counts, ours, kw),
                            "runtime_mallocs": gpu.memory_stats().get("num_device_alloc", 0) - mallocs}
        result["entries"] = _safe(entry_costs, "gpu")
        print(f"{model}: inductor on cuda {ind:.3f} ms, Triton level on gpu {tri:.3f} ms per call")
        for side in ("inductor", "triton"):
            print(f"  {side:<8} " + _summary(result[side], calls))
        print("  host us per call: " + ", ".join(f"{k[:-3]} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                                 for k, v in result["entries"].items()), flush=True)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            ours(**kw)
        gpu.synchronize()
        prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tier", default="fast", choices=("fast", "full"))
    p.add_argument("--models", help="comma list (default: the tier)")
    p.add_argument("--parts", default="inference")
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timing per backend and model")
    p.add_argument("--stop", type=float, help="end each side's unfinished models after this many seconds")
    p.add_argument("--out", help="write the rows as JSON here")
    p.add_argument("--profile", metavar="MODELS", help="only profile these models' inference, a comma list "
                   "(see profile(); --out: their results as JSON)")
    args = p.parse_args(argv)
    if args.profile:
        results = [profile(m, top=15 if "," in args.profile else 25) for m in args.profile.split(",")]
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
        return 0
    from torchvendor.sdk.conformance.models.catalog import names
    from torchvendor.sdk.conformance.models.suite import run_suite

    models = args.models.split(",") if args.models else names(args.tier)
    parts = tuple(args.parts.split(","))
    common = dict(parts=parts, jobs=args.jobs, budget=args.budget, stop=args.stop, progress=True)
    started = time.perf_counter()
    ind = run_suite(models, ["inductor"], device="cuda", **common)
    tri = run_suite(models, ["torchvendor_triton"], device="gpu", runtime=RUNTIME, **common)
    rows = [_row(m, a, b) for m, a, b in zip(models, ind, tri)]
    print(f"{'model':<14} {'inductor':<12} {'triton':<12} {'ind ms':>8} {'tri ms':>8} {'ratio':>6} "
          f"{'ind s':>7} {'tri s':>7}")
    for r in rows:
        fmt = lambda v, w=8, d=3: f"{v:{w}.{d}f}" if isinstance(v, float) else f"{'-':>{w}}"  # noqa: E731
        print(f"{r['model']:<14} {r['inductor']:<12} {r['triton']:<12} {fmt(r['inductor_ms'])} "
              f"{fmt(r['triton_ms'])} {r['ratio'] if r['ratio'] is None else round(r['ratio'], 2)!s:>6} "
              f"{fmt(r['inductor_compile_s'], 7, 1)} {fmt(r['triton_compile_s'], 7, 1)}")
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if ratios:
        print(f"geomean inductor/triton: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f} "
              f"over {len(ratios)} models; {time.perf_counter() - started:.0f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "raw": {"inductor": ind, "triton": tri}}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
