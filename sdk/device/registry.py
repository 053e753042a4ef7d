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
import importlib.resources
import os
import re
import threading
import types
import warnings
from typing import Any, Callable

import torch

# The torch.<name> module's functions live in device_module.py; the native-module calls are
# also offered here, as torchvendor.sdk.load_module etc.
from .module import DeviceProperties, _C, build_device_module, get_function, launch, load_module, unload_module

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


class DeviceRegistrationError(RuntimeError):
    """``register_device`` cannot make the device: bad name, PrivateUse1 owned elsewhere, or a
    second registration under another name or runtime."""


class RuntimeLoadError(DeviceRegistrationError):
    """The vendor runtime library cannot be used: missing file, no ``torchvendor_get_runtime``,
    an unknown ABI major, or required table entries missing."""


_lock = threading.RLock()
_state: dict[str, Any] = {}  # name, path, module once registered

def default_runtime_path() -> str:
    """The reference simulated runtime shipped in the wheel (``torchvendor/lib``).

    Example::

        >>> default_runtime_path().endswith("libtorchvendor_sim.so")
        True
    """
    return os.fspath(importlib.resources.files("torchvendor") / "lib" / "libtorchvendor_sim.so")


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
        _check_privateuse1_is_free(name)
        module = _install(name, path)
        _state.update(name=name, path=path, module=module)
        _check_autograd(name, module)
        return module


def _check_privateuse1_is_free(name: str) -> None:
    """Refuse before touching anything if another package owns PrivateUse1 or torch.<name> exists."""
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


def _install(name: str, path: str) -> types.ModuleType:
    """Load the runtime, install the C++ device layer, rename PrivateUse1 and register torch.<name>."""
    from torchvendor.ir import compat

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
    module = build_device_module(name, info)
    compat.register_device_module(name, module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    return module


def _check_autograd(name: str, module: types.ModuleType) -> None:
    """Make autograd run on the new device even when torch's engine started before it existed.

    torch's autograd engine sizes its per-device queues once, at the first backward pass of the
    process, from the device guards registered at that moment; on a device registered later every
    backward fails with torch's internal assert. The engine skips those queues when autograd
    multithreading is off (``torch.autograd.set_multithreading_enabled``, public API): it then
    runs the backward on the calling thread. That mode is thread-local, so after a late
    registration the extension sets it in each thread at the thread's first device allocation,
    and this says so. A one-element backward through a view (only native kernels: nothing reaches
    the CPU fallback) tells which case this is.
    """
    last = f"{name}:{module.device_count() - 1}"  # the engine may have queues for fewer devices
    if module.device_count() == 0:
        return
    from torchvendor.ir import compat

    def probe() -> None:
        x = torch.ones(1, device=last, requires_grad=True)
        compat.backward_without_context([x.view(1)], [torch.ones(1, device=last)])

    try:
        probe()
    except RuntimeError as e:
        if "device_ready_queues" not in str(e):
            raise
        _C().run_autograd_on_calling_threads()
        probe()  # its allocation turns this thread's multithreading off
        warnings.warn(
            f"torchvendor: torch's autograd engine started before the '{name}' device was registered "
            f"and has no worker thread for it, so from now on autograd multithreading is off in every "
            f"thread that allocates on '{name}' (backward passes run on the calling thread). A "
            f"thread whose backward on '{name}' allocates nothing there (an explicit gradient made in "
            f"another thread) needs `with torch.autograd.set_multithreading_enabled(False):`. To keep "
            f"the worker, call register_device() before the first backward pass: at import of your "
            f"package, or through the torch.backends autoload entry point (see autoload_entry).",
            RuntimeWarning, stacklevel=3)
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
