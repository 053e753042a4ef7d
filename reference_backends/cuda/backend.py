"""The ``torchvendor_cuda`` backend: LOOP level, loop IR kernels -> CUDA C -> NVRTC cubins, cached on
disk by content hash, launched on torch's ``cuda`` device or on a PrivateUse1 GPU device.

>>> from torchvendor.reference_backends.cuda.backend import CudaBackend
>>> CudaBackend.name, CudaBackend.level.value
('torchvendor_cuda', 'loop')
"""
from __future__ import annotations

import types
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import torch

from torchvendor.ir.loop_ir import Kernel
from torchvendor.sdk import Backend, BackendError, Level, loop_kernels

from .codegen import CodegenError, CudaKernel, generate
from .graphs import GraphedProgram, graphs_enabled
from .launch import CompiledKernel, nvrtc_compile

__all__ = ["CudaBackend", "device_arch"]


def device_arch(device: str) -> tuple[str, int]:
    """(``sm_XY``, multiprocessor count) of device ``device`` (``cuda`` or a PrivateUse1 GPU device).

    >>> device_arch("cuda") if torch.cuda.is_available() else ("sm_90", 132)  # doctest: +ELLIPSIS
    ('sm_...', ...)
    """
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}", torch.cuda.get_device_properties().multi_processor_count
    mod = getattr(torch, device, None)
    if mod is None or not hasattr(mod, "get_device_properties"):
        raise BackendError(f"torchvendor_cuda generates code for 'cuda' or a registered PrivateUse1 GPU device; "
                           f"the kernel's device is {device!r}")
    props = mod.get_device_properties(mod.current_device())
    return f"sm_{props.major}{props.minor}", props.multi_processor_count


class CudaBackend(Backend):
    """Loop IR kernels as CUDA C (see :mod:`.codegen`), compiled with NVRTC at run time."""

    name = "torchvendor_cuda"
    level = Level.LOOP
    device = None            # wherever the inputs are: torch's cuda, or a PrivateUse1 GPU device
    supported_ops = None     # every op: what the code generator cannot do falls back per partition
    #: cuda_graphs: replay each partition's launches from a CUDA graph once its input layout has
    #: run (see :mod:`.graphs`; ``$TORCHVENDOR_CUDA_GRAPHS=0`` also turns it off)
    default_options: dict[str, Any] = {"cuda_graphs": True}
    version = "2"

    def compile(self, kernel: Any) -> Callable[..., None]:
        """One :class:`torchvendor.sdk.LoopKernel` -> ``fn(*buffers, *sizes)``.

        A row-reduction kernel followed directly by a pointwise kernel over the same rows (a
        softmax's or layer norm's epilogue, or var's division, which the loop IR puts in a kernel
        of its own) is generated as one launch: the pointwise kernel's call runs both. The
        reduction kernel's call does nothing, or, when the pointwise kernel's call lacks some of
        its buffers (var_mean's input), hands its arguments over to it (:class:`_Handoff`)."""
        if kernel.device == "cpu":
            raise BackendError("torchvendor_cuda runs on a GPU; this kernel's buffers are on cpu "
                               "(move the model and inputs to 'cuda')")
        arch, sms = device_arch(kernel.device)
        prev, nxt = _neighbours(kernel)
        if nxt is not None and self._fused(kernel, nxt, sms) is not None:
            if not _extra(kernel, nxt)[0] and not _extra(kernel, nxt)[1]:
                return _nothing
            return self._handoffs.setdefault((id(kernel.program), kernel.kernel.name), _Handoff())
        fused = self._fused(prev, kernel, sms) if prev is not None else None
        code = fused or _generate(kernel, (kernel,), sms)

        def build(path: str) -> None:
            Path(path).write_bytes(nvrtc_compile(code.source, f"{code.name}.cu", arch))

        cubin = self.cache.get_or_build(f"{arch}\n{code.source}", build, suffix=".cubin")
        compiled = CompiledKernel(code, Path(cubin).read_bytes())
        handoff = self._handoffs.get((id(kernel.program), prev.kernel.name)) if fused is not None else None
        return compiled if handoff is None else _Receiver(compiled, handoff, prev, kernel)

    @property
    def _handoffs(self) -> dict[tuple[int, str], "_Handoff"]:
        """Hand-overs between the two halves of each fused pair (program, first kernel)."""
        if not hasattr(self, "_pending"):
            self._pending: dict[tuple[int, str], _Handoff] = {}
        return self._pending

    def program_runner(self, runner: Callable[..., Any], program: Any) -> Callable[..., Any]:
        """The SDK's runner for a partition, replayed from a CUDA graph on ``cuda`` (the runner's
        per-call host work is what bounds small models; see :mod:`.graphs`)."""
        if not (self.options["cuda_graphs"] and graphs_enabled()):
            return runner
        return GraphedProgram(runner, program)

    @staticmethod
    def _fused(first: Any, second: Any, sms: int) -> CudaKernel | None:
        """The code of ``first`` (with a reduction) and ``second`` (pointwise) as one kernel, if
        that takes fewer launches than the two apart; else None."""
        def reduces(k: Any) -> bool:
            return any(n.reduction_ranges for n in k.kernel.nests)
        if not reduces(first) or reduces(second) or first.device != second.device:
            return None
        bufs, sizes = _extra(first, second)
        merged = types.SimpleNamespace(kernel=replace(second.kernel, nests=first.kernel.nests + second.kernel.nests),
                                       buffers=(*second.buffers, *bufs), size_vars=(*second.size_vars, *sizes),
                                       program=second.program)
        try:
            both = _generate(merged, (first, second), sms)
            apart = len(_generate(first, (first,), sms).launches) + len(_generate(second, (second,), sms).launches)
        except CodegenError:
            return None
        return both if len(both.launches) < apart else None


def _nothing(*args: Any) -> None:
    """A kernel whose work runs in the next kernel's launch."""


def _extra(first: Any, second: Any) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """The buffers and size variables of ``first`` that ``second``'s call does not pass."""
    mine = {b.name for b in second.buffers}
    return (tuple(b for b in first.buffers if b.name not in mine),
            tuple(v for v in first.size_vars if v not in second.size_vars))


class _Handoff:
    """The first kernel of a fused pair whose work runs in the second's launch: its call keeps
    its arguments for the second's call (the program runner makes the two calls one after the
    other)."""

    def __init__(self) -> None:
        self.args: tuple[Any, ...] = ()

    def __call__(self, *args: Any) -> None:
        self.args = args


class _Receiver:
    """The second kernel of a fused pair: launches the fused kernel with its own arguments and
    the first's buffers and sizes it lacks (taken from the :class:`_Handoff`)."""

    def __init__(self, compiled: CompiledKernel, handoff: _Handoff, first: Any, second: Any) -> None:
        self.compiled, self.handoff, self.nbuf, self.nfirst = compiled, handoff, len(second.buffers), len(first.buffers)
        bufs, sizes = _extra(first, second)
        names = [b.name for b in first.buffers]
        self.buf_at = [names.index(b.name) for b in bufs]
        self.size_at = [self.nfirst + list(first.size_vars).index(v) for v in sizes]

    def __call__(self, *args: Any) -> None:
        theirs = self.handoff.args
        self.compiled(*args[: self.nbuf], *[theirs[i] for i in self.buf_at], *args[self.nbuf:],
                      *[theirs[i] for i in self.size_at])


def _neighbours(kernel: Any) -> tuple[Any, Any]:
    """The LoopKernels directly before and after ``kernel`` in its program (None: not a kernel)."""
    ops = kernel.program.ops
    by_name = {lk.kernel.name: lk for lk in loop_kernels(kernel.program)}
    i = next(j for j, op in enumerate(ops) if getattr(op, "name", None) == kernel.kernel.name)
    near = [by_name.get(getattr(ops[j], "name", None)) if 0 <= j < len(ops) and isinstance(ops[j], Kernel) else None
            for j in (i - 1, i + 1)]
    return near[0], near[1]


def _generate(kernel: Any, parts: tuple[Any, ...], sms: int) -> CudaKernel:
    """Generate ``kernel``; buffers that ops other than ``parts`` use (or the program returns, or
    that are bases of such views) are stored, the rest may stay in registers."""
    program = kernel.program
    skip = {p.kernel.name for p in parts}
    elsewhere = {n for op in program.ops if getattr(op, "name", None) not in skip for n in (*op.reads(), *op.writes())}
    elsewhere |= {getattr(o, "name", o) for o in program.outputs if o is not None}
    views = {b.name: b.view_of for b in program.buffers if b.view_of}
    for name in list(elsewhere):   # a view used elsewhere makes its base used elsewhere
        while name in views:
            name = views[name]
            elsewhere.add(name)
    mine = {b.name for b in kernel.buffers}
    return generate(kernel.kernel, kernel.buffers, kernel.size_vars, frozenset(elsewhere & mine), sms)
