"""The host C++ compiler, and running a compiled kernel on the host or on a torchvendor device.

``compiler_flags()`` probes once which optimisation flags the system compiler accepts (OpenMP,
``-march=native``; never ``-ffast-math``, which changes NaN and Inf results). ``build(source,
path)`` compiles a shared library. :class:`HostKernel` calls an exported kernel through ctypes
with a packed argument block; :class:`DeviceKernel` loads the same library through the
device's runtime table (``module_load_file``) and launches it on the device's current stream.

Example::

    >>> flags = compiler_flags()
    >>> "-O3" in flags and "-shared" in flags
    True
"""
from __future__ import annotations

import ctypes
import functools
import os
import shutil
import struct
import subprocess
import tempfile
from typing import Any, Callable, Sequence

import torch

from torchvendor.sdk import NativeKernel, NativeLaunch, get_function, launch, load_module, tensor_data_ptr_address

from .codegen import ASSERTION

__all__ = ["compiler", "compiler_flags", "build", "host_kernel", "HostKernel", "DeviceKernel", "ToolchainError"]

_WANTED = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fopenmp")


class ToolchainError(RuntimeError):
    """No usable C++ compiler, or the compiler rejected the generated code (the message has its output)."""


def compiler() -> str:
    """The C++ compiler: ``$CXX``, else ``g++``, else ``c++``, else ``clang++``."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return name
    raise ToolchainError("torchvendor_cpu needs a C++ compiler: install g++ (or set CXX)")


@functools.cache
def compiler_flags() -> tuple[str, ...]:
    """The flags this machine's compiler accepts, probed once by compiling a small OpenMP loop."""
    flags = ["-shared", "-fPIC", "-std=c++17"]
    probe = '#include <cmath>\nextern "C" float f(float* x, int n) { float s = 0;\n#pragma omp parallel for\n' \
            'for (int i = 0; i < n; ++i) x[i] = std::exp(x[i]); return s; }\n'
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.cpp")
        with open(src, "w") as f:
            f.write(probe)
        for flag in _WANTED:
            run = subprocess.run([compiler(), *flags, flag, src, "-o", os.path.join(tmp, "probe.so")],
                                 capture_output=True, text=True)
            if run.returncode == 0:
                flags.append(flag)
        if _links_vector_math(tmp, flags):
            flags += ["-DTV_VECTOR_MATH", "-lmvec"]
    return tuple(flags)


def _links_vector_math(tmp: str, flags: list[str]) -> bool:
    """Whether glibc's libmvec is there and the compiler vectorizes a loop through it."""
    src = os.path.join(tmp, "mvec.cpp")
    with open(src, "w") as f:
        f.write('#include <cmath>\nextern "C" { __attribute__((__simd__("notinbranch"))) float sinf(float); }\n'
                'extern "C" void f(float* __restrict__ x, long n) {\n#pragma omp simd\n'
                'for (long i = 0; i < n; ++i) x[i] = std::sin(x[i]); }\n')
    out = os.path.join(tmp, "mvec.so")
    run = subprocess.run([compiler(), *flags, src, "-o", out, "-lmvec"], capture_output=True, text=True)
    if run.returncode != 0:
        return False
    try:
        ctypes.CDLL(out)
    except OSError:
        return False
    return "_ZGV" in open(out, "rb").read().decode("latin-1")


@functools.cache
def toolchain_id() -> str:
    """The compiler's version line and flags: part of the artifact cache key (probed once)."""
    version = subprocess.run([compiler(), "--version"], capture_output=True, text=True).stdout.splitlines()
    return f"{version[0] if version else compiler()} {' '.join(compiler_flags())}"


def build(source: str, path: str) -> None:
    """Compile ``source`` into the shared library ``path``; a compiler error raises with its output."""
    src = path + ".cpp"
    with open(src, "w") as f:
        f.write(source)
    try:
        flags = compiler_flags()
        libraries = [f for f in flags if f.startswith("-l")]  # after the source: linkers read in order
        run = subprocess.run([compiler(), *(f for f in flags if not f.startswith("-l")), src, "-o", path, *libraries],
                             capture_output=True, text=True)
    finally:
        os.unlink(src)
    if run.returncode != 0:
        raise ToolchainError(f"{compiler()} rejected the generated kernel (exit status {run.returncode}):\n"
                             f"{run.stderr[-4000:] or run.stdout[-4000:]}")


@functools.cache
def _packer(n_buffers: int, n_sizes: int) -> Callable[..., bytes]:
    """``pack(*pointers, *sizes)``: the kernel's argument block (a compiled ``struct.Struct``)."""
    return struct.Struct(f"<{n_buffers}Q{n_sizes}q").pack


def _pack(tensors: Sequence[torch.Tensor], sizes: Sequence[int]) -> bytes:
    return _packer(len(tensors), len(sizes))(*[t.data_ptr() for t in tensors], *sizes)


try:  # built with the package (CMakeLists.txt); a source tree without the build uses ctypes
    from . import _host_call
except ImportError:
    _host_call = None


def host_kernel(name: str, n_buffers: int) -> Any:
    """A kernel to ``load(path)`` from its library, then call on the host as ``kernel(*tensors,
    *sizes)``: through the ``_host_call`` extension (``host_call.c``), else through ctypes
    (:class:`HostKernel`).

    >>> k = host_kernel("loop_kernel0", 2)
    >>> k(torch.ones(2), torch.ones(2))
    Traceback (most recent call last):
    RuntimeError: kernel loop_kernel0: its library is not loaded yet (call load(path) first)
    """
    return _host_call.HostCall(name, n_buffers) if _host_call is not None else HostKernel(None, name, n_buffers)


def _bind_library(kernel: Any, library: str) -> None:
    """``HostCall.load``: open the library and bind the kernel's entry and its error report."""
    lib = ctypes.CDLL(library)
    entry = ctypes.cast(getattr(lib, kernel.name), ctypes.c_void_p).value
    error = getattr(lib, f"{kernel.name}_error", None)  # generated where the kernel checks bounds
    if error is not None:
        error.argtypes, error.restype = [ctypes.POINTER(ctypes.c_int64)], ctypes.c_char_p

    def on_error(status: int) -> None:
        message = out_of_bounds(kernel.name, error, status)
        raise (RuntimeError if ASSERTION in message else IndexError)(message)

    kernel.bind(entry, on_error, lib)


class HostKernel:
    """An exported kernel of a shared library, called on the host through ctypes: ``kernel(*tensors,
    *sizes)`` (where the ``host_call`` extension cannot be built). With ``library=None`` the library
    is still being built: :meth:`load` it before the first call."""

    def __init__(self, library: str | None, name: str, n_buffers: int) -> None:
        self.name, self.n = name, n_buffers
        if library is not None:
            self.load(library)

    def load(self, library: str) -> None:
        self.lib = ctypes.CDLL(library)
        self.fn = getattr(self.lib, self.name)
        self.fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.fn.restype = ctypes.c_int32
        self.error = getattr(self.lib, f"{self.name}_error", None)  # generated where the kernel checks bounds
        if self.error is not None:
            self.error.argtypes, self.error.restype = [ctypes.POINTER(ctypes.c_int64)], ctypes.c_char_p

    def __call__(self, *args: Any) -> None:
        n = self.n
        status = self.fn(None, _packer(n, len(args) - n)(*[t.data_ptr() for t in args[:n]], *args[n:]))
        if status:
            message = out_of_bounds(self.name, self.error, status)
            raise (RuntimeError if ASSERTION in message else IndexError)(message)


def out_of_bounds(kernel: str, error: Any, status: int) -> str:
    """The message of a kernel that returned ``status`` 3: the failed check (which buffer, which
    index, its bound) and the index value, read through the kernel's ``<name>_error``."""
    value = ctypes.c_int64(0)
    what = error(ctypes.byref(value)) if error is not None else None
    if what is None:
        return f"kernel {kernel}: an index was out of bounds (status {status})"
    if what.decode().startswith(ASSERTION):
        return f"kernel {kernel}: {what.decode()}"
    return (f"kernel {kernel}: index out of bounds: {what.decode()}, got {value.value} "
            "(as eager indexing raises; the generated kernel read nothing there)")


class DeviceKernel:
    """The same kernel loaded through a torchvendor device's runtime table (one module per device
    index) and launched on the current stream of the tensors' device."""

    def __init__(self, library: str | None, name: str, n_buffers: int, device_type: str) -> None:
        self.library, self.name, self.n = library, name, n_buffers
        self.module = getattr(torch, device_type)
        self.functions: dict[int, int] = {}
        self.offsets = tuple(8 * k for k in range(n_buffers))

    def load(self, library: str) -> None:
        self.library = library

    def __call__(self, *args: Any) -> None:
        fn = self._function(args[0].device.index or 0)
        launch(fn, (1,), (1,), _pack(args[:self.n], args[self.n:]), pointer_offsets=self.offsets,
               stream=self.module.current_stream(args[0].device.index or 0))

    def _function(self, index: int) -> int:
        fn = self.functions.get(index)
        if fn is None:
            fn = self.functions[index] = get_function(load_module(self.library, index), self.name)
        return fn

    def native(self, device: torch.device, sizes: tuple[int, ...]) -> NativeKernel:
        """The same launch for the SDK runner's C++ replay (``torchvendor.sdk.compile.runner_replay``)."""
        return NativeKernel((NativeLaunch(self._function(device.index or 0), (1,), (1,)),))


if _host_call is not None:
    _host_call.configure(tensor_data_ptr_address() or 0, torch.Tensor, torch.nn.Parameter, _bind_library)
