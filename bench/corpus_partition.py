"""Partition quality on real graphs: ours vs torch.fx's CapabilityBasedPartitioner (CBP).

For every graph of ``bench/corpus.py`` (tiny BERT, GPT-2, Llama, T5, ViT, ResNet; inference,
training forward and backward) and every capability profile, one run partitions the same
``fx.GraphModule`` with

- **ours**: :func:`torchvendor.partitioner.partition` (boundary-aware, the default),
- **plain**: the same with ``boundary_aware=False`` (the earliest-wave assignment),
- **CBP**: ``CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)``
  ``.propose_partitions()`` (its default horizontal fusion),

and measures each result with one independent function: partitions, boundary values (distinct
values that a partition reads from outside or writes out), boundary bytes (each partition's
inputs and outputs, sizes from ``meta["val"]``), and time (min of ``--repeat`` runs).

    .venv/bin/python bench/corpus_partition.py [--models bert,gpt2] [--repeat 5]

writes the corpus section of ``docs/bench_partition.md``.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time
from pathlib import Path

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import MODELS, PROFILES, graphs  # noqa: E402

from torchvendor.ir import FxView  # noqa: E402
from torchvendor.partitioner import partition  # noqa: E402
from torchvendor.partitioner.boundary import value_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- corpus: begin (bench/corpus_partition.py) -->", "<!-- corpus: end -->"


class _Support(OperatorSupportBase):
    def __init__(self, view: FxView, pred) -> None:
        self.view, self.pred = view, pred

    def is_node_supported(self, submodules, node) -> bool:  # never inputs/outputs (pytorch#80753)
        return node.op == "call_function" and self.pred(self.view.op(node))


def boundary(gm: torch.fx.GraphModule, parts: list[set]) -> tuple[int, int]:
    """(distinct boundary values, boundary bytes) of node sets, independent of either partitioner."""
    meta = FxView(gm.graph).meta
    values: set = set()
    nbytes = 0
    for members in parts:
        ins = {x for n in members for x in n.all_input_nodes if x not in members}
        outs = {n for n in members if any(u not in members for u in n.users)}
        for v in ins | outs:
            values.add(v)
            nbytes += value_bytes(meta(v)) or 0
    return len(values), nbytes


def best(fn, repeat: int):
    t, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        t = min(t, time.perf_counter() - t0)
    return t, out


def measure(gm: torch.fx.GraphModule, pred, repeat: int) -> dict:
    view = FxView(gm.graph)
    oracle = lambda key: pred(key)  # noqa: E731
    row = {}
    for name, kw in (("ours", {}), ("plain", {"boundary_aware": False})):
        t, res = best(lambda: partition(FxView(gm.graph), {k for k in map(view.op, gm.graph.nodes) if oracle(k)}, **kw),
                      repeat)
        vals, nbytes = boundary(gm, [set(p.nodes) for p in res.partitions])
        row[name] = {"parts": len(res.partitions), "values": vals, "bytes": nbytes, "s": t}
    support = _Support(view, pred)
    t, parts = best(lambda: CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
                    .propose_partitions(), max(1, repeat // 2))
    vals, nbytes = boundary(gm, [set(p.nodes) for p in parts])
    row["cbp"] = {"parts": len(parts), "values": vals, "bytes": nbytes, "s": t}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench_partition.md"))
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    rows = []
    for model, kind, gm in graphs(args.models.split(",")):
        for prof, pred in PROFILES.items():
            row = {"model": model, "kind": kind, "profile": prof, "nodes": len(gm.graph.nodes)}
            row.update(measure(gm, pred, args.repeat))
            rows.append(row)
            o, c = row["ours"], row["cbp"]
            print(f"{model:7} {kind:9} {prof:15} parts {o['parts']}/{c['parts']} bytes {o['bytes']}/{c['bytes']} "
                  f"plain {row['plain']['bytes']}", flush=True)
    load1 = os.getloadavg()[0]
    write(rows, Path(args.out), load0, load1, args.repeat)


def write(rows: list[dict], path: Path, load0: float, load1: float, repeat: int) -> None:
    tot = {k: sum(r[k]["bytes"] for r in rows) for k in ("ours", "plain", "cbp")}
    totv = {k: sum(r[k]["values"] for r in rows) for k in ("ours", "plain", "cbp")}
    tott = {k: sum(r[k]["s"] for r in rows) for k in ("ours", "plain", "cbp")}
    worse = [r for r in rows if r["ours"]["bytes"] > r["cbp"]["bytes"]]
    more = [r for r in rows if r["ours"]["parts"] > r["cbp"]["parts"]]
    ratio = lambda r: r["ours"]["bytes"] / r["cbp"]["bytes"] if r["cbp"]["bytes"] else 1.0  # noqa: E731
    worst = max(rows, key=ratio)
    lines = [BEGIN, "", "## Real-graph corpus: quality vs CapabilityBasedPartitioner", "",
             f"Written by `bench/corpus_partition.py` on {platform.machine()}, {os.cpu_count()} CPU(s), Python "
             f"{platform.python_version()}, torch {torch.__version__}; load average {load0:.1f} at the start, "
             f"{load1:.1f} at the end (the machine may be shared with other jobs). Times are the min of {repeat} "
             f"runs (CBP: min of {max(1, repeat // 2)}), so they are noisy; the byte and partition counts are "
             "exact and deterministic.", "",
             "Graphs: `bench/corpus.py` builds tiny `transformers` models with random weights from configs (never "
             "downloaded) and captures them with `torchvendor.ir.capture(..., level=\"aten\")`: inference, and "
             "AOTAutograd's training forward and backward. Profiles: **gemm+pointwise** (matmuls, elementwise "
             "math, views only), **no-norm/gather** (everything but layer/batch norm, embedding, index/gather/"
             "scatter), **no-reductions** (everything but sums, means, max, softmax, norms), **hash-20%** "
             "(a fixed fifth of the op packets, by CRC32, unsupported).", "",
             "Every column is measured by one independent function on the node sets: *values* = distinct values "
             "read from outside or written out by some partition; *bytes* = sum over partitions of their inputs' "
             "and outputs' bytes (`meta[\"val\"]`). *plain* = ours with `boundary_aware=False` (the earliest-wave "
             "assignment).", "",
             "### Totals", "",
             "| | ours | plain waves | CBP |", "|---|---:|---:|---:|",
             f"| partitions | {sum(r['ours']['parts'] for r in rows)} | {sum(r['plain']['parts'] for r in rows)} | "
             f"{sum(r['cbp']['parts'] for r in rows)} |",
             f"| boundary values | {totv['ours']:,} | {totv['plain']:,} | {totv['cbp']:,} |",
             f"| boundary bytes | {tot['ours']:,} | {tot['plain']:,} | {tot['cbp']:,} |",
             f"| time (sum of mins) | {tott['ours'] * 1e3:.0f} ms | {tott['plain'] * 1e3:.0f} ms | "
             f"{tott['cbp'] * 1e3:.0f} ms |", "",
             f"- boundary bytes vs CBP: {100 * (tot['ours'] / tot['cbp'] - 1):+.1f} % in total "
             f"(target <= -10 %: {'met' if tot['ours'] <= 0.9 * tot['cbp'] else 'NOT met'}); plain waves "
             f"{100 * (tot['plain'] / tot['cbp'] - 1):+.1f} %.",
             f"- graphs where ours moves more bytes than CBP: {len(worse)} of {len(rows)} (target 0: "
             f"{'met' if not worse else 'NOT met'}); worst ours/CBP ratio {ratio(worst):.3f} "
             f"({worst['model']} {worst['kind']} {worst['profile']}).",
             f"- graphs where ours has more partitions than CBP: {len(more)} (target 0: {'met' if not more else 'NOT met'}).",
             f"- time: ours {tott['cbp'] / max(tott['ours'], 1e-9):.0f}x faster than CBP in total.", "",
             "### Per graph", "",
             "| model | graph | nodes | profile | parts ours/CBP | values ours/plain/CBP | bytes ours/plain/CBP | "
             "ours/CBP bytes | ms ours/CBP |", "|---|---|---:|---|---|---|---|---:|---|"]
    for r in rows:
        o, p, c = r["ours"], r["plain"], r["cbp"]
        lines.append(f"| {r['model']} | {r['kind']} | {r['nodes']} | {r['profile']} | {o['parts']} / {c['parts']} | "
                     f"{o['values']} / {p['values']} / {c['values']} | {o['bytes']:,} / {p['bytes']:,} / {c['bytes']:,} | "
                     f"{ratio(r):.3f} | {o['s'] * 1e3:.1f} / {c['s'] * 1e3:.1f} |")
    lines += ["", END, ""]
    write_section(path, BEGIN, END, "\n".join(lines))


def write_section(path: Path, begin: str, end: str, block: str) -> None:
    """Replace the section of ``path`` between the markers ``begin`` and ``end`` by ``block``
    (appended when the markers are not there yet); the rest of the page stays as it is."""
    text = path.read_text() if path.exists() else "# Partitioning benchmark\n\n"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end) + "\n?", lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text)


if __name__ == "__main__":
    main()
