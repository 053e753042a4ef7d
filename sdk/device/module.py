"""The ``torch.<name>`` device module: what ``torch.acme`` offers, as plain functions.

Every function and class below marked ``@device_api`` becomes an attribute of the module that
``register_device`` builds (:func:`build_device_module`) and registers as ``torch.<name>``; the
marker, not a list kept elsewhere, is what decides. The functions follow ``torch.cuda``'s names
and meanings, so code written for CUDA finds the same calls::

    >>> import torch, torchvendor.sdk.device.module
    >>> from torchvendor.sdk import register_device
    >>> acme = register_device("acme")
    >>> acme.device_count() >= 1 and acme.is_available()
    True
    >>> acme.synchronize is torchvendor.sdk.device.module.synchronize
    True

One device module exists per process (PrivateUse1 is a single dispatch key), so the functions
read the registered device's name from this module's state, set once by build_device_module.
"""
from __future__ import annotations

import contextlib
import dataclasses
import types
from typing import Any, Callable, Iterator, Sequence, TypeVar, Union

import torch

__all__ = ["DeviceProperties", "build_device_module", "load_module", "get_function", "launch", "unload_module"]

DeviceLike = Union[int, str, torch.device, None]
_T = TypeVar("_T")

#: name (str), module, default_generators (tuple), initialized (bool) once build_device_module ran
_device: dict[str, Any] = {}
#: attribute name -> function or class of the device module, filled by @device_api
_API: dict[str, Any] = {}

# Optional runtime entries and what their absence disables (diagnose()).
_OPTIONAL_FEATURES = {
    "host_malloc": "pinned memory (pin_memory(), async host copies)",
    "host_free": "pinned memory (pin_memory(), async host copies)",
    "memcpy_async": "asynchronous copies (copies synchronize the stream instead)",
    "memset": "fast zero fills (fills go through a host buffer)",
    "memset_async": "asynchronous zero fills",
    "stream_priority_range": "stream priorities (all streams get priority 0)",
    "event_elapsed_time": "Event.elapsed_time(), device time in torch's profiler (sdk/device/profiler.py)",
    "module_load_file": "load_module(path)",
    "module_load_data": "load_module(bytes)",
    "module_unload": "unload_module()",
    "module_get_function": "get_function()",
    "launch": "launch() of native kernels",
    **dict.fromkeys(("comm_create", "comm_destroy", "all_reduce", "broadcast", "all_gather",
                     "reduce_scatter", "send", "recv"),
                    "native collectives (torch.distributed stages them through host memory over gloo)"),
}


def device_api(obj: _T) -> _T:
    """Mark a function or class of this file as an attribute of ``torch.<name>``."""
    _API[obj.__name__] = obj
    return obj


def build_device_module(name: str, info: dict[str, Any]) -> types.ModuleType:
    """The ``torch.<name>`` module: every ``@device_api`` object of this file, and the device's
    default generators. ``info`` is what the C++ layer's ``load_runtime`` returned."""
    ext = _C()
    _device.update(name=name, initialized=False,
                   default_generators=tuple(ext.default_generator(i) for i in range(ext.device_count())))
    mod = types.ModuleType(f"torch.{name}", f"The {name} device (torchvendor, runtime {info['name']!r}).")
    mod.__file__ = __file__
    for attr, obj in _API.items():
        setattr(mod, attr, obj)
    mod.default_generators = _device["default_generators"]
    _device["module"] = mod
    return mod


# ---- shared helpers ---------------------------------------------------------------------------


def _C() -> types.ModuleType:
    from torchvendor import _C as ext  # imported only when a device is used

    return ext


def _require_registered() -> str:
    if not _device:
        raise RuntimeError("no torchvendor device is registered in this process; call "
                           "torchvendor.sdk.register_device(name) first.")
    return _device["name"]


def _index(device: DeviceLike) -> int:
    """Device index from an int, 'acme', 'acme:1', torch.device or None (-1 = current)."""
    name = _require_registered()
    if device is None:
        return -1
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != name:
            raise ValueError(f"expected a {name!r} device, got {str(device)!r}")
        return -1 if device.index is None else device.index
    raise TypeError(f"device must be an int, a '{name}:N' string, a torch.device or None; "
                    f"got {type(device).__name__}")


def _current_index(device: DeviceLike) -> int:
    i = _index(device)
    return _C().current_device() if i < 0 else i


# ---- devices ----------------------------------------------------------------------------------


@device_api
@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What ``torch.<name>.get_device_properties(i)`` returns (from the runtime's table)."""

    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int


@device_api
def is_available() -> bool:
    """True if the runtime reports at least one device."""
    return _C().device_count() > 0


@device_api
def device_count() -> int:
    """Number of devices the runtime reports."""
    return _C().device_count()


@device_api
def current_device() -> int:
    """Index of the calling thread's current device."""
    return _C().current_device()


@device_api
def set_device(device: DeviceLike) -> None:
    """Set the calling thread's current device (ValueError if out of range)."""
    i = _index(device)
    if i >= 0:
        _C().set_device(i)


@device_api
@contextlib.contextmanager
def device(device: DeviceLike) -> Iterator[None]:
    """Context manager that makes ``device`` current and restores the previous one.

    Example::

        >>> from torchvendor.sdk import register_device
        >>> acme = register_device("acme")
        >>> with acme.device(acme.device_count() - 1):
        ...     torch.empty(2, device="acme").device.index == acme.device_count() - 1
        True
    """
    i = _index(device)
    if i < 0:
        yield
        return
    ext = _C()
    previous = ext.exchange_device(i)
    try:
        yield
    finally:
        ext.set_device(previous)


@device_api
def synchronize(device: DeviceLike = None) -> None:
    """Wait for all work on all streams of ``device`` (default: current)."""
    _C().synchronize(_index(device))


@device_api
def get_device_properties(device: DeviceLike = None) -> DeviceProperties:
    """Name, total memory, capability and unit count of ``device``."""
    return DeviceProperties(**_C().get_device_properties(_index(device)))


@device_api
def get_device_name(device: DeviceLike = None) -> str:
    """The runtime's name for ``device``."""
    return _C().get_device_properties(_index(device))["name"]


@device_api
def get_device_capability(device: DeviceLike = None) -> tuple[int, int]:
    """The vendor-defined (major, minor) capability."""
    p = _C().get_device_properties(_index(device))
    return (p["major"], p["minor"])


@device_api
def get_amp_supported_dtype() -> list[torch.dtype]:
    """dtypes torch.autocast(name) may cast to."""
    return [torch.float16, torch.bfloat16]


@device_api
def is_initialized() -> bool:
    """True: the device is initialized when it is registered."""
    return True


@device_api
def _lazy_init() -> None:
    """torch calls this hook before first use of the device (torch.cuda's private name)."""
    if not _device["initialized"]:
        _C().lazy_init()
        _device["initialized"] = True


@device_api
def init() -> None:
    """Initialize the device (already done at registration; kept for torch.cuda parity)."""
    _lazy_init()


@device_api
def _is_in_bad_fork() -> bool:
    """torch asks this before using the device in a forked child (torch.cuda's private name)."""
    return bool(_C().is_in_bad_fork())


# ---- streams and events -----------------------------------------------------------------------


@device_api
class Stream(torch.Stream):
    """A stream of the device: an in-order queue of its work (a torch.Stream).

    Example::

        >>> from torchvendor.sdk import register_device
        >>> acme = register_device("acme")
        >>> x = torch.ones(4, device="acme")
        >>> s = acme.Stream(priority=-1)
        >>> with acme.stream(s):
        ...     y = x + 1
        >>> s.synchronize()
        >>> y.cpu()
        tensor([2., 2., 2., 2.])
    """

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if kwargs:  # stream_id=, device_index=, device_type= (wrapping an existing stream)
            return super().__new__(cls, **kwargs)
        index = _current_index(device)
        return super().__new__(cls, device=torch.device(_require_registered(), index), priority=priority)

    @property
    def priority(self) -> int:
        """The runtime priority (lower is more urgent)."""
        return _C().stream_priority(self)

    def __repr__(self) -> str:
        name = _require_registered()
        return f"<torch.{name}.Stream device={name}:{self.device_index} id={self.stream_id}>"


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


class _EventMeta(type):
    # torch.Event's C methods (elapsed_time) accept only exact torch.Event objects, so
    # Event(...) returns a torch.Event on this device and isinstance() recognizes those.
    def __call__(cls, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, device: DeviceLike = None) -> torch.Event:
        return torch.Event(device=torch.device(_require_registered(), _current_index(device)),
                           enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == _device.get("name")


@device_api
class Event(metaclass=_EventMeta):
    """A marker in a stream: ``Event(...)`` returns a ``torch.Event`` on the device.

    Example::

        >>> from torchvendor.sdk import register_device
        >>> acme = register_device("acme")
        >>> x = torch.ones(8, 8, device="acme")
        >>> start, end = acme.Event(enable_timing=True), acme.Event(enable_timing=True)
        >>> start.record(); y = x @ x; end.record(); end.synchronize()
        >>> start.elapsed_time(end) >= 0
        True
    """


@device_api
def current_stream(device: DeviceLike = None) -> Stream:
    """The calling thread's current stream on ``device``."""
    return _wrap(_C().current_stream(_index(device)))


@device_api
def default_stream(device: DeviceLike = None) -> Stream:
    """The default stream of ``device``."""
    return _wrap(_C().default_stream(_index(device)))


@device_api
def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` the calling thread's current stream on its device, and that device
    the current one (as ``torch.cuda.set_stream`` and ``torch.accelerator.set_stream`` do)."""
    ext = _C()
    if stream.device_index != ext.current_device():
        ext.set_device(stream.device_index)
    ext.set_stream(stream)


@device_api
@contextlib.contextmanager
def stream(stream: torch.Stream | None) -> Iterator[None]:
    """Context manager that makes ``stream`` current (None: no-op).

    Example::

        >>> from torchvendor.sdk import register_device
        >>> acme = register_device("acme")
        >>> s = acme.Stream()
        >>> with acme.stream(s):
        ...     acme.current_stream() == s
        True
    """
    if stream is None:
        yield
        return
    # As torch.cuda.stream: a stream of another device makes that device current inside
    # the block; afterwards both the stream and the device are what they were.
    ext = _C()
    previous_device = ext.current_device()
    previous = ext.current_stream(stream.device_index)
    set_stream(stream)
    try:
        yield
    finally:
        ext.set_stream(previous)
        if ext.current_device() != previous_device:
            ext.set_device(previous_device)


# ---- memory -----------------------------------------------------------------------------------


@device_api
def memory_stats(device: DeviceLike = None) -> dict[str, int]:
    """Caching allocator statistics, keyed like ``torch.cuda.memory_stats()``."""
    return dict(_C().memory_stats(_index(device)))


def _stat(key: str, device: DeviceLike) -> int:
    return int(_C().memory_stats(_index(device))[key])


@device_api
def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes held by tensors on ``device`` (512-byte rounded blocks)."""
    return _stat("allocated_bytes.all.current", device)


@device_api
def max_memory_allocated(device: DeviceLike = None) -> int:
    """Peak of memory_allocated since the last reset."""
    return _stat("allocated_bytes.all.peak", device)


@device_api
def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes the caching allocator holds from the runtime."""
    return _stat("reserved_bytes.all.current", device)


@device_api
def max_memory_reserved(device: DeviceLike = None) -> int:
    """Peak of memory_reserved since the last reset."""
    return _stat("reserved_bytes.all.peak", device)


@device_api
def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Reset the peaks of the allocator statistics to their current values."""
    _C().reset_peak_memory_stats(_index(device))


@device_api
def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    """Reset the allocated/freed totals of the allocator statistics."""
    _C().reset_accumulated_memory_stats(_index(device))


@device_api
def empty_cache() -> None:
    """Return every cached, unused block on every device to the runtime."""
    _C().empty_cache()


@device_api
def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes: total from the runtime, free = total - reserved here."""
    return tuple(_C().mem_get_info(_index(device)))  # type: ignore[return-value]


# ---- random numbers ---------------------------------------------------------------------------


def _generators() -> tuple[torch.Generator, ...]:
    _require_registered()
    return _device["default_generators"]


def _gen(device: DeviceLike) -> torch.Generator:
    return _generators()[_current_index(device)]


def _rng_api(fn: _T) -> _T:
    """A ``torch.<name>`` RNG function that ``torch.compile`` calls instead of tracing, as Dynamo
    does for ``torch.cuda``'s (a ``SkipFunctionVariable``: seeding and generator state are no ATen
    ops, so a trace would lose them). Traced, ``set_rng_state`` inside OpInfo's
    ``freeze_rng_state`` (a ``no_dispatch()`` block) failed every compiled random op."""
    return device_api(torch.compiler.disable(fn))


@_rng_api
def manual_seed(seed: int) -> None:
    """Seed the current device's default generator."""
    _gen(None).manual_seed(int(seed))


@_rng_api
def manual_seed_all(seed: int) -> None:
    """Seed every device's default generator."""
    for g in _generators():
        g.manual_seed(int(seed))


@_rng_api
def seed() -> None:
    """Seed the current device's generator with a non-deterministic number."""
    _gen(None).seed()


@_rng_api
def seed_all() -> None:
    """Seed every device's generator with one non-deterministic number."""
    s = _gen(None).seed()
    for g in _generators():
        g.manual_seed(s)


@_rng_api
def initial_seed() -> int:
    """The current device's generator's initial seed."""
    return _gen(None).initial_seed()


@_rng_api
def get_rng_state(device: DeviceLike = None) -> torch.Tensor:
    """The RNG state of ``device`` (default current) as a uint8 CPU tensor."""
    return _gen(device).get_state()


@_rng_api
def set_rng_state(new_state: torch.Tensor, device: DeviceLike = None) -> None:
    """Restore an RNG state from get_rng_state()."""
    _gen(device).set_state(new_state)


@_rng_api
def get_rng_state_all() -> list[torch.Tensor]:
    """get_rng_state() of every device."""
    return [g.get_state() for g in _generators()]


@_rng_api
def set_rng_state_all(new_states: Sequence[torch.Tensor]) -> None:
    """set_rng_state() for every device."""
    for g, s in zip(_generators(), new_states):
        g.set_state(s)


# ---- the CPU fallback and diagnosis -----------------------------------------------------------


@device_api
def fallback_counts() -> dict[str, int]:
    """Operators that ran through the CPU fallback and how often, most used first.

    Example::

        >>> from torchvendor.sdk import register_device
        >>> acme = register_device("acme")
        >>> x = torch.ones(3, device="acme")
        >>> acme.reset_fallback_counts(); _ = (x * 2, x * 3)
        >>> acme.fallback_counts()
        {'mul.out': 2}
    """
    counts = _C().fallback_counts()
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@device_api
def fallback_costs() -> dict[str, dict[str, float]]:
    """What the CPU fallback cost per operator since the process started (never reset): calls,
    bytes copied to the host and back to the device, and seconds spent.

    Example::

        >>> from torchvendor.sdk import register_device
        >>> acme = register_device("acme")
        >>> before = acme.fallback_costs().get("mul.out", {}).get("calls", 0)
        >>> _ = torch.ones(4, device="acme") * 2
        >>> cost = acme.fallback_costs()["mul.out"]
        >>> cost["calls"] - before, cost["to_host_bytes"] > 0
        (1, True)
    """
    return {op: {"calls": c, "to_host_bytes": h, "to_device_bytes": d, "seconds": ns / 1e9}
            for op, (c, h, d, ns) in _C().fallback_costs().items()}


@device_api
def reset_fallback_counts() -> None:
    """Forget the fallback counts (e.g. between phases of a workload)."""
    _C().reset_fallback_counts()


@device_api
def diagnose() -> str:
    """A report of what the device layer registered and what the runtime lacks.

    Example::

        >>> from torchvendor.sdk import register_device
        >>> print(register_device("acme").diagnose())  # doctest: +ELLIPSIS
        torchvendor device 'acme': runtime ...
    """
    name = _require_registered()
    ext = _C()
    info = ext.runtime_info()
    lines = [f"torchvendor device {name!r}: runtime {info['name']!r} ({info['path']})",
             f"  runtime ABI {info['abi_major']}.{info['abi_minor']}, table "
             f"{info['struct_size']} bytes; {info['device_count']} device(s)"]
    for i in range(info["device_count"]):
        p = ext.get_device_properties(i)
        lines.append(f"    {name}:{i} {p['name']!r}, {p['total_memory'] / 2**20:.0f} MiB, "
                     f"capability {p['major']}.{p['minor']}")
    lines += _registration_lines(name, ext)
    missing = info["missing_optional"]
    if missing:
        lines.append("  optional runtime entries missing (feature disabled):")
        lines += [f"    {m}: {_OPTIONAL_FEATURES.get(m, '')}" for m in missing]
    else:
        lines.append("  optional runtime entries missing: none")
    lines += _counts_lines(name, ext)
    return "\n".join(lines)


def _counts_lines(name: str, ext: types.ModuleType) -> list[str]:
    """diagnose()'s lines on what fell back to the CPU and what ran in kernel libraries; the
    number of operators always agrees with the list, or says how many are left out."""
    out = []
    for what, counts in (("CPU fallback", ext.fallback_counts()),
                         ("native kernels (kernel libraries)", ext.native_counts())):
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{k} x{v}" for k, v in ranked[:8])
        more = (f" (the 8 most used; {len(ranked) - 8} more in torch.{name}."
                f"{'fallback' if what == 'CPU fallback' else 'native'}_counts())"
                if len(ranked) > 8 else "")
        verb = "fell back" if what == "CPU fallback" else "ran natively"
        out.append(f"  {what}: {len(ranked)} operator(s) {verb}" + (f": {shown}{more}" if ranked else ""))
    return out


@device_api
def native_counts() -> dict[str, int]:
    """Calls served by kernel-library kernels (torchvendor.sdk.load_kernel_library), per
    operator, most used first; keyed like fallback_counts().

    Example::

        >>> from torchvendor.sdk import register_device
        >>> isinstance(register_device("acme").native_counts(), dict)
        True
    """
    counts = _C().native_counts()
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _registration_lines(name: str, ext: types.ModuleType) -> list[str]:
    """diagnose()'s section on what is registered with torch."""
    lines = ["  registered with torch:"]
    lines += [f"    {piece}" for piece in ext.registered_pieces()]
    module_ok = getattr(torch, name, None) is _device.get("module")
    lines.append(f"    torch.{name} device module: {'yes' if module_ok else 'NO'}")
    lines.append(f"    Tensor.{name}() / Tensor.is_{name}: {'yes' if hasattr(torch.Tensor, name) else 'NO'}")
    try:
        acc = torch.accelerator.current_accelerator()
    except Exception as e:  # pragma: no cover - diagnostic only
        acc = f"error: {e}"
    lines.append(f"    torch.accelerator.current_accelerator(): {acc}")
    return lines


# ---- native modules and launches --------------------------------------------------------------


@device_api
def load_module(image: str | bytes | Any, device: DeviceLike = None) -> int:
    """Load compiled device code (a file path or an in-memory image) through the runtime's
    ``module_load_file``/``module_load_data``; returns an opaque module handle.

    Example (the simulator's sample kernels)::

        >>> import importlib.resources, os
        >>> from torchvendor.sdk import register_device
        >>> acme = register_device("acme")
        >>> kernels = os.fspath(importlib.resources.files("torchvendor") / "lib" / "libtorchvendor_sim_kernels.so")
        >>> mod = acme.load_module(kernels, device=0)
        >>> acme.get_function(mod, "tv_add_f32") != 0
        True
    """
    _require_registered()
    return _C().load_module(image, _index(device))


@device_api
def get_function(module: int, name: str) -> int:
    """Look up a kernel in a loaded module (``module_get_function``); returns a handle."""
    _require_registered()
    return _C().get_function(module, name)


@device_api
def unload_module(module: int) -> None:
    """Unload a module; its function handles become invalid."""
    _require_registered()
    _C().unload_module(module)


@device_api
def launch(function: int, grid: Sequence[int], block: Sequence[int], args: bytes,
           pointer_offsets: Sequence[int] = (), stream: torch.Stream | None = None,
           shared_memory_bytes: int = 0) -> None:
    """Enqueue ``function`` on ``stream`` (default: the current stream of the current device).

    ``args`` is the packed argument buffer (``struct.pack``); ``pointer_offsets`` are the byte
    offsets at which device pointers lie, so runtimes that translate addresses can do so.

    Example (``tv_add_f32(n, a, b, out)`` from the simulator's sample kernels)::

        >>> import importlib.resources, os, struct
        >>> from torchvendor.sdk import register_device
        >>> acme = register_device("acme")
        >>> kernels = os.fspath(importlib.resources.files("torchvendor") / "lib" / "libtorchvendor_sim_kernels.so")
        >>> add = acme.get_function(acme.load_module(kernels, device=0), "tv_add_f32")
        >>> a, b = torch.ones(4, device="acme:0"), torch.full((4,), 2.0, device="acme:0")
        >>> out = torch.empty(4, device="acme:0")
        >>> args = struct.pack("<qQQQ", 4, a.data_ptr(), b.data_ptr(), out.data_ptr())
        >>> acme.launch(add, (1,), (1,), args, pointer_offsets=(8, 16, 24))
        >>> out.cpu()
        tensor([3., 3., 3., 3.])
    """
    _require_registered()
    ext = _C()
    if stream is None:
        stream = ext.current_stream(-1)
    return ext.launch(function, list(grid), list(block), bytes(args), list(pointer_offsets),
                      stream, shared_memory_bytes)
