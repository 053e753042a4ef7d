"""Partitioning and outlining benchmark, side by side with torch.fx on the same graphs.

Runs, on synthetic ATen-level FX graphs (2k, 10k, 50k, 200k nodes; a *local* shape whose nodes
read from the last 8 values, and a *multi-branch* shape of 8 parallel chains exchanging values
every 16 steps; 0, 1 and 5 % unsupported ``aten.sin``):

- **ours**: ``torchvendor.partitioner.partition`` with every feature on (an op-key oracle built
  with combinators, forced-fallback ops, min_size=2, getitem grouping, atomic groups for 2 % of
  the nodes, mutation detection, horizontal merging) plus the report;
- **bare scan**: a ~45-line linear wave scan in the style of ONNX Runtime's
  ``CreateSupportedPartitionNodeGroups`` (below), over the same FxView -- the baseline;
- **CBP**: torch.fx ``CapabilityBasedPartitioner(allows_single_node_partition=True)``
  (constructor + ``propose_partitions``), in a subprocess killed after 60 s or 8 GB;
- **fuse_by_partitions** of torch.fx on our partitions (subprocess, same limits) and our
  ``outline_fx``.

    .venv/bin/python bench/bench_partition.py [--quick]

writes ``docs/bench_partition.md``.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import torch.fx as fx  # noqa: E402

from torchvendor.sdk.compile.fx_outline import outline_fx  # noqa: E402
from torchvendor.ir.fx_view import FxView  # noqa: E402
from torchvendor.partitioner import chain, partition, unsupported_ops  # noqa: E402

aten = torch.ops.aten
SUPPORTED = [aten.add.Tensor, aten.mul.Tensor, aten.relu.default]
CBP_LIMIT_S = 60
MEM_LIMIT = 8 << 30


def synth_graph(n: int, shape: str, p_unsup: float, seed: int = 0) -> fx.GraphModule:
    """n call_function nodes; ``local``: inputs from the last 8 values; ``branchy``: 8 chains
    that read each other's latest value every 16 steps."""
    rng = random.Random(seed)
    g = fx.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y")
    vals = [x, y]
    lanes = [x, y, x, y, x, y, x, y]

    def op(args_pool):
        if rng.random() < p_unsup:
            return g.call_function(aten.sin.default, (rng.choice(args_pool),))
        fn = rng.choice(SUPPORTED)
        if fn is aten.relu.default:
            return g.call_function(fn, (rng.choice(args_pool),))
        return g.call_function(fn, (rng.choice(args_pool), rng.choice(args_pool)))

    for i in range(n):
        if shape == "local":
            vals.append(op(vals[-8:]))
        else:
            lane = i % 8
            pool = [lanes[lane], lanes[(lane + 1) % 8]] if (i // 8) % 16 == 15 else [lanes[lane]]
            lanes[lane] = op(pool)
            vals.append(lanes[lane])
    sinks = [v for v in vals[2:] if not v.users]
    g.output(tuple(sinks[-16:]) if sinks else vals[-1])
    return fx.GraphModule(torch.nn.Module(), g)


# ---- the baseline: a bare linear wave scan (ORT partitioning_utils style) ------------------------
def bare_wave_scan(view, is_supported):
    """ONNX Runtime's CreateSupportedPartitionNodeGroups, stripped: Kahn's sort in waves."""
    nodes = view.nodes()
    in_degree = {}
    ready = []
    for n in nodes:
        in_degree[n] = len(set(view.inputs(n)))
        if in_degree[n] == 0:
            ready.append(n)
    supported = {n: view.kind(n) == "op" and is_supported(n) for n in nodes}
    groups, group, border, deferred = [], [], set(), []
    while ready or deferred:
        if not ready:
            if group:
                groups.append(group)
            group, border = [], set()
            ready, deferred = deferred, []
        n = ready.pop()
        if supported[n]:
            group.append(n)
            border.update(view.users(n))
        elif n in border:
            deferred.append(n)
            continue
        for u in view.users(n):
            in_degree[u] -= 1
            if in_degree[u] == 0:
                ready.append(u)
    if group:
        groups.append(group)
    return groups


def feature_inputs(gm):
    """The oracle and atomic groups of the all-features run: the same question the bare scan
    asks (op key), through combinators; 2 % of the nodes in 2-node groups (producer, user)."""
    oracle = chain(unsupported_ops({"aten.sin"}), unsupported_ops({"aten.cos"}, "no cos kernels"))
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    rng = random.Random(1)
    groups = []
    for _ in range(len(nodes) // 100):
        a = rng.choice(nodes)
        if a.users:
            groups.append([a, next(iter(a.users))])
    return oracle, groups


def ours(view, oracle, groups, boundary_aware=True):
    """Every feature on: combinator oracle, forced fallback ops, min_size, getitem grouping,
    atomic groups, mutation detection, horizontal merging, boundary-aware placement, and the report."""
    result = partition(view, oracle, atomic_groups=groups, min_size=2, fallback_ops={"aten.div"},
                       detect_mutation=True, merge_independent=True, boundary_aware=boundary_aware)
    result.report()
    return result


def best_of(fn, repeat):
    """Min CPU time (``time.process_time``) of ``repeat`` runs: on the shared machine, time spent
    preempted by other processes would otherwise count against whichever side it hit."""
    best, out = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t)
    return best, out


def peak_mb(fn) -> float:
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


# ---- torch.fx in a subprocess (it may take minutes or exhaust memory) -----------------------------
CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
resource.setrlimit(resource.RLIMIT_AS, ({mem}, {mem}))
import torch
from bench_partition import synth_graph, aten
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions
gm = synth_graph({n}, {shape!r}, {p})
class S(OperatorSupportBase):
    def is_node_supported(self, submodules, node):
        return node.op == "call_function" and node.target is not aten.sin.default
if {what!r} == "cbp":
    t = time.perf_counter()
    parts = CapabilityBasedPartitioner(gm, S(), allows_single_node_partition=True).propose_partitions()
    print(json.dumps({{"s": time.perf_counter() - t, "parts": len(parts)}}))
else:
    from torchvendor.ir.fx_view import FxView
    from torchvendor.partitioner import partition, unsupported_ops
    res = partition(FxView(gm.graph), unsupported_ops({{"aten.sin"}}))
    parts = [dict.fromkeys(p.nodes) for p in res.partitions]
    t = time.perf_counter()
    fuse_by_partitions(gm, parts)
    print(json.dumps({{"s": time.perf_counter() - t, "parts": len(parts)}}))
"""


def run_child(what: str, n: int, shape: str, p: float) -> dict:
    code = CHILD.format(root=str(ROOT / "python"), bench=str(ROOT / "bench"), mem=MEM_LIMIT, n=n, shape=shape, p=p,
                        what=what)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=CBP_LIMIT_S + 30)
    except subprocess.TimeoutExpired:
        return {"skip": f"> {CBP_LIMIT_S} s (killed)"}
    if out.returncode != 0:
        err = "MemoryError (8 GB cap)" if "MemoryError" in out.stderr else out.stderr.strip().splitlines()[-1][:80]
        return {"skip": err}
    return json.loads(out.stdout.strip().splitlines()[-1])


def cbp_feasible(n: int, p: float) -> str | None:
    """Skip CBP where the notes measured it past ~60 s or past memory."""
    if n <= 2000 or (n <= 10000 and p == 0):
        return None
    return "skipped: CBP quadratic (notes: >300 s at 10k, MemoryError at 50k)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2k and 10k nodes only, fewer repeats")
    ap.add_argument("--shapes", default="local,branchy", help="comma-separated subset of local,branchy")
    ap.add_argument("--sizes", help="comma-separated node counts (default 2000,10000,50000,200000)")
    ap.add_argument("--json", help="also write the raw rows to this JSON file")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="only write the Markdown from earlier --json files")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench_partition.md"))
    args = ap.parse_args()
    if args.merge:
        runs = [json.loads(Path(f).read_text()) for f in args.merge]
        rows = [r for run in runs for r in run["rows"]]
        write_markdown(rows, Path(args.out), runs[0]["quick"], runs[0]["machine"])
        return
    sizes = [2000, 10000] if args.quick else [2000, 10000, 50000, 200000]
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
    repeat = 2 if args.quick else 3
    rows = []
    for shape in args.shapes.split(","):
        for n in sizes:
            for p in (0.0, 0.01, 0.05):
                rows.append(bench_one(shape, n, p, repeat))
                print(json.dumps(rows[-1]), flush=True)
    machine = (f"{platform.machine()}, {os.cpu_count()} CPU(s), Python {platform.python_version()}, "
               f"torch {torch.__version__}")
    if args.json:
        Path(args.json).write_text(json.dumps({"quick": args.quick, "machine": machine, "rows": rows}))
    write_markdown(rows, Path(args.out), args.quick, machine)


def bench_one(shape: str, n: int, p: float, repeat: int) -> dict:
    gm = synth_graph(n, shape, p)
    view = FxView(gm.graph)
    is_sup = lambda node: view.op(node) != "aten.sin.default"  # noqa: E731
    oracle, groups = feature_inputs(gm)
    # interleaved (base, ours) pairs, best of each: a load spike on the shared machine then
    # hits both sides rather than one
    t_base = t_ours = t_waves = float("inf")
    for _ in range(repeat if n >= 50000 else 3 * repeat):
        t, base_groups = best_of(lambda: bare_wave_scan(view, is_sup), 1)
        t_base = min(t_base, t)
        t, res = best_of(lambda: ours(view, oracle, groups), 1)
        t_ours = min(t_ours, t)
        t, _ = best_of(lambda: ours(view, oracle, groups, boundary_aware=False), 1)
        t_waves = min(t_waves, t)
    row = {"shape": shape, "n": n, "p": p, "base_s": t_base, "base_parts": len(base_groups),
           "ours_s": t_ours, "ours_parts": len(res.partitions), "fallback": len(res.fallback),
           "waves_s": t_waves}
    t_plain, plain = best_of(lambda: partition(view, unsupported_ops({"aten.sin"})), repeat if n >= 50000 else 3 * repeat)
    row["plain_s"], row["plain_parts"] = t_plain, len(plain.partitions)
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    outline_fx(gm, plain)
    row["outline_s"], row["outline_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    if n <= 50000:
        row["mem_base_mb"] = peak_mb(lambda: bare_wave_scan(view, is_sup))
        row["mem_ours_mb"] = peak_mb(lambda: ours(view, oracle, groups))
    why = cbp_feasible(n, p)
    row["cbp"] = {"skip": why} if why else run_child("cbp", n, shape, p)
    row["fuse"] = run_child("fuse", n, shape, p) if n <= 50000 else {"skip": "skipped (notes: 40 s at 50k)"}
    return row


def fmt_child(d: dict) -> str:
    return d["skip"] if "skip" in d else f"{d['s']:.2f} s"


def write_markdown(rows: list[dict], path: Path, quick: bool, machine: str) -> None:
    lines = [
        "# Partitioning benchmark",
        "",
        f"Written by `bench/bench_partition.py{' --quick' if quick else ''}` on {machine}. "
        f"Load average at the end of the run: {os.getloadavg()[0]:.1f}. Partitioning times are CPU "
        "time (`time.process_time`, which preemption by other processes on the shared machine does not "
        "inflate), the min of several runs, bare scan and ours interleaved in one process; every row runs "
        "all methods on the same graph (CBP and fuse_by_partitions: wall time, in a child process).",
        "",
        "- **bare scan**: the ~45-line ORT-style wave scan in the bench file (the baseline), on the same `FxView`.",
        "- **ours**: `partition()` with every feature on (op-key oracle through `chain`, `fallback_ops`, "
        "`min_size=2`, getitem grouping, atomic groups on 2 % of nodes, mutation detection, horizontal "
        "merging) plus `report()`; *ratio* = ours / bare scan (target <= 2). Both ask the same question "
        "(is the op key `aten.sin.default`?) through the same `FxView`.",
        "- **plain waves**: *ours* with `boundary_aware=False` (no boundary-bytes refinement), and its ratio "
        "to the bare scan: the price of the refinement is the difference.",
        "- **ours (defaults)**: `partition()` with default options and an op-key oracle.",
        "- **parts**: partitions of the bare scan / ours with all features / ours with defaults (min_size=1) / "
        "CBP (`allows_single_node_partition=True`). Ours with min_size=1 is count-optimal, so never above CBP.",
        "- **CBP**: torch.fx constructor + `propose_partitions`; **fuse**: torch.fx `fuse_by_partitions` on our "
        f"partitions; both in a subprocess killed after {CBP_LIMIT_S} s or at 8 GB.",
        "- **outline**: our `outline_fx` of the default partitions (lazy submodules), wall time (and process "
        "CPU time, which load on the shared machine does not inflate); target 50k nodes <= 2 s.",
        "- **mem**: tracemalloc peak of bare scan / ours (only up to 50k nodes).",
        "",
        "| shape | nodes | unsup | bare scan | ours | ratio | plain waves (ratio) | ours (defaults) | "
        "parts bare/ours/min1/CBP | CBP | fuse_by_partitions | outline_fx | mem MB bare/ours |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---|",
    ]
    for r in rows:
        cbp_parts = r["cbp"].get("parts", "-")
        mem = f"{r['mem_base_mb']:.0f} / {r['mem_ours_mb']:.0f}" if "mem_ours_mb" in r else "-"
        cpu = f" ({r['outline_cpu_s']:.2f} s CPU)" if "outline_cpu_s" in r else ""
        lines.append(
            f"| {r['shape']} | {r['n']:,} | {r['p'] * 100:.0f} % | {r['base_s'] * 1e3:.0f} ms | "
            f"{r['ours_s'] * 1e3:.0f} ms | {r['ours_s'] / r['base_s']:.2f} | "
            f"{r['waves_s'] * 1e3:.0f} ms ({r['waves_s'] / r['base_s']:.2f}) | {r['plain_s'] * 1e3:.0f} ms | "
            f"{r['base_parts']} / {r['ours_parts']} / {r['plain_parts']} / {cbp_parts} | {fmt_child(r['cbp'])} | "
            f"{fmt_child(r['fuse'])} | {r['outline_s']:.2f} s{cpu} | {mem} |")
    worst = max(r["ours_s"] / r["base_s"] for r in rows)
    worst_waves = max(r["waves_s"] / r["base_s"] for r in rows)
    over = [r for r in rows if "parts" in r["cbp"] and r["plain_parts"] > r["cbp"]["parts"]]
    out50 = [r.get("outline_cpu_s", r["outline_s"]) for r in rows if r["n"] == 50000]
    lines += ["", "## Targets", "",
              f"- partitioning within 2x of the bare scan with every feature on: worst ratio {worst:.2f} "
              f"({'met' if worst <= 2 else 'NOT met'}); with `boundary_aware=False`: {worst_waves:.2f} "
              f"({'met' if worst_waves <= 2 else 'NOT met'}).",
              "  Worst ratio by size: " + ", ".join(
                  f"{n:,}: {max(r['ours_s'] / r['base_s'] for r in rows if r['n'] == n):.2f}"
                  for n in sorted({r["n"] for r in rows})) + ". Small graphs take milliseconds, so a load spike "
              "on the shared machine moves their ratio most; compare with the *ours (defaults)* column, which "
              "does the same work minus the features.",
              f"- never more partitions than CBP where it finishes: "
              f"{'met' if not over else f'NOT met on {len(over)} row(s)'}.",
              (f"- outlining 50k nodes within 2 s: worst {max(out50):.2f} s (CPU time where recorded) "
               f"({'met' if max(out50) <= 2 else 'NOT met'})."
               if out50 else f"- outlining 50k nodes: not run ({'--quick' if quick else 'no 50k rows in this run'})."),
              ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text() if path.exists() else ""
    begin = old.find("<!-- corpus: begin")  # keep the corpus section of bench/corpus_partition.py
    corpus = "\n" + old[begin:] if begin >= 0 else ""
    path.write_text("\n".join(lines) + corpus)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
