"""Benchmark of the reference CUDA backend against the device-to-device copy and Inductor's Triton
kernels, in one process on one GPU (needs a CUDA GPU; writes a Markdown table).

    python bench/bench_backend_cuda.py --out docs/bench_backend_cuda.md

- large pointwise kernels (256 MB or more moved) against the copy bandwidth measured here;
- pointwise chains, softmax, layer norm and reductions of several shapes against
  ``torch.compile`` (Inductor, default mode) on the same inputs; times are medians of
  ``triton.testing.do_bench`` (CUDA events) of CUDA graph replays of one call (GPU work and
  launch gaps, without the host work of the call), for both;
- compile time, cold (empty caches) and warm (disk caches filled), beside Inductor's;
- ``--zoo``: the model zoo (``torchvendor.sdk.conformance.zoo``; fast tier at ``size="bench"``, slow tier at
  ``size="test"``) in inference, eager vs Inductor vs ``torch.compile(backend="torchvendor_cuda")``,
  speedups over eager and their geometric means (target: ours at least 0.9x of Inductor's).

``--no-inductor`` times ours only (for sweeping the tiling knobs of
``TORCHVENDOR_CUDA_TILING``, see ``reference_backends/cuda/codegen.py``).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from typing import Any, Callable

# a fresh Inductor cache per run, set before torch is imported (Inductor fixes the directory at its
# first use): no artifacts of earlier processes are served to this one
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torchvendor.ir import capture  # noqa: E402
from torchvendor.reference_backends.cuda import CudaBackend  # noqa: E402
from torchvendor.sdk import ProgramRunner, loop_kernels  # noqa: E402
from torchvendor.sdk.conformance import zoo  # noqa: E402


def ours(fn: Callable[..., Any], inputs: list[torch.Tensor], backend: CudaBackend) -> tuple[Callable[[], Any], list[Any], float]:
    """(call, outputs, compile seconds): the loop program of ``fn`` with every kernel compiled by
    torchvendor_cuda, run by the SDK's ProgramRunner (as torch.compile's LOOP level runs it)."""
    t0 = time.perf_counter()
    program = capture(fn, inputs, level="loop").inference
    runner = ProgramRunner(program, {lk.name: backend.compile(lk) for lk in loop_kernels(program)}, "cuda")
    seconds = time.perf_counter() - t0
    outs = runner(*inputs)
    return (lambda: runner(*inputs)), outs, seconds


def median_ms(fn: Callable[[], Any]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=200, return_mode="median"))


def graph_replay(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` captured into a CUDA graph: its replays time the GPU work alone, for ours and
    Inductor alike (a call's host work, e.g. the program runner's Python, stays out: do_bench's
    cache flush hides only part of it, so short kernels would be timed with some of it)."""
    call()
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    try:
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            call()
    except Exception as e:  # noqa: BLE001 - timed as a whole call instead, and said so
        print(f"capture failed ({type(e).__name__}: {e}); timing the whole call", flush=True)
        return call
    return graph.replay


def copy_bandwidth(nbytes: int) -> float:
    """Device-to-device copy, bytes read plus written per second."""
    x = torch.randn(nbytes // 4, device="cuda")
    y = torch.empty_like(x)
    return 2 * nbytes / (median_ms(lambda: y.copy_(x)) * 1e-3)


CASES: list[tuple[str, Callable[..., Any], Callable[[], list[torch.Tensor]]]] = [
    ("mul_add 64M f32", lambda x, y: x * y + x, lambda: [torch.randn(1 << 26, device="cuda"), torch.randn(1 << 26, device="cuda")]),
    ("scale_relu 64M f32", lambda x: torch.relu(x * 0.5), lambda: [torch.randn(1 << 26, device="cuda")]),
    ("bias_gelu 8192x4096", lambda x, b: F.gelu(x + b, approximate="tanh"),
     lambda: [torch.randn(8192, 4096, device="cuda"), torch.randn(4096, device="cuda")]),
    ("chain bf16 8192x4096", lambda x, y: (torch.sigmoid(x) * y + 1).to(torch.bfloat16),
     lambda: [torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16), torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)]),
    ("softmax 4096x1024", lambda x: torch.softmax(x, -1), lambda: [torch.randn(4096, 1024, device="cuda")]),
    ("softmax 65536x128", lambda x: torch.softmax(x, -1), lambda: [torch.randn(65536, 128, device="cuda")]),
    ("softmax 1024x32768", lambda x: torch.softmax(x, -1), lambda: [torch.randn(1024, 32768, device="cuda")]),
    ("layer_norm 8192x1024", lambda x, w, b: F.layer_norm(x, (1024,), w, b),
     lambda: [torch.randn(8192, 1024, device="cuda"), torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")]),
    ("layer_norm 4096x4096", lambda x, w, b: F.layer_norm(x, (4096,), w, b),
     lambda: [torch.randn(4096, 4096, device="cuda"), torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")]),
    ("sum rows 8192x8192", lambda x: x.sum(-1), lambda: [torch.randn(8192, 8192, device="cuda")]),
    ("sum cols 8192x8192", lambda x: x.sum(0), lambda: [torch.randn(8192, 8192, device="cuda")]),
    ("amax rows 32768x256", lambda x: x.amax(-1), lambda: [torch.randn(32768, 256, device="cuda")]),
    ("sum all 64M", lambda x: x.sum(), lambda: [torch.randn(1 << 26, device="cuda")]),
    ("var_mean rows 4096x4096", lambda x: torch.var_mean(x, -1), lambda: [torch.randn(4096, 4096, device="cuda")]),
]
BANDWIDTH = {"mul_add 64M f32", "scale_relu 64M f32"}


def _sync_call(fn: Callable[..., Any], inputs: list[Any]) -> Callable[[], Any]:
    def call() -> Any:
        with torch.no_grad():
            return fn(*inputs)
    return call


def zoo_rows(only: str | None) -> tuple[list[tuple[Any, ...]], list[str]]:
    """(model, size, eager ms, Inductor ms, ours ms, Inductor with CUDA graphs ms, max rel. err)
    for the zoo in inference."""
    rows, skipped = [], []
    models = [(m, "bench") for m in zoo.names(tier="fast")] + [(m, "test") for m in zoo.names(tier="slow")]
    for name, size in models:
        if only and only not in name:
            continue
        try:
            model, inputs = zoo.build(name, size=size)
        except ImportError as e:  # transformers missing
            skipped.append(f"{name} ({e.name} not installed)")
            continue
        model = model.eval().cuda()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs]
        torch._dynamo.reset()
        try:
            with torch.no_grad():
                want = zoo.leaves(model(*inputs))
                ind, ours_fn = torch.compile(model), torch.compile(model, backend="torchvendor_cuda")
                ind_graphs = torch.compile(model, mode="reduce-overhead")   # Inductor with CUDA graphs
                ind(*inputs)
                for _ in range(3):
                    ind_graphs(*inputs)
                got = zoo.leaves(ours_fn(*inputs))
        except Exception as e:  # noqa: BLE001 - reported in the table, the rest of the zoo still runs
            skipped.append(f"{name} ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
            continue
        err = max(float((g.float() - w.float()).abs().max() / (w.float().abs().max() + 1e-6))
                  for g, w in zip(got, want) if w.is_floating_point())
        times = [median_ms(_sync_call(f, inputs)) for f in (model, ind, ours_fn, ind_graphs)]
        rows.append((name, size, *times, err))
        print(f"model {name:14s} {size:5s} eager {times[0]:8.3f} ms inductor {times[1]:8.3f} ms ours "
              f"{times[2]:8.3f} ms inductor+graphs {times[3]:8.3f} ms speedup inductor {times[0] / times[1]:5.2f}x "
              f"ours {times[0] / times[2]:5.2f}x inductor+graphs {times[0] / times[3]:5.2f}x err {err:.1e}", flush=True)
    return rows, skipped


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def zoo_lines(rows: list[tuple[Any, ...]], skipped: list[str]) -> list[str]:
    lines = ["", "## Model zoo (inference)", "",
             "Times: median of `do_bench` of the whole call (`torch.no_grad()`); speedup = eager / compiled. "
             "Inductor: `torch.compile(model)` (default mode, the target's reference); Inductor + graphs: "
             "`mode=\"reduce-overhead\"` (CUDA graphs, as torchvendor_cuda replays them).", "",
             "| model | size | eager ms | Inductor ms | Inductor + graphs ms | torchvendor_cuda ms | Inductor speedup | "
             "Inductor + graphs speedup | ours speedup | ours / Inductor speedup | max rel. err |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {m} | {s} | {e:.3f} | {i:.3f} | {g:.3f} | {o:.3f} | {e / i:.2f}x | {e / g:.2f}x | {e / o:.2f}x | "
              f"{i / o:.2f}x | {err:.1e} |" for m, s, e, i, o, g, err in rows]
    if rows:
        gi, go, gg = (geomean([r[2] / r[k] for r in rows]) for k in (3, 4, 5))
        lines.append(f"| **geometric mean** | | | | | | **{gi:.2f}x** | **{gg:.2f}x** | **{go:.2f}x** | "
                     f"**{go / gi:.2f}x** | |")
        lines += ["", f"Target (ours geomean speedup >= 0.9x Inductor's): {'met' if go >= 0.9 * gi else 'not met'} "
                  f"({go:.2f}x vs {gi:.2f}x: {go / gi:.2f}); against Inductor with CUDA graphs: {go / gg:.2f}."]
    from torchvendor.reference_backends.cuda.graphs import stats

    lines += ["", f"CUDA graphs (torchvendor_cuda partitions): {stats['captured']} layouts captured and replayed, "
              f"{stats['not capturable']} not capturable, {stats['not usable']} partitions not usable (random "
              f"numbers or constants) of {stats['usable'] + stats['not usable']}."]
    if skipped:
        lines += ["", "Not run: " + "; ".join(skipped) + "."]
    return lines


def kernel_rows(only: str | None, inductor: bool, copy_bw: float) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(kernel rows, compile rows): ours against Inductor on every case (ours only without ``inductor``)."""
    backend = CudaBackend()
    rows, compile_rows = [], []
    for name, fn, make in CASES:
        if only and only not in name:
            continue
        inputs = make()
        with torch.no_grad():
            expected = fn(*inputs)
            t0 = time.perf_counter()
            ind = torch.compile(fn) if inductor else fn
            ind(*inputs)
            torch.cuda.synchronize()
            ind_compile = time.perf_counter() - t0
            replay, outs, our_compile = ours(fn, inputs, backend)
            torch.cuda.synchronize()
            exp = list(expected) if isinstance(expected, tuple) else [expected]
            err = max(float((o.float() - e.float()).abs().max() / (e.float().abs().max() + 1e-6)) for o, e in zip(outs, exp))
            t_ours = median_ms(graph_replay(replay))
            t_ind = median_ms(graph_replay(lambda: ind(*inputs))) if inductor else float("nan")
        moved = sum(t.numel() * t.element_size() for t in inputs) + sum(e.numel() * e.element_size() for e in exp)
        bw = moved / (t_ours * 1e-3)
        rows.append((name, t_ours, t_ind, t_ind / t_ours, bw / 1e9, bw / copy_bw * 100, err))
        t0 = time.perf_counter()
        ours(fn, inputs, backend)   # warm: the cubins come from the disk cache
        compile_rows.append((name, our_compile, time.perf_counter() - t0, ind_compile))
        print(f"{name:28s} ours {t_ours:8.4f} ms  inductor {t_ind:8.4f} ms  speedup {t_ind / t_ours:5.2f}x  "
              f"{bw / 1e9:7.1f} GB/s ({bw / copy_bw * 100:5.1f}% of copy)  rel.err {err:.1e}", flush=True)
    for k, (name, fn, make) in enumerate(CASES if inductor else ()):
        # Inductor warm compile: a fresh Dynamo cache, Inductor's disk caches filled above
        if only and only not in name:
            continue
        torch._dynamo.reset()
        inputs = make()
        t0 = time.perf_counter()
        with torch.no_grad():
            torch.compile(fn)(*inputs)
        torch.cuda.synchronize()
        at = [r[0] for r in compile_rows].index(name)
        compile_rows[at] = (*compile_rows[at], time.perf_counter() - t0)
    return rows, compile_rows


def kernel_lines(rows: list[tuple[Any, ...]], compile_rows: list[tuple[Any, ...]]) -> list[str]:
    lines = ["Kernel times: median of `triton.testing.do_bench` over replays of a CUDA graph of one call, for ours "
             "and Inductor alike (the GPU work with its launch gaps, without the call's host work); GB/s counts each "
             "input read once and each output written once.\n",
             "| kernel | torchvendor_cuda ms | Inductor ms | Inductor / ours | ours GB/s | % of copy | max rel. err |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {n} | {a:.4f} | {b:.4f} | {s:.2f}x | {g:.0f} | {p:.0f}% | {e:.1e} |" for n, a, b, s, g, p, e in rows]
    ratios = [r[3] for r in rows if r[3] == r[3]]
    if ratios:
        lines.append(f"| **geometric mean** | | | **{geomean(ratios):.2f}x** | | | |")
    lines += ["", "Compile time (seconds): capture + code generation + NVRTC for ours; `torch.compile` first call for "
              "Inductor. Cold: empty caches; warm: disk caches filled (ours: same process, cubins from the cache; "
              "Inductor: after `torch._dynamo.reset()`).", "",
              "| program | ours cold | ours warm | Inductor cold | Inductor warm |", "|---|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} |" for r in compile_rows if len(r) > 4]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="Markdown file to write the tables to")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    ap.add_argument("--no-inductor", action="store_true", help="time ours only (tiling sweeps)")
    ap.add_argument("--zoo", action="store_true", help="also run the model zoo section")
    ap.add_argument("--no-kernels", action="store_true", help="skip the kernel and compile-time sections")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_backend_cuda needs a CUDA GPU")
    os.environ.setdefault("TORCHVENDOR_CACHE_DIR", tempfile.mkdtemp(prefix="tvcuda-"))
    copy_bw = copy_bandwidth(1 << 30)
    # capture on cuda needs Inductor's cuda registration, made by its first cuda compile
    torch.compile(lambda x: x + 1)(torch.ones(2, device="cuda"))
    lines = ["# torchvendor_cuda benchmark\n", f"Device: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
             f"device-to-device copy: {copy_bw / 1e9:.0f} GB/s (bytes read + written), measured in the same run; "
             f"tiling knobs: {os.environ.get('TORCHVENDOR_CUDA_TILING', 'default')}.\n"]
    if not args.no_kernels:
        lines += kernel_lines(*kernel_rows(args.only, not args.no_inductor, copy_bw))
    if args.zoo:
        lines += zoo_lines(*zoo_rows(args.only))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    sys.exit(main())
