"""Compiling generated CUDA C with NVRTC and launching it: on torch's ``cuda`` device through the
CUDA driver (``ctypes``, on torch's current stream), on a PrivateUse1 GPU device through
``torchvendor.sdk.load_module/get_function/launch`` (the runtime table).

>>> from torchvendor.reference_backends.cuda.launch import nvrtc_available
>>> isinstance(nvrtc_available(), bool)
True
"""
from __future__ import annotations

import ctypes
import glob
import math
import os
import struct
import sys
import threading
from typing import Any, Sequence

import torch

from torchvendor.ir.loop_ir import parse_expr
from torchvendor.sdk import NativeKernel, NativeLaunch

from .checks import BoundsRecord
from .codegen import CudaKernel, Launch
from .runtime import cuda_include_dir

__all__ = ["nvrtc_compile", "nvrtc_available", "CompiledKernel", "NvrtcError", "kernel_operands"]


class NvrtcError(RuntimeError):
    """NVRTC is missing or rejected the source (the message carries its log)."""


_lock = threading.Lock()
_nvrtc: ctypes.CDLL | None = None


def _load_nvrtc() -> ctypes.CDLL:
    global _nvrtc
    if _nvrtc is not None:
        return _nvrtc
    names = [os.environ.get("TORCHVENDOR_NVRTC", ""), "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    dirs = [os.path.join(p, "nvidia", sub, "lib") for p in sys.path for sub in ("cu13", "cuda_nvrtc")]
    inc = cuda_include_dir()
    if inc:
        dirs += [os.path.join(os.path.dirname(inc), d) for d in ("lib64", "lib")]
    for name in names:
        for cand in [name] + [os.path.join(d, name) for d in dirs]:
            if not name:
                break
            try:
                _nvrtc = ctypes.CDLL(cand)
                return _nvrtc
            except OSError:
                continue
    for cand in sorted(glob.glob(os.path.join(d, "libnvrtc.so*")) for d in dirs):
        for path in cand:
            try:
                _nvrtc = ctypes.CDLL(path)
                return _nvrtc
            except OSError:
                continue
    raise NvrtcError("NVRTC (libnvrtc.so) not found: install the CUDA toolkit or the nvidia-cuda-nvrtc wheel, "
                     "or set TORCHVENDOR_NVRTC to the library's path")


def nvrtc_available() -> bool:
    """Whether NVRTC can be loaded on this machine.

    >>> nvrtc_available() in (True, False)
    True
    """
    try:
        _load_nvrtc()
        return True
    except NvrtcError:
        return False


def nvrtc_compile(source: str, name: str, arch: str) -> bytes:
    """Compile CUDA C ``source`` to a cubin for ``arch`` (``"sm_90"``) with NVRTC.

    >>> cubin = nvrtc_compile('extern "C" __global__ void k() {}', "k.cu", "sm_90") if nvrtc_available() else b"\\x7fELF"
    >>> cubin[:4]
    b'\\x7fELF'
    """
    lib = _load_nvrtc()
    prog = ctypes.c_void_p()

    def check(rc: int, what: str) -> None:
        if rc:
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise NvrtcError(f"{what}: {lib.nvrtcGetErrorString(rc).decode()}")

    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
          "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}", "-std=c++17", "-default-device"]
        inc = cuda_include_dir()
        if inc:
            opts.append(f"-I{inc}")
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        if rc:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            text = log.value.decode(errors="replace")
            # the error lines first: a report cuts long reasons, and warnings come before errors in the log
            errors = "; ".join(line.strip() for line in text.splitlines() if ": error" in line)
            raise NvrtcError(f"NVRTC could not compile {name} for {arch}: {errors or 'no error line'}\n{text[-4000:]}")
        size = ctypes.c_size_t()
        check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        out = ctypes.create_string_buffer(size.value)
        check(lib.nvrtcGetCUBIN(prog, out), "nvrtcGetCUBIN")
        return out.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


# ---- the CUDA driver, for torch's cuda device --------------------------------------------------
class _Driver:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3

    def check(self, rc: int, what: str) -> None:
        if rc:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {name.value.decode() if name.value else rc}")

    def load(self, image: bytes) -> ctypes.c_void_p:
        mod = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(mod), image), "cuModuleLoadData")
        return mod

    def function(self, mod: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        fn = ctypes.c_void_p()
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), f"cuModuleGetFunction({name})")
        return fn

    def launch(self, fn: ctypes.c_void_p, grid: Sequence[int], block: Sequence[int], args: "_Args", stream: int) -> None:
        self.check(self.lib.cuLaunchKernel(fn, *grid, *block, 0, stream, None, args.extra), "cuLaunchKernel")


class _Args:
    """A kernel's packed argument buffer, reused by every launch (the driver copies the
    arguments when the launch is enqueued): no ctypes objects are made per call."""

    def __init__(self, size: int) -> None:
        self.buf = ctypes.create_string_buffer(max(size, 8))
        self.size = ctypes.c_size_t(size)
        self.extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(self.buf), 2, ctypes.addressof(self.size), 0)

    def pack(self, data: bytes) -> "_Args":
        ctypes.memmove(self.buf, data, len(data))
        self.size.value = len(data)
        return self


_driver: _Driver | None = None
_BOUNDS = "<bounds record>"   # in a module's function table: its BoundsRecord (checks.py)

_WS_DTYPES = {"float": torch.float32, "double": torch.float64, "long long": torch.int64, "int": torch.int32,
              "bool": torch.bool}


def kernel_operands(tensors: Sequence[torch.Tensor], home: str = "cuda") -> tuple[torch.device, list[torch.Tensor]]:
    """The device a kernel runs on and its operands there. Inductor lets a GPU kernel read a
    0-d CPU tensor (a scale, a position offset), which its own wrapper passes by value; a GPU
    cannot read host memory (an illegal address on a PrivateUse1 GPU, the wrong device when it
    comes first), so such an operand is copied to the device first (it is only ever read). A
    kernel whose operands all live on the host (Inductor makes it a C++ kernel: an index table
    built on the CPU) runs on the current device of type ``home``, on copies of its operands
    (``CompiledKernel`` copies what it writes back).

    >>> kernel_operands([torch.tensor(2.0), torch.ones(2)], home="cpu")[0]
    device(type='cpu')
    """
    device = next((t.device for t in tensors if t.device.type != "cpu"), None)
    if device is None:
        if home == "cpu":
            return torch.device("cpu"), list(tensors)
        mod = getattr(torch, home)
        device = torch.device(home, mod.current_device())
    return device, [_on(t, device) if t.device.type == "cpu" else t for t in tensors]


def _on(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device`` with its strides and storage offset kept: the kernel indexes its
    memory as the buffer's layout says, which ``Tensor.to`` need not keep (an expanded or
    overlapping view comes back contiguous). The whole span of storage it reaches is copied."""
    if t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
    span = _span(t)
    flat = t.as_strided((span,), (1,), t.storage_offset()).to(device)
    return flat.as_strided(t.shape, t.stride(), 0)


def _span(t: torch.Tensor) -> int:
    """Elements from the first to the last one a non-empty ``t`` addresses."""
    return 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))


def _copy_back(t: torch.Tensor, copy: torch.Tensor) -> None:
    """Write the span of ``copy`` (made by :func:`_on`) back into the host tensor ``t``."""
    if t.numel():
        span = _span(t)
        t.as_strided((span,), (1,), t.storage_offset()).copy_(copy.as_strided((span,), (1,), 0))


class CompiledKernel:
    """A compiled kernel: ``fn(*buffers, *sizes)`` launches its functions on the buffers' device,
    on that device's current stream (torch's ``cuda``, or a PrivateUse1 GPU through the runtime)."""

    def __init__(self, kernel: CudaKernel, image: bytes, home: str = "cuda", written: Sequence[int] = ()) -> None:
        self.kernel, self.image = kernel, image
        #: the device type a kernel of host operands runs on, and which buffers it writes
        self.home, self.written = home, tuple(written)
        self.nbuf = len(kernel.buffers)
        self._modules: dict[tuple[str, int], dict[str, Any]] = {}
        self._plans: dict[tuple[int, ...], list[tuple[Any, ...]]] = {}
        self._args: dict[int, _Args] = {}   # per thread: a launch packs, then enqueues

    def _functions(self, device: torch.device) -> dict[str, Any]:
        key = (device.type, device.index or 0)
        fns = self._modules.get(key)
        if fns is not None:
            return fns
        names = []
        for l in self.kernel.launches:
            names.append(l.name)
            if l.kind == "pointwise" and l.vector > 1:
                names.append(l.name + "_s")
            if l.kind == "split" or (l.kind == "column" and l.splits > 1):
                names.append(l.name + "_final")
        with _lock:
            if device.type == "cuda":
                global _driver
                _driver = _driver or _Driver()
                with torch.cuda.device(device):
                    mod = _driver.load(self.image)
                    fns = {n: _driver.function(mod, n) for n in names}
                    fns[_BOUNDS] = BoundsRecord(_driver.lib, mod) if self.kernel.checks else None
            else:
                from torchvendor.sdk import get_function, load_module

                mod = load_module(self.image, device=device.index or 0)
                fns = {n: get_function(mod, n) for n in names}
            self._modules[key] = fns
        return fns

    def _steps(self, sizes: tuple[int, ...]) -> list[tuple[Any, ...]]:
        """Per size binding: (kind, name, grid, block, ...) of every launch, computed once."""
        steps = self._plans.get(sizes)  # type: ignore[assignment]
        if steps is not None:
            return steps  # type: ignore[return-value]
        env = dict(zip(self.kernel.size_vars, sizes))

        def ev(text: str) -> int:
            e = parse_expr(text)
            return int(e.subs({s: env[s.name] for s in e.free_symbols})) if e.free_symbols else int(e)
        steps = []
        for l in self.kernel.launches:
            n, rows = ev(l.numel), ev(l.rows)
            if l.kind == "pointwise" and n > 0:
                vec = (l.name, (math.ceil(n / (256 * l.vector)), 1, 1))
                scalar = (l.name + "_s" if l.vector > 1 else l.name, (math.ceil(n / 256), 1, 1))
                steps.append(("pointwise", l, vec, scalar))
            elif l.kind == "rows" and rows > 0:
                steps.append(("one", l.name, (math.ceil(rows / l.rows_per_block), 1, 1), (l.threads, l.rows_per_block, 1)))
            elif l.kind == "column" and rows > 0 and l.splits == 1:
                steps.append(("one", l.name, (math.ceil(rows / 256), 1, 1), (256, 1, 1)))
            elif rows > 0:  # split in two launches over a workspace
                first = (l.splits, rows, 1) if l.kind == "split" else (math.ceil(rows / 256), l.splits, 1)
                final = ((rows, 1, 1), (32, 1, 1)) if l.kind == "split" else ((math.ceil(rows / 256), 1, 1), (256, 1, 1))
                steps.append(("two", l, rows * l.splits, first, (l.threads if l.kind == "split" else 256, 1, 1), final))
        self._plans[sizes] = steps  # type: ignore[assignment]
        return steps

    def native(self, device: torch.device, sizes: tuple[int, ...]) -> NativeKernel | None:
        """The launches of one call on a PrivateUse1 GPU device, for the SDK runner's C++ replay
        (``torchvendor.sdk.compile.runner_replay``): the same functions, grids and workspaces as
        :meth:`__call__`, the vector variant where the pointers are aligned. On ``cuda`` the
        functions are the driver's ``CUfunction`` handles (the replay calls ``cuLaunchKernel``:
        a partition too large for a CUDA graph launches its kernels without Python); None there
        where the kernel records out-of-bounds accesses (checks.py: read back after each call)."""
        fns = self._functions(device)
        if device.type == "cuda":
            if fns.get(_BOUNDS) is not None:
                return None
            fns = {name: getattr(fn, "value", fn) for name, fn in fns.items() if name != _BOUNDS}
        launches: list[NativeLaunch] = []
        scratch: list[tuple[int, torch.dtype]] = []
        for step in self._steps(tuple(int(s) for s in sizes)):
            if step[0] == "one":
                launches.append(NativeLaunch(fns[step[1]], step[2], step[3]))
            elif step[0] == "pointwise":
                l, (vec, vgrid), (name, grid) = step[1], step[2], step[3]
                scalar = NativeLaunch(fns[name], grid, (256, 1, 1))
                launches.append(scalar if l.vector <= 1 else NativeLaunch(
                    fns[vec], vgrid, (256, 1, 1), aligned=tuple(l.aligned), alignment=l.align, otherwise=scalar))
            else:
                _, l, n, first, block, final = step
                ws = tuple(range(len(scratch), len(scratch) + len(l.workspace)))
                scratch += [(n, _WS_DTYPES[t]) for t in l.workspace]
                launches.append(NativeLaunch(fns[l.name], first, block, scratch=ws))
                launches.append(NativeLaunch(fns[l.name + "_final"], *final, scratch=ws))
        return NativeKernel(tuple(launches), tuple(scratch))

    def __call__(self, *args: Any) -> None:
        # the common case, every operand on cuda, without kernel_operands' per-tensor checks: a
        # partition that is not launch-bound (graphs.launch_bound) launches each kernel this way
        tensors = args[: self.nbuf]
        if tensors and all(t.is_cuda for t in tensors):
            device = tensors[0].device
        else:
            device, tensors = kernel_operands(tensors, self.home)
        sizes = tuple(int(s) for s in args[self.nbuf:])
        fns = self._functions(device)
        ptrs = [t.data_ptr() for t in tensors]
        packed = struct.pack(f"<{self.nbuf}Q{len(sizes)}q", *ptrs, *sizes)
        if device.type == "cuda":
            stream = torch.cuda.current_stream(device).cuda_stream
            args_buf = self._args.get(threading.get_ident())
            if args_buf is None:   # pointers, sizes and up to 4 workspace pointers
                args_buf = self._args[threading.get_ident()] = _Args(8 * (self.nbuf + len(sizes) + 4))

            def go(name: str, grid: Sequence[int], block: Sequence[int], extra: bytes = b"") -> None:
                _driver.launch(fns[name], grid, block, args_buf.pack(packed + extra), stream)  # type: ignore[union-attr]
        else:
            from torchvendor.sdk import launch

            offsets = tuple(range(0, 8 * self.nbuf, 8))

            def go(name: str, grid: Sequence[int], block: Sequence[int], extra: bytes = b"") -> None:
                launch(fns[name], grid, block, packed + extra,
                       pointer_offsets=offsets + tuple(range(len(packed), len(packed) + len(extra), 8)))
        for step in self._steps(sizes):
            if step[0] == "one":
                go(step[1], step[2], step[3])
            elif step[0] == "pointwise":
                l = step[1]
                name, grid = step[2] if l.vector > 1 and all(ptrs[i] % l.align == 0 for i in l.aligned) else step[3]
                go(name, grid, (256, 1, 1))
            else:
                _, l, n, first, block, final = step
                ws = [torch.empty(n, dtype=_WS_DTYPES[t], device=device) for t in l.workspace]
                extra = struct.pack(f"<{len(ws)}Q", *[w.data_ptr() for w in ws])
                go(l.name, first, block, extra)
                go(l.name + "_final", *final, extra)
        if device.type == "cuda" and fns[_BOUNDS] is not None:
            fns[_BOUNDS].check(self.kernel, stream)  # see checks.py
        for i in self.written:
            if args[i].device.type == "cpu":   # a kernel of host operands ran on copies
                _copy_back(args[i], tensors[i])
