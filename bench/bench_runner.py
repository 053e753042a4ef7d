"""The LOOP runner's per-call cost and memory plan, beside eager and Inductor in the same process
setup (one process per measurement, so Dynamo's caches never mix).

``overhead``: a tiny pointwise graph (``(x * y + 1).sin()`` on 16 floats) called ``--calls``
times after a warm-up; per device, eager, Dynamo alone (``backend="eager"``: the floor every
backend pays), Inductor where it runs, and each LOOP backend with
the runner's C++ replay on and off (``TORCHVENDOR_REPLAY=0``), the CUDA backend on ``cuda``
also with and without CUDA graphs. Reports the fastest of 5 timed loops (us per call) of the
whole compiled call and of the partition alone (``PartitionCall``).

``memory``: the suite's small GPT-2, forward and backward compiled; the bytes each partition's
call allocates (``ProgramRunner.memory``: naive vs planned), and on a device with allocator
statistics the step's peak (``max_memory_allocated``) with the plan on and off
(``TORCHVENDOR_MEMORY_PLAN=0``).

``layers``: the suite's models (default: BEiT, Switch Transformers, DeBERTa-v2, EfficientNet at
their small size), host time per call split by layer (Dynamo, AOTAutograd's wrapper, the outer
graph, the partition calls, the runner), beside eager, Dynamo alone and Inductor
(``bench/bench_host_layers.py`` says how each layer is timed).

    python bench/bench_runner.py overhead --devices cpu,acme --out runner.json
    python bench/bench_runner.py layers --devices cpu,acme --out layers.json
    python bench/bench_runner.py memory --devices cpu,acme
    # GPU machine: torch's cuda and the CUDA runtime as the PrivateUse1 device "gpu"
    python bench/bench_runner.py overhead --devices cuda,gpu --out $OUT/runner_gpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

_LAYER_MODELS = ("beit", "switch_transformers", "deberta_v2", "efficientnet")
_BACKENDS = {  # device -> (backend, extra environment) rows besides eager
    "cpu": [("inductor", {}), ("torchvendor_cpu", {"TORCHVENDOR_REPLAY": "0"}), ("torchvendor_cpu", {})],
    "acme": [("torchvendor_cpu", {"TORCHVENDOR_REPLAY": "0"}), ("torchvendor_cpu", {})],
    "cuda": [("inductor", {}), ("torchvendor_cuda", {}),
             ("torchvendor_cuda", {"TORCHVENDOR_CUDA_GRAPHS": "0", "TORCHVENDOR_REPLAY": "0"}),
             ("torchvendor_cuda", {"TORCHVENDOR_CUDA_GRAPHS": "0"})],
    "gpu": [("torchvendor_cuda", {"TORCHVENDOR_REPLAY": "0"}), ("torchvendor_cuda", {})],
}


def _setup(device: str) -> Any:
    import torch

    torch.set_num_threads(1)
    if device == "acme":
        from torchvendor.sdk import register_device

        register_device("acme")
    elif device == "gpu":
        from torchvendor.reference_backends.cuda.runtime import build_runtime
        from torchvendor.sdk import register_device

        register_device("gpu", runtime=build_runtime())
    import torchvendor.reference_backends.cpu  # noqa: F401 - registers the backends
    if device in ("cuda", "gpu"):
        import torchvendor.reference_backends.cuda  # noqa: F401
    return torch


def _spy_partitions() -> list:
    from torchvendor.sdk.compile import partition_call

    made: list = []
    init = partition_call.PartitionCall.__init__

    def spy(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        made.append(self)

    partition_call.PartitionCall.__init__ = spy  # a benchmark's probe, never the library's path
    return made


def _time(fn: Any, args: tuple, calls: int, sync: Any) -> float:
    for _ in range(50):
        fn(*args)
    sync()
    loops = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        sync()
        loops.append((time.perf_counter() - start) / calls * 1e6)
    return min(loops)  # the machine may be shared: the quietest loop


def _overhead_one(device: str, backend: str, calls: int) -> dict[str, Any]:
    torch = _setup(device)
    made = _spy_partitions()

    def f(x: Any, y: Any) -> Any:
        return (x * y + 1.0).sin()

    x, y = torch.randn(16).to(device), torch.randn(16).to(device)
    mod = getattr(torch, device.split(":")[0], None)
    sync = getattr(mod, "synchronize", None) if device != "cpu" else None
    sync = sync or (lambda: None)
    g = f if backend == "eager" else torch.compile(f, backend="eager" if backend == "dynamo" else backend)
    with torch.no_grad():
        row: dict[str, Any] = {"us_per_call": _time(g, (x, y), calls, sync)}
        torch.testing.assert_close(g(x, y).cpu(), f(x, y).cpu())
        if made:
            row["partition_us"] = _time(made[0], (x, y), calls, sync)
            row["replayed"] = made[0]._replay is not None
    return row


def _memory_one(device: str) -> dict[str, Any]:
    torch = _setup(device)
    from torchvendor.sdk.compile import loop_runner
    from torchvendor.sdk.conformance.models.catalog import SPECS

    runners: list = []
    call = loop_runner.ProgramRunner.__call__

    def spy(self: Any, *inputs: Any) -> Any:  # the first inputs each runner sees, for memory()
        if not any(r is self for r, _ in runners):
            runners.append((self, inputs))
        return call(self, *inputs)

    loop_runner.ProgramRunner.__call__ = spy  # a benchmark's probe
    model, inputs = SPECS["gpt2"].build()
    model, inputs = model.to(device), {k: v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}
    compiled = torch.compile(model, backend="torchvendor_cpu")
    mod = getattr(torch, device, None)
    for _ in range(2):
        loss = compiled(**inputs).logits.float().square().mean()
        loss.backward()
    peak = None
    if hasattr(mod, "max_memory_allocated"):
        mod.synchronize()
        mod.reset_peak_memory_stats()
        base = mod.memory_allocated()
        loss = compiled(**inputs).logits.float().square().mean()
        loss.backward()
        mod.synchronize()
        peak = mod.max_memory_allocated() - base
    plans = [r.memory(*i) for r, i in runners]
    return {"step_peak_bytes": peak, "partitions": len(plans),
            **{k: sum(p[k] for p in plans) for k in ("naive", "planned", "idle_inputs", "buffers", "allocations")},
            "max_partition_naive": max(p["naive"] for p in plans), "max_partition_planned": max(p["planned"] for p in plans)}


def _child(what: str, device: str, backend: str, calls: int, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "_one", what, device, backend, str(calls)]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=900)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"rc {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["overhead", "memory", "layers", "_one"])
    parser.add_argument("rest", nargs="*")
    parser.add_argument("--devices", default="cpu,acme")
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--models", help="layers: comma list of the suite's models")
    parser.add_argument("--backends", help="layers: only these of the device's rows (eager, dynamo, inductor, "
                                           "cudagraphs, torchvendor_cpu, torchvendor_cuda)")
    parser.add_argument("--jobs", type=int, default=1, help="layers: children at a time")
    parser.add_argument("--child-timeout", type=float, default=900.0, help="layers: seconds per child")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.what == "_one":
        what, device, backend, calls = args.rest
        row = _overhead_one(device, backend, int(calls)) if what == "overhead" else _memory_one(device)
        print(json.dumps(row))
        return 0
    import torch

    if args.what == "layers":
        rows = _layers(args.devices.split(","), (args.models or ",".join(_LAYER_MODELS)).split(","),
                       args.backends.split(",") if args.backends else None, args.jobs, args.child_timeout)
    else:
        rows = _runs(args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "machine": os.uname().nodename, "rows": rows}, f, indent=1)
    return 0


def _layers(devices: list[str], models: list[str], backends: list[str] | None, jobs: int,
            timeout: float = 900.0) -> list[dict[str, Any]]:
    """One child (bench_host_layers.py) per model, device and backend, ``jobs`` at a time; a
    table per model."""
    from concurrent.futures import ThreadPoolExecutor

    from bench_host_layers import BACKENDS, table

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_host_layers.py")

    def one(job: tuple[str, str, str]) -> dict[str, Any]:
        try:
            done = subprocess.run([sys.executable, script, *job], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return dict(zip(("model", "device", "backend"), job), error="timed out")
        lines = done.stdout.strip().splitlines()
        row = json.loads(lines[-1]) if done.returncode == 0 and lines else {
            **dict(zip(("model", "device", "backend"), job)),
            "error": (done.stderr.strip().splitlines() or [f"rc {done.returncode}"])[-1]}
        print(json.dumps(row), flush=True)
        return row

    todo = [(m, d, b) for m in models for d in devices for b in BACKENDS[d] if backends is None or b in backends]
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        rows = list(pool.map(one, todo))
    for model in models:
        print(table([r for r in rows if r["model"] == model]), flush=True)
    return rows


def _runs(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for device in args.devices.split(","):
        if args.what == "overhead":
            for backend, env in [("eager", {}), ("dynamo", {}), *_BACKENDS[device]]:
                row = {"device": device, "backend": backend, "env": env, **_child("overhead", device, backend,
                                                                                  args.calls, env)}
                rows.append(row)
                print(json.dumps(row), flush=True)
        else:
            for env in ({}, {"TORCHVENDOR_MEMORY_PLAN": "0"}):
                row = {"device": device, "env": env, **_child("memory", device, "torchvendor_cpu", 0, env)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
