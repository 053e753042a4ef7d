"""Vendor LOOP backends on the simulated device ``acme``, side by side with eager on the device
and with the reference ``torchvendor_cpu`` on the same device: one compiled transformer block
(the zoo's ``gpt_block``, its small and its bench size), inference. Writes docs/bench_vendor_loop.md.

    .venv/bin/python bench/bench_vendor_loop.py --threads 1   # ~12 minutes on 2 shared cores
    .venv/bin/python bench/bench_vendor_loop.py --quick       # a smoke run

Two vendors, both written only on the public SDK API (and a third, the scaffolded one built
as ``torchvendor_cpu`` builds, :func:`_tuned`):

- the scaffolded one: the backend file ``torchvendor new acme --level loop`` generates
  (:func:`scaffolded_vendor`), imported as generated: the SDK's ``CStyleRenderer`` with the
  runtime's launch model, ``transforms = (merge_neighbours,)``, kernels built by the system
  compiler and launched through the runtime table's module entries;
- :class:`VendorLoop`, a minimal one (a class attribute and a four-line ``compile``): the CPU
  reference's code generator and toolchain (``generate``, ``build``, ``DeviceKernel``), the SDK's
  artifact cache, and the one transform line; :class:`VendorLoopUnmerged`, the same without that line (one launch per
  Inductor kernel), shows what the line buys.

A last section times each kernel of the minimal vendor's block at the bench size
(:class:`VendorLoopTimed`): what a call spends in its kernels, and the rest (extern kernels, the
runner) beside eager's whole call.

Timing: interleaved rounds (one call of each variant per round, so load from other processes
hits all alike), the device synchronized after each call, the minimum over the rounds, repeated
(``--repeat``), the median of the repeats' minima reported (on a shared machine one quiet moment
can favour one variant of a round; the median repeat is steadier); the load average of the
machine before and after is written with the numbers.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import torch

from torchvendor.ir import compat
from torchvendor.ir.loop_ir import merge_neighbours
from torchvendor.reference_backends.cpu.codegen import generate
from torchvendor.reference_backends.cpu.toolchain import DeviceKernel, build
from torchvendor.sdk import LoopBackend, LoopKernel, last_report, register_backend, register_device
from torchvendor.sdk.conformance import zoo

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "acme"
#: the programs each vendor variant compiled, by content (their kernels: one launch each per call)
PROGRAMS: dict[str, dict[str, Any]] = defaultdict(dict)


class VendorLoop(LoopBackend):
    """A vendor's LOOP backend: each kernel as C++, built into a shared library (cached by its
    source), loaded and launched through the device's runtime table."""

    name = "bench_vendor_loop"
    device = DEVICE
    transforms = (merge_neighbours,)   # the one line: a run of neighbouring kernels is one launch

    def compile(self, kernel: LoopKernel) -> Callable[..., Any]:
        PROGRAMS[self.name][kernel.program.to_json(indent=None)] = kernel.program
        source = generate(kernel)
        library = self.cache.get_or_build(source, lambda path: build(source, path), ".so")
        compiled = DeviceKernel(None, kernel.name, len(kernel.buffers), kernel.device)
        compiled.load(str(library))
        return compiled


class VendorLoopUnmerged(VendorLoop):
    """The same vendor without the transform."""

    name = "bench_vendor_loop_unmerged"
    transforms = ()


class VendorLoopTimed(VendorLoop):
    """The minimal vendor, each kernel's launches timed (the simulated device runs a launch on an
    idle stream before it returns): where a compiled block's time goes, kernel by kernel."""

    name = "bench_vendor_loop_timed"
    #: kernel name -> (its ops, its shortest call in s)
    TIMES: dict[str, list] = {}

    def compile(self, kernel: LoopKernel) -> Callable[..., Any]:
        run = super().compile(kernel)
        entry = self.TIMES.setdefault(kernel.name, [_ops(kernel), math.inf])

        def timed(*args: Any) -> None:
            t0 = time.perf_counter()
            run(*args)
            entry[1] = min(entry[1], time.perf_counter() - t0)
        return timed


def _ops(kernel: LoopKernel) -> str:
    """What a kernel computes, by its nests' reductions and distinctive ops."""
    seen: dict[str, None] = {}
    for nest in kernel.kernel.nests:
        for stmt in nest.stmts():
            what = stmt.attr("kind") if stmt.op == "reduction" else stmt.op
            if what in ("exp", "tanh", "erf", "rsqrt", "sqrt", "sum", "max", "any", "welford_reduce", "where"):
                seen[str(what)] = None
    return ", ".join(seen) or "pointwise"


def scaffolded_vendor(tmp: str) -> tuple[str, str]:
    """``torchvendor new acme --level loop`` into ``tmp``; its backend module (the generated file,
    as generated) imported, which registers the backend ``acme`` on the device ``acme``. The
    generated runtime is not built: the SDK's simulated runtime already serves ``acme`` with the
    same runtime ABI. Returns the backend's name, and that of the same backend built as
    ``torchvendor_cpu`` builds (:func:`_tuned`)."""
    from torchvendor.sdk.scaffold.generate import new

    package = new(DEVICE, "loop", Path(tmp) / DEVICE)
    path = package / f"{DEVICE}_torch" / "backend.py"
    spec = importlib.util.spec_from_file_location(f"{DEVICE}_scaffolded_backend", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    backend = next(v for v in vars(module).values()
                   if isinstance(v, type) and issubclass(v, LoopBackend) and v is not LoopBackend)
    tuned = _tuned(backend, module)
    register_backend(tuned)
    return backend.name, tuned.name


def _tuned(backend: Any, module: Any) -> Any:
    """The scaffolded backend with two changes in its own hooks: the system compiler's flags
    ``torchvendor_cpu`` uses (``-march=native -fno-math-errno``, libmvec) and, in its renderer's
    prelude, glibc's vector math declarations (so ``omp simd`` loops calling exp or tanh vectorize)."""
    from torchvendor.reference_backends.cpu.codegen import VECTOR_MATH

    renderer = next(v for v in vars(module).values() if isinstance(v, type) and v.__name__.endswith("C"))

    class TunedC(renderer):
        def prelude(self) -> str:
            return self.includes + VECTOR_MATH + self.helpers

    class Tuned(backend):
        name = f"{backend.name}_tuned"

        def compile(self, kernel: LoopKernel) -> Callable[..., Any]:
            source = TunedC().render(kernel)
            library = self.cache.get_or_build(source, lambda path: build(source, path), ".so")
            return module.DeviceKernel(str(library), TunedC().symbol(kernel.name), len(kernel.buffers),
                                       len(kernel.size_vars))
    return Tuned


def min_ms(fns: list[Callable[[], Any]], sync: Callable[[], None], budget: float, min_reps: int = 5) -> list[float]:
    """Minimum wall time in ms of each of ``fns`` (device synchronized), run interleaved for
    about ``budget`` seconds per function after two warm-up calls each."""
    for fn in fns:
        fn(), fn()
        sync()
    best, start, n = [math.inf] * len(fns), time.perf_counter(), 0
    while n < min_reps or time.perf_counter() - start < budget * len(fns):
        for k, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            sync()
            best[k] = min(best[k], time.perf_counter() - t0)
        n += 1
    return [b * 1e3 for b in best]


def _compile(model: Any, backend: str, x: torch.Tensor) -> tuple[Any, float, str]:
    """The compiled model, the seconds its compile and first call took, and what the report says
    of its partitions (compiled / fell back)."""
    compat.dynamo_reset()
    f = torch.compile(model, backend=backend)
    t0 = time.perf_counter()
    f(x)
    seconds = time.perf_counter() - t0
    parts = [p for g in last_report().graphs for p in g.partitions]
    compiled = sum(p.status == "compiled" for p in parts)
    return f, seconds, f"{compiled}/{len(parts)}"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run (the small block only, short timing)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds of timing per variant and repeat (default 6; --quick 0.5)")
    ap.add_argument("--repeat", type=int, default=5,
                    help="timing repeats (each its own interleaved minimum); the target is judged on their median")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for eager and the kernels (torch.set_num_threads, OMP_NUM_THREADS); default: "
                         "torch's. 1 keeps OpenMP barriers from waiting on descheduled threads on a loaded machine")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench_vendor_loop.md"))
    return ap.parse_args(argv)


def measure(size: str, args: argparse.Namespace, sync: Callable[[], None],
            variants: list[str]) -> tuple[dict[str, dict[str, Any]], list]:
    """Rows (by variant: ms, each repeat's ms, compile seconds, error, partitions) for the block
    at zoo size ``size``, and its input's shape."""
    torch.manual_seed(0)
    model, (x,) = zoo.build("gpt_block", size=size)
    model, x = model.eval().to(DEVICE), x.to(DEVICE)
    budget = args.budget if args.budget is not None else (0.5 if args.quick else 6.0)
    PROGRAMS.clear()
    with torch.no_grad():
        want = model(x).cpu()
        runs: dict[str, Any] = {"eager": model}
        rows: dict[str, dict[str, Any]] = {"eager": {"compile": float("nan"), "err": 0.0, "parts": "-"}}
        for name in variants:
            f, seconds, parts = _compile(model, name, x)
            rows[name] = {"compile": seconds, "err": float((f(x).cpu() - want).abs().max()), "parts": parts}
            runs[name] = f
        repeats = [min_ms([lambda f=f: f(x) for f in runs.values()], sync, budget)
                   for _ in range(max(1, args.repeat))]
    for k, (name, row) in enumerate(rows.items()):
        row["repeats"] = [r[k] for r in repeats]
        row["ms"] = statistics.median(row["repeats"])
        row["kernels"] = sum(len(p.kernels) for p in PROGRAMS[name].values()) if name in PROGRAMS else "-"
    return rows, list(x.shape)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before the first kernel loads libgomp
        torch.set_num_threads(args.threads)
    os.environ.setdefault("TORCHVENDOR_CACHE_DIR", tempfile.mkdtemp(prefix="bench_vendor_loop_"))
    load_before = os.getloadavg()
    acme = register_device(DEVICE)
    import torchvendor.reference_backends.cpu  # noqa: F401  (registers torchvendor_cpu)
    register_backend(VendorLoop)
    register_backend(VendorLoopUnmerged)
    register_backend(VendorLoopTimed)
    scaffolded, tuned = scaffolded_vendor(tempfile.mkdtemp(prefix="bench_vendor_loop_scaffold_"))
    variants = ["torchvendor_cpu", scaffolded, tuned, VendorLoop.name, VendorLoopUnmerged.name]
    sections = []
    for size in ["test"] if args.quick else ["test", "bench"]:
        rows, shape = measure(size, args, acme.synchronize, variants)
        sections += _section(rows, shape, scaffolded)
    sections += breakdown("test" if args.quick else "bench", acme.synchronize)
    _write(args, sections, load_before, os.getloadavg())
    return 0


def breakdown(size: str, sync: Callable[[], None], calls: int = 30) -> list[str]:
    """A section: each kernel's shortest call in the minimal vendor's compiled block at ``size``
    beside the whole call's, and eager's (the rest of a compiled call: its extern kernels,
    matmuls through ATen on the device, and the runner)."""
    torch.manual_seed(0)
    model, (x,) = zoo.build("gpt_block", size=size)
    model, x = model.eval().to(DEVICE), x.to(DEVICE)
    VendorLoopTimed.TIMES.clear()
    with torch.no_grad():
        f, _, _ = _compile(model, VendorLoopTimed.name, x)
        whole, eager = min_ms([lambda: f(x), lambda: model(x)], sync, budget=1.0, min_reps=calls)
    rows = sorted(VendorLoopTimed.TIMES.items(), key=lambda kv: -kv[1][1])
    kernels = sum(t for _, t in VendorLoopTimed.TIMES.values()) * 1e3
    return [f"## where the time goes: `{VendorLoopTimed.name}` at input {list(x.shape)}", "",
            f"A call: {whole:.3f} ms (eager {eager:.3f} ms); its kernels' shortest calls add up to {kernels:.3f} ms, "
            f"the rest ({whole - kernels:.3f} ms) is extern kernels (matmuls through ATen on the device) and the "
            "runner.", "", "| kernel | computes | ms |", "|---|---|---:|",
            *(f"| {name} | {ops} | {t * 1e3:.3f} |" for name, (ops, t) in rows), ""]


def _section(rows: dict[str, dict[str, Any]], shape: list, scaffolded: str) -> list[str]:
    eager, ref = rows["eager"]["ms"], rows["torchvendor_cpu"]["ms"]
    lines = [
        f"## input {shape}",
        "",
        "| variant | ms per call | speedup over eager | time vs torchvendor_cpu | kernels | partitions compiled "
        "| max abs err vs eager | compile + first call (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['ms']:.3f} | {eager / row['ms']:.2f}x | {row['ms'] / ref:.2f}x "
                     f"| {row['kernels']} | {row['parts']} | {row['err']:.1e} | {row['compile']:.1f} |")
    lines += ["", "The table holds the median of the repeats' minima. Each repeat's own time ratio (lower is "
              "faster), sorted:", ""]
    for name in (scaffolded, f"{scaffolded}_tuned", VendorLoop.name):
        vs_eager = sorted(m / e for m, e in zip(rows[name]["repeats"], rows["eager"]["repeats"]))
        vs_ref = sorted(m / r for m, r in zip(rows[name]["repeats"], rows["torchvendor_cpu"]["repeats"]))
        median_eager, median_ref = vs_eager[len(vs_eager) // 2], vs_ref[len(vs_ref) // 2]
        verdict = "met" if median_eager <= 1.0 and median_ref <= 1.2 else "NOT met"
        lines.append(f"- `{name}`: vs eager {', '.join(f'{v:.2f}' for v in vs_eager)}; vs torchvendor_cpu "
                     f"{', '.join(f'{v:.2f}' for v in vs_ref)}. Target (issue 32) on the median repeat, at least as "
                     f"fast as eager ({median_eager:.2f}x eager's time) and within 1.2x of torchvendor_cpu "
                     f"({median_ref:.2f}x): **{verdict}**.")
    return lines + [""]


def _write(args: argparse.Namespace, sections: list[str], load_before: tuple[float, ...],
           load_after: tuple[float, ...]) -> None:
    lines = [
        "# Vendor LOOP backends on `acme` (bench/bench_vendor_loop.py)",
        "",
        "One compiled transformer block (the zoo's `gpt_block`; inference, no_grad) on the simulated device `acme`: "
        "eager on the device, the reference `torchvendor_cpu` on the device, the scaffolded vendor `acme` (the "
        "backend file `torchvendor new acme --level loop` writes, imported as generated: `CStyleRenderer` with the "
        "runtime's launch model, `transforms = (merge_neighbours,)`, kernels built and launched through the runtime "
        "table; the generated runtime itself is not built, the SDK's simulated runtime serves `acme` with the same "
        f"ABI), `acme_tuned` (the same with the compiler flags and vector-math prelude `torchvendor_cpu` uses, "
        "changed in its two hooks), and "
        f"`{VendorLoop.name}`, a minimal vendor backend (one class, a four-line `compile`) on the public SDK API "
        "(`LoopBackend`, the CPU reference's code generator and toolchain, `transforms = (merge_neighbours,)`), "
        "with and "
        f"without its one transform line (`{VendorLoopUnmerged.name}`: one launch per Inductor kernel). Time: "
        "the minimum wall time over interleaved rounds (one call of each variant per round, device synchronized "
        "after each call), repeated; the median of the repeats' minima. `kernels`: the minimal vendor's launches "
        "per call (counted in its `compile`).",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other work, torch {torch.__version__}, "
        f"Python {platform.python_version()}; load average (1, 5, 15 min) before "
        f"{', '.join(f'{v:.2f}' for v in load_before)}, after {', '.join(f'{v:.2f}' for v in load_after)}"
        f"; threads: {torch.get_num_threads()}{'; --quick run' if args.quick else ''}. Command: "
        f"`.venv/bin/python bench/bench_vendor_loop.py {' '.join(sys.argv[1:])}`.",
        "",
        *sections,
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
