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
  copies of them; an output that views an input is that view of the caller's input, and outputs
  that share a buffer are views of one copy of it, as a plain call returns them;
- a call whose in-place input moved runs the runner again; a program that draws random numbers,
  or whose capture fails (a host synchronisation, a pageable copy), keeps running the runner:
  nothing changes for it.

What a graph costs in memory, and when a partition is not graphed
-----------------------------------------------------------------

A captured call keeps, for as long as the graph lives: the storage its capture allocated (the
runner's planned peak, outputs included: the memory pool), a copy of every input whose address
moves (a backward's saved activations: copied in before each replay) and, per call, a clone of
each output. For a training step whose partitions hold the activations, that is the activations
two or three times over, and the runner's boxed call (each input freed at its last use) cannot
run. A graph only pays where the host is the bottleneck, so a layout is captured only where its
call is **launch-bound** (:func:`launch_bound`): the bytes it touches per operation (its inputs
plus every buffer it allocates, each counted once, over the program's operations) are at most
``max_bytes_per_op`` (the backend option ``cuda_graph_max_bytes_per_op``, default
:data:`GRAPH_MAX_BYTES_PER_OP`, 8 MiB). Each byte is read or written at least once, so at about
4 TB/s such an operation keeps the GPU busy for at least 2 µs, about what the runner's host path
spends per operation; above it the GPU is the bottleneck, launches are hidden behind kernels,
and the partition runs the SDK runner: its C++ replay (:meth:`GraphedProgram.replay`) or, where
AOTAutograd hands over its inputs, its boxed call (:meth:`GraphedProgram.boxed`). GPT-2 124M at
8 x 512 tokens moves tens of MB per operation (not graphed); a model of hidden size 32 moves KBs
(graphed). The rule sees sizes only, never a model's or a device's name.

The graphs of a device (and caller stream) capture into one shared memory pool
(``torch.cuda.graph_pool_handle``), so a graph reuses the storage other graphs' captures freed
(their intermediates) instead of each keeping a private pool. That is safe here because every
replay's outputs are copied out before the next replay on the stream: what one graph leaves in
the pool is never read after another graph ran. Graphs replay on the caller's stream; graphs
sharing a pool must not replay concurrently on two streams.

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

__all__ = ["GraphedProgram", "graphs_enabled", "launch_bound", "stats", "GRAPH_MAX_BYTES_PER_OP"]

#: how partitions fared, for benchmarks: "captured" (layouts replayed from a graph), "not
#: capturable" (the capture failed), "not usable" (random, constants), "not launch-bound"
#: (layouts left to the runner by :func:`launch_bound`)
stats: Counter = Counter()

#: the launch-bound rule's limit (module docstring): a layout whose call touches more bytes per
#: operation than this runs without a graph
GRAPH_MAX_BYTES_PER_OP = 8 << 20

#: ops that draw random numbers: replaying a capture would repeat the warm-up's draws
_RANDOM = ("rand", "bernoulli", "dropout", "normal", "uniform", "exponential", "multinomial", "seed", "poisson")


def graphs_enabled() -> bool:
    """Whether partitions replay CUDA graphs (``TORCHVENDOR_CUDA_GRAPHS=0`` turns it off).

    >>> isinstance(graphs_enabled(), bool)
    True
    """
    return os.environ.get("TORCHVENDOR_CUDA_GRAPHS", "1") != "0"


def launch_bound(runner: Any, program: Any, inputs: Sequence[Any], limit: int | None = GRAPH_MAX_BYTES_PER_OP) -> bool:
    """Whether a partition's call on ``inputs`` is bound by its launches, so that a CUDA graph
    pays (module docstring): the bytes of its tensor inputs (each storage once) plus the storage
    the call allocates with every buffer its own (``runner.memory(*inputs)["naive"]``, the SDK's
    :meth:`~torchvendor.sdk.ProgramRunner.memory`), over the program's operations, at most
    ``limit``. True where that is unknown (no ``memory``, no operations) or ``limit`` is None.

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> from torchvendor.sdk import ProgramRunner, loop_kernels, reference_kernel
    >>> prog = capture(lambda x: x.sin() * 2, [torch.randn(8)], level="loop").inference
    >>> runner = ProgramRunner(prog, {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)})
    >>> x = torch.randn(8)    # 32 bytes in, 32 allocated, one operation
    >>> launch_bound(runner, prog, [x]), launch_bound(runner, prog, [x], limit=63)
    (True, False)
    """
    memory = getattr(runner, "memory", None)
    ops = len(getattr(program, "ops", ()))
    if limit is None or memory is None or not ops:
        return True
    try:
        allocated = int(memory(*inputs)["naive"])
    except Exception:  # noqa: BLE001 - a runner that cannot tell: graphed, as before the rule
        return True
    spans: dict[int, int] = {}
    for x in inputs:
        if isinstance(x, torch.Tensor):
            ptr = x.untyped_storage().data_ptr()
            spans[ptr] = max(spans.get(ptr, 0), x.numel() * x.element_size())
    return (allocated + sum(spans.values())) / ops <= limit


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


def _layout(inputs: Sequence[Any], skip: frozenset[int] = frozenset()) -> tuple:
    """The key of a call: each tensor's shape, strides, dtype and device; other values as such;
    positions in ``skip`` (parameters) left out."""
    return tuple((tuple(x.shape), x.stride(), x.dtype, x.device) if isinstance(x, torch.Tensor) else x
                 for k, x in enumerate(inputs) if k not in skip)


class _Graph:
    """One captured call: the graph, the inputs it owns (position -> buffer), the positions it
    reads in place (position -> address), the inputs to copy back, its outputs, and how each
    output is handed out (:func:`_handouts`)."""

    def __init__(self, graph: torch.cuda.CUDAGraph, owned: dict[int, torch.Tensor], fixed: dict[int, int],
                 write_back: list[int], outputs: list[Any], handouts: list[tuple]) -> None:
        self.graph, self.owned, self.fixed, self.write_back = graph, owned, fixed, write_back
        self.outputs, self.handouts = outputs, handouts

    def matches(self, inputs: Sequence[Any]) -> bool:
        """Whether the inputs read in place are where they were at capture."""
        return all(inputs[i].data_ptr() == ptr for i, ptr in self.fixed.items())

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        for i, buf in self.owned.items():
            buf.copy_(inputs[i])
        self.graph.replay()
        for i in self.write_back:
            inputs[i].copy_(self.owned[i])
        copies: dict[int, Any] = {}   # one copy per storage that outputs share
        out = []
        for o, (how, *at) in zip(self.outputs, self.handouts):
            if how == "clone":
                out.append(o.clone())
            elif how == "input":   # a view of the caller's input, as eager returns it
                k, delta = at
                out.append(inputs[k].as_strided(o.shape, o.stride(), inputs[k].storage_offset() + delta))
            elif how == "shared":
                group = at[0]
                if group not in copies:
                    copies[group] = o.untyped_storage().clone()
                out.append(torch.empty(0, dtype=o.dtype, device=o.device).set_(
                    copies[group], o.storage_offset(), o.shape, o.stride()))
            else:
                out.append(o)
        return out


class GraphedProgram:
    """A partition's program runner that replays a CUDA graph once a layout has run (module
    docstring). ``runner(*inputs)`` runs the program; ``program`` is its loop program (for which
    inputs it writes and whether it draws random numbers), None if unknown;
    ``max_bytes_per_op``: the launch-bound rule's limit (:func:`launch_bound`; None: every
    layout is graphed)."""

    #: graphs kept per partition (dynamic shapes: one per layout seen, up to this many)
    max_graphs = 8

    def __init__(self, runner: Callable[..., list[Any]], program: Any,
                 max_bytes_per_op: int | None = GRAPH_MAX_BYTES_PER_OP) -> None:
        self.runner, self.program, self.max_bytes_per_op = runner, program, max_bytes_per_op
        # constants are copied from the host at each call: a pageable copy cannot be captured
        self.usable = program is not None and not _draws_random(program) and not any(
            b.kind == "constant" for b in program.buffers)
        inputs = list(getattr(program, "inputs", ()))
        written = {n for op in getattr(program, "ops", ()) for n in op.writes()}
        self.written = {k for k, name in enumerate(inputs) if name in written}
        self.on_device = _host_inputs_kernels_read(program) if program is not None else set()
        stats["usable" if self.usable else "not usable"] += 1
        self.graphs: dict[tuple, _Graph | None] = {}   # None: this layout runs the runner
        self.last: dict[tuple, list[int]] = {}         # the addresses of the last call, per layout
        self.bound: dict[tuple, bool] = {}             # per layout: launch-bound (graphed) or not
        #: positions of parameters, left out of the layout key: a model's hundreds of weights made
        #: the key cost more than the replay; Dynamo's guards fix their layout, and a replay checks
        #: their addresses (a parameter replaced by another tensor is captured again)
        self.params: frozenset[int] | None = None
        #: the graph the last replayed call took, with its guard in C++ (:func:`_fast_path`)
        self._fast: tuple[Callable[[tuple], bool], _Graph] | None = None

    def __call__(self, *inputs: Any) -> list[Any]:
        if _TRACE and _cuda_device(inputs) is not None:
            return _traced(self._call, self.program, "call")(*inputs)
        return self._call(*inputs)

    def _call(self, *inputs: Any) -> list[Any]:
        fast = self._fast
        if fast is not None and fast[0](inputs) and not torch.cuda.is_current_stream_capturing():
            return fast[1](inputs)
        self._fast = None
        device = _cuda_device(inputs)
        if not self.usable or device is None or torch.cuda.is_current_stream_capturing():
            return self.runner(*inputs)
        key = self._key(inputs)
        graph = self.graphs.get(key)
        if graph is not None and graph.matches(inputs):
            self._fast = _fast_path(graph, inputs)
            return graph(inputs)
        if not self._launch_bound(key, inputs):
            return self.runner(*inputs)
        ptrs = [x.data_ptr() if isinstance(x, torch.Tensor) else 0 for x in inputs]
        before, self.last[key] = self.last.get(key), ptrs
        if key in self.graphs or before is None or len(self.graphs) >= self.max_graphs:
            if graph is not None:   # an input read in place moved: capture again at the next call
                del self.graphs[key]
            return self.runner(*inputs)
        fixed = {k for k, x in enumerate(inputs) if isinstance(x, torch.Tensor) and ptrs[k] == before[k]
                 and k not in self.written and x.device.type == "cuda"}
        try:
            graph = self._capture(inputs, fixed, device)
        except Exception:  # noqa: BLE001 - a call that cannot be captured keeps running the runner
            graph = None
        self.graphs[key] = graph
        stats["captured" if graph is not None else "not capturable"] += 1
        if graph is None:
            return self.runner(*inputs)
        self._fast = _fast_path(graph, inputs)
        return graph(inputs)

    def graphed(self, *inputs: Any) -> bool:
        """Whether calls laid out as ``inputs`` replay a CUDA graph (once captured): tensors on
        ``cuda``, a program that can be captured, and a launch-bound layout (:func:`launch_bound`).

        >>> GraphedProgram(lambda *xs: [], program=None).graphed(1, 2)
        False
        """
        if not self.usable or _cuda_device(inputs) is None:
            return False
        return self._launch_bound(self._key(inputs), inputs)

    def replay(self, *inputs: Any, form: int = 0) -> Callable[..., Any] | None:
        """The SDK runner's C++ replay (``ProgramRunner.replay``) for calls laid out as ``inputs``
        where they do not replay a graph (:meth:`graphed`): inputs off ``cuda`` (a PrivateUse1
        GPU device: no CUDA graphs there), a program that is never captured, a layout that is not
        launch-bound; None where the graph replays."""
        make = getattr(self.runner, "replay", None)
        if make is None or self.graphed(*inputs):
            return None
        return _traced(make(*inputs, form=form), self.program, "replay")

    def boxed(self, *inputs: Any) -> Callable[[list], list] | None:
        """The SDK runner's boxed call (``ProgramRunner.boxed``: AOTAutograd's convention, each
        input freed at its last use) for calls laid out as ``inputs`` where they do not replay a
        graph (:meth:`graphed`); None where the graph replays (it keeps its inputs: they are
        copied into its own buffers) or the runner offers none."""
        make = getattr(self.runner, "boxed", None)
        if make is None or self.graphed(*inputs):
            return None
        run = make(*inputs)
        return _traced(run, self.program, "replay+boxed" if getattr(run, "native", False) else "boxed")

    def _key(self, inputs: Sequence[Any]) -> tuple:
        if self.params is None:
            self.params = frozenset(k for k, x in enumerate(inputs) if isinstance(x, torch.nn.Parameter))
        return _layout(inputs, self.params)

    def _launch_bound(self, key: tuple, inputs: Sequence[Any]) -> bool:
        got = self.bound.get(key)
        if got is None:
            got = self.bound[key] = launch_bound(self.runner, self.program, inputs, self.max_bytes_per_op)
            if not got:
                stats["not launch-bound"] += 1
        return got

    def _capture(self, inputs: Sequence[Any], fixed: set[int], device: torch.device) -> _Graph | None:
        """Capture one call; None if an input cannot be copied into a buffer of its own
        (overlapping strides), a host input is one an extern reads or the program writes, or an
        output is a view of an input that cannot be rebuilt. A host input that only kernels read
        (a model's lifted scalar constant, which a kernel would copy over inside the capture: a
        pageable copy) gets a buffer on the device, filled before each replay."""
        owned: dict[int, torch.Tensor] = {}
        for k, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and k not in fixed:
                host = x.device.type == "cpu"
                if not _dense(x) or (host and k not in self.on_device):
                    return None
                owned[k] = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device if host else x.device)
                owned[k].copy_(x)
        args = [owned.get(k, x) for k, x in enumerate(inputs)]
        caller = torch.cuda.current_stream(device)
        stream, pool = _capture_stream_and_pool(device, caller)
        stream.wait_stream(caller)
        with torch.cuda.stream(stream):   # lazy per-stream state (cuBLAS workspaces) before the capture
            self.runner(*args)
        caller.wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        try:
            # the outer stream context restores the caller's stream also when the capture fails
            with torch.cuda.stream(stream), torch.cuda.graph(graph, pool=pool, stream=stream):
                outputs = list(self.runner(*args))
        except Exception:
            _end_generator_capture(device)
            raise
        handouts = _handouts(outputs, args)
        if handouts is None:
            return None
        write_back = sorted(k for k in self.written if k in owned)
        return _Graph(graph, owned, {k: inputs[k].data_ptr() for k in fixed}, write_back, outputs, handouts)


#: ``$TORCHVENDOR_CUDA_MEMORY_TRACE``: a file each partition call on ``cuda`` appends a line to
_TRACE = os.environ.get("TORCHVENDOR_CUDA_MEMORY_TRACE", "")


def _traced(fn: Callable[..., Any] | None, program: Any, path: str) -> Callable[..., Any] | None:
    """``fn`` itself, or with ``$TORCHVENDOR_CUDA_MEMORY_TRACE`` set, ``fn`` appending one JSON line
    per call to that file: the program's name, the path the call took (``call``: this wrapper,
    graphed or not; ``replay``; ``boxed``), ``torch.cuda.memory_allocated`` before and after, and
    ``max_memory_allocated`` after (the peak since the caller's last reset): where a step's
    memory goes, partition by partition, without a profiler."""
    if not _TRACE or fn is None:
        return fn
    import json

    name = getattr(program, "name", "?")

    def run(*args: Any) -> Any:
        before = torch.cuda.memory_allocated()
        out = fn(*args)
        line = {"program": name, "path": path, "before": before, "after": torch.cuda.memory_allocated(),
                "peak": torch.cuda.max_memory_allocated()}
        with open(_TRACE, "a") as f:
            f.write(json.dumps(line) + "\n")
        return out

    run.native = getattr(fn, "native", None)  # type: ignore[attr-defined]
    return run


def _fast_path(graph: _Graph, inputs: Sequence[Any]) -> tuple[Callable[[tuple], bool], _Graph] | None:
    """``(guard, graph)``: ``guard(inputs)`` (``torchvendor._C.InputGuard``) tells in one C++ pass
    whether a call takes ``graph`` as this one did (every tensor of these dtypes, sizes, strides
    and devices, those the graph reads in place at their addresses, other values equal): the
    layout key and the address checks in Python cost ~30 us a call for a model of 50 weights,
    the C++ guard ~1.5 us (``ProgramRunner.input_guard``). None where there is none (no
    ``InputGuard`` in this build, a value it does not compare): the Python checks run."""
    made = getattr(graph, "fast", False)   # one guard per graph, made at its first replay
    if made is False:
        from torchvendor.sdk import ProgramRunner

        guard = ProgramRunner.input_guard(inputs, graph.fixed)
        made = graph.fast = None if guard is None else (guard, graph)   # type: ignore[attr-defined]
    return made


def _cuda_device(inputs: Sequence[Any]) -> torch.device | None:
    """The device of the first input on torch's ``cuda``, None if none is."""
    return next((x.device for x in inputs if isinstance(x, torch.Tensor) and x.device.type == "cuda"), None)


#: (device, caller stream) -> the side stream captures run on and the memory pool they share
_CAPTURE: dict[tuple, tuple[Any, Any]] = {}


def _capture_stream_and_pool(device: torch.device, caller: Any) -> tuple[Any, Any]:
    """The stream to capture on and the memory pool graphs share (module docstring), one pair per
    device and caller stream: a fresh stream per capture left the blocks its warm-up call cached
    to that stream alone, and a private pool per graph kept each graph's intermediates apart."""
    key = (device, caller.cuda_stream)
    got = _CAPTURE.get(key)
    if got is None:
        got = _CAPTURE[key] = (torch.cuda.Stream(device), torch.cuda.graph_pool_handle())
    return got


def _host_inputs_kernels_read(program: Any) -> set[int]:
    """Positions of the inputs that only kernels read (through any view): never written or
    returned, never an extern's argument (ATen would see them on another device)."""
    touched = {n for op in program.extern_kernels for n in op.reads()}
    touched |= {n for op in program.ops for n in op.writes()}
    touched |= program.returned
    roots = {program.root(n) for n in touched}
    return {k for k, name in enumerate(program.inputs) if name not in roots}


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


def _handouts(outputs: Sequence[Any], inputs: Sequence[Any]) -> list[tuple] | None:
    """How each captured output is handed out at a replay, the aliasing of a plain call kept:
    ``("clone",)`` a copy (the graph's memory is overwritten by the next replay); ``("input", k,
    delta)`` the same view of the caller's input ``k`` (a partition that returns a reshape of its
    input); ``("shared", group)`` a view into one copy of a storage that several outputs share
    (views of one buffer); ``("value",)`` a non-tensor. None: an output views an input with
    another dtype (not rebuilt)."""
    by_storage: dict[int, int] = {}
    for k, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            by_storage.setdefault(x.untyped_storage().data_ptr(), k)
    counts: dict[int, int] = {}
    for o in outputs:
        if isinstance(o, torch.Tensor):
            counts[o.untyped_storage().data_ptr()] = counts.get(o.untyped_storage().data_ptr(), 0) + 1
    handouts: list[tuple] = []
    for o in outputs:
        if not isinstance(o, torch.Tensor):
            handouts.append(("value",))
            continue
        ptr = o.untyped_storage().data_ptr()
        k = by_storage.get(ptr)
        if k is not None:
            x = inputs[k]
            offset = o.data_ptr() - x.data_ptr()
            if o.dtype != x.dtype or offset % o.element_size():
                return None
            handouts.append(("input", k, offset // o.element_size()))
        elif counts[ptr] > 1:
            handouts.append(("shared", ptr))
        else:
            handouts.append(("clone",))
    return handouts
