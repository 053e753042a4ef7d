"""The device layer: one call turns a vendor's C runtime table into a PyTorch device.

``register_device("acme")`` loads the runtime library (``torchvendor/runtime.h``), installs the
C++ device layer in ``torchvendor._C`` (allocator, guard, streams, events, hooks, generators,
native copy/view kernels, the counted CPU fallback, autocast), renames PrivateUse1 to ``acme``
and registers the ``torch.acme`` device module, so that::

    >>> import torch
    >>> from torchvendor.sdk import register_device
    >>> acme = register_device("acme")          # the reference simulated runtime
    >>> x = torch.randn(3, device="acme")
    >>> (x * 2).cpu().shape
    torch.Size([3])
    >>> acme.reset_fallback_counts(); _ = (x * 2).cpu()
    >>> acme.fallback_counts()                  # what to implement natively next
    {'mul.out': 1}

Private torch API used (kept minimal, through ``torchvendor.ir.compat``): the PrivateUse1
backend's current name (to detect another owner before touching it) and
``torch._register_device_module`` (the documented registration path).
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib.resources
import os
import re
import sys
import threading
import types
import warnings
from typing import Any, Callable, Iterator, Sequence, Union

import torch

__all__ = [
    "DeviceRegistrationError",
    "RuntimeLoadError",
    "DeviceProperties",
    "register_device",
    "registered_device",
    "autoload_entry",
    "default_runtime_path",
    "load_module",
    "get_function",
    "launch",
    "unload_module",
]

DeviceLike = Union[int, str, torch.device, None]


class DeviceRegistrationError(RuntimeError):
    """``register_device`` cannot make the device: bad name, PrivateUse1 owned elsewhere, or a
    second registration under another name or runtime."""


class RuntimeLoadError(DeviceRegistrationError):
    """The vendor runtime library cannot be used: missing file, no ``torchvendor_get_runtime``,
    an unknown ABI major, or required table entries missing."""


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What ``torch.<name>.get_device_properties(i)`` returns (from the runtime's table)."""

    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int


_lock = threading.RLock()
_state: dict[str, Any] = {}  # name, path, module once registered

# Optional runtime entries and what their absence disables (diagnose()).
_OPTIONAL_FEATURES = {
    "host_malloc": "pinned memory (pin_memory(), async host copies)",
    "host_free": "pinned memory (pin_memory(), async host copies)",
    "memcpy_async": "asynchronous copies (copies synchronize the stream instead)",
    "memset": "fast zero fills (fills go through a host buffer)",
    "memset_async": "asynchronous zero fills",
    "stream_priority_range": "stream priorities (all streams get priority 0)",
    "event_elapsed_time": "Event.elapsed_time()",
    "module_load_file": "load_module(path)",
    "module_load_data": "load_module(bytes)",
    "module_unload": "unload_module()",
    "module_get_function": "get_function()",
    "launch": "launch() of native kernels",
}


def default_runtime_path() -> str:
    """The reference simulated runtime shipped in the wheel (``torchvendor/lib``).

    Example::

        >>> default_runtime_path().endswith("libtorchvendor_sim.so")
        True
    """
    return os.fspath(importlib.resources.files("torchvendor") / "lib" / "libtorchvendor_sim.so")


def _C() -> types.ModuleType:
    from torchvendor import _C as ext  # imported only when a device is registered

    return ext


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name or ""):
        raise ValueError(
            f"device name must be a lowercase Python identifier such as 'acme', got {name!r}: "
            "it becomes torch.<name>, tensor.<name>() and the device string '<name>:0'."
        )
    builtin = {t.lower() for t in ("cpu", "cuda", "mps", "xpu", "meta", "hpu", "mtia", "xla",
                                   "lazy", "ipu", "vulkan", "ve", "ort", "maia", "fpga", "mkldnn",
                                   "opengl", "opencl", "ideep", "hip", "msnpu", "privateuseone")}
    if name in builtin:
        raise ValueError(f"device name {name!r} is a built-in PyTorch device type; choose a "
                         "vendor name such as 'acme'.")
    if name.startswith(("cpu", "cuda")):
        raise ValueError(f"device name {name!r} starts with 'cpu' or 'cuda', which breaks "
                         "torch.load's location matching (pytorch#165455); choose another.")
    return name


def _resolve_runtime(runtime: str | os.PathLike[str] | None) -> str:
    path = default_runtime_path() if runtime is None else os.fspath(runtime)
    if not os.path.exists(path):
        what = "the reference simulated runtime" if runtime is None else "the runtime library"
        raise RuntimeLoadError(
            f"{what} {path!r} does not exist. Pass runtime= the path of your vendor runtime "
            "library (a shared library exporting torchvendor_get_runtime), or runtime=None "
            "for the reference simulator (rebuild torchvendor if it is missing)."
        )
    if os.path.isdir(path):
        raise RuntimeLoadError(f"runtime {path!r} is a directory; pass the shared library file.")
    return os.path.realpath(path)


def register_device(name: str, runtime: str | os.PathLike[str] | None = None
                    ) -> types.ModuleType:
    """Make the vendor runtime a PyTorch device called ``name`` and return ``torch.<name>``.

    ``runtime`` is the path of the vendor's driver library (``torchvendor/runtime.h``); None
    means the reference simulated accelerator. Calling it again with the same name and runtime
    returns the same module; anything else raises, because PrivateUse1 is one key per process.

    Example::

        >>> acme = register_device("acme")
        >>> torch.ones(2, device="acme").is_acme
        True
        >>> acme is torch.acme
        True

    Raises:
        ValueError: ``name`` is not a usable device name.
        RuntimeLoadError: the library is missing, lacks ``torchvendor_get_runtime``, speaks an
            unknown ABI major, or lacks required table entries (named in the message).
        DeviceRegistrationError: another name/runtime is registered, or another package owns
            PrivateUse1.
    """
    name = _check_name(name)
    path = _resolve_runtime(runtime)
    with _lock:
        if _state:
            if _state["name"] == name and _state["path"] == path:
                return _state["module"]
            raise DeviceRegistrationError(
                f"this process already registered the device {_state['name']!r} on runtime "
                f"{_state['path']!r}; cannot also register {name!r} on {path!r}. PrivateUse1 is "
                "a single key per process: use torch."
                f"{_state['name']} or start a new process."
            )
        from torchvendor.ir import compat  # imported here: registration must not import Inductor's world

        owner = compat.privateuse1_backend_name()
        if owner != "privateuseone":
            raise DeviceRegistrationError(
                f"another package already owns PrivateUse1 in this process under the name "
                f"{owner!r}; torchvendor cannot register {name!r}. Only one PrivateUse1 backend "
                "can live in a process: do not import that package, or disable torch's backend "
                "autoload with TORCH_DEVICE_BACKEND_AUTOLOAD=0."
            )
        if hasattr(torch, name):
            raise ValueError(f"torch.{name} already exists; choose another device name.")
        ext = _C()
        try:
            info = ext.load_runtime(path)
        except RuntimeError as e:  # c10::Error: the message says what is wrong
            raise RuntimeLoadError(str(e)) from None
        torch.utils.rename_privateuse1_backend(name)
        try:
            ext.install()
        except RuntimeError as e:
            raise DeviceRegistrationError(str(e)) from None
        module = _make_device_module(name, info)
        compat.register_device_module(name, module)
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
        _state.update(name=name, path=path, module=module)
        _check_autograd(name, module)
        return module


def _check_autograd(name: str, module: types.ModuleType) -> None:
    """Warn now, not at the user's first backward, if autograd cannot run on the new device.

    torch's autograd engine sizes its per-device queues once, at the first backward pass of the
    process, from the device guards registered at that moment; a device registered later makes
    every backward on it fail with an internal assert. A one-element backward through a view (only
    native kernels: nothing reaches the CPU fallback) tells which case this is.
    """
    last = f"{name}:{module.device_count() - 1}"  # the engine may have queues for fewer devices
    if module.device_count() == 0:
        return
    from torchvendor.ir import compat

    x = torch.ones(1, device=last, requires_grad=True)
    try:
        compat.backward_without_context([x.view(1)], [torch.ones(1, device=last)])
    except RuntimeError as e:
        if "device_ready_queues" not in str(e):
            raise
        warnings.warn(
            f"torchvendor: torch's autograd engine started before the '{name}' device was registered, "
            f"so backward passes on '{name}' will fail in this process. Call register_device() before "
            f"the first backward pass: at import of your package, or through the torch.backends "
            f"autoload entry point (see autoload_entry).", RuntimeWarning, stacklevel=3)
    else:
        atexit.register(_drain_autograd_workers, name, module.device_count())
    finally:
        module.reset_fallback_counts()


def _drain_autograd_workers(name: str, count: int) -> None:
    """At exit, push one tiny backward through each device's autograd worker and wait for it.

    A worker drops a finished graph task after the caller of ``backward`` has moved on, and that
    needs the GIL (see ``compat.backward_without_context``); a script that ends right after a
    backward could abort in interpreter finalization. Workers take tasks in order, so once the
    tiny one is done every earlier task has been dropped, while the GIL was free to take.
    """
    from torchvendor.ir import compat

    try:
        for index in range(count):
            x = torch.ones(1, device=f"{name}:{index}", requires_grad=True)
            compat.backward_without_context([x.view(1)], [torch.ones(1, device=f"{name}:{index}")])
    except Exception:  # noqa: BLE001  a device already in an error state must not fail the exit
        pass


def registered_device() -> types.ModuleType | None:
    """The ``torch.<name>`` module registered by torchvendor in this process, or None."""
    return _state.get("module")


def autoload_entry(name: str, runtime: str | os.PathLike[str] | None = None
                   ) -> Callable[[], None]:
    """A zero-argument callable for a vendor package's ``torch.backends`` entry point.

    ``import torch`` calls every ``torch.backends`` entry point, so a vendor package can make
    its device appear without an explicit ``register_device`` call::

        # acme_tv/__init__.py
        from torchvendor.sdk import autoload_entry
        _autoload = autoload_entry("acme", runtime="/opt/acme/lib/libacme_tv.so")

        # pyproject.toml
        [project.entry-points."torch.backends"]
        acme = "acme_tv:_autoload"

    ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns autoload off for a process.
    """
    _check_name(name)

    def _autoload() -> None:
        register_device(name, runtime)

    _autoload.__name__ = f"autoload_{name}"
    return _autoload


# ---- native modules and launches ---------------------------------------------------------------


def load_module(image: str | os.PathLike[str] | bytes, device: DeviceLike = None) -> int:
    """Load compiled device code (a file path or an in-memory image) through the runtime's
    ``module_load_file``/``module_load_data``; returns an opaque module handle.

    Example (the simulator's sample kernels)::

        >>> kernels = os.fspath(importlib.resources.files("torchvendor") / "lib" / "libtorchvendor_sim_kernels.so")
        >>> mod = load_module(kernels, device=0)
        >>> add = get_function(mod, "tv_add_f32")
        >>> add != 0
        True
    """
    _require_registered()
    return _C().load_module(image, _index(device))


def get_function(module: int, name: str) -> int:
    """Look up a kernel in a loaded module (``module_get_function``); returns a handle."""
    _require_registered()
    return _C().get_function(module, name)


def unload_module(module: int) -> None:
    """Unload a module; its function handles become invalid."""
    _require_registered()
    _C().unload_module(module)


def launch(function: int, grid: Sequence[int], block: Sequence[int], args: bytes,
           pointer_offsets: Sequence[int] = (), stream: torch.Stream | None = None,
           shared_memory_bytes: int = 0) -> None:
    """Enqueue ``function`` on ``stream`` (default: the current stream of the current device).

    ``args`` is the packed argument buffer (``struct.pack``); ``pointer_offsets`` are the byte
    offsets at which device pointers lie, so runtimes that translate addresses can do so.

    Example (``tv_add_f32(n, a, b, out)`` from the simulator's sample kernels)::

        >>> import struct
        >>> kernels = os.fspath(importlib.resources.files("torchvendor") / "lib" / "libtorchvendor_sim_kernels.so")
        >>> add = get_function(load_module(kernels, device=0), "tv_add_f32")
        >>> a, b = torch.ones(4, device="acme:0"), torch.full((4,), 2.0, device="acme:0")
        >>> out = torch.empty(4, device="acme:0")
        >>> args = struct.pack("<qQQQ", 4, a.data_ptr(), b.data_ptr(), out.data_ptr())
        >>> launch(add, (1,), (1,), args, pointer_offsets=(8, 16, 24))
        >>> out.cpu()
        tensor([3., 3., 3., 3.])
    """
    _require_registered()
    ext = _C()
    if stream is None:
        stream = ext.current_stream(-1)
    return ext.launch(function, list(grid), list(block), bytes(args), list(pointer_offsets),
                      stream, shared_memory_bytes)


# ---- the torch.<name> device module ------------------------------------------------------------


def _require_registered() -> str:
    if not _state:
        raise RuntimeError("no torchvendor device is registered in this process; call "
                           "torchvendor.sdk.register_device(name) first.")
    return _state["name"]


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


def _make_device_module(name: str, info: dict[str, Any]) -> types.ModuleType:
    ext = _C()
    mod = types.ModuleType(f"torch.{name}", f"The {name} device (torchvendor, runtime "
                                            f"{info['name']!r}).")
    mod.__file__ = __file__

    class Stream(torch.Stream):
        """A stream of the device: an in-order queue of its work (a torch.Stream).

        Example::

            >>> s = torch.acme.Stream(priority=-1)
            >>> with s:
            ...     y = x + 1
            >>> s.synchronize()
        """

        def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> "Stream":
            if kwargs:  # stream_id=, device_index=, device_type= (wrapping an existing stream)
                return super().__new__(cls, **kwargs)
            index = _current_index(device)
            return super().__new__(cls, device=torch.device(name, index), priority=priority)

        @property
        def priority(self) -> int:
            """The runtime priority (lower is more urgent)."""
            return ext.stream_priority(self)

        def __repr__(self) -> str:
            return (f"<torch.{name}.Stream device={name}:{self.device_index} "
                    f"id={self.stream_id}>")

    class _EventMeta(type):
        # torch.Event's C methods (elapsed_time) accept only exact torch.Event objects, so
        # Event(...) returns a torch.Event on this device and isinstance() recognizes those.
        def __call__(cls, enable_timing: bool = False, blocking: bool = False,
                     interprocess: bool = False, device: DeviceLike = None) -> torch.Event:
            return torch.Event(device=torch.device(name, _current_index(device)),
                               enable_timing=enable_timing, blocking=blocking,
                               interprocess=interprocess)

        def __instancecheck__(cls, obj: object) -> bool:
            return isinstance(obj, torch.Event) and obj.device.type == name

    class Event(metaclass=_EventMeta):
        """A marker in a stream: ``Event(...)`` returns a ``torch.Event`` on the device.

        Example::

            >>> start = torch.acme.Event(enable_timing=True)
            >>> end = torch.acme.Event(enable_timing=True)
            >>> start.record(); y = x @ x; end.record(); end.synchronize()
            >>> start.elapsed_time(end) >= 0
            True
        """

    def _wrap(s: torch.Stream) -> Stream:
        return Stream(stream_id=s.stream_id, device_index=s.device_index,
                      device_type=s.device_type)

    def is_available() -> bool:
        """True if the runtime reports at least one device."""
        return ext.device_count() > 0

    def device_count() -> int:
        """Number of devices the runtime reports."""
        return ext.device_count()

    def current_device() -> int:
        """Index of the calling thread's current device."""
        return ext.current_device()

    def set_device(device: DeviceLike) -> None:
        """Set the calling thread's current device (ValueError if out of range)."""
        i = _index(device)
        if i >= 0:
            ext.set_device(i)

    @contextlib.contextmanager
    def device(device: DeviceLike) -> Iterator[None]:
        """Context manager that makes ``device`` current and restores the previous one.

        Example::

            >>> with torch.acme.device(1):
            ...     torch.empty(2, device="acme").device
            device(type='acme', index=1)
        """
        i = _index(device)
        if i < 0:
            yield
            return
        previous = ext.exchange_device(i)
        try:
            yield
        finally:
            ext.set_device(previous)

    def synchronize(device: DeviceLike = None) -> None:
        """Wait for all work on all streams of ``device`` (default: current)."""
        ext.synchronize(_index(device))

    def current_stream(device: DeviceLike = None) -> Stream:
        """The calling thread's current stream on ``device``."""
        return _wrap(ext.current_stream(_index(device)))

    def default_stream(device: DeviceLike = None) -> Stream:
        """The default stream of ``device``."""
        return _wrap(ext.default_stream(_index(device)))

    def set_stream(stream: torch.Stream) -> None:
        """Make ``stream`` the calling thread's current stream on its device, and that device
        the current one (as ``torch.cuda.set_stream`` and ``torch.accelerator.set_stream`` do)."""
        if stream.device_index != ext.current_device():
            ext.set_device(stream.device_index)
        ext.set_stream(stream)

    @contextlib.contextmanager
    def stream(stream: torch.Stream | None) -> Iterator[None]:
        """Context manager that makes ``stream`` current (None: no-op).

        Example::

            >>> with torch.acme.stream(torch.acme.Stream()):
            ...     y = x * 2
        """
        if stream is None:
            yield
            return
        # As torch.cuda.stream: a stream of another device makes that device current inside
        # the block; afterwards both the stream and the device are what they were.
        previous_device = ext.current_device()
        previous = ext.current_stream(stream.device_index)
        set_stream(stream)
        try:
            yield
        finally:
            ext.set_stream(previous)
            if ext.current_device() != previous_device:
                ext.set_device(previous_device)

    def memory_stats(device: DeviceLike = None) -> dict[str, int]:
        """Caching allocator statistics, keyed like ``torch.cuda.memory_stats()``."""
        return dict(ext.memory_stats(_index(device)))

    def _stat(key: str, fname: str, doc: str) -> Callable[[DeviceLike], int]:
        def get(device: DeviceLike = None) -> int:
            return int(ext.memory_stats(_index(device))[key])

        get.__name__ = get.__qualname__ = fname
        get.__doc__ = doc
        return get

    memory_allocated = _stat("allocated_bytes.all.current", "memory_allocated",
                             "Bytes held by tensors on ``device`` (512-byte rounded blocks).")
    max_memory_allocated = _stat("allocated_bytes.all.peak", "max_memory_allocated",
                                 "Peak of memory_allocated since the last reset.")
    memory_reserved = _stat("reserved_bytes.all.current", "memory_reserved",
                            "Bytes the caching allocator holds from the runtime.")
    max_memory_reserved = _stat("reserved_bytes.all.peak", "max_memory_reserved",
                                "Peak of memory_reserved since the last reset.")

    def reset_peak_memory_stats(device: DeviceLike = None) -> None:
        """Reset the peaks of the allocator statistics to their current values."""
        ext.reset_peak_memory_stats(_index(device))

    def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
        """Reset the allocated/freed totals of the allocator statistics."""
        ext.reset_accumulated_memory_stats(_index(device))

    def empty_cache() -> None:
        """Return every cached, unused block on every device to the runtime."""
        ext.empty_cache()

    def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
        """(free, total) bytes: total from the runtime, free = total - reserved here."""
        return tuple(ext.mem_get_info(_index(device)))  # type: ignore[return-value]

    default_generators = tuple(ext.default_generator(i) for i in range(ext.device_count()))

    def _gen(device: DeviceLike) -> torch.Generator:
        return default_generators[_current_index(device)]

    def manual_seed(seed: int) -> None:
        """Seed the current device's default generator."""
        _gen(None).manual_seed(int(seed))

    def manual_seed_all(seed: int) -> None:
        """Seed every device's default generator."""
        for g in default_generators:
            g.manual_seed(int(seed))

    def seed() -> None:
        """Seed the current device's generator with a non-deterministic number."""
        _gen(None).seed()

    def seed_all() -> None:
        """Seed every device's generator with one non-deterministic number."""
        s = _gen(None).seed()
        for g in default_generators:
            g.manual_seed(s)

    def initial_seed() -> int:
        """The current device's generator's initial seed."""
        return _gen(None).initial_seed()

    def get_rng_state(device: DeviceLike = None) -> torch.Tensor:
        """The RNG state of ``device`` (default current) as a uint8 CPU tensor."""
        return _gen(device).get_state()

    def set_rng_state(new_state: torch.Tensor, device: DeviceLike = None) -> None:
        """Restore an RNG state from get_rng_state()."""
        _gen(device).set_state(new_state)

    def get_rng_state_all() -> list[torch.Tensor]:
        """get_rng_state() of every device."""
        return [g.get_state() for g in default_generators]

    def set_rng_state_all(new_states: Sequence[torch.Tensor]) -> None:
        """set_rng_state() for every device."""
        for g, s in zip(default_generators, new_states):
            g.set_state(s)

    def get_device_properties(device: DeviceLike = None) -> DeviceProperties:
        """Name, total memory, capability and unit count of ``device``."""
        return DeviceProperties(**ext.get_device_properties(_index(device)))

    def get_device_name(device: DeviceLike = None) -> str:
        """The runtime's name for ``device``."""
        return ext.get_device_properties(_index(device))["name"]

    def get_device_capability(device: DeviceLike = None) -> tuple[int, int]:
        """The vendor-defined (major, minor) capability."""
        p = ext.get_device_properties(_index(device))
        return (p["major"], p["minor"])

    def get_amp_supported_dtype() -> list[torch.dtype]:
        """dtypes torch.autocast(name) may cast to."""
        return [torch.float16, torch.bfloat16]

    _init_done = [False]

    def is_initialized() -> bool:
        """True: the device is initialized when it is registered."""
        return True

    def _lazy_init() -> None:
        if not _init_done[0]:
            ext.lazy_init()
            _init_done[0] = True

    def init() -> None:
        """Initialize the device (already done at registration; kept for torch.cuda parity)."""
        _lazy_init()

    def _is_in_bad_fork() -> bool:
        return bool(ext.is_in_bad_fork())

    def fallback_counts() -> dict[str, int]:
        """Operators that ran through the CPU fallback and how often, most used first.

        Example::

            >>> torch.acme.fallback_counts()
            {'add.Tensor': 12, 'mul.Tensor': 3}
        """
        counts = ext.fallback_counts()
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def reset_fallback_counts() -> None:
        """Forget the fallback counts (e.g. between phases of a workload)."""
        ext.reset_fallback_counts()

    def diagnose() -> str:
        """A report of what the device layer registered and what the runtime lacks."""
        return _diagnose(name)

    for fn in (is_available, device_count, current_device, set_device, device, synchronize,
               current_stream, default_stream, set_stream, stream, memory_stats,
               memory_allocated, max_memory_allocated, memory_reserved, max_memory_reserved,
               reset_peak_memory_stats, reset_accumulated_memory_stats, empty_cache,
               mem_get_info, manual_seed, manual_seed_all, seed, seed_all, initial_seed,
               get_rng_state, set_rng_state, get_rng_state_all, set_rng_state_all,
               get_device_properties, get_device_name, get_device_capability,
               get_amp_supported_dtype, is_initialized, _lazy_init, init, _is_in_bad_fork,
               fallback_counts, reset_fallback_counts, diagnose):
        fn.__module__ = mod.__name__
        setattr(mod, fn.__name__, fn)
    Stream.__module__ = Event.__module__ = mod.__name__
    mod.Stream, mod.Event = Stream, Event
    mod.DeviceProperties = DeviceProperties
    mod.default_generators = default_generators
    mod.load_module, mod.get_function, mod.launch = load_module, get_function, launch
    mod.unload_module = unload_module
    return mod


def _diagnose(name: str) -> str:
    ext = _C()
    info = ext.runtime_info()
    lines = [f"torchvendor device {name!r}: runtime {info['name']!r} ({info['path']})",
             f"  runtime ABI {info['abi_major']}.{info['abi_minor']}, table "
             f"{info['struct_size']} bytes; {info['device_count']} device(s)"]
    for i in range(info["device_count"]):
        p = ext.get_device_properties(i)
        lines.append(f"    {name}:{i} {p['name']!r}, {p['total_memory'] / 2**20:.0f} MiB, "
                     f"capability {p['major']}.{p['minor']}")
    lines.append("  registered with torch:")
    lines += [f"    {piece}" for piece in ext.registered_pieces()]
    module_ok = getattr(torch, name, None) is _state.get("module")
    lines.append(f"    torch.{name} device module: {'yes' if module_ok else 'NO'}")
    lines.append(f"    Tensor.{name}() / Tensor.is_{name}: "
                 f"{'yes' if hasattr(torch.Tensor, name) else 'NO'}")
    try:
        acc = torch.accelerator.current_accelerator()
    except Exception as e:  # pragma: no cover - diagnostic only
        acc = f"error: {e}"
    lines.append(f"    torch.accelerator.current_accelerator(): {acc}")
    missing = info["missing_optional"]
    if missing:
        lines.append("  optional runtime entries missing (feature disabled):")
        lines += [f"    {m}: {_OPTIONAL_FEATURES.get(m, '')}" for m in missing]
    else:
        lines.append("  optional runtime entries missing: none")
    counts = sorted(ext.fallback_counts().items(), key=lambda kv: (-kv[1], kv[0]))
    lines.append(f"  CPU fallback: {len(counts)} operator(s) fell back"
                 + (": " + ", ".join(f"{k} x{v}" for k, v in counts[:8]) if counts else ""))
    return "\n".join(lines)
