"""One partition at run time: :class:`PartitionCall`, the module that replaces a partition in the
outlined graph and runs the vendor's callable, else the eager fallback.

Example::

    >>> import torch
    >>> device_of_values([torch.ones(1), 3]), value_meta(torch.ones(2, 3))
    ('cpu', (torch.float32, (2, 3), device(type='cpu')))
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from .levels import BackendError
from .report import PartitionRecord

#: the most input layouts (bindings of a dynamic graph's sizes) one partition keeps a replay for
MAX_REPLAYS = 4

__all__ = ["MAX_REPLAYS", "PartitionCall", "box_partition_calls", "device_of_values", "fast_attributes", "example_value",
           "output_nodes", "value_meta"]


class PartitionCall(torch.nn.Module):
    """Runs one partition: the vendor's callable on the backend's device, else the eager fallback.

    Moves tensors to the backend's device and results back, checks what the vendor returns
    against the graph's metadata, counts the device's CPU fallback on the first call, and turns
    a vendor exception into a fallback (or a :class:`BackendError` in strict mode).
    """

    def __init__(self, backend: Any, record: PartitionRecord, compiled: Callable[..., Any] | None,
                 fallback: fx.GraphModule, expected: list[tuple | None], device: str) -> None:
        super().__init__()
        self.backend, self.record, self.compiled, self.fallback = backend, record, compiled, fallback
        self.expected = expected
        self.single = not isinstance(fallback.graph.output_node().args[0], (tuple, list))
        target = backend.device
        self.to_device = torch.device(target) if target is not None and target != device else None
        self.check = bool(backend.options["check_outputs"])
        self.lost_backward_check = backend._checks_backward
        #: per output: (dtype, shape, device type) where every size is static, for the quick check
        self._quick = [None if e is None else (e[0], e[1] if all(isinstance(s, int) for s in e[1]) else None,
                                               e[2].type) for e in expected]
        #: the compiled callable's replay for the layout of the first call (``replay(*args)``:
        #: the outputs, or None for inputs of another layout), made after that call passed, and
        #: those of later layouts (a dynamic graph called with several bindings of its sizes:
        #: Switch Transformers' encoder and decoder run one graph), at most :data:`MAX_REPLAYS`
        self._replay: Callable[..., Any] | None = None
        self._more: list[Callable[..., Any]] = []
        self._tries = 0
        #: calls that no replay takes run :meth:`_run`, the lean path (set after a call passed)
        self._settled = False
        #: called with one list it owns (AOTAutograd's boxed convention, :func:`box_partition_calls`)
        self.boxed = False
        #: the compiled callable's boxed call (``run(args)``: it clears the list and frees each
        #: input after its last use), made after the first call passed, where it offers one
        self._boxed_run: Callable[[list], Any] | None = None

    # A partition runs on every call of a small model: skip nn.Module's hook dispatch (nothing
    # registers hooks on this internal module), a microsecond or two per call; once the first
    # call passed, inputs of its layout take the compiled callable's replay (the LOOP runner's
    # C++ replay: no Python between here and the kernels but extern calls).
    def __call__(self, *args: Any) -> Any:
        if self.boxed:
            return self._call_boxed(args[0])
        return self._call(*args)

    def _call_boxed(self, box: list) -> Any:
        """One call with the inputs in ``box``, which this call owns: the compiled callable's
        boxed call where it has one (the inputs are freed as it goes, so a failure can no longer
        fall back: it raises), else the positional path."""
        run = self._boxed_run
        if run is None:
            args = tuple(box)
            box.clear()
            return self._call(*args)
        try:
            outs = run(box)
            problem = self._problem((), outs) if self.check and not self._fine(outs) else None
            if problem:
                raise BackendError(problem)
        except Exception as e:  # noqa: BLE001
            self._boxed_run = None  # later calls take the positional path (and its fallback)
            self.backend._vendor_failed(self.record, "run", e)
            raise BackendError(f"partition {self.record.name} failed after its inputs were released "
                               f"(boxed call): {type(e).__name__}: {e}") from e
        self.record.calls += 1
        return outs[0] if self.single else tuple(outs)

    def _call(self, *args: Any) -> Any:
        replay = self._replay
        if replay is not None:
            try:
                out = replay(*args)
                if out is None and self._more:
                    out = next((o for o in (r(*args) for r in self._more) if o is not None), None)
            except Exception as e:  # noqa: BLE001
                return self._failed(args, e)
            if out is not None:
                self.record.calls += 1
                return out
        if self._settled:
            return self._run(args)
        return self.forward(*args)

    def _run(self, args: tuple) -> Any:
        """:meth:`forward` once nothing is left to learn (not the first call, no move to another
        device, no replay to make: a CUDA graph's partition on every call): the compiled
        callable and the check of what it returns, no more."""
        try:
            out = self.compiled(*args)  # type: ignore[misc]
            outs = out if type(out) is list else list(out) if isinstance(out, tuple) else [out]
            if self.check and not self._fine(outs):
                problem = self._problem(args, outs)
                if problem:
                    raise BackendError(problem)
        except Exception as e:  # noqa: BLE001
            return self._failed(args, e)
        self.record.calls += 1
        return outs[0] if self.single else tuple(outs)

    def forward(self, *args: Any) -> Any:
        if self.compiled is None:
            return self.fallback(*args)
        moved = args if self.to_device is None else tuple(
            a.to(self.to_device) if isinstance(a, torch.Tensor) else a for a in args)
        watch = _device_module(moved) if self.record.calls == 0 else None
        before = watch.fallback_counts() if watch is not None else None
        try:
            out = self.compiled(*moved)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if self.to_device is not None:
                outs = [o.to(e[2]) if isinstance(o, torch.Tensor) and e is not None else o
                        for o, e in zip(outs, self.expected)]
            problem = self._problem(args, outs) if self.check and not self._fine(outs) else None
            if problem:
                raise BackendError(problem)
        except Exception as e:  # noqa: BLE001
            return self._failed(args, e)
        if before is not None:
            after = watch.fallback_counts()
            self.record.device_fallback = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
        if self._tries < MAX_REPLAYS:  # a layout no replay took (the first call's, or a new one)
            self._tries += 1
            made = self._make_replay(args)
            if made is not None and self._replay is None:
                self._replay = made
            elif made is not None:
                self._more.append(made)
        if self.record.calls == 0:
            self._boxed_run = self._make_boxed(args) if self.boxed else None
        self.record.calls += 1
        self._settled = self.to_device is None and self._tries >= MAX_REPLAYS
        return outs[0] if self.single else tuple(outs)

    def _failed(self, args: Sequence[Any], e: Exception) -> Any:
        """A vendor exception: reported once, and this partition falls back for good."""
        self.backend._vendor_failed(self.record, "run", e)
        self.compiled, self._replay, self._more, self._settled = None, None, [], False
        return self.fallback(*args)

    def _make_replay(self, args: Sequence[Any]) -> Callable[..., Any] | None:
        """The compiled callable's replay for this call's layout, where it offers one and nothing
        per call is left to do here (no move to another device, no backward to check)."""
        make = getattr(self.compiled, "replay", None)
        if make is None or self.to_device is not None or (self.check and self.lost_backward_check):
            return None
        try:
            return make(*args, form=2 if self.single else 1)
        except Exception:  # noqa: BLE001 - no replay: the call keeps its Python path
            return None

    def _make_boxed(self, args: Sequence[Any]) -> Callable[[list], Any] | None:
        """The compiled callable's boxed call for this call's inputs (``compiled.boxed(*args)``),
        where it offers one and nothing per call is left to do here."""
        make = getattr(self.compiled, "boxed", None)
        if make is None or self.to_device is not None or (self.check and self.lost_backward_check):
            return None
        try:
            return make(*args)
        except Exception:  # noqa: BLE001 - no boxed call: the call keeps its positional path
            return None

    def _fine(self, outs: list[Any]) -> bool:
        """The common case of :meth:`_problem` at a fraction of its cost: as many outputs as
        expected, each tensor one of its dtype, static shape and device type, and no backward
        to check; anything else takes :meth:`_problem`."""
        if len(outs) != len(self._quick) or (self.lost_backward_check and torch.is_grad_enabled()):
            return False
        for o, q in zip(outs, self._quick):
            if q is not None and not (isinstance(o, torch.Tensor) and o.dtype == q[0] and q[1] is not None
                                      and o.shape == q[1] and o.device.type == q[2]):
                return False
        return True

    def _problem(self, args: Sequence[Any], outs: list[Any]) -> str | None:
        if len(outs) != len(self.expected):
            return f"returned {len(outs)} output(s), the graph has {len(self.expected)}"
        for i, (o, e) in enumerate(zip(outs, self.expected)):
            if e is None:
                continue
            if not isinstance(o, torch.Tensor):
                return f"output {i} is a {type(o).__name__}, expected a tensor"
            dtype, shape, device = e
            if o.dtype != dtype:
                return f"output {i} has dtype {o.dtype}, expected {dtype}"
            if o.dim() != len(shape) or any(isinstance(s, int) and s != t for s, t in zip(shape, o.shape)):
                return f"output {i} has shape {tuple(o.shape)}, expected {tuple(shape)}"
            if o.device.type != device.type and not _aten_cpu_scalar(o, device):
                return f"output {i} is on {o.device}, expected {device.type}"
        if self.lost_backward_check and torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            if not any(isinstance(o, torch.Tensor) and o.requires_grad for o in outs):
                return ("no output requires grad although an input does: the compiled partition loses the backward "
                        "(at the torch level the vendor's callable must be differentiable)")
        return None


def box_partition_calls(gm: fx.GraphModule) -> Callable[[list], Any]:
    """``gm`` (an outlined graph) in AOTAutograd's boxed calling convention, as Inductor's
    compiled graphs take it: ``fn(args)`` clears the list it is given, the graph's code drops
    each value after its last use, and each :class:`PartitionCall` gets its inputs in a list of
    its own, built just before the call (the graph's locals of inputs used nowhere later are
    dropped there), so the partition's boxed call can free an input, a backward's saved
    activation, at its last use instead of holding it to the end of the call.

    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x, y: x * y)
    >>> fn = box_partition_calls(gm)
    >>> args = [torch.ones(2), torch.full((2,), 3.0)]
    >>> fn(args), args
    (tensor([3., 3.]), [])
    """
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and isinstance(gm.get_submodule(node.target), PartitionCall):
            with gm.graph.inserting_before(node):
                box = gm.graph.call_function(list, (tuple(node.args),))
            node.args, node.kwargs = (box,), {}
            gm.get_submodule(node.target).boxed = True
    gm.graph.set_codegen(_UnpackingCodeGen())
    gm.recompile()
    forward = fast_attributes(gm).forward

    def run(args: list) -> Any:  # the graph's code without nn.Module's call machinery (~5 us a call)
        return forward(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    run.graph_module = gm  # type: ignore[attr-defined]
    return run


class _UnpackingCodeGen(fx.graph.CodeGen):
    """FX's code for a graph in AOTAutograd's boxed convention, ``forward(self, args_list)``:
    the inputs taken from the list in one unpacking (torch's boxed code generator calls
    ``next`` once per input: a few microseconds for a graph of fifty weights), then the list
    cleared; FX's code drops each value after its last use as always."""

    def gen_fn_def(self, free_vars: list[str], maybe_return_annotation: str, **_: Any) -> str:
        names = [v.split(":")[0].split("=")[0].strip() for v in free_vars if v != "self"]
        lines = [f"def forward(self, args_list){maybe_return_annotation}:"]
        if names:
            lines += [f"    {', '.join(names)}, = args_list", "    args_list.clear()"]
        return "\n".join(lines)


def fast_attributes(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with what its code reads from ``self`` found in its instance dictionary, so each
    ``self.fused_0`` or ``self._tensor_constant0`` is a dictionary hit, not a call of
    ``nn.Module.__getattr__`` (0.7 us each per call: DeBERTa-v2's outer graph read 8 constants).
    A submodule (a partition) is also in the dictionary (``Module.__setattr__`` removes that copy
    if it is ever set again, so the two never disagree); a buffer (a constant the graph lifted)
    moves there: a plain attribute of this internal module, not a buffer any more.

    >>> import torch
    >>> gm = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.ReLU()))
    >>> "0" in vars(fast_attributes(gm))
    True
    """
    buffers = dict(gm.named_buffers(recurse=False))
    for node in gm.graph.nodes:
        if "." in str(node.target):
            continue
        if node.op == "call_module":
            vars(gm)[node.target] = gm.get_submodule(node.target)
        elif node.op == "get_attr" and node.target in buffers:
            delattr(gm, node.target)
            vars(gm)[node.target] = buffers[node.target]
    return gm


def device_of_values(values: Sequence[Any]) -> str:
    """The device type the work on ``values`` runs on: the first that is not ``cpu`` (a CPU
    tensor beside device tensors is a scalar or ATen's bookkeeping, e.g. the philox seed and
    offset of efficient attention), else ``cpu``."""
    types = [v.device.type for v in values if isinstance(v, torch.Tensor)]
    return next((t for t in types if t != "cpu"), "cpu")


def output_nodes(gm: fx.GraphModule) -> list[Any]:
    """What the graph returns, as a list (one entry per output)."""
    out = gm.graph.output_node().args[0]
    return list(out) if isinstance(out, (tuple, list)) else [out]


def example_value(node: Any) -> Any:
    """The fake value an FX node carries in its metadata (None for a constant or no metadata)."""
    return node.meta.get("val", node.meta.get("example_value")) if isinstance(node, fx.Node) else None


def value_meta(value: Any) -> tuple | None:
    """(dtype, shape, device) of a tensor, what :class:`PartitionCall` checks an output against."""
    if not isinstance(value, torch.Tensor):
        return None
    shape = tuple(int(s) if isinstance(s, int) else s for s in value.shape)
    return value.dtype, shape, value.device


def _aten_cpu_scalar(value: torch.Tensor, expected: torch.device) -> bool:
    """A 0-d CPU tensor where the graph's metadata says a device tensor: ATen keeps some
    bookkeeping scalars on the host whatever its meta function says (efficient attention's philox
    seed and offset on ``cuda``: eager and Inductor return them on the CPU too)."""
    return value.dim() == 0 and value.device.type == "cpu" and expected.type != "cpu"


def _device_module(args: Sequence[Any]) -> Any:
    for a in args:
        if isinstance(a, torch.Tensor):
            module = getattr(torch, a.device.type, None)
            return module if hasattr(module, "fallback_counts") else None
    return None
