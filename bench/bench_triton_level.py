"""The Triton level's cost of the vendor's runtime, measured: the model suite with Inductor on
``cuda`` (its own launcher) and with ``torchvendor_triton`` on the PrivateUse1 GPU device over
the reference CUDA runtime (the same kind of kernels, built by the same Triton, launched through
the runtime table), each model in a process of its own (``sdk/conformance/models``).

For each model: both statuses over the parts run (correct against float64 truth, as the suite
judges) and both inference times; ``ratio`` is Inductor's time over ours (1.0: the same speed).

    python bench/bench_triton_level.py --tier fast --parts inference --jobs 8 --out triton_level.json
    python bench/bench_triton_level.py --profile gpt2     # where one model's time goes

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


def profile(model: str, calls: int = 200, top: int = 25) -> None:
    """Where one model's inference time goes: ms per call with Inductor on ``cuda`` and with the
    Triton level on the PrivateUse1 GPU, then a cProfile of ours (host time by function: a
    launch, an extern, an allocation or a wait for the device)."""
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

    with torch.no_grad():
        m, kw = on("cuda")
        ind = per_call(torch.compile(m, backend="inductor"), kw, torch.cuda.synchronize)
        m, kw = on("gpu")
        ours = torch.compile(m, backend="torchvendor_triton")
        tri = per_call(ours, kw, gpu.synchronize)
        print(f"{model}: inductor on cuda {ind:.3f} ms, Triton level on gpu {tri:.3f} ms per call")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            ours(**kw)
        gpu.synchronize()
        prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tier", default="fast", choices=("fast", "full"))
    p.add_argument("--models", help="comma list (default: the tier)")
    p.add_argument("--parts", default="inference")
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timing per backend and model")
    p.add_argument("--stop", type=float, help="end each side's unfinished models after this many seconds")
    p.add_argument("--out", help="write the rows as JSON here")
    p.add_argument("--profile", metavar="MODEL", help="only profile one model's inference (see profile())")
    args = p.parse_args(argv)
    if args.profile:
        profile(args.profile)
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
