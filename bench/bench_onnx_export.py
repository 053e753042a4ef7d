"""Export time per partition: the ONNX level's converter beside ``torch.onnx.export``.

For each model (the zoo's fast tier, plus deep stacks of Linear-LayerNorm-GELU blocks, one
partition of up to thousands of nodes), the ATen inference graph is captured and partitioned exactly as the
ONNX level does (every node with an ONNX form claimed); then each partition, one
``fx.GraphModule``, is exported twice in this process:

- **ours**: ``torchvendor.ir.onnx_ir.to_onnx(gm)`` (what ``Level.ONNX`` runs);
- **torch**: ``torch.onnx.export(gm, args, dynamo=True)`` on real tensors of the partition's
  input shapes (torch's exporter: ``torch.export`` of the module, then onnxscript's ATen library,
  then its optimizer), median of ``--repeat`` runs each.

Both models are run by ONNX Runtime on the same inputs and compared (``max |ours - torch|``), so
the two exports compute the same thing. Usage: ``.venv/bin/python bench/bench_onnx_export.py
[--quick] [--repeat N]``; writes ``docs/bench_onnx_export.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from torchvendor.ir import compat  # noqa: E402
from torchvendor.ir.onnx_ir import to_onnx  # noqa: E402
from torchvendor.sdk import AtenBackend, Level  # noqa: E402
from torchvendor.sdk.compile.onnx_level import support_rule  # noqa: E402
from torchvendor.sdk.conformance import zoo  # noqa: E402

FAST = ["mlp", "cnn", "encoder", "gpt_block"]


class _Recorder(AtenBackend):
    """The ONNX level's partitioning, at the ATen level: compile() keeps each partition."""

    name = "bench_onnx_recorder"
    supported_ops = support_rule(None)
    partitions: list = []

    def compile(self, gm, example_inputs):
        self.partitions.append((gm, list(example_inputs)))
        return gm


def _stack(layers: int) -> tuple[torch.nn.Module, list]:
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU())
              for _ in range(layers)]
    return torch.nn.Sequential(*blocks).eval(), [torch.randn(8, 64)]


def _partitions(model: torch.nn.Module, inputs: list) -> list:
    _Recorder.partitions = []
    compat.dynamo_reset()
    with torch.no_grad():
        torch.compile(model, backend=_Recorder())(*inputs)
    return list(_Recorder.partitions)


def _real(examples: list) -> tuple:
    torch.manual_seed(0)
    return tuple(torch.rand(tuple(e.shape)).to(e.dtype) if e.dtype.is_floating_point else
                 torch.zeros(tuple(e.shape), dtype=e.dtype) for e in examples)


def _time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def _torch_export(gm: torch.fx.GraphModule, args: tuple):
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(gm, args, dynamo=True, verbose=False).model_proto


def _run(model, args: tuple) -> list:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    return session.run(None, feeds)


def measure(name: str, model: torch.nn.Module, inputs: list, repeat: int) -> list[dict]:
    rows = []
    for k, (gm, examples) in enumerate(_partitions(model, inputs)):
        nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        args = _real(examples)
        ours_s, ours = _time(lambda: to_onnx(gm), repeat)
        try:
            torch_s, theirs = _time(lambda: _torch_export(gm, args), max(1, repeat // 2))
            diff = max(float(abs(a - b).max()) if a.size else 0.0 for a, b in zip(_run(ours, args), _run(theirs, args)))
            torch_nodes = len(theirs.graph.node)
        except Exception as e:  # noqa: BLE001 - reported in the table
            torch_s, diff, torch_nodes = float("nan"), float("nan"), f"failed ({type(e).__name__})"
            print(f"torch.onnx.export failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        rows.append(dict(model=name, part=k, fx_nodes=nodes, ours_ms=ours_s * 1e3, torch_ms=torch_s * 1e3,
                         ours_nodes=len(ours.graph.node), torch_nodes=torch_nodes, diff=diff))
        print(f"{name} partition {k}: {nodes} FX nodes, ours {ours_s * 1e3:.2f} ms, torch {torch_s * 1e3:.1f} ms, "
              f"max diff {diff:.2g}", flush=True)
    return rows


def write(rows: list[dict], path: Path, repeat: int) -> None:
    lines = ["# ONNX export time per partition: ours beside `torch.onnx.export`", "",
             f"Written by `bench/bench_onnx_export.py` on {platform.machine()} ({platform.processor() or 'cpu'}), "
             f"torch {torch.__version__}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"median of {repeat} runs (torch's exporter: of {max(1, repeat // 2)}). Each row is one partition of the "
             "model's ATen inference graph as the ONNX level cuts it. `max diff`: the largest difference between the "
             "two models' outputs, both run by ONNX Runtime on the same inputs.", "",
             "| model | partition | FX nodes | ours (ms) | torch.onnx.export (ms) | ratio | ONNX nodes ours / torch | max diff |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = r["torch_ms"] / r["ours_ms"] if r["ours_ms"] else float("nan")
        lines.append(f"| {r['model']} | {r['part']} | {r['fx_nodes']} | {r['ours_ms']:.2f} | {r['torch_ms']:.0f} | "
                     f"{ratio:.0f}x | {r['ours_nodes']} / {r['torch_nodes']} | {r['diff']:.1e} |")
    total_ours = sum(r["ours_ms"] for r in rows)
    both = [r for r in rows if r["torch_ms"] == r["torch_ms"]]
    total_torch = sum(r["torch_ms"] for r in both)
    lines += ["", f"Over the {len(both)} partitions both exported: ours {sum(r['ours_ms'] for r in both):.0f} ms, "
              f"torch.onnx.export {total_torch:.0f} ms. torch.onnx.export failed on {len(rows) - len(both)} of "
              f"{len(rows)} partitions (ours on none); ours took {total_ours:.0f} ms for all {len(rows)}.", ""]
    path.write_text("\n".join(lines))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two models, fewer repetitions")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    repeat = 2 if args.quick else args.repeat
    rows = []
    for name in (FAST[:2] if args.quick else FAST):
        model, inputs = zoo.build(name)
        rows += measure(name, model.eval(), inputs, repeat)
    for layers in ((8,) if args.quick else (8, 64, 256)):
        model, inputs = _stack(layers)
        rows += measure(f"{layers} x (Linear, LayerNorm, GELU)", model, inputs, repeat)
    write(rows, ROOT / "docs" / "bench_onnx_export.md", repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
