"""Bus bandwidth of the native c10d path on a PrivateUse1 GPU device (the CUDA reference runtime's
collectives, NCCL underneath) against torch's own NCCL process group on ``cuda`` tensors: two
processes, one GPU each, in one run.

    python bench/bench_collectives_gpu.py [--quick] [--out docs/bench_distributed.md] [--json rows.json]
                                          [--tree COMMIT] [--note TEXT] [--from-json rows.json]

Each rank registers its GPU twice over: as torch's ``cuda`` device, in an ``nccl`` group, and as
the PrivateUse1 device ``gpu`` on ``tv_cuda_runtime.c``, in a ``tvgloo`` group on the native path.
For all_reduce (SUM), all_gather (into one tensor) and reduce_scatter (SUM, from one tensor),
float32, 4 KiB .. 1 GiB, each repeat times a burst of calls on each of the two, interleaved, and
synchronizes the device after the burst; the median over repeats of the slower rank is reported.
Bus bandwidth follows nccl-tests: the size is the larger buffer (all_reduce's tensor,
all_gather's output, reduce_scatter's input), algorithm bandwidth = size / time and bus bandwidth
= algorithm bandwidth x 2(n-1)/n for all_reduce, x (n-1)/n for the other two (1 GB = 1e9 bytes).

Where the time goes, per call and path: ``host`` is the time to issue the burst (the calls return
before the device is done), ``device`` the stream time between events recorded before and after
the burst. A path is host-bound where host is close to its time per call. Latency is the time per
call of a one-element all_reduce over a burst, also for the native path through the group's Python
methods (its path before the C++ fast path: the communicator handle withheld from C++).

The results replace the section between the ``gpu-collectives`` markers of the output file (the
rest of the file, bench/bench_distributed.py's CPU numbers, stays). ``--tree`` names the commit
where the run's copy has no git metadata of its own (or stale metadata), ``--note`` says what else
ran on the machine meanwhile; ``--from-json`` writes the section again from a run's ``--json``
without measuring.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
SIZES = [4 << 10 << 2 * i for i in range(10)]  # 4 KiB, 16 KiB, ..., 1 GiB
KINDS = ("all_reduce", "all_gather", "reduce_scatter")
WORLD = 2
START, END = "<!-- gpu-collectives:start -->", "<!-- gpu-collectives:end -->"
for _var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ.setdefault(_var, "0" if _var == "NCCL_NVLS_ENABLE" else "1")  # NVLink multicast off


def _burst(size: int) -> int:
    """Calls per timed burst: about 256 MiB moved, at least 10 and at most 200 calls (the sync after
    a burst, and the idle device's first call, then weigh a tenth or less of it)."""
    return max(10, min(200, (256 << 20) // size))


def _collective(kind: str, size: int, dev: str, group: Any) -> Callable[[], Any]:
    """A zero-argument call of ``kind`` on ``size`` bytes of float32 (the larger buffer) on ``dev``."""
    import torch.distributed as dist

    n = size // 4
    if kind == "all_reduce":
        x = torch.ones(n, device=dev)
        return lambda: dist.all_reduce(x, group=group)
    big, small = torch.ones(n, device=dev), torch.ones(n // WORLD, device=dev)
    if kind == "all_gather":
        return lambda: dist.all_gather_into_tensor(big, small, group=group)
    return lambda: dist.reduce_scatter_tensor(small, big, group=group)


def _time(calls: list, burst: int, repeats: int) -> list[tuple[float, float, float]]:
    """(wall, host, device) seconds per call of each ``(fn, sync, stream)``, medians over repeats
    with the bursts interleaved, after one warm burst. host: issuing the burst; device: between
    events recorded on ``stream`` around it."""
    times: list[list[tuple[float, float, float]]] = [[] for _ in calls]
    for i in range(repeats + 1):
        for (fn, sync, stream), ts in zip(calls, times):
            start, end = (torch.Event(device=stream.device, enable_timing=True) for _ in range(2))
            sync()
            t0 = time.perf_counter()
            start.record(stream)
            for _ in range(burst):
                fn()
            end.record(stream)
            t1 = time.perf_counter()
            sync()
            if i:
                t2 = time.perf_counter()
                ts.append(((t2 - t0) / burst, (t1 - t0) / burst, start.elapsed_time(end) / 1e3 / burst))
    return [tuple(statistics.median(t[k] for t in ts) for k in range(3)) for ts in times]


def _worker(rank: int, port: int, out: str, sizes: list[int], repeats: int) -> None:
    import torch.distributed as dist

    from torchvendor import _C
    from torchvendor.reference_backends.cuda.runtime import build_runtime
    from torchvendor.sdk import collective_counts, register_device, register_distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    gpu = register_device("gpu", runtime=build_runtime())
    torch.cuda.set_device(rank)
    gpu.set_device(rank)
    dist.init_process_group(register_distributed(), rank=rank, world_size=WORLD, device_id=torch.device("gpu", rank))
    assert dist.group.WORLD.native, "the CUDA runtime should serve the collective entries"
    nccl = dist.new_group(backend="nccl", device_id=torch.device("cuda", rank))
    gloo = dist.new_group(backend="gloo")
    on_cuda = (torch.cuda.synchronize, torch.cuda.current_stream())
    on_gpu = (gpu.synchronize, gpu.current_stream())

    def slower(times: list[tuple[float, ...]]) -> list[list[float]]:
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        return t.tolist()

    rows = []
    for kind in KINDS:
        for size in sizes:
            calls = [(_collective(kind, size, f"cuda:{rank}", nccl), *on_cuda),
                     (_collective(kind, size, f"gpu:{rank}", None), *on_gpu)]
            rows.append((kind, size, *slower(_time(calls, _burst(size), repeats if size > 16 << 20 else 3 * repeats))))
            del calls
            torch.cuda.empty_cache()
            gpu.empty_cache()
    one = [(_collective("all_reduce", 4, f"cuda:{rank}", nccl), *on_cuda),
           (_collective("all_reduce", 4, f"gpu:{rank}", None), *on_gpu)]
    latency = slower(_time(one, 1000, repeats))
    counts = collective_counts()
    group = dist.group.WORLD  # the Python group's path: C++ declines without the communicator
    _C.set_native_collectives(group, True, 0, rank)
    python_path = slower(_time(one[1:], 1000, repeats))[0]
    _C.set_native_collectives(group, True, group._comm[1], rank)
    dist.destroy_process_group()
    if rank == 0:
        torch.save({"rows": rows, "latency": latency, "python_path": python_path, "counts": counts,
                    "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}, out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fmt_size(b: int) -> str:
    return f"{b >> 30} GiB" if b >= 1 << 30 else f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def _busbw(kind: str, size: int, t: float) -> float:
    factor = 2 * (WORLD - 1) / WORLD if kind == "all_reduce" else (WORLD - 1) / WORLD
    return size / t / 1e9 * factor


def _tree() -> str:
    """The commit this run measured (and '+' when the working tree differs), or '?' without git."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _markdown(result: dict) -> str:
    lines = [
        START,
        "## Two GPUs: the native path on the PrivateUse1 device vs torch's NCCL process group",
        "",
        f"Generated by `bench/bench_collectives_gpu.py` on {result.get('date', datetime.date.today())} "
        f"(tree {result['tree']}): "
        f"torch {result.get('torch', '?')}, {WORLD} processes on one machine, one {result['gpu']} each (NVLink multicast "
        "off: NCCL_NVLS_ENABLE=0). `nccl` = torch's `nccl` process group on `cuda` tensors; `native` = the "
        "`tvgloo` group on the PrivateUse1 device `gpu` (the CUDA reference runtime, "
        "`reference_backends/cuda/runtime/tv_cuda_runtime.c`, whose collective entries call the NCCL "
        "torch ships, opened with dlopen), enqueued on the device's current stream from C++ "
        "(csrc/device/process_group.cpp). float32; median time per call of the slower rank over bursts of "
        "calls; bus bandwidth as nccl-tests computes it (all_reduce: size/time x 2(n-1)/n; all_gather, "
        "reduce_scatter: size/time x (n-1)/n, size = the larger buffer; 1 GB = 1e9 bytes). host / device: "
        "per call, the time to issue the burst and the stream time it took (a path whose host time is "
        "close to its time per call is host-bound)." + (f" Also on the machine during the run: {result['note']}"
                                                       if result.get("note") else ""),
        "",
        "| collective | size | nccl (us) | native (us) | nccl busbw (GB/s) | native busbw (GB/s) | native / nccl busbw "
        "| nccl host / device (us) | native host / device (us) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    worst: dict[str, float] = {}
    for kind, size, nccl, nat in result["rows"]:
        b_nccl, b_nat = _busbw(kind, size, nccl[0]), _busbw(kind, size, nat[0])
        worst[kind] = min(worst.get(kind, float("inf")), b_nat / b_nccl)
        lines.append(f"| {kind} | {_fmt_size(size)} | {nccl[0] * 1e6:.1f} | {nat[0] * 1e6:.1f} | {b_nccl:.2f} "
                     f"| {b_nat:.2f} | {b_nat / b_nccl:.2f}x | {nccl[1] * 1e6:.1f} / {nccl[2] * 1e6:.1f} "
                     f"| {nat[1] * 1e6:.1f} / {nat[2] * 1e6:.1f} |")
    nccl, nat = result["latency"]
    py = result["python_path"]
    lines += [
        "",
        "Lowest native / nccl bus bandwidth over the sizes: "
        + ", ".join(f"{kind} {w:.2f}x" for kind, w in worst.items()) + ".",
        "",
        f"Small-message latency (one-element all_reduce, per call, bursts of 1000): nccl {nccl[0] * 1e6:.1f} us "
        f"(host {nccl[1] * 1e6:.1f}), native {nat[0] * 1e6:.1f} us (host {nat[1] * 1e6:.1f}); the native path "
        f"through the group's Python methods, as before the C++ path: {py[0] * 1e6:.1f} us (host {py[1] * 1e6:.1f}).",
        "",
        f"Collectives on device tensors counted by rank 0 (`collective_counts()`): {result['counts']}.",
        END,
    ]
    return "\n".join(lines)


def _splice(path: Path, section: str) -> str:
    """``path``'s text with the marked section replaced by ``section`` (appended if absent)."""
    text = path.read_text() if path.exists() else ""
    if START in text and END in text:
        return text[:text.index(START)] + section + text[text.index(END) + len(END):]
    return text.rstrip("\n") + "\n\n" + section + "\n"


def main(argv: list[str] | None = None) -> int:
    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 1 MiB, fewer repeats")
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench_distributed.md"))
    parser.add_argument("--json", help="also write the raw numbers (seconds per call) here")
    parser.add_argument("--tree", help="the commit measured, where git here cannot say (default: git)")
    parser.add_argument("--note", help="what else ran on the machine during the run (written in the section)")
    parser.add_argument("--from-json", help="write the section from this earlier run's --json, measuring nothing")
    args = parser.parse_args(argv)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
        result.update({k: v for k, v in (("tree", args.tree), ("note", args.note)) if v})
        Path(args.out).write_text(_splice(Path(args.out), _markdown(result)))
        return 0
    if torch.cuda.device_count() < WORLD:
        print(f"bench_collectives_gpu: needs {WORLD} GPUs, found {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    sizes = [s for s in SIZES if s <= (1 << 20)] if args.quick else SIZES
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.pt")
        mp.spawn(_worker, args=(_free_port(), out, sizes, 3 if args.quick else 5), nprocs=WORLD, join=True)
        result = torch.load(out)
    result.update(tree=args.tree or _tree(), date=str(datetime.date.today()), note=args.note)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    section = _markdown(result)
    print(section)
    if not args.quick:
        Path(args.out).write_text(_splice(Path(args.out), section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
