"""A LOOP partition's call without per-call Python: the runner's replay (``torchvendor._C.Replay``,
``csrc/device/replay.cpp``).

:func:`~torchvendor.sdk.compile.runner_source.write_call` writes a partition's call as Python and,
beside it, as operations on named buffers (allocate, view, take over a dead buffer's storage,
drop, run a kernel, call an extern kernel). :func:`build_replay` turns those into a table for
the C++ replay: on each call it checks the inputs against the layouts the program was planned
for (the guard: each an exact ``Tensor``/``Parameter`` of that dtype, device, sizes and
strides), allocates with the device's allocator, makes views and reuses storage as planned,
launches each kernel that has a native form through the runtime table's ``launch`` (a host
kernel is called directly), and calls the rest (extern kernels, kernels without a native form)
through Python. A call whose inputs fail the guard returns None and the caller runs the Python
call, which handles any layout.

A compiled kernel offers its native form through a method ``native(device, sizes)`` returning a
:class:`NativeKernel` or a plain tuple of its fields, launches as :class:`NativeLaunch` or plain
tuples (a kernel object written in C); None: the replay calls it through Python, as the runner does.
``sizes`` are the size arguments of this call, ``device`` the ``torch.device`` it runs on. Its
argument block is the one every LOOP kernel gets: the buffers' data pointers, then the sizes,
8 bytes each, then the pointers of its scratch buffers.

Example (a launch through a device's runtime table, the simulator's sample kernel)::

    >>> NativeLaunch(function=0x1234, grid=(1,), block=(1,)).host
    False
    >>> NativeLaunch(function=0x1234).host      # no grid: a host function, called on this thread
    True
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import torch

__all__ = ["NativeLaunch", "NativeKernel", "build_replay", "input_guard", "replay_available"]


class NativeLaunch(NamedTuple):
    """One launch of a kernel's native form."""

    #: a ``tv_function`` handle of the device's runtime (``get_function``), or for a host kernel
    #: the address of ``int32_t fn(const void* launch, void* args)``
    function: int
    #: blocks and threads; empty for a host kernel (called directly, ``launch`` NULL)
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    shared_memory_bytes: int = 0
    #: positions in :attr:`NativeKernel.scratch` whose pointers follow the sizes in the block
    scratch: tuple[int, ...] = ()
    #: buffer positions whose pointers must be multiples of ``alignment`` for this launch ...
    aligned: tuple[int, ...] = ()
    alignment: int = 0
    #: ... else this launch runs instead (a kernel's scalar variant)
    otherwise: "NativeLaunch | None" = None
    #: host kernels: called with a nonzero status; it raises the kernel's error
    on_error: Callable[[int], None] | None = None

    @property
    def host(self) -> bool:
        return not self.grid


class NativeKernel(NamedTuple):
    """A kernel's native form: its launches in order, and the scratch buffers ``(numel, dtype)``
    they share, allocated on the kernel's device for each call."""

    launches: tuple[NativeLaunch, ...]
    scratch: tuple[tuple[int, torch.dtype], ...] = ()


def replay_available() -> bool:
    """Whether this build of ``torchvendor._C`` has the replay (``TORCHVENDOR_REPLAY=0`` turns
    it off: every call takes the generated Python call, to compare or to rule the replay out).

    >>> isinstance(replay_available(), bool)
    True
    """
    if os.environ.get("TORCHVENDOR_REPLAY", "1") == "0":
        return False
    try:
        from torchvendor import _C
    except ImportError:
        return False
    return hasattr(_C, "Replay")


def input_guard(values: Sequence[Any], fixed: Mapping[int, int] | None = None) -> Callable[[tuple], bool] | None:
    """``guard(args)``, one C++ pass (``torchvendor._C.InputGuard``): whether a call's ``args``
    are laid out as ``values`` (each tensor's dtype, sizes, strides where a size is over 1, and
    device; each other value equal, of its type) and, at the positions in ``fixed``, have their
    data at those addresses. What a cached call (a CUDA graph) checks before it replays, without
    the Python of a layout key. None where this build has no ``InputGuard`` or a value is not a
    tensor, None, bool, int, float or str.

    >>> import torch
    >>> x = torch.ones(2, 3)
    >>> guard = input_guard([x, 4], {0: x.data_ptr()})
    >>> guard is None or (guard((x, 4)), guard((x.clone(), 4)), guard((x, 5)))
    (True, False, False)
    """
    try:
        from torchvendor._C import InputGuard
    except ImportError:
        return None
    fixed = fixed or {}
    specs: list[Any] = []
    for k, x in enumerate(values):
        if isinstance(x, torch.Tensor):
            specs.append(("tensor", x.dtype, list(x.shape), list(x.stride()), x.device, int(fixed.get(k, -1))))
        elif x is None or isinstance(x, (bool, int, float, str)):
            specs.append(("value", x))
        else:
            return None
    return InputGuard(specs)


def build_replay(ops: Sequence[tuple], steps: Sequence[Any], inputs: Sequence[tuple[str, Any]], plan: Any,
                 values: Sequence[Any], device_type: str, form: int = 0,
                 helpers: Mapping[str, Any] | None = None) -> Any:
    """The C++ replay of one written call (``Written.ops``) for inputs laid out as ``values`` (the
    call's first inputs; a scalar input, a size symbol's value, is guarded to equal its value
    there), or None where it cannot be replayed (no input on the program's device, no replay in
    this build). ``form``: 0 returns a list, 1 a tuple, 2 the one output; ``helpers``: the
    runner's ``_constant`` and ``_on_device`` where ``ops`` use them."""
    if not replay_available() or len(values) != len(inputs):
        return None
    for (_, buf), v in zip(inputs, values):
        if not (type(v) is int if buf is None else type(v) in (torch.Tensor, torch.nn.Parameter)):
            return None
    device = next((v.device for (_, buf), v in zip(inputs, values) if buf is not None and v.device.type == device_type),
                  None)
    if device is None and device_type == "cpu":
        device = torch.device("cpu")
    if device is None:
        return None
    slots = {name: k for k, (name, _) in enumerate(inputs)}

    def slot(name: str) -> int:
        return slots.setdefault(name, len(slots))

    guards = []
    for (name, buf), value, stride in zip(inputs, values, plan.strides):
        if buf is None:
            guards.append(("int", value))
            continue
        size, _, dtype = plan.layouts[name]
        guards.append((dtype, list(size), list(stride or value.stride()), value.device))
    # a kernel given an input from another device (a 0-d host tensor) keeps its Python call, which
    # copies such operands over (the native launch would pass a host pointer)
    elsewhere = {name for (name, buf), v in zip(inputs, values) if buf is not None and v.device != device}
    table: list[tuple] = []
    outputs: list[Any] = []
    for op in ops:
        if op[0] == "return":
            outputs = [slot(o) if isinstance(o, str) else o for o in op[1]]
        elif op[0] == "kernel" and elsewhere.intersection(op[2]):
            table.append(("call", steps[op[1]][1], [slot(n) for n in op[2]], tuple(op[3]), []))
        else:
            table += _operation(op, slot, steps, plan, device, helpers or {})
    from torchvendor import _C

    return _C.Replay(guards, len(slots), table, outputs, form, (torch.Tensor, torch.nn.Parameter), device)


def _operation(op: tuple, slot: Callable[[str], int], steps: Sequence[Any], plan: Any, device: torch.device,
               helpers: Mapping[str, Any]) -> list:
    """One written operation as the replay's table entries."""
    kind = op[0]
    if kind == "constant":  # made from the host on each call, as the Python call makes it
        _, name, value, size, dtype, where = op
        make = functools.partial(_one, helpers["_constant"], value, size, dtype, where or device)
        return [("call", make, [], (), [slot(name)])]
    if kind == "on_device":  # a kernel of host buffers runs on device copies of them
        _, k, names, sizes, moved, back = op
        run = functools.partial(helpers["_on_device"], steps[k][1], moved, back, device)
        return [("call", run, [slot(n) for n in names], tuple(sizes), [])]
    if kind == "alloc":
        _, name, size, stride, dtype, where = op
        return [("alloc", slot(name), list(size), list(stride), dtype, torch.device(where) if where else None)]
    if kind == "view":
        _, name, base, size, stride, offset = op
        return [("alias", slot(name), slot(base), list(size), list(stride), offset)]
    if kind == "reuse":
        _, name, donor, size, stride, _ = op
        if plan.layouts[donor][:2] == (tuple(size), tuple(stride)):
            return [("move", slot(name), slot(donor))]
        return [("alias", slot(name), slot(donor), list(size), list(stride), 0), ("drop", [slot(donor)])]
    if kind in ("drop", "release"):   # release: an input at its last use, freed where the call owns it (boxed)
        return [("drop", [slot(n) for n in op[1]])]
    if kind == "call":
        _, fn, reads, binds, _ = op
        return [("call", fn, [slot(n) for n in reads], (), [slot(n) for n in binds])]
    if kind == "kernel":
        _, k, names, sizes = op
        fn = steps[k][1]
        native = getattr(fn, "native", None)
        form = native(device, tuple(sizes)) if native is not None else None
        if form is None:
            return [("call", fn, [slot(n) for n in names], tuple(sizes), [])]
        launches, scratch = form  # a NativeKernel, or a plain tuple of its fields (a kernel written in C)
        return [("launch", [slot(n) for n in names], list(sizes), [_launch(l) for l in launches],
                 [(int(n), dtype) for n, dtype in scratch], fn)]
    raise ValueError(f"replay: unknown operation {kind!r}")


def _one(fn: Callable[..., Any], *args: Any) -> tuple:
    return (fn(*args),)


def _launch(l: tuple) -> tuple:
    """A :class:`NativeLaunch` (or a plain tuple of its fields) as the replay reads it."""
    fn, grid, block, shared, scratch, aligned, alignment, otherwise, on_error = NativeLaunch(*l)
    return (int(fn), tuple(grid), tuple(block), int(shared), tuple(scratch), tuple(aligned), int(alignment),
            None if otherwise is None else _launch(otherwise), on_error)
