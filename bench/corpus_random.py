"""Partition quality under randomized capability profiles: ours vs CapabilityBasedPartitioner (CBP).

An evaluation that cannot be tuned to: every graph of ``bench/corpus.py`` (14 ``transformers``
architectures built offline from tiny configs; inference, training forward, backward and the
joint graph, captured now) under ``--profiles`` seeded random capability profiles
(:func:`corpus.random_profile`: matmul engines, pointwise-only, broad with random holes, no
views, no reductions, no norm/gather, ...). Per graph x profile, in this process and on the same
``fx.GraphModule``:

- **ours**: :func:`torchvendor.partitioner.partition` with default options;
- **CBP**: ``CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)``
  ``.propose_partitions()``;

each measured by the same independent functions: boundary bytes (sum over partitions of their
inputs' and outputs' bytes, ``meta["val"]``), joint convexity (contract every partition, Kahn),
and the count lower bound *L* (the most runs of supported nodes along one path: no convex
partitioning of every supported node has fewer partitions; ours may then leave views at a
partition's edge outside, keeping its count).

    .venv/bin/python bench/corpus_random.py [--profiles 200] [--models bert,gpt2] [--json out.json]

writes the randomized-corpus section of ``docs/bench_partition.md`` (``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import MODELS, graphs, random_profile  # noqa: E402
from corpus_partition import boundary, write_section  # noqa: E402
from torch.fx.passes.operator_support import OperatorSupportBase  # noqa: E402

from torchvendor.ir import FxView  # noqa: E402
from torchvendor.partitioner import partition  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- corpus-random: begin (bench/corpus_random.py) -->", "<!-- corpus-random: end -->"
KINDS = ("inference", "forward", "backward", "joint")


class _Support(OperatorSupportBase):
    def __init__(self, view: FxView, pred) -> None:
        self.view, self.pred = view, pred

    def is_node_supported(self, submodules, node) -> bool:  # never inputs/outputs (pytorch#80753)
        return node.op == "call_function" and self.pred(self.view.op(node), node)


def jointly_convex(gm: torch.fx.GraphModule, parts: list[set]) -> bool:
    """Contract every partition at once; the quotient graph must be acyclic (Kahn)."""
    rep = {n: ("p", i) for i, members in enumerate(parts) for n in members}
    key = lambda n: rep.get(n, n)  # noqa: E731
    succ, indeg = defaultdict(set), defaultdict(int)
    verts = {key(n) for n in gm.graph.nodes}
    for n in gm.graph.nodes:
        for u in n.users:
            a, b = key(n), key(u)
            if a != b and b not in succ[a]:
                succ[a].add(b)
                indeg[b] += 1
    ready = [v for v in verts if not indeg[v]]
    seen = 0
    while ready:
        v = ready.pop()
        seen += 1
        for s in succ[v]:
            indeg[s] -= 1
            if not indeg[s]:
                ready.append(s)
    return seen == len(verts)


def supported_set(gm: torch.fx.GraphModule, view: FxView, pred) -> set:
    """The nodes a partitioning must cover: supported calls (a getitem only with its producer)."""
    out = set()
    for n in gm.graph.nodes:
        if n.op == "call_function" and pred(view.op(n), n):
            if view.op(n) == "operator.getitem" and n.all_input_nodes and n.all_input_nodes[0] not in out:
                continue
            out.add(n)
    return out


def runs_bound(gm: torch.fx.GraphModule, partitioned: set) -> int:
    """*L*: the largest number of maximal runs of ``partitioned`` nodes along any path; no convex
    partitioning of that set has fewer partitions."""
    inside, outside, best = {}, {}, 0
    for n in gm.graph.nodes:  # topological
        ins = [inside.get(p, 0) for p in n.all_input_nodes]
        outs = [outside.get(p, 0) for p in n.all_input_nodes]
        if n in partitioned:
            cont = [inside[p] for p in n.all_input_nodes if p in partitioned]
            fresh = [outside[p] + 1 for p in n.all_input_nodes if p not in partitioned]
            inside[n] = max(cont + fresh + [1])
            outside[n] = 0
            best = max(best, inside[n])
        else:
            outside[n] = max(ins + outs + [0])
    return best


def measure(gm: torch.fx.GraphModule, pred, repeat: int) -> dict:
    view = FxView(gm.graph)
    oracle = lambda v, node: pred(v.op(node), node)  # noqa: E731
    row = {}
    for name, kw in (("ours", {}), ("sweeps", {"pair_cuts": False})):
        t, res = float("inf"), None
        for _ in range(repeat):
            t0 = time.process_time()
            res = partition(FxView(gm.graph), oracle, **kw)
            t = min(t, time.process_time() - t0)
        parts = [set(p.nodes) for p in res.partitions]
        row[name] = {"parts": len(parts), "bytes": boundary(gm, parts)[1], "s": t, "convex": jointly_convex(gm, parts),
                     "cut_moves": res.stats.get("cut_moves", 0), "start": res.stats.get("boundary_start")}
        if "bytes_lower_bound" in res.stats:  # the span cut ran: a certified lower bound and the factor rho
            row[name].update(lb=res.stats["bytes_lower_bound"], rho=res.stats["bytes_bound"], span=res.stats["bytes_span"])
    row["ours"]["L"] = runs_bound(gm, supported_set(gm, view, pred))
    support = _Support(view, pred)
    t0 = time.process_time()
    cbp = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True).propose_partitions()
    t = time.process_time() - t0
    cparts = [set(p.nodes) for p in cbp]
    row["cbp"] = {"parts": len(cparts), "bytes": boundary(gm, cparts)[1], "s": t}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--profiles", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write every row here")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench_partition.md"))
    ap.add_argument("--label", default="", help="what was measured (goes into the doc)")
    ap.add_argument("--from-json", default=None, help="only write the doc from the rows of earlier --json runs (comma-separated files)")
    args = ap.parse_args()
    if args.from_json:
        load = os.getloadavg()[0]
        rows = [r for f in args.from_json.split(",") for r in json.loads(Path(f).read_text())]
        write(rows, Path(args.out), load, load, 0.0, args)
        return
    load0, t_start = os.getloadavg()[0], time.time()
    profiles = [random_profile(seed) for seed in range(args.profiles)]
    rows = []
    for model, kind, gm in graphs(args.models.split(","), kinds=tuple(args.kinds.split(","))):
        n = len(gm.graph.nodes)
        for name, pred in profiles:
            row = {"model": model, "kind": kind, "nodes": n, "profile": name}
            row.update(measure(gm, pred, args.repeat))
            rows.append(row)
        sub = rows[-len(profiles):]
        worse = sum(r["ours"]["bytes"] > r["cbp"]["bytes"] for r in sub)
        if args.json:
            Path(args.json).write_text(json.dumps(rows))
        print(f"{model:10} {kind:9} {n:5} nodes: bytes ours/CBP {sum(r['ours']['bytes'] for r in sub) / max(1, sum(r['cbp']['bytes'] for r in sub)):.3f}, "
              f"worse {worse}/{len(sub)}, ms ours/CBP {1e3 * sum(r['ours']['s'] for r in sub):.0f}/"
              f"{1e3 * sum(r['cbp']['s'] for r in sub):.0f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows))
    write(rows, Path(args.out), load0, os.getloadavg()[0], time.time() - t_start, args)


def summary(rows: list[dict]) -> dict:
    """Totals and the worst rows (also used by the doc writer)."""
    tot = {k: sum(r[k]["bytes"] for r in rows) for k in ("ours", "sweeps", "cbp")}
    ratio = lambda r: r["ours"]["bytes"] / r["cbp"]["bytes"] if r["cbp"]["bytes"] else (  # noqa: E731
        1.0 if not r["ours"]["bytes"] else float("inf"))
    worse = [r for r in rows if r["ours"]["bytes"] > r["cbp"]["bytes"]]
    return {"tot": tot, "ratio": ratio, "worse": sorted(worse, key=ratio, reverse=True),
            "more": [r for r in rows if r["ours"]["parts"] > r["cbp"]["parts"]],
            "not_L": [r for r in rows if r["ours"]["parts"] != r["ours"]["L"]],
            "not_convex": [r for r in rows if not r["ours"]["convex"]],
            "worse_sweeps": [r for r in rows if r["sweeps"]["bytes"] > r["cbp"]["bytes"]],
            "cuts_better": [r for r in rows if r["ours"]["bytes"] < r["sweeps"]["bytes"]],
            "cuts_worse": [r for r in rows if r["ours"]["bytes"] > r["sweeps"]["bytes"]],
            "s": {k: sum(r[k]["s"] for r in rows) for k in ("ours", "sweeps", "cbp")}}


def _bound_lines(rows: list[dict]) -> list[str]:
    """The span cut's certified bounds (docs/partitioner.md, *How close to the optimum*)."""
    bounded = [r for r in rows if "lb" in r["ours"]]
    if not bounded:
        return []
    ours, lb = sum(r["ours"]["bytes"] for r in bounded), sum(r["ours"]["lb"] for r in bounded)
    gaps = sorted((r["ours"]["bytes"] / r["ours"]["lb"] for r in bounded if r["ours"]["lb"]), reverse=True)
    starts = defaultdict(int)
    for r in rows:
        starts[r["ours"].get("start")] += 1
    return [f"- certified lower bound (the span cut, {len(bounded):,} runs where it ran): ours / bound "
            f"**{ours / max(1, lb):.3f}** in total, worst run {gaps[0] if gaps else 1:.2f}, median "
            f"{gaps[len(gaps) // 2] if gaps else 1:.3f}; proven factor rho at most "
            f"{max(r['ours']['rho'] for r in bounded)}, median {sorted(r['ours']['rho'] for r in bounded)[len(bounded) // 2]}.",
            "- the start the result came from: " + ", ".join(f"{k or 'none (one wave)'} {v:,}" for k, v in
                                                            sorted(starts.items(), key=lambda kv: -kv[1])) + "."]


def write(rows: list[dict], path: Path, load0: float, load1: float, wall: float, args) -> None:
    s = summary(rows)
    tot, ratio = s["tot"], s["ratio"]
    graphs_seen = sorted({(r["model"], r["kind"]) for r in rows})
    lines = [BEGIN, "", "## Randomized capability profiles: boundary bytes vs CapabilityBasedPartitioner", "",
             f"Written by `bench/corpus_random.py` on {platform.machine()}, {os.cpu_count()} CPU(s), Python "
             f"{platform.python_version()}, torch {torch.__version__}; "
             + (f"load average {load0:.1f} at the start, {load1:.1f} at the end, {wall / 60:.0f} min in all (a "
                "shared machine). " if wall else "") + args.label, "",
             f"{len(graphs_seen)} graphs ({len({m for m, _ in graphs_seen})} architectures of `bench/corpus.py`, "
             f"kinds {', '.join(sorted({k for _, k in graphs_seen}))}) x {args.profiles} seeded random profiles "
             "(`corpus.random_profile`, seeds 0..N-1) = "
             f"{len(rows):,} runs. Times are CPU time (`time.process_time`) of one run each, ours and CBP "
             "in the same process on the same graph.", "",
             "*ours*: default options (three starts: the earliest waves, the latest, the span cut's; the sweeps; then "
             "the pair cuts and sweeps); *sweeps only*: `pair_cuts=False`, the placement of main before issue 22 "
             "(cde63af).", "",
             "| | ours | sweeps only | CBP |", "|---|---:|---:|---:|",
             f"| partitions | {sum(r['ours']['parts'] for r in rows):,} | {sum(r['sweeps']['parts'] for r in rows):,} | "
             f"{sum(r['cbp']['parts'] for r in rows):,} |",
             f"| boundary bytes | {tot['ours']:,} | {tot['sweeps']:,} | {tot['cbp']:,} |",
             f"| runs with more bytes than CBP | {len(s['worse'])} | {len(s['worse_sweeps'])} | - |",
             f"| time | {s['s']['ours']:.1f} s | {s['s']['sweeps']:.1f} s | {s['s']['cbp']:.1f} s |", "",
             f"- boundary bytes, ours / CBP in total: **{tot['ours'] / max(1, tot['cbp']):.3f}** (target <= 0.85: "
             f"{'met' if tot['ours'] <= 0.85 * tot['cbp'] else 'NOT met'}).",
             f"- runs where ours moves more bytes than CBP: **{len(s['worse'])} of {len(rows):,}** (target 0: "
             f"{'met' if not s['worse'] else 'NOT met'}).",
             f"- sweeps only / CBP: {tot['sweeps'] / max(1, tot['cbp']):.3f}; the cuts (span start, pair cuts) lower the bytes in "
             f"{len(s['cuts_better'])} runs and raise them in {len(s['cuts_worse'])} (ours / sweeps only "
             f"{tot['ours'] / max(1, tot['sweeps']):.4f}).",
             f"- runs with more partitions than CBP: {len(s['more'])}; count != the lower bound L: {len(s['not_L'])}; "
             f"not jointly convex: {len(s['not_convex'])}.",
             f"- time: ours {s['s']['cbp'] / max(s['s']['ours'], 1e-9):.0f}x faster than CBP in total (target >= 20x).",
             *_bound_lines(rows), ""]
    if s["worse"]:
        lines += ["Worst runs (ours > CBP):", "", "| model | graph | nodes | profile | parts ours/CBP | bytes ours/CBP | ratio |",
                  "|---|---|---:|---|---|---|---:|"]
        for r in s["worse"][:15]:
            lines.append(f"| {r['model']} | {r['kind']} | {r['nodes']} | {r['profile']} | {r['ours']['parts']} / "
                         f"{r['cbp']['parts']} | {r['ours']['bytes']:,} / {r['cbp']['bytes']:,} | {ratio(r):.2f} |")
        lines.append("")
    lines += ["Per graph (all profiles). *bounded*: runs where the span cut ran (graphs up to 1,000 nodes, two waves or "
              "more, the layer and phase caps); *lower bound*: the sum of its certified lower bounds on those runs (no "
              "count-optimal, jointly convex placement moves fewer bytes), *ours/bound*: ours over it on the same runs "
              "(below 1 where views left their partitions, which no placement of the whole supported set can do); "
              "*rho*: the largest proven factor.", "",
              "| model | graph | nodes | bytes ours/CBP | worse runs | parts ours/CBP | s ours/CBP | bounded | lower bound "
              "| ours/bound | rho |", "|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|"]
    for m, k in graphs_seen:
        sub = [r for r in rows if r["model"] == m and r["kind"] == k]
        ob, cb = sum(r["ours"]["bytes"] for r in sub), sum(r["cbp"]["bytes"] for r in sub)
        bounded = [r for r in sub if "lb" in r["ours"]]
        lb = sum(r["ours"]["lb"] for r in bounded)
        bound = (f"{len(bounded)} | {lb:,} | {sum(r['ours']['bytes'] for r in bounded) / lb:.3f} | "
                 f"{max(r['ours']['rho'] for r in bounded)}" if lb else f"{len(bounded)} | - | - | -")
        lines.append(f"| {m} | {k} | {sub[0]['nodes']} | {ob / max(1, cb):.3f} | "
                     f"{sum(r['ours']['bytes'] > r['cbp']['bytes'] for r in sub)} | "
                     f"{sum(r['ours']['parts'] for r in sub)} / {sum(r['cbp']['parts'] for r in sub)} | "
                     f"{sum(r['ours']['s'] for r in sub):.2f} / {sum(r['cbp']['s'] for r in sub):.2f} | {bound} |")
    lines += ["", END, ""]
    write_section(path, BEGIN, END, "\n".join(lines))


if __name__ == "__main__":
    main()
