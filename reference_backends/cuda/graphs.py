"""Replaying a partition's launches from a CUDA graph: the CPU cost of a call drops to a few
copies and one ``cudaGraphLaunch``.

A small model's partition is bound by the host: the SDK's program runner binds sizes, allocates
buffers and calls each kernel and extern through Python, tens of microseconds per step, while the
GPU waits. :class:`GraphedProgram` wraps the runner of one partition on torch's ``cuda``
device. It runs the runner as is for the first call of each input layout (shapes, strides,
dtypes); on the next call of that layout it captures one call into a CUDA graph
(``torch.cuda.CUDAGraph``) and from then on replays it:

- inputs whose address stayed the same from one call to the next (parameters, buffers) are read
  in place; the others are copied into buffers the graph owns before each replay, and copied
  back afterwards if the program writes them;
- outputs live in the graph's memory, which the next replay overwrites, so each call returns
  copies of them;
- a call whose in-place input moved runs the runner again; a program that draws random numbers,
  returns an input (or a view of one) or outputs that share memory, or whose capture fails (a
  host synchronisation, a pageable copy), keeps running the runner: nothing changes for it.

>>> from torchvendor.reference_backends.cuda.graphs import GraphedProgram
>>> calls = []
>>> g = GraphedProgram(lambda *xs: calls.append(len(xs)) or [], program=None)
>>> g(1, 2), calls          # no tensor on cuda: the runner runs as is
([], [2])
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Any, Callable, Sequence

import torch

__all__ = ["GraphedProgram", "graphs_enabled", "stats"]

#: how partitions fared, for benchmarks: "captured" (layouts replayed from a graph), "not
#: capturable" (the capture failed or the outputs alias), "not usable" (random, constants)
stats: Counter = Counter()

#: ops that draw random numbers: replaying a capture would repeat the warm-up's draws
_RANDOM = ("rand", "bernoulli", "dropout", "normal", "uniform", "exponential", "multinomial", "seed", "poisson")


def graphs_enabled() -> bool:
    """Whether partitions replay CUDA graphs (``TORCHVENDOR_CUDA_GRAPHS=0`` turns it off).

    >>> isinstance(graphs_enabled(), bool)
    True
    """
    return os.environ.get("TORCHVENDOR_CUDA_GRAPHS", "1") != "0"


def _draws_random(program: Any) -> bool:
    """Whether a loop program draws random numbers (in a kernel or through an extern)."""
    from torchvendor.ir.loop_ir import Kernel

    for op in getattr(program, "ops", ()):
        if isinstance(op, Kernel):
            if any(st.op in ("rand", "randn", "randint64", "load_seed") for n in op.nests for st in _walk(n.body)):
                return True
        elif any(word in op.op.lower() for word in _RANDOM):
            return True
    return False


def _walk(body: Sequence[Any]):  # type: ignore[no-untyped-def]
    for st in body:
        yield st
        yield from _walk(st.body or ())


def _layout(inputs: Sequence[Any]) -> tuple:
    """The key of a call: each tensor's shape, strides, dtype and device; other values as such."""
    return tuple((tuple(x.shape), x.stride(), x.dtype, x.device) if isinstance(x, torch.Tensor) else x
                 for x in inputs)


class _Graph:
    """One captured call: the graph, the inputs it owns (position -> buffer), the positions it
    reads in place (position -> address), the inputs to copy back, and its outputs."""

    def __init__(self, graph: torch.cuda.CUDAGraph, owned: dict[int, torch.Tensor], fixed: dict[int, int],
                 write_back: list[int], outputs: list[Any]) -> None:
        self.graph, self.owned, self.fixed, self.write_back, self.outputs = graph, owned, fixed, write_back, outputs

    def matches(self, inputs: Sequence[Any]) -> bool:
        """Whether the inputs read in place are where they were at capture."""
        return all(inputs[i].data_ptr() == ptr for i, ptr in self.fixed.items())

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        for i, buf in self.owned.items():
            buf.copy_(inputs[i])
        self.graph.replay()
        for i in self.write_back:
            inputs[i].copy_(self.owned[i])
        return [o.clone() if isinstance(o, torch.Tensor) else o for o in self.outputs]


class GraphedProgram:
    """A partition's program runner that replays a CUDA graph once a layout has run (module
    docstring). ``runner(*inputs)`` runs the program; ``program`` is its loop program (for which
    inputs it writes and whether it draws random numbers), None if unknown."""

    #: graphs kept per partition (dynamic shapes: one per layout seen, up to this many)
    max_graphs = 8

    def __init__(self, runner: Callable[..., list[Any]], program: Any) -> None:
        self.runner = runner
        # constants are copied from the host at each call: a pageable copy cannot be captured
        self.usable = program is not None and not _draws_random(program) and not any(
            b.kind == "constant" for b in program.buffers)
        inputs = list(getattr(program, "inputs", ()))
        written = {n for op in getattr(program, "ops", ()) for n in op.writes()}
        self.written = {k for k, name in enumerate(inputs) if name in written}
        stats["usable" if self.usable else "not usable"] += 1
        self.graphs: dict[tuple, _Graph | None] = {}   # None: this layout runs the runner
        self.last: dict[tuple, list[int]] = {}         # the addresses of the last call, per layout

    def __call__(self, *inputs: Any) -> list[Any]:
        device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), None)
        if not self.usable or device is None or device.type != "cuda" or torch.cuda.is_current_stream_capturing():
            return self.runner(*inputs)
        key = _layout(inputs)
        graph = self.graphs.get(key)
        if graph is not None and graph.matches(inputs):
            return graph(inputs)
        ptrs = [x.data_ptr() if isinstance(x, torch.Tensor) else 0 for x in inputs]
        before, self.last[key] = self.last.get(key), ptrs
        if key in self.graphs or before is None or len(self.graphs) >= self.max_graphs:
            if graph is not None:   # an input read in place moved: capture again at the next call
                del self.graphs[key]
            return self.runner(*inputs)
        fixed = {k for k, x in enumerate(inputs) if isinstance(x, torch.Tensor) and ptrs[k] == before[k]
                 and k not in self.written}
        try:
            graph = self._capture(inputs, fixed, device)
        except Exception:  # noqa: BLE001 - a call that cannot be captured keeps running the runner
            graph = None
        self.graphs[key] = graph
        stats["captured" if graph is not None else "not capturable"] += 1
        return graph(inputs) if graph is not None else self.runner(*inputs)

    def _capture(self, inputs: Sequence[Any], fixed: set[int], device: torch.device) -> _Graph | None:
        """Capture one call; None if its outputs alias its inputs or each other, or if an input
        cannot be copied into a buffer of its own (overlapping strides)."""
        owned: dict[int, torch.Tensor] = {}
        for k, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and k not in fixed:
                if not _dense(x):
                    return None
                owned[k] = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
                owned[k].copy_(x)
        args = [owned.get(k, x) for k, x in enumerate(inputs)]
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):   # lazy per-stream state (cuBLAS workspaces) before the capture
            self.runner(*args)
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        try:
            # the outer stream context restores the caller's stream also when the capture fails
            with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
                outputs = list(self.runner(*args))
        except Exception:
            _end_generator_capture(device)
            raise
        if _aliased(outputs, args):
            return None
        write_back = sorted(k for k in self.written if k in owned)
        return _Graph(graph, owned, {k: inputs[k].data_ptr() for k in fixed}, write_back, outputs)


def _end_generator_capture(device: torch.device) -> None:
    """Undo what a failed capture leaves in torch's CUDA generators.

    ``CUDAGraph::capture_end`` raises as soon as ``cudaStreamEndCapture`` reports the capture
    invalidated (a host synchronisation, a pageable copy inside it), before it runs the
    generators' capture epilogue: the device's default generator then believes a capture is
    still under way, and every later random op in the process raises "Offset increment outside
    graph capture encountered unexpectedly". An empty capture that ends cleanly runs that
    epilogue (it resets the generator's capture flag and nothing else)."""
    import warnings

    with torch.cuda.device(device), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "the CUDA graph is empty": that is the point
        empty = torch.cuda.CUDAGraph()
        with torch.cuda.graph(empty):
            pass
        del empty


def _dense(x: torch.Tensor) -> bool:
    """Whether no element of ``x`` is stored twice (so it can be copied into a buffer of its own
    strides): each dimension, by increasing stride, steps over the extent of the ones before."""
    extent = 1
    for stride, size in sorted((s, n) for s, n in zip(x.stride(), x.shape) if n > 1):
        if stride < extent:
            return False
        extent = stride * (size - 1) + extent
    return True


def _aliased(outputs: Sequence[Any], inputs: Sequence[Any]) -> bool:
    """Whether an output shares memory with an input or with another output."""
    seen = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    for o in outputs:
        if isinstance(o, torch.Tensor):
            ptr = o.untyped_storage().data_ptr()
            if ptr in seen:
                return True
            seen.add(ptr)
    return False
