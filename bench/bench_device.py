"""Device-layer benchmark: per-op overhead and copy bandwidth, side by side with CPU eager.

    .venv/bin/python bench/bench_device.py [--quick] [--out docs/bench_device.md]

Measures, in one process:
  1. per-call time of small ops (add, mul, relu of 16-element float32 tensors) on the device vs
     CPU eager - through the CPU fallback, then through the stable-ABI kernel template
     (examples/stable_kernels, loaded as examples/native_kernel.py does) - median microseconds
     per call;
  2. copy bandwidth host->device, device->host (pinned and pageable host memory), device->device
     (same device and across devices) for 64 KiB .. 256 MiB, vs a plain host memcpy of the same
     size (torch CPU copy_ and numpy.copyto), GB/s (1 GB = 1e9 bytes).
Results are printed and written as Markdown (docs/bench_device.md).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "acme"
KB, MB = 1024, 1024 * 1024


# ----------------------------------------------------------------------------------------------
# timing helpers
# ----------------------------------------------------------------------------------------------

def paired_us(cpu_fn, dev_fn, sync, *, inner: int, repeats: int, warmup: int = 50):
    """((CPU eager, device) wall, (CPU eager, device) process CPU time): the median over
    `repeats` batches of the mean time per call of a batch of `inner` calls (the device
    synchronized at the end of its batches), in microseconds. CPU and device batches alternate,
    so both see the same machine load. Process CPU time (all threads, the runtime's workers
    included) counts only what the calls cost, not the time other processes held the cores, so
    its ratio holds on a busy shared machine where wall-clock ratios swing."""
    for _ in range(warmup):
        cpu_fn(), dev_fn()
    sync()
    wall, cpu_time = ([], []), ([], [])
    for _ in range(repeats):
        for k, (fn, done) in enumerate(((cpu_fn, lambda: None), (dev_fn, sync))):
            t0, c0 = time.perf_counter_ns(), time.process_time_ns()
            for _ in range(inner):
                fn()
            done()
            wall[k].append((time.perf_counter_ns() - t0) / inner / 1e3)
            cpu_time[k].append((time.process_time_ns() - c0) / inner / 1e3)
    med = statistics.median
    return (med(wall[0]), med(wall[1])), (med(cpu_time[0]), med(cpu_time[1]))


def copy_gbps(fn, sync, nbytes: int, *, repeats: int) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        sync()
        times.append(time.perf_counter_ns() - t0)
    return nbytes / statistics.median(times)  # bytes per ns == GB/s


def _machine() -> dict:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return {
        "cpu": model or platform.processor(), "cores": cores, "os": platform.platform(),
        "python": platform.python_version(), "torch": torch.__version__,
        "numpy": np.__version__, "threads": torch.get_num_threads(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


# ----------------------------------------------------------------------------------------------
# 1. per-op overhead
# ----------------------------------------------------------------------------------------------

def _falls_back(acme, fn) -> bool:
    acme.reset_fallback_counts()
    fn()
    acme.synchronize()
    hit = any(v for v in acme.fallback_counts().values())
    acme.reset_fallback_counts()
    return hit


def _load_template():
    """Build and load the stable-ABI kernel template (examples/stable_kernels, TORCH_TARGET 2.11)
    through examples/native_kernel.py: (label, KernelLibrary) or (why not, None)."""
    path = ROOT / "examples" / "native_kernel.py"
    import importlib.util

    from torchvendor.sdk import load_kernel_library

    spec = importlib.util.spec_from_file_location("tv_native_kernel_example", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
        lib = load_kernel_library(mod.build_template())
    except Exception as exc:  # no cmake or compiler, or the template broke: say so in the report
        return (f"stable-ABI kernel unavailable ({type(exc).__name__}: {exc!s:.80})", None)
    return ("stable-ABI kernel (examples/stable_kernels)", lib)


# The floor kernels (bench/floor_kernels): each a prefix of what a device kernel does, registered
# for an aten operator nobody else serves on the device, all called as torch.<op>(a, b) on two
# 16-element float32 device tensors (see docs/bench_device.md, "Floors").
FLOORS = [
    ("unboxed C++ kernel returning its input", "hypot"),
    ("stable-ABI kernel returning its input", "div"),
    ("unboxed + at::empty_strided", "remainder"),
    ("stable + torch::stable::empty", "maximum"),
    ("stable + shim aoti_torch_empty_strided", "minimum"),
    ("stable + kernel API empty_strided", "atan2"),
    ("stable + shim alloc + getCurrentStream + launch", "fmax"),
    ("stable + kernel API alloc + current_stream + launch", "fmin"),
]


def _load_floors(acme):
    """Build bench/floor_kernels (the unboxed library too when torch's full headers compile) and
    load it: (None, loaded unboxed?) or (why not, False)."""
    import subprocess

    from torchvendor.sdk import cmake_dir, load_kernel_library

    src, build = ROOT / "bench" / "floor_kernels", ROOT / "build" / "bench" / "floor_kernels"
    unboxed = True
    try:
        for flag in ("ON", "OFF"):
            cfg = subprocess.run(["cmake", "-S", str(src), "-B", str(build),
                                  f"-Dtorchvendor_DIR={cmake_dir()}", f"-DTV_FLOOR_UNBOXED={flag}"],
                                 capture_output=True, text=True)
            made = cfg.returncode == 0 and subprocess.run(
                ["cmake", "--build", str(build)], capture_output=True, text=True).returncode == 0
            if made:
                break
            unboxed = False
        else:
            return ("floor kernels did not build", False)
        load_kernel_library(build / "libtv_floor_kernels.so")
        if unboxed:
            torch.ops.load_library(str(build / "libtv_floor_unboxed.so"))
    except Exception as exc:  # no cmake or compiler: say so in the report
        return (f"floor kernels unavailable ({type(exc).__name__}: {exc!s:.80})", False)
    return (None, unboxed)


def bench_floors(acme, quick: bool):
    """Each floor kernel (FLOORS) interleaved with CPU eager add: rows like bench_overhead's."""
    inner, repeats = (200, 7) if quick else (1000, 15)
    why, unboxed = _load_floors(acme)
    if why is not None:
        return [("floors", why, None, None, None, None)]
    a_c, b_c = torch.randn(16), torch.randn(16)
    a_d, b_d = a_c.to(DEVICE), b_c.to(DEVICE)
    for op in ("fmax", "fmin"):  # the launching floors compute a + b
        torch.testing.assert_close(getattr(torch, op)(a_d, b_d).cpu(), a_c + b_c)
    rows = []
    for label, op in FLOORS:
        if op in ("hypot", "remainder") and not unboxed:
            continue
        fn = getattr(torch, op)
        (cpu, dev), (cpu_t, dev_t) = paired_us(lambda: torch.add(a_c, b_c), lambda: fn(a_d, b_d),
                                               acme.synchronize, inner=inner, repeats=repeats)
        rows.append((label, f"torch.{op}", dev, dev / cpu, dev_t, dev_t / cpu_t))
    return rows


SMALL_OPS = {
    "add": lambda a, b: torch.add(a, b),
    "mul": lambda a, b: torch.mul(a, b),
    "relu": lambda a, b: torch.relu(a),
}


def bench_overhead(acme, quick: bool):
    """add/mul/relu on 16 float32 elements: CPU eager, then the device through the CPU fallback,
    then (after loading the template, which replaces the fallback for them) the stable-ABI
    kernels; plus add(out=) and empty(16) through the fallback and the caching allocator."""
    inner, repeats = (200, 7) if quick else (1000, 15)
    rows = []
    a_c, b_c = torch.randn(16), torch.randn(16)
    a_d, b_d = a_c.to(DEVICE), b_c.to(DEVICE)
    sync = acme.synchronize

    def pair(label, what, cpu_fn, dev_fn):
        (cpu, dev), (cpu_t, dev_t) = paired_us(cpu_fn, dev_fn, sync, inner=inner, repeats=repeats)
        rows.extend([(label, "CPU eager", cpu, 1.0, cpu_t, 1.0),
                     (label, f"{DEVICE} ({what})", dev, dev / cpu, dev_t, dev_t / cpu_t)])

    for name, fn in SMALL_OPS.items():
        assert _falls_back(acme, lambda: fn(a_d, b_d)), f"{name} has a native kernel already"
        pair(f"{name}, 16 x f32", "CPU fallback", lambda: fn(a_c, b_c), lambda: fn(a_d, b_d))
    out_c, out_d = torch.empty(16), torch.empty(16, device=DEVICE)
    pair("add(out=), 16 x f32", "CPU fallback", lambda: torch.add(a_c, b_c, out=out_c),
         lambda: torch.add(a_d, b_d, out=out_d))
    pair("empty(16)", "caching allocator", lambda: torch.empty(16),
         lambda: torch.empty(16, device=DEVICE))
    # last: the template's kernels replace the fallback for add/mul/relu in this process
    label, lib = _load_template()
    for name, fn in SMALL_OPS.items():
        if lib is None:
            rows.append((f"{name}, 16 x f32", label, None, None, None, None))
            continue
        assert not _falls_back(acme, lambda: fn(a_d, b_d)), f"{name} still falls back"
        torch.testing.assert_close(fn(a_d, b_d).cpu(), fn(a_c, b_c))
        pair(f"{name}, 16 x f32", label, lambda: fn(a_c, b_c), lambda: fn(a_d, b_d))
    return rows


# ----------------------------------------------------------------------------------------------
# 2. copy bandwidth
# ----------------------------------------------------------------------------------------------

def bench_copies(acme, quick: bool):
    sizes = [64 * KB, 1 * MB, 16 * MB, 256 * MB] if not quick else [64 * KB, 1 * MB, 16 * MB]
    two = acme.device_count() >= 2
    sync = acme.synchronize

    def sync_all():
        for i in range(acme.device_count()):
            acme.synchronize(i)
    nosync = lambda: None  # noqa: E731
    rows = []
    for n in sizes:
        reps = max(9, min(200, (256 * MB) // n // 4)) if not quick else 5
        pageable = torch.empty(n, dtype=torch.uint8).fill_(1)
        pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True).fill_(2)
        host_dst = torch.empty(n, dtype=torch.uint8)
        pinned_dst = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        d0 = torch.empty(n, dtype=torch.uint8, device=f"{DEVICE}:0")
        d0b = torch.empty(n, dtype=torch.uint8, device=f"{DEVICE}:0")
        src_np, dst_np = pageable.numpy(), host_dst.numpy()
        r = {"size": n}
        r["memcpy torch"] = copy_gbps(lambda: host_dst.copy_(pageable), nosync, n, repeats=reps)
        r["memcpy numpy"] = copy_gbps(lambda: np.copyto(dst_np, src_np), nosync, n,
                                      repeats=reps)
        r["H2D pageable"] = copy_gbps(lambda: d0.copy_(pageable), sync, n, repeats=reps)
        r["H2D pinned"] = copy_gbps(lambda: d0.copy_(pinned, non_blocking=True), sync, n,
                                    repeats=reps)
        r["D2H pageable"] = copy_gbps(lambda: host_dst.copy_(d0), sync, n, repeats=reps)
        r["D2H pinned"] = copy_gbps(lambda: pinned_dst.copy_(d0, non_blocking=True), sync, n,
                                    repeats=reps)
        r["D2D same"] = copy_gbps(lambda: d0b.copy_(d0), sync, n, repeats=reps)
        if two:
            d1 = torch.empty(n, dtype=torch.uint8, device=f"{DEVICE}:1")
            r["D2D 0->1"] = copy_gbps(lambda: d1.copy_(d0), sync_all, n, repeats=reps)
            del d1
        # correctness of what was measured
        assert torch.equal(pinned_dst, host_dst) and bool((host_dst == 2).all())
        rows.append(r)
        del pageable, pinned, host_dst, pinned_dst, d0, d0b
        acme.empty_cache()
    return rows


# ----------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------

def _size(n):
    return f"{n // MB} MiB" if n >= MB else f"{n // KB} KiB"


def _reading_per_op(overhead, floors) -> list[str]:
    """The per-op bullets of the reading: where the time of a stable-ABI kernel and of the
    fallback goes, from the floor rows (CPU time)."""
    ct = {op: c for _, op, _, _, c, _ in floors if c is not None}
    cpu_add = statistics.median(c / r for _, _, _, _, c, r in floors if c is not None) if ct else None
    tpl = {op.split(",")[0]: c for op, p, _, _, c, _ in overhead if "stable-ABI" in p and c}
    out = []
    if ct and "torch.div" in ct and "torch.fmin" in ct:
        ident, floor = ct["torch.div"], ct["torch.fmin"]
        unboxed = ct.get("torch.hypot")
        out.append(
            f"- Torch's floor for a stable-ABI kernel, measured (Floors, CPU time): a kernel that "
            f"returns its input costs {ident:.2f} µs per call"
            + (f" ({ident - unboxed:.2f} µs more than the same kernel unboxed on torch's C++ API, "
               f"{unboxed:.2f} µs: the stable ABI's boxing)" if unboxed else "")
            + f"; returning a new tensor instead (its storage, TensorImpl and Python object made "
            f"and freed on every call, which returning the input skips) adds "
            f"{ct['torch.maximum'] - ident:.2f} µs through torch::stable::empty (the operator "
            f"looked up by name and dispatched on every call), {ct['torch.minimum'] - ident:.2f} "
            f"µs through the C shim, {ct['torch.atan2'] - ident:.2f} µs through the kernel API's "
            f"empty_strided"
            + (f" (an unboxed kernel's at::empty_strided: {ct['torch.remainder'] - unboxed:.2f} µs)"
               if unboxed and "torch.remainder" in ct else "")
            + "; the "
            f"current stream and a launch through the runtime add "
            f"{floor - ct['torch.atan2']:.2f} µs. The least a stable-ABI kernel can do here "
            f"(allocate, find the stream, launch: torch.fmin) is {floor:.2f} µs = "
            f"{floor / cpu_add:.2f}x CPU eager add: the floor of this path, below the 1.5x target.")
        if tpl:
            out.append(
                "- The template's kernels cost "
                + ", ".join(f"{op} {c - floor:+.2f} µs" for op, c in tpl.items())
                + " over that floor: reading the operands' dtypes, sizes and strides through the "
                "shim (one C call each), broadcasting and type promotion, the device check, "
                "counting the call, and a larger argument block; add also passes the SDK's bridge "
                "from aten::add.Tensor (Scalar alpha) to the twin torchvendor::add.Tensor.")
    out.append(
        "- The fallback's direct path (dense device tensors) copies each device input to a CPU "
        "tensor of the same strides with one runtime copy (none for an out= argument; tensors "
        "up to 4 KiB in reused host staging blocks, not torch's CPU allocator), runs the "
        "CPU kernel (redispatched to the CPU key) and allocates and copies each output back, "
        "without the dispatcher calls of torch's cpu_fallback (Tensor.cpu() and Tensor.to() per "
        "tensor). add and mul pay more than relu before reaching it: torch serves add.Tensor on "
        "the device with its structured wrapper (a TensorIterator over the device tensors, an "
        "output allocated through the dispatcher, then add.out), so the fallback runs add.out.")
    return out


def render(machine, overhead, floors, copies, wall, quick) -> str:
    out = ["# Device layer benchmark", "",
           "Generated by `bench/bench_device.py`" + (" --quick" if quick else "") +
           f" in {wall:.0f} s (one process; device `{DEVICE}` on the reference simulated "
           "runtime, whose \"device memory\" is host memory, so copies are memcpys behind the "
           "runtime ABI and stream queues).", "",
           "## Machine", "",
           "| | |", "|---|---|"]
    for k, v in machine.items():
        out.append(f"| {k} | {v} |")
    out += ["", "## Per-op overhead", "",
            "Median over batches of the mean time per call (device synchronized at the end of "
            "each batch). Each device row is measured with batches interleaved with the CPU "
            "eager row above it, and its ratio is relative to that CPU time. Wall: elapsed time; "
            "CPU time: the process's CPU time (all threads), which leaves out the time other "
            "processes held the cores, so its ratio moves less on a loaded machine.", "",
            "| op | path | wall µs / call | × CPU eager (wall) | CPU-time µs / call "
            "| × CPU eager (CPU time) |", "|---|---|---:|---:|---:|---:|"]
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for op, path, t, ratio, ct, cratio in overhead:
        out.append(f"| {op} | {path} | {fmt(t, '.1f')} | {fmt(ratio, '.1f')} | {fmt(ct, '.1f')} "
                   f"| {fmt(cratio, '.1f')} |")
    if floors:
        out += ["", "## Floors", "",
                "What a 16-element op costs on the device when its kernel does only a prefix of "
                "a real kernel's work (bench/floor_kernels, one kernel per aten operator nobody "
                "else serves, called as `torch.<op>(a, b)`), each interleaved with CPU eager "
                "`torch.add` like the rows above; ratios are to that CPU time. Read down the "
                "stable rows: each adds one step of the template's kernel. See the reading below.",
                "", "| floor kernel | called as | wall µs / call | × CPU add (wall) "
                "| CPU-time µs / call | × CPU add (CPU time) |", "|---|---|---:|---:|---:|---:|"]
        for label, op, t, ratio, ct, cratio in floors:
            out.append(f"| {label} | {op} | {fmt(t, '.2f')} | {fmt(ratio, '.2f')} "
                       f"| {fmt(ct, '.2f')} | {fmt(cratio, '.2f')} |")
    cols = [k for k in copies[0] if k != "size"]
    out += ["", "## Copy bandwidth (GB/s, 1 GB = 1e9 bytes)", "",
            "Median of repeated synchronous copies (`non_blocking=True` copies are followed by "
            "`synchronize()` inside the timed region). `memcpy torch` / `memcpy numpy`: a "
            "plain host-to-host copy of the same size (`Tensor.copy_` on CPU with one "
            "intra-op thread, `numpy.copyto`), the ceiling for a simulator whose device memory "
            "is host memory.",
            "", "| size | " + " | ".join(cols) + " |",
            "|---|" + "---:|" * len(cols)]
    for r in copies:
        out.append(f"| {_size(r['size'])} | " + " | ".join(f"{r[c]:.2f}" for c in cols) + " |")
    big = copies[-1]
    out += ["", "## Reading", ""]
    for path, target in (("CPU fallback", 3.0), ("stable-ABI kernel", 1.5)):
        got = [(op.split(",")[0], r, cr) for op, p, t, r, ct, cr in overhead
               if path in p and r is not None]
        if got:
            worst = max(max(r, cr) for _, r, cr in got)
            out.append(f"- Per-op overhead through the {path}: "
                       + ", ".join(f"{op} {r:.1f}x wall / {cr:.1f}x CPU time" for op, r, cr in got)
                       + f" CPU eager (target {target:g}x or less: "
                       + ("met" if worst <= target else "not met") + ").")
    out += _reading_per_op(overhead, floors)
    out += [
            f"- At {_size(big['size'])}, H2D pinned reaches "
            f"{100 * big['H2D pinned'] / big['memcpy numpy']:.0f} % and D2H pinned "
            f"{100 * big['D2H pinned'] / big['memcpy numpy']:.0f} % of a host memcpy "
            f"(numpy.copyto); pageable H2D "
            f"{100 * big['H2D pageable'] / big['memcpy numpy']:.0f} %, "
            f"D2D {100 * big['D2D same'] / big['memcpy numpy']:.0f} %. The simulator's copies "
            "are the same memcpy run on a stream worker thread, so ratios near or above 100 % "
            "mean \"at memcpy speed, within this machine's noise\" (large copies are bound by "
            "the shared machine's memory bandwidth).",
            f"- Small copies ({_size(copies[0]['size'])}) are dominated by per-copy overhead "
            f"(H2D pinned {copies[0]['H2D pinned']:.2f} GB/s vs memcpy "
            f"{copies[0]['memcpy numpy']:.2f} GB/s): every copy locks the runtime, checks "
            "both ends and waits for the stream; copies up to 64 KiB run on the calling thread "
            "when the stream is idle, larger ones on the stream's worker.",
            "- Timings are taken on a shared machine (see load above): compare ratios within "
            "one run, not across runs; where wall and CPU-time ratios differ, other processes "
            "held the cores during the device batches.", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations and sizes")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench_device.md"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    from torchvendor.sdk import register_device

    acme = register_device(DEVICE)
    # One intra-op thread: on a small shared machine OpenMP's thread hand-offs make a CPU
    # copy_ of >= 64 KiB take milliseconds, which would distort both the baselines and the
    # fallback's CPU compute. The runtime's own copies run on its stream worker threads.
    torch.set_num_threads(1)
    machine = _machine()
    overhead = bench_overhead(acme, args.quick)
    for op, path, t, ratio, ct, cratio in overhead:
        print(f"{op:24s} {path:45s} {'-' if t is None else f'{t:9.1f} us  x{ratio:.1f}'}"
              f"{'' if ct is None else f'   cpu-time {ct:6.1f} us  x{cratio:.1f}'}", flush=True)
    floors = bench_floors(acme, args.quick)
    for label, op, t, ratio, ct, cratio in floors:
        print(f"floor {label:52s} {op:16s}" + ("" if ct is None else
              f"{t:6.2f} us x{ratio:.2f}   cpu-time {ct:6.2f} us x{cratio:.2f}"), flush=True)
    copies = bench_copies(acme, args.quick)
    for r in copies:
        print(_size(r["size"]), "  ".join(f"{k}={v:.2f}" for k, v in r.items() if k != "size"),
              flush=True)
    text = render(machine, overhead, floors, copies, time.perf_counter() - t0, args.quick)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
