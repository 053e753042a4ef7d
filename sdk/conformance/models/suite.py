"""The model suite, a process per model: one model's crash (a segfault in a generated kernel, an
illegal address that poisons the CUDA context) never stops the others, and the result says
which backend and which step killed the process.

Each child runs :func:`.check.check_model` and writes its progress events to a JSON-lines file;
the driver runs ``jobs`` children at once, each with fresh compile caches (so "cold" is cold),
and turns the events into one record per model and backend.

    >>> import tempfile
    >>> rows = run_suite(["moe_topk"], ["eager"], parts=("inference",), timing=False, jobs=1,
    ...                  workdir=tempfile.mkdtemp())
    >>> rows[0]["backends"]["eager"]["status"]
    'correct'
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

__all__ = ["run_suite", "main", "runtime_path"]


def _command(model: str, backends: Sequence[str], events: Path, args: dict[str, Any]) -> list[str]:
    cmd = [sys.executable, "-m", "torchvendor.sdk.conformance.models.suite", "--child", model,
           "--backends", ",".join(backends), "--events", str(events), "--device", args["device"],
           "--parts", ",".join(args["parts"]), "--budget", str(args["budget"])]
    if args.get("baseline_parts") is not None:
        cmd += ["--baseline-parts", ",".join(args["baseline_parts"])]
    if args.get("runtime"):
        cmd += ["--runtime", args["runtime"]]
    return cmd + ([] if args["timing"] else ["--no-timing"]) + ([] if args["warm"] else ["--no-warm"])


def _assemble(model: str, events: Path, returncode: int | None, stderr: str, seconds: float) -> dict[str, Any]:
    """One model's record from its events; a process that died marks the step it was in as crashed."""
    lines = events.read_text().splitlines() if events.exists() else []
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            continue  # cut short by the crash
    done = next((e["done"] for e in parsed if "done" in e), None)
    if done is not None:
        done["seconds"] = seconds
        return done
    record: dict[str, Any] = {"model": model, "backends": {}, "ms": {}, "seconds": seconds}
    eager_error = next((e["eager_error"] for e in parsed if "eager_error" in e), None)
    if eager_error:
        record["eager_error"] = eager_error
        return record
    current = None
    for e in parsed:
        if "begin" in e:
            current = e["begin"]
        elif "backend" in e:
            b = record["backends"].setdefault(e["backend"], {"parts": {}, "compile_s": {}})
            b["parts"][e["part"]] = e["result"]
    why = "timeout" if returncode is None else f"exit status {returncode}"
    tail = stderr.strip().splitlines()[-6:]
    crashed = current[0] if current else "(before any step)"  # "all": the timing of every backend
    record["crash"] = {"backend": crashed, "step": current[1] if current else "", "why": why,
                       "stderr": tail}
    dead = "timed out" if returncode is None else "crashed"
    for name, b in record["backends"].items():
        b["status"] = dead if name == crashed else "not finished"
    if crashed not in record["backends"]:
        record["backends"][crashed] = {"parts": {}, "compile_s": {}, "status": dead}
    return record


def run_suite(models: Sequence[str], backends: Sequence[str], *, device: str = "cpu",
              parts: Sequence[str] = ("inference", "dynamic", "training"), baseline_parts: Sequence[str] | None = None,
              timing: bool = True, warm: bool = True, budget: float = 1.0, jobs: int = 1, timeout: float = 900.0,
              threads: int | None = None, runtime: str | None = None, workdir: str | None = None,
              shared_cache: bool = False, deadline: float | None = None, stop: float | None = None,
              progress: bool = False) -> list[dict[str, Any]]:
    """Check ``models`` on ``backends``, a child process per model, ``jobs`` at a time; the
    records in model order (see :func:`.check.check_model`; a dead child gives ``crash``).
    Every model starts with empty compile caches, or with ``shared_cache`` one pair of caches
    serves the whole run (kernels that models share are then built once). No model starts
    after ``deadline`` seconds: those are recorded as ``not run`` (a run that must fit a budget);
    at ``stop`` seconds the models still running are ended and recorded as ``not run`` too, so
    the run returns (and its caller writes what finished) before an outer time limit kills it."""
    from .catalog import SPECS

    unknown = [m for m in models if m not in SPECS]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; known: {sorted(SPECS)}")
    root = Path(workdir or tempfile.mkdtemp(prefix="tv-models-"))
    args = {"device": device, "parts": parts, "baseline_parts": baseline_parts, "timing": timing, "warm": warm,
            "budget": budget, "runtime": runtime}
    pending, running, records = list(models), {}, {}
    start = time.perf_counter()
    while pending or running:
        if deadline is not None and time.perf_counter() - start > deadline:
            for model in pending:
                records[model] = {"model": model, "backends": {}, "ms": {}, "not_run": "the run's time budget was spent"}
            pending = []
        while pending and len(running) < max(1, jobs):
            model = pending.pop(0)
            caches = root / ("shared" if shared_cache else model)
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"),
                       TORCHVENDOR_CACHE_DIR=str(caches / "torchvendor"), PYTHONWARNINGS="ignore")
            if threads:
                env["OMP_NUM_THREADS"] = str(threads)
            events, err = root / model / "events.jsonl", root / model / "stderr.txt"
            events.parent.mkdir(parents=True, exist_ok=True)
            events.unlink(missing_ok=True)
            proc = subprocess.Popen(_command(model, backends, events, args), env=env, stdout=subprocess.DEVNULL,
                                    stderr=open(err, "w"))
            running[model] = (proc, time.perf_counter(), events, err)
        time.sleep(0.2)
        if stop is not None and time.perf_counter() - start > stop:
            for model, (proc, started, _, _) in running.items():
                proc.kill()
                proc.wait()
                records[model] = {"model": model, "backends": {}, "ms": {}, "not_run":
                                  f"ended at the run's time limit after {time.perf_counter() - started:.0f} s"}
            running = {}
        for model, (proc, started, events, err) in list(running.items()):
            took = time.perf_counter() - started
            if proc.poll() is None and took < timeout:
                continue
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                code = None
            else:
                code = proc.returncode
            records[model] = _assemble(model, events, code, err.read_text(errors="replace"), took)
            del running[model]
            if progress:
                statuses = {b: r.get("status") for b, r in records[model].get("backends", {}).items()}
                print(f"[{len(records)}/{len(models)}] {model}: {statuses or records[model].get('eager_error')} "
                      f"({took:.0f} s)", flush=True)
    return [records[m] for m in models]


def runtime_path(spec: str | None) -> str | None:
    """The runtime library a ``--runtime`` names: a path, or ``module:function`` that builds one
    and returns its path (a runtime compiled on first use).

    >>> runtime_path("/opt/acme/libacme_tv.so"), runtime_path(None)
    ('/opt/acme/libacme_tv.so', None)
    """
    if not spec or ":" not in spec or spec.startswith("/"):
        return spec
    import importlib

    module, _, fn = spec.partition(":")
    return str(getattr(importlib.import_module(module), fn)())


def _child(args: argparse.Namespace) -> int:
    import torch

    from ..core import _import_entry_point
    from .check import check_model

    if args.device not in ("cpu", "cuda"):
        from torchvendor.sdk import register_device

        register_device(args.device, runtime=runtime_path(args.runtime))
    for b in args.backends.split(","):
        _import_entry_point(b)  # a backend's entry point names its package (any vendor's, ours alike)
    torch.manual_seed(0)
    with open(args.events, "a") as sink:
        def emit(event: dict[str, Any]) -> None:
            sink.write(json.dumps(event, default=str) + "\n")
            sink.flush()
            os.fsync(sink.fileno())
        check_model(args.child, args.backends.split(","), device=args.device, parts=args.parts.split(","),
                    baseline_parts=args.baseline_parts.split(",") if args.baseline_parts else None,
                    timing=args.timing, warm=args.warm, budget=args.budget, sink=emit)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m torchvendor.sdk.conformance.models.suite --child MODEL ...``: one model (the
    driver's child process)."""
    p = argparse.ArgumentParser(description="run one model of the suite (a child of run_suite)")
    p.add_argument("--child", required=True)
    p.add_argument("--backends", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--runtime")
    p.add_argument("--parts", default="inference,dynamic,training")
    p.add_argument("--baseline-parts")
    p.add_argument("--budget", type=float, default=1.0)
    p.add_argument("--no-timing", dest="timing", action="store_false")
    p.add_argument("--no-warm", dest="warm", action="store_false")
    return _child(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
