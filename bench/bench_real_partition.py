"""What AOTAutograd's joint-graph partition costs a fusing backend in training: a GPT-2 training
step (forward, backward) through a torchvendor backend with ``aot_partition="default"`` (save
what the forward computed) and ``"min_cut"`` (Inductor's rematerialization), beside eager.

    .venv/bin/python bench/bench_real_partition.py                       # torchvendor_cpu, a small GPT-2
    .venv/bin/python bench/bench_real_partition.py --hidden 256 --layers 4 --seq 256
    python bench/bench_real_partition.py --backend torchvendor_cuda --device cuda --hidden 768 --layers 12 --seq 512 --batch 8
    .venv/bin/python bench/bench_real_partition.py --graph-only --hidden 768 --layers 12 --seq 512 --batch 1 --vocab 50257

Per variant: the tensors saved for the backward (count and bytes, from saved-tensor hooks; the
parameters, which every variant saves, counted apart), the peak of memory allocated during the
step above what was live before it (CPU: the profiler's allocation events; CUDA:
``max_memory_allocated``), the median step time, and the largest relative error of the loss and
every gradient against eager float32. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

import torch

from torchvendor.ir.compat import dynamo_reset


def _model(args: argparse.Namespace) -> torch.nn.Module:
    import transformers

    cfg = transformers.GPT2Config(n_embd=args.hidden, n_layer=args.layers, n_head=max(1, args.hidden // 64),
                                  n_positions=max(1024, args.seq), vocab_size=args.vocab, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg).to(args.device)


def _step(run: Callable[..., Any], model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    loss = run(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach()


def _saved(run: Callable[..., Any], model: torch.nn.Module, ids: torch.Tensor) -> dict[str, int]:
    """Count and bytes of the distinct tensors saved for the backward during one step."""
    params = {p.data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    param_bytes = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal param_bytes
        ptr = t.untyped_storage().data_ptr()
        size = t.untyped_storage().nbytes()
        if ptr in params:
            param_bytes += 0 if ptr in seen else size
        seen[ptr] = size
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _step(run, model, ids)
    acts = {p: b for p, b in seen.items() if p not in params}
    return {"saved": len(acts), "saved_bytes": sum(acts.values()), "saved_params": len(seen) - len(acts)}


def _peak(run: Callable[..., Any], model: torch.nn.Module, ids: torch.Tensor) -> int:
    """Bytes allocated at the step's peak above what was live when it began."""
    if ids.device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        _step(run, model, ids)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _step(run, model, ids)
    live = peak = 0
    for e in sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def _time(run: Callable[..., Any], model: torch.nn.Module, ids: torch.Tensor, reps: int) -> float:
    times = []
    for _ in range(reps):
        if ids.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        _step(run, model, ids)
        if ids.device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _errors(model: torch.nn.Module, loss: torch.Tensor, ref: dict[str, torch.Tensor]) -> float:
    got = {"loss": loss, **{n: p.grad for n, p in model.named_parameters() if p.grad is not None}}
    return max(float((got[k].double() - v.double()).norm() / v.double().norm().clamp_min(1e-30)) for k, v in ref.items())


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Eager, then the backend with each partition: saved activations, peak, time, error."""
    if args.backend.startswith("torchvendor"):
        import torchvendor.reference_backends  # noqa: F401 - registers the reference backends

    model = _model(args)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(1)).to(args.device)
    loss = _step(model, model, ids)
    ref = {"loss": loss, **{n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}}
    out: dict[str, Any] = {"config": vars(args), "torch": torch.__version__,
                           "eager": {**_saved(model, model, ids), "peak_bytes": _peak(model, model, ids),
                                     "ms": _time(model, model, ids, args.reps)}}
    ours = args.backend.startswith("torchvendor")
    for partition in args.partitions.split(",") if ours else [args.backend]:
        dynamo_reset()
        run = torch.compile(model, backend=args.backend, options={"aot_partition": partition} if ours else None)
        t0 = time.perf_counter()
        loss = _step(run, model, ids)
        first = time.perf_counter() - t0
        row = {"first_call_s": first, "error": _errors(model, loss, ref), **_saved(run, model, ids),
               "peak_bytes": _peak(run, model, ids), "ms": _time(run, model, ids, args.reps)}
        out[partition] = row
        print(json.dumps({partition: row}), flush=True)
    return out


def graph_saved(args: argparse.Namespace) -> dict[str, Any]:
    """Without compiling kernels: per partition, what AOTAutograd's forward graph hands the
    backward (the backward graph's non-tangent inputs from their shapes, the model's parameters
    and inputs apart; a view counts its own elements), with the LOOP level's
    decomposition table; the graphs run as ATen."""
    from torchvendor.ir import aten_ir_hook
    from torchvendor.ir.decompositions import resolve
    from torchvendor.ir.loop_ir import inductor_decompositions

    model = _model(args)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(1)).to(args.device)
    table = resolve(inductor_decompositions())
    out: dict[str, Any] = {"config": vars(args), "torch": torch.__version__}
    for partition in args.partitions.split(","):
        seen: dict[str, Any] = {}

        def backward(gm: Any, example_inputs: list[Any]) -> None:
            saved = [n for n in gm.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]
            def nbytes(nodes: list[Any]) -> int:
                return sum(n.meta["val"].numel() * n.meta["val"].element_size() for n in nodes
                           if isinstance(n.meta.get("val"), torch.Tensor))
            acts = [n for n in saved if not n.name.startswith("primals")]  # the rest: parameters and inputs
            seen.update(saved=len(acts), saved_bytes=nbytes(acts), saved_inputs=len(saved) - len(acts),
                        saved_inputs_bytes=nbytes(saved) - nbytes(acts))

        dynamo_reset()
        run = torch.compile(model, backend=aten_ir_hook(None, backward, decompositions=table, partition=partition))
        _step(run, model, ids)
        out[partition] = seen
        print(json.dumps({partition: seen}), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="torchvendor_cpu")
    p.add_argument("--device", default="cpu")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--partitions", default="default,min_cut")
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--graph-only", action="store_true",
                   help="only the saved tensors per partition, from the graphs (no kernels compiled: real sizes on a CPU)")
    args = p.parse_args()
    result = graph_saved(args) if args.graph_only else measure(args)
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
