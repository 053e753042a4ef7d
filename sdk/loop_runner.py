"""Running a loop-IR program with a vendor's compiled kernels: the loop level's runtime.

A LOOP-level backend compiles one :class:`LoopKernel` at a time into a callable
``fn(*buffers, *sizes)``; :class:`ProgramRunner` runs the whole :class:`LoopProgram` with them:
it binds the size symbols from the inputs, allocates the program's buffers on the inputs'
device (views of their base where ``view_of`` says so, constants from the program), launches
the kernels in order and runs the extern kernels (matmul, convolution, ...) through ATen on the
device. The allocation plan is computed once per binding of the size symbols, so a call costs
a few microseconds plus the kernels.

A kernel's arguments are the buffers it reads, then those it only writes (``LoopKernel.buffers``),
as tensors whose ``data_ptr()`` is the buffer's first element — exactly the loop IR's memory
model (an index is an element offset from there) — followed by the values of the size symbols
it uses (``LoopKernel.size_vars``), as Python ints.

Example (kernels "compiled" to the reference interpreter, :func:`reference_kernel`)::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> prog = capture(lambda x: torch.softmax(x, -1), [torch.randn(4, 8)], level="loop").inference
    >>> runner = ProgramRunner(prog, {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)})
    >>> x = torch.randn(4, 8)
    >>> torch.allclose(runner(x)[0], torch.softmax(x, -1))
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from torchvendor.ir.loop_ir import Buffer, BufferRef, Kernel, LoopProgram, SizeExpr, parse_expr
from torchvendor.ir.loop_ir.interpreter import run_extern

__all__ = ["LoopKernel", "loop_kernels", "ProgramRunner", "kernel_symbols", "reference_kernel"]


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

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> prog = capture(lambda x: x.sin() * 2, [torch.randn(8)], level="loop").inference
    >>> [(lk.name, [b.name for b in lk.buffers], lk.size_vars) for lk in loop_kernels(prog)]
    [('loop_kernel0', ['arg0_1', 'buf0'], ())]
    """
    out = []
    for kernel in program.kernels:
        reads = kernel.reads()
        names = (*reads, *(w for w in kernel.writes() if w not in reads))
        buffers = tuple(program.buffer(n) for n in names)
        used = kernel_symbols(kernel, buffers)
        size_vars = tuple(v for v in program.size_vars if v in used)
        out.append(LoopKernel(kernel, buffers, size_vars, program, program.device))
    return out


def reference_kernel(kernel: LoopKernel) -> Callable[..., None]:
    """A kernel "compiled" to the loop IR's reference interpreter, with the calling convention of
    a compiled kernel: what a vendor's ``compile`` returns, to check a runner or to stand in for a
    kernel the vendor's code generator cannot handle yet (slowly: the interpreter is exact, not fast).

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> (lk,) = loop_kernels(capture(lambda x: x * 3, [torch.ones(4)], level="loop").inference)
    >>> out = torch.empty(4); reference_kernel(lk)(torch.ones(4), out); out
    tensor([3., 3., 3., 3.])
    """
    from torchvendor.ir.loop_ir import run_kernel

    names = [b.name for b in kernel.buffers]
    n = len(names)

    def run(*args: Any) -> None:
        run_kernel(kernel.kernel, dict(zip(names, args[:n])), dict(zip(kernel.size_vars, args[n:])))

    return run


def _in_layout(t: torch.Tensor, size: list[int], stride: list[int], dtype: str) -> torch.Tensor:
    """``t`` itself when it has the buffer's size, strides (where a dimension has more than one
    element) and dtype, else a copy that has them."""
    if list(t.shape) == size and str(t.dtype) == f"torch.{dtype}" and \
            all(s == g for s, g, n in zip(stride, t.stride(), size) if n > 1):
        return t
    out = torch.empty_strided(size, stride, dtype=getattr(torch, dtype), device=t.device)
    out.copy_(t)
    return out


def _int(text: str, sizes: Mapping[str, int]) -> int:
    if text.lstrip("-").isdigit():
        return int(text)
    e = parse_expr(text)
    try:
        return int(e.subs({s: sizes[s.name] for s in e.free_symbols}))
    except KeyError as k:
        raise ValueError(f"size expression {text!r} uses the symbol {k} that no input binds") from None


def _ints(texts: Sequence[str], sizes: Mapping[str, int]) -> list[int]:
    return [_int(t, sizes) for t in texts]


class ProgramRunner:
    """Runs one :class:`LoopProgram` with compiled kernels; call it with the program's inputs.

    Args:
        program: the loop program.
        compiled: kernel name -> callable ``fn(*buffers, *sizes)`` (see the module docstring).
        device: the device type the program runs on (default ``program.device``); buffers are
            allocated on the device of the first tensor input.
    """

    def __init__(self, program: LoopProgram, compiled: Mapping[str, Callable[..., Any]],
                 device: str | None = None) -> None:
        self.program = program
        self.device = device or program.device
        kernels = loop_kernels(program)
        missing = [lk.name for lk in kernels if lk.name not in compiled]
        if missing:
            raise ValueError(f"ProgramRunner: no compiled callable for kernel(s) {missing} of program "
                             f"{program.name!r}")
        by_name = {lk.name: lk for lk in kernels}
        #: ("kernel", fn, buffer names, size symbols) or ("extern", ExternKernel)
        self.steps: list[tuple] = []
        for op in program.ops:
            if isinstance(op, Kernel):
                lk = by_name[op.name]
                self.steps.append(("kernel", compiled[op.name], tuple(b.name for b in lk.buffers), lk.size_vars))
            else:
                self.steps.append(("extern", op, ()))
        self._bind_extern_results()
        self._scalar = {name: parse_expr(expr) for name, expr in program.scalar_inputs}
        self._inputs = [(name, program.buffer(name) if name not in self._scalar else None) for name in program.inputs]
        self._plans: dict[tuple, list[tuple]] = {}
        self._written = {n for op in program.ops for n in op.writes()}

    def _bind_extern_results(self) -> None:
        """An extern kernel's result becomes its output buffer instead of being copied into a
        preallocated one (a matmul's output is often the biggest tensor of a partition): for
        outputs that nothing wrote before, that are no view and have none. The result is checked
        against the buffer's layout at run time (the kernels were compiled for it)."""
        program, seen = self.program, set(self.program.inputs)
        viewed = {b.view_of for b in program.buffers if b.view_of is not None}
        self._deferred: set[str] = set()
        for k, step in enumerate(self.steps):
            op = program.ops[k]
            if step[0] == "extern" and op.op != "getitem" and len(op.outputs) == 1:
                name = op.outputs[0]
                buf = program.buffer(name)
                if name not in seen and name not in viewed and buf.view_of is None and buf.kind != "constant":
                    self._deferred.add(name)
                    self.steps[k] = ("extern", op, (name,))
            seen.update(op.writes())

    # ---- sizes and allocation ------------------------------------------------------------------

    def _bind(self, inputs: Sequence[Any]) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for (name, buf), value in zip(self._inputs, inputs):
            if buf is None:
                e = self._scalar[name]
                if e.is_Symbol:
                    sizes[e.name] = int(value)
            elif isinstance(value, torch.Tensor):
                for text, actual in zip((*buf.size, *buf.stride), (*value.shape, *value.stride())):
                    if not text.isdigit():
                        e = parse_expr(text)
                        if e.is_Symbol and e.name not in sizes:
                            sizes[e.name] = int(actual)
        return sizes

    def _plan(self, sizes: dict[str, int]) -> list[tuple]:
        key = tuple(sorted(sizes.items()))
        plan = self._plans.get(key)
        if plan is None:
            plan = []
            for b in self.program.buffers:
                plan.append((b, _ints(b.size, sizes), _ints(b.stride, sizes), _ints((b.offset,), sizes)[0]))
            self._plans[key] = plan
        return plan

    # ---- running -------------------------------------------------------------------------------

    def __call__(self, *inputs: Any) -> list[Any]:
        program = self.program
        if len(inputs) != len(self._inputs):
            raise ValueError(f"program {program.name!r} takes {len(self._inputs)} inputs "
                             f"({list(program.inputs)}), got {len(inputs)}")
        sizes = self._bind(inputs)
        plan = self._plan(sizes)
        device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), torch.device(self.device))
        env: dict[str, Any] = {}
        restrided: list[tuple[torch.Tensor, torch.Tensor]] = []
        layouts = {b.name: (size, stride) for b, size, stride, _ in plan}
        for (name, buf), value in zip(self._inputs, inputs):
            if buf is None:
                continue
            if isinstance(value, torch.Tensor):
                size, stride = layouts[name]
                if value.numel() > 1 and any(s != g for s, g, n in zip(stride, value.stride(), value.shape) if n > 1):
                    # Inductor compiled for the declared strides (AOTAutograd coerces e.g.
                    # tangents to them): run on a copy with those strides.
                    copy = torch.empty_strided(value.shape, stride, dtype=value.dtype, device=value.device)
                    copy.copy_(value)
                    if name in self._written:
                        restrided.append((value, copy))
                    value = copy
            env[name] = value
        constants = dict(program.constants)
        for b, size, stride, offset in plan:
            if b.name in env or b.view_of is not None or b.name in self._deferred:
                continue
            dtype = getattr(torch, b.dtype)
            if b.kind == "constant":
                env[b.name] = torch.tensor(constants[b.name], dtype=dtype).reshape(size).to(device)
            else:
                env[b.name] = torch.empty_strided(size, stride, dtype=dtype, device=device)
        for b, size, stride, offset in plan:  # bases come before their views in the table
            if b.view_of is not None:
                base = env[b.view_of]
                env[b.name] = base.as_strided(size, stride, base.storage_offset() + offset)
        for step in self.steps:
            if step[0] == "kernel":
                _, fn, names, symbols = step
                fn(*[env[n] for n in names], *[sizes[s] for s in symbols])
            else:
                run_extern(step[1], env, sizes)
                for name in step[2]:
                    env[name] = _in_layout(env[name], *layouts[name], self.program.buffer(name).dtype)
        for original, copy in restrided:
            original.copy_(copy)
        outs: list[Any] = []
        for o in program.outputs:
            if isinstance(o, BufferRef):
                outs.append(env[o.name])
            elif isinstance(o, str):
                outs.append(env[o])
            elif isinstance(o, SizeExpr):
                outs.append(_int(o.expr, sizes))
            else:
                outs.append(o)
        return outs
