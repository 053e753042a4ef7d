"""Benchmark of the reference CUDA backend against the device-to-device copy and Inductor's Triton
kernels, in one process on one GPU (needs a CUDA GPU; writes a Markdown table).

    python bench/bench_backend_cuda.py --out docs/bench_backend_cuda.md

- large pointwise kernels (256 MB or more moved) against the copy bandwidth measured here;
- pointwise chains, softmax, layer norm and reductions of several shapes against
  ``torch.compile`` (Inductor, default mode) on the same inputs; times are medians of
  ``triton.testing.do_bench`` (CUDA events) of the whole call, launch overhead included;
- compile time, cold (empty caches) and warm (disk caches filled), beside Inductor's.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from torchvendor.ir import capture
from torchvendor.reference_backends.cuda import CudaBackend
from torchvendor.sdk import ProgramRunner, loop_kernels


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="Markdown file to write the tables to")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_backend_cuda needs a CUDA GPU")
    os.environ.setdefault("TORCHVENDOR_CACHE_DIR", tempfile.mkdtemp(prefix="tvcuda-"))
    dev = torch.cuda.get_device_name()
    copy_bw = copy_bandwidth(1 << 30)
    backend = CudaBackend()
    rows, compile_rows = [], []
    for name, fn, make in CASES:
        if args.only and args.only not in name:
            continue
        inputs = make()
        with torch.no_grad():
            expected = fn(*inputs)
            t0 = time.perf_counter()
            ind = torch.compile(fn)
            ind(*inputs)
            torch.cuda.synchronize()
            ind_compile = time.perf_counter() - t0
            replay, outs, our_compile = ours(fn, inputs, backend)
            torch.cuda.synchronize()
            exp = list(expected) if isinstance(expected, tuple) else [expected]
            err = max(float((o.float() - e.float()).abs().max() / (e.float().abs().max() + 1e-6)) for o, e in zip(outs, exp))
            t_ours, t_ind = median_ms(replay), median_ms(lambda: ind(*inputs))
        moved = sum(t.numel() * t.element_size() for t in inputs) + sum(e.numel() * e.element_size() for e in exp)
        bw = moved / (t_ours * 1e-3)
        rows.append((name, t_ours, t_ind, t_ind / t_ours, bw / 1e9, bw / copy_bw * 100, err))
        t0 = time.perf_counter()
        ours(fn, inputs, backend)   # warm: the cubins come from the disk cache
        warm = time.perf_counter() - t0
        compile_rows.append((name, our_compile, warm, ind_compile))
        print(f"{name:28s} ours {t_ours:8.4f} ms  inductor {t_ind:8.4f} ms  speedup {t_ind / t_ours:5.2f}x  "
              f"{bw / 1e9:7.1f} GB/s ({bw / copy_bw * 100:5.1f}% of copy)  rel.err {err:.1e}", flush=True)
    # Inductor warm compile: a fresh Dynamo cache, Inductor's disk caches filled above
    for i, (name, fn, make) in enumerate(CASES):
        if args.only and args.only not in name:
            continue
        torch._dynamo.reset()
        inputs = make()
        t0 = time.perf_counter()
        with torch.no_grad():
            torch.compile(fn)(*inputs)
        torch.cuda.synchronize()
        k = [r[0] for r in compile_rows].index(name)
        compile_rows[k] = (*compile_rows[k], time.perf_counter() - t0)
    lines = [f"# torchvendor_cuda benchmark\n", f"Device: {dev}; torch {torch.__version__}; "
             f"device-to-device copy: {copy_bw / 1e9:.0f} GB/s (bytes read + written), measured in the same run.\n",
             "Kernel times: median of `triton.testing.do_bench` over the whole call (launches included); "
             "GB/s counts each input read once and each output written once.\n",
             "| kernel | torchvendor_cuda ms | Inductor ms | Inductor / ours | ours GB/s | % of copy | max rel. err |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {n} | {a:.4f} | {b:.4f} | {s:.2f}x | {g:.0f} | {p:.0f}% | {e:.1e} |" for n, a, b, s, g, p, e in rows]
    lines += ["", "Compile time (seconds): capture + code generation + NVRTC for ours; `torch.compile` first call for "
              "Inductor. Cold: empty caches; warm: disk caches filled (ours: same process, cubins from the cache; "
              "Inductor: after `torch._dynamo.reset()`).", "",
              "| program | ours cold | ours warm | Inductor cold | Inductor warm |", "|---|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} |" for r in compile_rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    sys.exit(main())
