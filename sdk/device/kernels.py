"""Eager kernels for the device on PyTorch's LibTorch stable ABI.

A vendor's kernel library is a shared library of ATen kernels registered with
``STABLE_TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)`` and built with ``TORCH_TARGET_VERSION`` set
to the oldest torch it supports, so it never includes an unstable torch header and loads on
later releases unchanged. What the stable ABI lacks for a device kernel (the runtime's stream,
module and launch entries, Scalar arguments, call counting, output checks) comes from the SDK's
versioned C header ``torchvendor/kernel_api.h`` (see docs/runtime.md, "Eager kernels").

``load_kernel_library(path)`` checks the library's marker (built for a torch no newer than the
running one), loads it, checks what it registered (operators that exist, none already served by
another kernel library) and hands it the kernel API table; on any problem it unloads the library,
so nothing stays registered, and raises ``KernelLibraryError``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Iterator

__all__ = ["KernelLibrary", "KernelLibraryError", "load_kernel_library", "native_counts",
           "reset_native_counts", "checked_mode"]


class KernelLibraryError(ValueError):
    """A kernel library was refused; the message says why and nothing it registered stays."""


@dataclasses.dataclass(frozen=True)
class KernelLibrary:
    """A loaded kernel library: its path and the operators it serves on the device."""

    path: str
    operators: tuple[str, ...]


def _C():  # the device layer, imported when used
    from torchvendor import _C as ext

    return ext


def load_kernel_library(path: str | os.PathLike[str]) -> KernelLibrary:
    """Load a kernel library for the registered device; returns what it serves.

    Example (``examples/stable_kernels``, built as docs/runtime.md says)::

        >>> lib = load_kernel_library(built_template)                     # doctest: +SKIP
        >>> lib.operators                                                 # doctest: +SKIP
        ('aten::mm', 'aten::mul.Tensor', 'aten::relu', 'aten::sum', 'aten::sum.dim_IntList', 'torchvendor::add.Tensor')

    Raises:
        KernelLibraryError: no marker, built for a newer torch, an operator torch does not
            define, an operator another loaded library serves, or its init failed.
        RuntimeError: no device is registered yet, or the file cannot be loaded.
    """
    from .registry import registered_device

    if registered_device() is None:
        raise RuntimeError("register the device (torchvendor.sdk.register_device) before "
                           "loading kernel libraries for it.")
    full = os.path.realpath(os.fspath(path))
    if not os.path.isfile(full):
        raise FileNotFoundError(f"kernel library {full!r} does not exist; build it first "
                                "(docs/runtime.md, 'Eager kernels').")
    try:
        ops = _C().load_kernel_library(full)
    except ValueError as e:  # c10::ValueError: refused, nothing registered
        raise KernelLibraryError(str(e)) from None
    return KernelLibrary(full, tuple(sorted(ops)))


def native_counts() -> dict[str, int]:
    """Calls served by kernel-library kernels, per operator, most used first.

    Example::

        >>> isinstance(native_counts(), dict)
        True
    """
    counts = _C().native_counts()
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def reset_native_counts() -> None:
    """Forget the native call counts."""
    _C().reset_native_counts()


@contextlib.contextmanager
def checked_mode(on: bool = True) -> Iterator[None]:
    """Inside the block every kernel-library kernel checks its outputs' shape, dtype and device
    against the operator's meta kernel (the conformance suite runs kernels this way).

    Example::

        >>> with checked_mode():
        ...     pass
    """
    ext = _C()
    previous = ext.checked_mode()
    ext.set_checked_mode(on)
    try:
        yield
    finally:
        ext.set_checked_mode(previous)
