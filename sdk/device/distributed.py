"""torch.distributed on a torchvendor device: a c10d backend that runs collectives on the
runtime's own collective entries when it has them, and stages them through host memory over gloo
otherwise.

``register_distributed()`` registers the backend ``"tvgloo"`` with torch's extension point
(``torch.distributed.Backend.register_backend(..., devices=[<device>, "cpu"])``), so that
``init_process_group("tvgloo")`` or ``init_process_group(device_id=torch.device("acme:0"))``
gives a process group whose collectives accept device tensors. Two paths:

- **native**, when the runtime table has the optional collectives (runtime.h minor 1: a
  communicator plus all_reduce, broadcast, all_gather, reduce_scatter, send and recv on a stream):
  the group joins one communicator (rank 0's bootstrap token, or its id, shared through the
  c10d store) and enqueues each collective on the caller's current stream, like NCCL.
- **staged** otherwise, or for a dtype or reduce op the runtime refuses: the device tensors are
  copied to pinned host buffers on the caller's current stream, gloo runs the collective, and the
  result is copied back on that same stream.

Either way later work on the stream sees the result, and ``wait()`` makes the waiting thread's
current stream wait for it. Every collective on device tensors is counted under the path that ran
it (``collective_counts()``, also ``torch.<device>.collective_counts()``)::

    >>> import torch, torch.distributed as dist
    >>> from torchvendor.sdk import register_device, register_distributed, collective_counts
    >>> acme = register_device("acme")
    >>> register_distributed()
    'tvgloo'
    >>> store = dist.HashStore()
    >>> dist.init_process_group("tvgloo", store=store, rank=0, world_size=1,
    ...                         device_id=torch.device("acme:0"))
    >>> x = torch.ones(4, device="acme")
    >>> dist.all_reduce(x, op=dist.ReduceOp.AVG); x.cpu()
    tensor([1., 1., 1., 1.])
    >>> collective_counts()  # the simulator has the collective entries
    {'native:all_reduce.avg': 1}
    >>> dist.destroy_process_group(); acme.reset_collective_counts()

CPU tensors go to gloo directly and are not counted. Functional collectives
(``torch.distributed._functional_collectives``, used by DTensor and FSDP2) reach this group from
C++: through torch's trampoline, or through the c10d backend the group registers for the device
type (``torchvendor._C.attach_device_backend``), which hands each call back to the method of the
same name here.

The native path's common case has no Python: ``all_reduce``, ``broadcast``,
``all_gather_into_tensor``, ``reduce_scatter_tensor`` and their coalesced forms on contiguous
tensors of the communicator's device and a runtime dtype run in C++ (csrc/device/process_group.cpp:
one runtime entry per tensor on the current stream, and a Work whose ``wait()`` is a
stream-ordered event wait), through methods the backend sets on the group's instance. What they
decline (the first call, which joins the communicator; other layouts, dtypes, ops; CPU tensors;
the staged path) runs the methods of this class.
"""
from __future__ import annotations

import collections
import datetime
import queue
import sys
import threading
import uuid
import weakref
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import DefaultSavePlanner

from torchvendor.ir import compat

__all__ = ["BACKEND_NAME", "DeviceProcessGroup", "StagedProcessGroup", "register_distributed",
           "collective_counts", "reset_collective_counts", "DeviceSavePlanner"]

BACKEND_NAME = "tvgloo"
_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg", dist.ReduceOp.MAX: "max",
        dist.ReduceOp.MIN: "min", dist.ReduceOp.PRODUCT: "product"}
# runtime.h's tv_reduce_op
_TV_OPS = {dist.ReduceOp.SUM: 0, dist.ReduceOp.PRODUCT: 1, dist.ReduceOp.MAX: 2, dist.ReduceOp.MIN: 3,
           dist.ReduceOp.AVG: 4}
# gloo's own dtype list (ProcessGroupGloo.cpp, GENERATE_ALL_TYPES), which is also runtime.h's
# tv_dtype; anything else fails in gloo with a message that does not name the device, so it is
# refused here first.
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
           torch.int32, torch.int64, torch.bool)
_counts: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()
_in_flight: collections.deque[tuple[torch.Event, list[torch.Tensor]]] = collections.deque()


def collective_counts() -> dict[str, int]:
    """Collectives on device tensors since the last reset, most used first, keyed
    ``"<path>:<collective>.<reduce op>"`` where the path is ``native`` (the runtime's collectives)
    or ``staged`` (host memory over gloo). CPU tensors, which gloo handles directly, are not
    counted.

    Example::

        >>> reset_collective_counts(); collective_counts()
        {}
    """
    with _lock:
        counts = collections.Counter(_counts)
    ext = sys.modules.get("torchvendor._C")  # the C++ fast path's counts, once the device layer is loaded
    if ext is not None:
        counts.update(ext.native_collective_counts())
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def reset_collective_counts() -> None:
    """Forget the collective counts (both paths)."""
    with _lock:
        _counts.clear()
    ext = sys.modules.get("torchvendor._C")
    if ext is not None:
        ext.reset_native_collective_counts()


def register_distributed() -> str:
    """Register the staged c10d backend for the registered device; returns its name.

    Idempotent. Raises RuntimeError if no device is registered or this torch lacks gloo.

    Example::

        >>> from torchvendor.sdk import register_device, register_distributed
        >>> _ = register_device("acme")
        >>> register_distributed() == register_distributed() == "tvgloo"
        True
        >>> torch.distributed.Backend.default_device_backend_map["acme"]
        'tvgloo'
    """
    from .registry import registered_device

    module = registered_device()
    if module is None:
        raise RuntimeError("register_distributed() needs a device: call "
                           "torchvendor.sdk.register_device(name) first.")
    if not dist.is_available() or not dist.is_gloo_available():
        raise RuntimeError("this torch build has no torch.distributed with gloo, which the staged "
                           "collectives run on; install a torch build with distributed support.")
    device_type = module.__name__.rsplit(".", 1)[1]
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        def create(store: Any, rank: int, size: int, timeout: datetime.timedelta) -> DeviceProcessGroup:
            return DeviceProcessGroup(store, rank, size, timeout, device_type)

        dist.Backend.register_backend(BACKEND_NAME, create, devices=[device_type, "cpu"])
        module.collective_counts = collective_counts  # the device module is ours: additive
        module.reset_collective_counts = reset_collective_counts
    return BACKEND_NAME


class _StagedWork(dist.Work):
    """An async collective: gloo's work plus the copy back to the device on the launch stream."""

    def __init__(self, gloo_works: list[dist.Work], finish: Callable[[], None],
                 outputs: list[torch.Tensor], stream: torch.Stream | None) -> None:
        super().__init__()
        self._gloo, self._finish, self._outputs, self._stream = gloo_works, finish, outputs, stream
        self._done: torch.Event | None = None
        self._once = threading.Lock()

    def _complete(self, gloo_done: bool = False) -> None:
        # gloo runs future callbacks before its work counts as finished: waiting on the work from
        # the callback, or holding the lock while waiting, would deadlock.
        if not gloo_done:
            for work in self._gloo:
                work.wait()
        with self._once:  # wait() and the future callback may both get here
            if self._done is None:
                with torch.get_device_module(self._stream.device.type).stream(self._stream):
                    self._finish()
                self._done = self._stream.record_event()

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        self._complete()
        current = torch.accelerator.current_stream(self._stream.device_index)
        current.wait_event(self._done)  # device-side: later work on the caller's stream is ordered
        return True

    def is_completed(self) -> bool:
        return self._done is not None and self._done.query()

    def result(self) -> list[torch.Tensor]:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()

        def done(_: Any) -> None:
            try:
                self._complete(gloo_done=True)
                self._done.synchronize()  # the future carries no stream: the host sees the result
                fut.set_result(self._outputs)
            except Exception as e:  # noqa: BLE001  handed to whoever waits on the future
                fut.set_exception(e)

        if not self._gloo:
            done(None)
        elif len(self._gloo) == 1:
            self._gloo[0].get_future().add_done_callback(done)
        else:  # a coalesced collective: one gloo work per tensor, all must be done
            torch.futures.collect_all([w.get_future() for w in self._gloo]).add_done_callback(done)
        return fut


class _Done(dist.Work):
    """A completed work for collectives that ran synchronously (CPU-only AVG, empty input)."""

    def __init__(self, outputs: list[torch.Tensor]) -> None:
        super().__init__()
        self._outputs = outputs

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        return True

    def result(self) -> list[torch.Tensor]:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self._outputs)
        return fut


_completions: queue.SimpleQueue = queue.SimpleQueue()
_completer: threading.Thread | None = None


def _complete_futures() -> None:
    """Completes native works' futures in order, off the caller's thread (DDP's reducer chains
    its bucket callbacks on them while backward goes on)."""
    while True:
        event, fut, outputs = _completions.get()
        try:
            event.synchronize()
            fut.set_result(outputs)
        except Exception as e:  # noqa: BLE001  handed to whoever waits on the future
            fut.set_exception(e)


class _NativeWork(dist.Work):
    """A collective enqueued on a stream through the runtime; ``done`` is recorded after it."""

    def __init__(self, outputs: list[torch.Tensor], done: torch.Event, device_index: int) -> None:
        super().__init__()
        self._outputs, self._done, self._index = outputs, done, device_index

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        torch.accelerator.current_stream(self._index).wait_event(self._done)
        return True

    def is_completed(self) -> bool:
        return self._done.query()

    def result(self) -> list[torch.Tensor]:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        global _completer
        fut: torch.futures.Future = torch.futures.Future()
        with _lock:
            if _completer is None:
                _completer = threading.Thread(target=_complete_futures, daemon=True,
                                              name="torchvendor-collective-futures")
                _completer.start()
        _completions.put((self._done, fut, self._outputs))
        return fut


def _eager(method: Callable) -> Callable:
    """Run a collective eagerly under torch.compile: Dynamo sees a process group as an opaque
    object and cannot trace into its Python methods (compiled DDP calls them from forward)."""
    return torch.compiler.disable(method, recursive=True)


def _not_supported(op: str) -> Callable[..., dist.Work]:
    """A process-group method for a collective the device backend does not run."""
    def method(self: "DeviceProcessGroup", *args: Any) -> dist.Work:
        return self._unsupported(op)
    method.__doc__ = f"Not run on the device: raises NotImplementedError naming the supported collectives ({op})."
    return method


class DeviceProcessGroup(dist.ProcessGroup):
    """A process group whose collectives on device tensors run on the runtime's collectives, or
    over gloo through pinned host buffers when it has none. Made by
    ``init_process_group("tvgloo")``; not constructed directly."""

    def __init__(self, store: Any, rank: int, size: int, timeout: datetime.timedelta,
                 device_type: str) -> None:
        super().__init__(rank, size)
        self._device_type = device_type
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        compat.process_group_set_backend(self, "cpu", dist.ProcessGroup.BackendType.GLOO, self._gloo)
        self._pin = bool(torch.get_device_module(device_type).is_available())
        from .module import _C

        self._ext = _C()
        # What c10d dispatches per device type (functional collectives, hence DTensor and FSDP2,
        # call ProcessGroup methods that torch's trampoline does not hand to Python) reaches the
        # C++ backend registered for the device: ours hands each call back to the method of the
        # same name here. gloo there received device pointers and crashed. It also sets the
        # native fast path's methods on this instance (allreduce, broadcast, ...): C++ callables
        # that fall back to this class's methods.
        self._ext.attach_device_backend(self, BACKEND_NAME)
        # c10d's C++ side (torch 2.15's flight recorder, sequence numbers) asks the group for its
        # default backend: the device's, as c10d picks for a group bound to a device
        compat.process_group_set_default_backend(self, dist.ProcessGroup.BackendType.CUSTOM)
        self._native = self._ext.has_collectives()
        self._store = store
        self._comm: tuple[int, int] | None = None  # (device index, tv_comm) once joined

    @property
    def native(self) -> bool:
        """Whether collectives on device tensors run on the runtime's collective entries (True
        when the runtime has them). Set it to False to stage this group's collectives through
        host memory over gloo instead, e.g. to compare the two paths.

        Example::

            >>> import torch.distributed as dist
            >>> from torchvendor.sdk import register_device, register_distributed
            >>> _ = register_device("acme"); _ = register_distributed()
            >>> dist.init_process_group("tvgloo", store=dist.HashStore(), rank=0, world_size=1)
            >>> dist.group.WORLD.native  # the simulator has the collective entries
            True
            >>> dist.group.WORLD.native = False; dist.destroy_process_group()
        """
        return self._native

    @native.setter
    def native(self, on: bool) -> None:
        if on and not self._ext.has_collectives():
            raise ValueError(f"{BACKEND_NAME}: the runtime has no collective entries (runtime.h minor 1: "
                             "comm_create ... recv); collectives can only be staged over gloo.")
        self._native = bool(on)
        index, handle = self._comm or (-1, 0)
        self._ext.set_native_collectives(self, self._native, handle, index)

    def getBackendName(self) -> str:
        """c10d's name for this backend (also what DDP logs)."""
        return BACKEND_NAME

    # ---- the staging machinery ------------------------------------------------------------------

    def _check(self, op: str, tensors: Sequence[torch.Tensor]) -> None:
        devices = {t.device for t in tensors if t.device.type != "cpu"}
        for t in tensors:
            if t.device.type not in ("cpu", self._device_type):
                raise ValueError(f"{BACKEND_NAME} {op}: tensor on {t.device} is neither on the CPU "
                                 f"nor on the {self._device_type!r} device; move it first.")
            if t.dtype not in _DTYPES:
                raise TypeError(f"{BACKEND_NAME} {op}: dtype {t.dtype} is not supported by the gloo "
                                f"staging path (supported: {', '.join(str(d)[6:] for d in _DTYPES)}); "
                                "cast the tensor to a supported dtype first.")
        if len(devices) > 1:
            raise ValueError(f"{BACKEND_NAME} {op}: tensors on several devices {sorted(map(str, devices))};"
                             " one collective takes tensors of one device.")

    def _stage(self, op: str, inputs: list[torch.Tensor], outputs: list[torch.Tensor],
               call: Callable[[Callable[[torch.Tensor], torch.Tensor]], dist.Work | list[dist.Work]],
               post: Callable[[Callable[[torch.Tensor], torch.Tensor]], None] | None = None) -> dist.Work:
        """Run ``call(host)`` (gloo on host tensors: one work, or a list for a coalesced
        collective) with device tensors staged; ``post(host)`` adjusts host results (AVG's
        division) before they are copied back into ``outputs``."""
        self._check(op, inputs + outputs)
        while _in_flight and _in_flight[0][0].query():  # host buffers whose copy back is done
            _in_flight.popleft()
        staged = [t for t in inputs + outputs if t.device.type == self._device_type]
        if not staged:
            work = call(lambda t: t)
            if post is None and not isinstance(work, list):
                return work
            for w in work if isinstance(work, list) else [work]:
                w.wait()
            if post is not None:
                post(lambda t: t)
            return _Done(outputs)
        stream = torch.accelerator.current_stream(staged[0].device.index)
        host = {id(t): torch.empty(t.shape, dtype=t.dtype, pin_memory=self._pin) for t in staged}
        for t in inputs:
            if id(t) in host:
                host[id(t)].copy_(t, non_blocking=True)  # on the caller's current stream
        stream.synchronize()  # gloo reads the host buffers from its own threads

        def h(t: torch.Tensor) -> torch.Tensor:
            return host.get(id(t), t)

        with _lock:
            _counts[f"staged:{op}"] += 1
        work = call(h)

        def finish() -> None:
            if post is not None:
                post(h)
            for t in outputs:
                if id(t) in host:
                    t.copy_(host[id(t)], non_blocking=True)
            _in_flight.append((stream.record_event(), list(host.values())))

        return _StagedWork(work if isinstance(work, list) else [work], finish, outputs, stream)

    # ---- the native path ---------------------------------------------------------------------------

    def _comm_for(self, device: torch.device) -> int:
        """The group's communicator, joined on first use (every rank gets here on the same
        collective). Rank 0 puts what the others need into the group's c10d store: the runtime's
        bootstrap token (runtime.h minor 2, e.g. NCCL's unique id, so one code path spans hosts),
        or else an id for ``comm_create``."""
        if self._comm is None:
            key = "torchvendor_comm"
            if self._ext.has_token_bootstrap():
                if self.rank() == 0:
                    self._store.set(key, self._ext.comm_token(device.index))
                handle = self._ext.comm_create_from_token(self._store.get(key), self.size(), self.rank(),
                                                          device.index)
            else:
                if self.rank() == 0:
                    self._store.set(key, f"tv-{uuid.uuid4().hex[:24]}")
                handle = self._ext.comm_create(self._store.get(key).decode(), self.size(), self.rank(),
                                               device.index)
            self._comm = (device.index, handle)
            weakref.finalize(self, self._ext.comm_destroy, handle)
            self._ext.set_native_collectives(self, self._native, handle, device.index)  # C++ takes over
        index, handle = self._comm
        if index != device.index:
            raise ValueError(f"{BACKEND_NAME}: this group's communicator is on {self._device_type}:{index}, "
                             f"the tensors on {device}; use one device per rank and process group.")
        return handle

    def _native_run(self, op: str, inputs: list[torch.Tensor], outputs: list[torch.Tensor],
                    enqueue: Callable[[Callable[..., None]], None]) -> dist.Work | None:
        """``enqueue(call)`` issues the runtime's collectives through ``call(kind, send, recv,
        count, reduce=0, peer=0)`` on the current stream. None (nothing enqueued) when the runtime
        has no collectives, a tensor is on the CPU, or the runtime refuses the dtype or op: the
        caller stages instead."""
        tensors = inputs + outputs
        if not self._native or not tensors or any(t.device.type != self._device_type for t in tensors):
            return None
        self._check(op, tensors)
        device = tensors[0].device
        comm = self._comm_for(device)
        copies: list[tuple[torch.Tensor, torch.Tensor]] = []  # (output, its contiguous buffer)
        enqueued = []

        def buffer(t: torch.Tensor | None, out: bool) -> torch.Tensor | None:
            if t is None or t.is_contiguous():
                return t
            c = t.contiguous()
            if out:
                copies.append((t, c))
            return c

        def call(kind: str, send: torch.Tensor | None, recv: torch.Tensor | None, count: int,
                 reduce: int = 0, peer: int = 0) -> None:
            self._ext.collective(kind, comm, buffer(send, False), buffer(recv, True), count, reduce, peer)
            enqueued.append(kind)

        try:
            enqueue(call)
        except NotImplementedError:  # TV_ERROR_NOT_SUPPORTED: this dtype or op is not reduced there
            if enqueued:
                raise
            return None
        for t, c in copies:
            t.copy_(c)  # on the same stream, after the collective
        with _lock:
            _counts[f"native:{op}"] += 1
        return _NativeWork(outputs, torch.accelerator.current_stream(device.index).record_event(), device.index)

    def _reduce_op(self, op: str, opts: Any) -> tuple[str, Any, bool, int]:
        """(counted name, options for gloo, whether gloo's result needs dividing by the world
        size, the runtime's tv_reduce_op)."""
        kind = opts.reduceOp.op if isinstance(opts.reduceOp, dist.ReduceOp) else opts.reduceOp
        if kind not in _OPS:
            raise ValueError(f"{BACKEND_NAME} {op}: ReduceOp {kind} is not supported; use one of "
                             f"{', '.join(n.upper() for n in _OPS.values())}.")
        avg = kind == dist.ReduceOp.AVG  # gloo has no AVG: SUM, then divide on the host
        if avg:
            opts.reduceOp = dist.ReduceOp.SUM
        return f"{op}.{_OPS[kind]}", opts, avg, _TV_OPS[kind]

    def _divide(self, tensors: list[torch.Tensor]) -> Callable[[Callable], None] | None:
        def post(h: Callable[[torch.Tensor], torch.Tensor]) -> None:
            for t in tensors:
                h(t).div_(self.size())
        for t in tensors:
            if not (t.is_floating_point() or t.is_complex()):
                raise TypeError(f"{BACKEND_NAME}: ReduceOp.AVG on {t.dtype} would truncate; use "
                                "SUM and divide, or a floating-point tensor.")
        return post

    # ---- collectives (the names and signatures c10d's ProcessGroup calls) ---------------------------

    @_eager
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        """all_reduce: SUM, AVG, MAX, MIN, PRODUCT."""
        name, opts, avg, tv_op = self._reduce_op("all_reduce", opts or dist.AllreduceOptions())
        post = self._divide(tensors) if avg else None  # checks the dtypes on both paths
        work = self._native_run(name, tensors, tensors, lambda call: [
            call("all_reduce", t, t, t.numel(), reduce=tv_op) for t in tensors])
        return work or self._stage(name, tensors, tensors,
                                   lambda h: self._gloo.allreduce([h(t) for t in tensors], opts), post)

    @_eager
    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        """broadcast from ``opts.rootRank``: only the root copies out, only the others copy back."""
        opts = opts or dist.BroadcastOptions()
        root = self.rank() == opts.rootRank
        work = self._native_run("broadcast", tensors if root else [], [] if root else tensors, lambda call: [
            call("broadcast", t, t, t.numel(), peer=opts.rootRank) for t in tensors])
        return work or self._stage("broadcast", tensors if root else [], [] if root else tensors,
                           lambda h: self._gloo.broadcast([h(t) for t in tensors], opts))

    @_eager
    def allgather(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: Any = None) -> dist.Work:
        """all_gather into a list of tensors per input."""
        opts = opts or dist.AllgatherOptions()
        outs = [t for ts in output_lists for t in ts]
        work = self._native_run("all_gather", inputs, outs, lambda call: [
            self._gather_into_list(call, t, ts) for t, ts in zip(inputs, output_lists)])
        return work or self._stage("all_gather", inputs, outs, lambda h: self._gloo.allgather(
            [[h(t) for t in ts] for ts in output_lists], [h(t) for t in inputs], opts))

    @_eager
    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        """all_gather_single (all_gather_into_tensor)."""
        opts = opts or dist.AllgatherOptions()
        work = self._native_run("all_gather_single", [input], [output], lambda call: call(
            "all_gather", input, output, input.numel()))
        return work or self._stage("all_gather_single", [input], [output],
                           lambda h: compat.gloo_all_gather_into(self._gloo, h(output), h(input), opts))

    @_eager
    def reduce_scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                       opts: Any = None) -> dist.Work:
        """reduce_scatter from a list of tensors per output."""
        name, opts, avg, tv_op = self._reduce_op("reduce_scatter", opts or dist.ReduceScatterOptions())
        post = self._divide(outputs) if avg else None
        ins = [t for ts in input_lists for t in ts]
        work = self._native_run(name, ins, outputs, lambda call: [
            call("reduce_scatter", torch.cat([t.reshape(-1) for t in ts]), o, o.numel(), reduce=tv_op)
            for o, ts in zip(outputs, input_lists)])
        return work or self._stage(name, ins, outputs, lambda h: self._gloo.reduce_scatter(
            [h(t) for t in outputs], [[h(t) for t in ts] for ts in input_lists], opts), post)

    @_eager
    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist.Work:
        """reduce_scatter_single (reduce_scatter_tensor)."""
        name, opts, avg, tv_op = self._reduce_op("reduce_scatter_single", opts or dist.ReduceScatterOptions())
        post = self._divide([output]) if avg else None
        work = self._native_run(name, [input], [output], lambda call: call(
            "reduce_scatter", input, output, output.numel(), reduce=tv_op))
        return work or self._stage(name, [input], [output],
                                   lambda h: compat.gloo_reduce_scatter_into(self._gloo, h(output), h(input), opts), post)

    @_eager
    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        """all_reduce_coalesced: several tensors (any dtypes) reduced as one collective and one
        work; the reduce ops of ``allreduce``."""
        name, opts, avg, tv_op = self._reduce_op("all_reduce_coalesced",
                                                 opts or dist.AllreduceCoalescedOptions())
        post = self._divide(tensors) if avg else None
        work = self._native_run(name, tensors, tensors, lambda call: [
            call("all_reduce", t, t, t.numel(), reduce=tv_op) for t in tensors])
        each = dist.AllreduceOptions()  # gloo's own coalesced form needs one dtype: one work per tensor
        each.reduceOp, each.timeout = opts.reduceOp, opts.timeout
        return work or self._stage(name, tensors, tensors,
                                   lambda h: [self._gloo.allreduce([h(t)], each) for t in tensors], post)

    @_eager
    def all_gather_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                    opts: Any = None) -> dist.Work:
        """all_gather_into_tensor of several pairs as one work (what functional collectives'
        all_gather_into_tensor(_coalesced) call)."""
        opts = opts or dist.AllgatherOptions()
        work = self._native_run("all_gather_single_coalesced", inputs, outputs, lambda call: [
            call("all_gather", i, o, i.numel()) for o, i in zip(outputs, inputs)])
        return work or self._stage("all_gather_single_coalesced", inputs, outputs, lambda h: [
            compat.gloo_all_gather_into(self._gloo, h(o), h(i), opts) for o, i in zip(outputs, inputs)])

    @_eager
    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> dist.Work:
        """reduce_scatter_tensor of several pairs as one work (what functional collectives'
        reduce_scatter_tensor(_coalesced) call); the reduce ops of ``allreduce``."""
        name, opts, avg, tv_op = self._reduce_op("reduce_scatter_single_coalesced",
                                                 opts or dist.ReduceScatterOptions())
        post = self._divide(outputs) if avg else None
        work = self._native_run(name, inputs, outputs, lambda call: [
            call("reduce_scatter", i, o, o.numel(), reduce=tv_op) for o, i in zip(outputs, inputs)])
        return work or self._stage(name, inputs, outputs, lambda h: [
            compat.gloo_reduce_scatter_into(self._gloo, h(o), h(i), opts) for o, i in zip(outputs, inputs)], post)

    @_eager
    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: list[int],
                          input_split_sizes: list[int], opts: Any = None) -> dist.Work:
        """all_to_all_single. Native when the split is even (every rank sends every rank the same
        number of rows: the runtime has no all-to-all entry, so it is an all_gather of the whole
        input followed by a copy of this rank's chunks); uneven splits are staged over gloo."""
        opts = opts or dist.AllToAllOptions()
        world, rank = self.size(), self.rank()
        even = self._even_split(input, output, output_split_sizes, input_split_sizes)

        def enqueue(call: Callable[..., None]) -> None:
            gathered = torch.empty((world, input.numel()), dtype=input.dtype, device=input.device)
            call("all_gather", input, gathered, input.numel())
            chunk = input.numel() // world  # rank j's rows for this rank are its chunk number `rank`
            output.copy_(gathered.view(world, world, chunk)[:, rank].reshape(output.shape))

        work = self._native_run("all_to_all_single", [input], [output], enqueue) if even else None
        return work or self._stage("all_to_all_single", [input], [output], lambda h: self._gloo.alltoall_base(
            h(output), h(input), list(output_split_sizes), list(input_split_sizes), opts))

    def _even_split(self, input: torch.Tensor, output: torch.Tensor, out_splits: Sequence[int],
                    in_splits: Sequence[int]) -> bool:
        """Whether all_to_all_single moves equal chunks (no splits, or all splits equal), which
        is what its native form needs; checks what the gloo path would reject unclearly."""
        world = self.size()
        for what, t, splits in (("input", input, in_splits), ("output", output, out_splits)):
            if splits and (len(splits) != world or sum(splits) != (t.shape[0] if t.dim() else 1)):
                raise ValueError(f"{BACKEND_NAME} all_to_all_single: {what}_split_sizes {list(splits)} must "
                                 f"have {world} entries summing to the {what}'s first dimension {tuple(t.shape)}.")
            if not splits and t.dim() and t.shape[0] % world:
                raise ValueError(f"{BACKEND_NAME} all_to_all_single: without split sizes the {what}'s first "
                                 f"dimension ({t.shape[0]}) must divide by the world size {world}.")
        rows = input.shape[0] if input.dim() else 1
        uniform = all(not sp or len(set(sp)) == 1 for sp in (in_splits, out_splits))
        return uniform and input.numel() == output.numel() and rows % world == 0

    @_eager
    def scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                opts: Any = None) -> dist.Work:
        """scatter from ``opts.rootRank`` (DTensor's distribute_tensor uses it). Native: a
        broadcast of the root's concatenated chunks, of which each rank copies its own."""
        opts = opts or dist.ScatterOptions()
        root, rank = opts.rootRank, self.rank()
        ins = [t for ts in input_lists for t in ts]
        self._check_root_list("scatter", root, input_lists, outputs)

        def enqueue(call: Callable[..., None]) -> None:
            out = outputs[0]
            flat = (torch.cat([t.reshape(-1) for t in input_lists[0]]) if rank == root else
                    torch.empty(self.size() * out.numel(), dtype=out.dtype, device=out.device))
            call("broadcast", flat, flat, flat.numel(), peer=root)
            out.copy_(flat.view(self.size(), -1)[rank].view(out.shape))

        work = self._native_run("scatter", ins, outputs, enqueue)
        return work or self._stage("scatter", ins, outputs, lambda h: self._gloo.scatter(
            [h(t) for t in outputs], [[h(t) for t in ts] for ts in input_lists], opts))

    @_eager
    def gather(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
               opts: Any = None) -> dist.Work:
        """gather to ``opts.rootRank``. Native: an all_gather of which the root keeps the rows."""
        opts = opts or dist.GatherOptions()
        root, rank = opts.rootRank, self.rank()
        outs = [t for ts in output_lists for t in ts]
        self._check_root_list("gather", root, output_lists, inputs)

        def enqueue(call: Callable[..., None]) -> None:
            i = inputs[0]
            flat = torch.empty((self.size(), i.numel()), dtype=i.dtype, device=i.device)
            call("all_gather", i, flat, i.numel())
            for row, out in zip(flat, output_lists[0] if rank == root else []):
                out.copy_(row.view(out.shape))

        work = self._native_run("gather", inputs, outs, enqueue)
        return work or self._stage("gather", inputs, outs, lambda h: self._gloo.gather(
            [[h(t) for t in ts] for ts in output_lists], [h(t) for t in inputs], opts))

    @_eager
    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        """reduce to ``opts.rootRank``; the other ranks' tensors are left as they were. Native:
        an all_reduce, in place on the root and into a scratch copy elsewhere."""
        name, opts, avg, tv_op = self._reduce_op("reduce", opts or dist.ReduceOptions())
        root = self.rank() == opts.rootRank
        post = self._divide(tensors) if avg else None
        if post is not None and not root:
            post = lambda h: None  # noqa: E731  only the root's result is divided (and copied back)
        work = self._native_run(name, tensors, tensors if root else [], lambda call: [
            call("all_reduce", t, t if root else torch.empty_like(t), t.numel(), reduce=tv_op) for t in tensors])
        return work or self._stage(name, tensors, tensors if root else [],
                                   lambda h: self._gloo.reduce([h(t) for t in tensors], opts), post)

    def _check_root_list(self, op: str, root: int, lists: list[list[torch.Tensor]],
                         singles: list[torch.Tensor]) -> None:
        """scatter and gather take one tensor per rank, and the root a list of ``size()``."""
        want = 1 if self.rank() == root else 0
        if len(singles) != 1 or len(lists) != want or (want and len(lists[0]) != self.size()):
            raise ValueError(f"{BACKEND_NAME} {op}: expected one tensor per rank and, on the root (rank "
                             f"{root}), a list of {self.size()} tensors; got {len(singles)} tensor(s) and "
                             f"{[len(ts) for ts in lists]} listed.")

    @_eager
    def barrier(self, opts: Any = None) -> dist.Work:
        """barrier over gloo (no tensors: nothing is staged or counted)."""
        return self._gloo.barrier(opts or dist.BarrierOptions())

    @_eager
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> dist.Work:
        """Point-to-point send (staged: the device tensor is copied out before this returns)."""
        work = self._native_run("send", tensors, [], lambda call: [
            call("send", t, None, t.numel(), peer=dst) for t in tensors])
        return work or self._stage("send", tensors, [], lambda h: self._gloo.send([h(t) for t in tensors], dst, tag))

    @_eager
    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> dist.Work:
        """Point-to-point receive (staged: the copy back happens at ``wait()``)."""
        work = self._native_run("recv", [], tensors, lambda call: [
            call("recv", None, t, t.numel(), peer=src) for t in tensors])
        return work or self._stage("recv", [], tensors, lambda h: self._gloo.recv([h(t) for t in tensors], src, tag))

    def _gather_into_list(self, call: Callable[..., None], input: torch.Tensor,
                          outputs: list[torch.Tensor]) -> None:
        """all_gather into one flat buffer, then copies to the listed outputs (on the stream)."""
        flat = torch.empty((len(outputs), input.numel()), dtype=input.dtype, device=input.device)
        call("all_gather", input, flat, input.numel())
        for row, out in zip(flat, outputs):
            out.copy_(row.view(out.shape))

    def _unsupported(self, op: str) -> dist.Work:
        raise NotImplementedError(
            f"{BACKEND_NAME} does not run {op}; supported: all_reduce(_coalesced), broadcast, all_gather, "
            "all_gather_into_tensor(_coalesced), reduce_scatter, reduce_scatter_tensor(_coalesced), "
            "all_to_all_single, scatter, gather, reduce, barrier, send, recv. Move the tensors to the CPU "
            "and use a gloo group (dist.new_group(backend='gloo')) for this collective.")

    # the older names c10d and torch releases before 2.13 call
    _allgather_base, _reduce_scatter_base = all_gather_single, reduce_scatter_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = all_to_all_single

    # c10d calls these by name; each raises NotImplementedError naming the supported collectives
    alltoall = _not_supported("all_to_all")
    allgather_coalesced = _not_supported("all_gather_coalesced")
    recv_anysource = _not_supported("recv from any source")

StagedProcessGroup = DeviceProcessGroup  # its name before the native path


class DeviceSavePlanner(DefaultSavePlanner):
    """``torch.distributed.checkpoint``'s default save planner, handing the writer the registered
    device's tensors already copied to the CPU: ``dcp.save(state, checkpoint_id=path,
    planner=DeviceSavePlanner())``. Needed wherever CUDA is available in the same process (the
    GPU machine, and a PrivateUse1 device over a CUDA runtime): torch's default file writer then
    copies only CUDA tensors to the host and refuses the device's with "Tensor must be on CPU"
    (torch 2.11 to 2.15; ``torchvendor.ir.compat.dcp_writer_moves_to_cpu`` says when that
    changes). Harmless elsewhere; loading needs nothing (``dcp.load`` copies into the device
    tensors of the state dict it is given).

    Example::

        >>> import tempfile, torch, torch.distributed.checkpoint as dcp
        >>> from torchvendor.sdk import register_device, DeviceSavePlanner
        >>> _ = register_device("acme")
        >>> with tempfile.TemporaryDirectory() as path:
        ...     _ = dcp.save({"w": torch.ones(3, device="acme")}, checkpoint_id=path, planner=DeviceSavePlanner())
        ...     state = {"w": torch.zeros(3, device="acme")}
        ...     dcp.load(state, checkpoint_id=path)
        >>> state["w"].device.type, state["w"].sum().item()
        ('acme', 3.0)
    """

    def resolve_data(self, write_item: Any) -> Any:
        """The item's data, on the CPU when it is a tensor on the registered device."""
        from .registry import registered_device

        data = super().resolve_data(write_item)
        module = registered_device()
        on_device = module is not None and isinstance(data, torch.Tensor) and \
            data.device.type == module.__name__.rsplit(".", 1)[1]
        return data.detach().cpu() if on_device else data
