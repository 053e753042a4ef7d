"""Host time per call of a compiled model of the suite, layer by layer, beside eager and Inductor
(``bench/bench_runner.py layers`` runs this; one process per model, device and backend).

Each layer is timed alone with the arguments it got on a warm call (captured once), fastest of 5
loops, in this thread's CPU time (the host's work: robust on a shared machine; a device's work
on its own threads or streams is not in it; ``total_wall`` is the whole call in elapsed time, the
device synchronized after each loop). A layer's own cost is its time minus the time of the
layers it calls:

- ``dynamo``: the compiled model minus its graphs: Dynamo's guards and frames, and the model's
  Python between graphs (graph breaks: Switch Transformers' routing runs there, eagerly);
- ``aot``: each graph's callable as Dynamo got it minus the graph it wraps (AOTAutograd's runtime
  wrappers, or the warm path's :func:`~torchvendor.sdk.compile.warm.inference_function`);
- ``outer``: the outer (outlined) graph minus its partitions: its FX code, the ops left outside
  every partition (eager fallback between partitions), the boxed argument lists;
- ``partition``: each :class:`~torchvendor.sdk.compile.partition_call.PartitionCall` minus what it
  runs (the layout check of the replay's result, the call counter, the boxed list);
- ``run``: what the partitions run: the runner's C++ replay (guard, allocation, launches: the
  kernels' own time is in it), else its Python call, else the eager fallback; ``run_python``:
  the same partitions through the runner's generated Python call, for comparison.

Inductor's rows split only ``dynamo`` and ``graph`` (its graph's callable: AOTAutograd's wrappers,
Inductor's ``call`` and its kernels); eager's and Dynamo-alone's (``backend="eager"``) the total.

    python bench/bench_runner.py layers --models beit,deberta_v2 --devices cpu,acme --out layers.json
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable

MODELS = ("beit", "switch_transformers", "deberta_v2", "efficientnet")
BACKENDS = {"cpu": ("eager", "dynamo", "inductor", "torchvendor_cpu"), "acme": ("eager", "dynamo", "torchvendor_cpu"),
            "cuda": ("eager", "dynamo", "inductor", "cudagraphs", "torchvendor_cuda")}


#: what a loop is timed with: this thread's CPU time (the host's work per call, robust on a
#: shared machine: time the thread waits for a core is not counted), or ``wall`` (the env
#: TORCHVENDOR_LAYERS_CLOCK=wall): the elapsed time, a device's work included where it bounds
CLOCK = time.perf_counter if os.environ.get("TORCHVENDOR_LAYERS_CLOCK") == "wall" else time.thread_time


def _best(fn: Callable[[], Any], sync: Callable[[], Any], budget: float = 0.25, clock: Callable[[], float] | None = None) -> float:
    """Microseconds per call: the fastest of 5 loops, each about ``budget`` / 5 seconds."""
    clock = clock or CLOCK
    fn()
    sync()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 0.02 or n < 3:
        fn()
        n += 1
    sync()
    calls = max(3, int(n * budget / 5 / max(time.perf_counter() - start, 1e-9)))
    loops = []
    for _ in range(5):
        start = clock()
        for _ in range(calls):
            fn()
        sync()
        loops.append((clock() - start) / calls * 1e6)
    return min(loops)


class _Replayed:
    """The calls one callable got during one call of the model, with their results: replayed in
    order (:meth:`again`), or handed out in order in place of the call (:meth:`next_result`: the
    layers above it are then timed alone). A graph or partition may run several times per model
    call (Switch Transformers' layers share graphs), each time with its own arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any]] = []
        self.k = 0

    def next_result(self) -> Any:
        out = self.calls[self.k][1]
        self.k = (self.k + 1) % len(self.calls)
        return list(out) if isinstance(out, list) else out


class _Capture(_Replayed):
    """A callable that records its calls while ``armed`` (a copy of a boxed argument list: the
    callee clears it), and while ``stub`` returns the recorded results instead of calling."""

    armed = False

    def __init__(self, fn: Callable[..., Any], boxed: bool = False) -> None:
        super().__init__()
        self.fn, self.boxed, self.stub = fn, boxed, False
        self._boxed_call = getattr(fn, "_boxed_call", False)

    def __call__(self, *args: Any) -> Any:
        if self.stub:
            if self.boxed:
                args[0].clear()
            return self.next_result()
        if _Capture.armed:
            given = list(args[0]) if self.boxed else args
            out = self.fn(*args)
            self.calls.append((given, out))
            return out
        return self.fn(*args)

    def again(self) -> None:
        """The recorded calls once more, in order."""
        fn = self.fn
        for args, _ in self.calls:
            fn(list(args)) if self.boxed else fn(*args)


def _probes(backend: str) -> tuple[Callable[..., Any], list, list, list]:
    """The backend for ``torch.compile`` with Dynamo's graphs captured, and lists that fill with
    each graph (:class:`_Capture`), each outer graph and each partition call as they are made."""
    import torch

    graphs: list[_Capture] = []
    outers: list[_Capture] = []
    parts: list = []
    if backend.startswith("torchvendor"):
        from torchvendor.sdk.compile import aot_flow, partition_call, warm
        from torchvendor.sdk.compile.registry import get_backend

        real = get_backend(backend)
        boxed, inference = aot_flow.AotFlow._boxed, warm.inference_function

        def spy_boxed(self: Any, compiled: Any) -> Any:
            outers.append(_Capture(boxed(self, compiled), boxed=True))
            return outers[-1]

        def spy_inference(compiled: Any) -> Any:  # the warm path's graph (a cold one's is captured already)
            if not isinstance(compiled, _Capture):
                outers.append(_Capture(getattr(compiled, "forward", compiled)))
                compiled = outers[-1]
            return inference(compiled)

        init = partition_call.PartitionCall.__init__

        def spy_init(self: Any, *a: Any, **k: Any) -> None:
            init(self, *a, **k)
            parts.append(self)

        # a benchmark's probes, never the library's path
        aot_flow.AotFlow._boxed, aot_flow.warm.inference_function = spy_boxed, spy_inference
        partition_call.PartitionCall.__init__ = spy_init
    else:
        from torchvendor.ir import compat

        real = compat.lookup_backend({"dynamo": "eager", "cudagraphs": "inductor"}.get(backend, backend))
        if backend == "cudagraphs":  # Inductor with CUDA graphs (what mode="reduce-overhead" sets)
            from functools import partial

            real = partial(real, config_patches={"triton.cudagraphs": True})

    def capture(gm: Any, example_inputs: list) -> Any:
        graphs.append(_Capture(real(gm, example_inputs)))
        return graphs[-1]

    return capture, graphs, outers, parts


def _part_args(parts: list) -> dict[int, _Replayed]:
    """Each partition call's calls on the next call of the model: arguments (positional, also for
    a boxed one: its list's contents) and results."""
    from torchvendor.sdk.compile import partition_call

    seen: dict[int, _Replayed] = {}
    call = partition_call.PartitionCall.__call__

    def spy(self: Any, *args: Any) -> Any:
        given = tuple(args[0]) if self.boxed else args  # before the call: a boxed one clears its list
        out = call(self, *args)
        seen.setdefault(id(self), _Replayed()).calls.append((given, out))
        return out

    partition_call.PartitionCall.__call__ = spy
    return seen


class _Stubbed:
    """Partition ``p`` with what it runs replaced by its recorded results (``record``), in each
    form it may call: the replay, the boxed call, the compiled callable."""

    def __init__(self, p: Any, record: _Replayed) -> None:
        self.p, self.saved = p, (p._replay, p._more, p._boxed_run, p.compiled, p._tries)

        def outs() -> list:
            out = record.next_result()
            return list(out) if isinstance(out, tuple) else [out]

        self.replay = lambda *a: record.next_result()
        self.boxed = lambda box: (box.clear(), outs())[1]
        self.compiled = lambda *a: outs()

    def __enter__(self) -> None:
        p = self.p
        p._replay = self.replay if self.saved[0] is not None else None
        p._more = []
        p._boxed_run = self.boxed if self.saved[2] is not None else None
        p.compiled, p._tries = (self.compiled if self.saved[3] is not None else None), 1 << 30

    def __exit__(self, *exc: Any) -> None:
        p = self.p
        p._replay, p._more, p._boxed_run, p.compiled, p._tries = self.saved


def _runs(p: Any, record: _Replayed) -> tuple[Callable[[], Any], Callable[[], Any] | None, str]:
    """What partition ``p`` runs for its recorded calls (and its runner's Python call for them),
    and which it is."""
    argses = [a for a, _ in record.calls]

    def each(fn: Callable[..., Any]) -> Callable[[], None]:
        def run() -> None:
            for a in argses:
                fn(*a)
        return run

    if p.compiled is None:
        return each(p.fallback), None, "fallback"
    python = each(p.compiled)
    if p.boxed and p._boxed_run is not None:
        return each(lambda *a: p._boxed_run(list(a))), python, "boxed"
    replays = ([p._replay] if p._replay is not None else []) + list(getattr(p, "_more", []))
    if replays and all(any(r(*a) is not None for r in replays) for a in argses):
        def replayed(*a: Any) -> Any:
            return next(o for o in (r(*a) for r in replays) if o is not None)
        return each(replayed), python, "replay"
    return python, python, type(p.compiled).__name__  # its own call: the runner's Python call, a CUDA graph


def measure(model_name: str, device: str, backend: str) -> dict[str, Any]:
    """One row: the model's call and, for a torchvendor backend, its layers (module docstring)."""
    import torch

    from torchvendor.sdk.conformance.models.catalog import SPECS

    torch.manual_seed(0)
    model, inputs = SPECS[model_name].build()
    model = model.eval().to(device)
    inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}
    mod = getattr(torch, device, None)
    sync = getattr(mod, "synchronize", None) if device != "cpu" else None
    sync = sync or (lambda: None)
    row: dict[str, Any] = {"model": model_name, "device": device, "backend": backend}
    with torch.no_grad():
        if backend == "eager":
            row["total"] = _best(lambda: model(**inputs), sync)
            row["total_wall"] = _best(lambda: model(**inputs), sync, clock=time.perf_counter)
            return row
        compile_with, graphs, outers, parts = _probes(backend)
        compiled = torch.compile(model, backend=compile_with)
        for _ in range(3):
            compiled(**inputs)
        from torchvendor.sdk.compile import partition_call

        original = partition_call.PartitionCall.__call__
        part_args = _part_args(parts)
        _Capture.armed = True
        compiled(**inputs)
        _Capture.armed = False
        partition_call.PartitionCall.__call__ = original
        row["total"] = _best(lambda: compiled(**inputs), sync)
        row["total_wall"] = _best(lambda: compiled(**inputs), sync, clock=time.perf_counter)
        timed = [g for g in graphs if g.calls]
        row["graphs"], row["graph_calls"] = len(timed), sum(len(g.calls) for g in timed)
        row["graph"] = sum(_best(g.again, sync) for g in timed)
        row["dynamo"] = _stubbed_time(timed, lambda: compiled(**inputs), sync)
        if backend.startswith("torchvendor"):
            row.update(_vendor_layers(timed, outers, parts, part_args, sync))
        return row


def _each_call(p: Any, record: _Replayed) -> Callable[[], None]:
    """Partition ``p`` called as the outer graph calls it, once per recorded call."""
    argses = [a for a, _ in record.calls]

    def run() -> None:
        for a in argses:
            p(list(a)) if p.boxed else p(*a)
    return run


def _stubbed_time(captures: list, fn: Callable[[], Any], sync: Callable[[], Any]) -> float:
    """``fn``'s time with ``captures`` returning their recorded results (the layer above alone)."""
    for c in captures:
        c.stub = True
    try:
        return _best(fn, sync)
    finally:
        for c in captures:
            c.stub = False


def _vendor_layers(graphs: list, outers: list, parts: list, part_args: dict, sync: Callable[[], Any]) -> dict[str, Any]:
    """The layers inside a torchvendor graph, each alone: AOTAutograd's wrappers (or the direct
    call), the outer graphs, the partition calls, and what they run."""
    called = [o for o in outers if o.calls]
    aot = sum(_stubbed_time(called, g.again, sync) for g in graphs)
    live = [p for p in parts if id(p) in part_args]
    outer = 0.0
    for o in called:
        stubs = [_Stubbed(p, part_args[id(p)]) for p in live]
        for st in stubs:
            st.__enter__()
        try:
            outer += _best(o.again, sync)
        finally:
            for st in stubs:
                st.__exit__()
    part = run = python = 0.0
    kinds: dict[str, int] = {}
    for p in live:
        record = part_args[id(p)]
        with _Stubbed(p, record):
            part += _best(_each_call(p, record), sync)
        fast, py, kind = _runs(p, record)
        kinds[kind] = kinds.get(kind, 0) + 1
        t = _best(fast, sync)
        run += t
        python += _best(py, sync) if py is not None and py is not fast else t
    return {"outer_graphs": len(called), "partitions": len(live),
            "partition_calls": sum(len(part_args[id(p)].calls) for p in live), "runs": kinds,
            "aot": aot, "outer": outer, "partition": part, "run": run, "run_python": python}


def main(argv: list[str]) -> int:
    model_name, device, backend = argv
    import torch

    torch.set_num_threads(1)
    if device == "acme":
        from torchvendor.sdk import register_device

        register_device("acme")
    if backend.startswith("torchvendor"):
        import torchvendor.reference_backends.cpu  # noqa: F401 - registers the backends
        if device in ("cuda", "gpu"):
            import torchvendor.reference_backends.cuda  # noqa: F401
    row = measure(model_name, device, backend)
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


_COLUMNS = ("total_wall", "total", "dynamo", "graph", "aot", "outer", "partition", "run", "run_python")


def table(rows: list[dict[str, Any]]) -> str:
    """The rows of one model as a Markdown table (µs per call; — where a layer is not split)."""
    def cell(v: Any) -> str:
        return "—" if v is None else f"{v:.1f}"

    lines = ["| model | device | backend | " + " | ".join(_COLUMNS) + " | partitions (how they run) |",
             "|---|---|---|" + "---:|" * len(_COLUMNS) + "---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['device']} | {r['backend']} | error: {r['error'][:80]} |")
            continue
        runs = ", ".join(f"{n} {k}" for k, n in sorted(r.get("runs", {}).items()))
        lines.append(f"| {r['model']} | {r['device']} | {r['backend']} | "
                     + " | ".join(cell(r.get(c)) for c in _COLUMNS) + f" | {runs} |")
    return "\n".join(lines)
