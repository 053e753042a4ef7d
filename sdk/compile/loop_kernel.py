"""One loop-IR kernel as a LOOP-level backend's ``compile`` receives it (:class:`LoopKernel`), and
the kernels of a program in that form (:func:`loop_kernels`): what the SDK's compile step
(:mod:`.loop_level`) and its runner (:mod:`.loop_runner`) both read.

A kernel's arguments are the buffers it reads, then those it only writes (``LoopKernel.buffers``),
followed by the values of the size symbols it uses (``LoopKernel.size_vars``), as Python ints.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from torchvendor.ir.loop_ir import Buffer, Kernel, LoopProgram, parse_expr

__all__ = ["LoopKernel", "loop_kernels", "kernel_symbols"]


@dataclass(frozen=True)
class LoopKernel:
    """One kernel as a LOOP-level backend's ``compile`` receives it."""

    kernel: Kernel
    #: the buffers it touches, in argument order: those it reads, then those it only writes
    buffers: tuple[Buffer, ...]
    #: the size symbols it uses, passed after the buffers as ints (in ``program.size_vars`` order)
    size_vars: tuple[str, ...]
    program: LoopProgram
    device: str

    @property
    def name(self) -> str:
        return self.kernel.name


def kernel_symbols(kernel: Kernel, buffers: Sequence[Buffer]) -> set[str]:
    """Names of the free symbols in a kernel's ranges, index expressions and buffer layouts.

    >>> from torchvendor.ir.loop_ir import LoopNest, Stmt
    >>> k = Kernel("k", (LoopNest("op0", ("s0",), (), (Stmt("t0", "load", (), (("buffer", "x"), ("index", "i0 + s1"))),)),))
    >>> sorted(kernel_symbols(k, []))
    ['i0', 's0', 's1']
    """
    texts: list[str] = []
    for nest in kernel.nests:
        texts += [*nest.ranges, *nest.reduction_ranges]
        for stmt in nest.stmts():
            for key in ("index", "expr", "size"):
                value = stmt.attr(key)
                if isinstance(value, str):
                    texts.append(value)
    for b in buffers:
        texts += [*b.size, *b.stride, b.offset]
    names: set[str] = set()
    for text in texts:
        names |= {s.name for s in parse_expr(text).free_symbols}
    return names


def loop_kernels(program: LoopProgram) -> list[LoopKernel]:
    """The program's kernels, each with its argument buffers and size symbols, in program order.

    The newest program's answer is remembered (a program is immutable): the SDK asks twice for
    each partition, when its kernels are compiled and when its runner is built.

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> prog = capture(lambda x: x.sin() * 2, [torch.randn(8)], level="loop").inference
    >>> [(lk.name, [b.name for b in lk.buffers], lk.size_vars) for lk in loop_kernels(prog)]
    [('loop_kernel0', ['arg0_1', 'buf0'], ())]
    """
    global _NEWEST
    newest = _NEWEST  # one read: another thread may replace it
    if newest[0] is program:
        return list(newest[1])
    out = []
    for kernel in program.kernels:
        reads = kernel.reads()
        names = (*reads, *(w for w in kernel.writes() if w not in reads))
        buffers = tuple(program.buffer(n) for n in names)
        used = kernel_symbols(kernel, buffers)
        size_vars = tuple(v for v in program.size_vars if v in used)
        out.append(LoopKernel(kernel, buffers, size_vars, program, program.device))
    _NEWEST = (program, tuple(out))
    return out


#: (program, its loop_kernels) of the newest program asked about
_NEWEST: tuple[Any, tuple[LoopKernel, ...]] = (None, ())
