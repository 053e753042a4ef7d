"""Public loop-IR program rewrites: what makes the reference backends fast, for every vendor.

Each transform takes a :class:`LoopProgram` and returns a new one (built with
``dataclasses.replace``; the input is never changed) that computes the same outputs, and checks
its result with :func:`~torchvendor.ir.loop_ir.validate` before returning it (always: an invalid
program raises :class:`~torchvendor.ir.loop_ir.LoopIRValidationError` here, not in a code
generator). ``tests/test_loop_transforms.py`` runs each over the loop-IR corpus and compares
``run_program`` before and after.

- :func:`merge_neighbours`: each run of consecutive kernels becomes one kernel (one call, one
  compiled function), as Inductor's C++ backend groups them into one ``cpp_fused_*`` function.
- :func:`merge_epilogues`: each reduction kernel followed directly by a pointwise kernel (a
  softmax's or layer norm's division) becomes one kernel where the backend's ``accept`` says it
  pays (the CUDA reference asks its launch count).
- :func:`host_onto_device`: host buffers that only kernels use are declared on the program's
  device, so nothing crosses between host and device during a call.

A LOOP-level backend gets them with one line, ``transforms = (merge_neighbours,)``: the SDK
applies them in order to each partition's program, validating after each. :func:`apply_transforms`
does the same for code that drives programs itself.

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> from torchvendor.ir.loop_ir import run_program
    >>> prog = capture(lambda x: (x - x.mean()).sin(), [torch.randn(4, 8)], level="loop").inference
    >>> [op.name for op in prog.kernels]
    ['loop_kernel0', 'loop_kernel1']
    >>> merged = merge_neighbours(prog)
    >>> [(op.name, len(op.nests)) for op in merged.kernels]
    [('loop_kernel0', 2)]
    >>> x = torch.randn(4, 8)
    >>> torch.allclose(run_program(merged, [x])[0], run_program(prog, [x])[0])
    True
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from .invariants import LoopIRValidationError, validate
from .schema import BufferRef, Kernel, LoopProgram, TorchValue

__all__ = ["Transform", "Accept", "merge_neighbours", "merge_epilogues", "host_onto_device", "apply_transforms"]

#: a program rewrite: returns a new, valid program that computes what ``program`` computes
Transform = Callable[[LoopProgram], LoopProgram]
#: ``accept(before, after, first, second)``: whether ``merge_epilogues`` keeps the merge of
#: kernels ``first`` and ``second`` of ``before`` into kernel ``second.name`` of ``after``
Accept = Callable[[LoopProgram, LoopProgram, Kernel, Kernel], bool]


def merge_neighbours(program: LoopProgram) -> LoopProgram:
    """``program`` with each run of consecutive :class:`Kernel` ops (no extern kernel between
    them) made one kernel: its nests in program order, named after the run's first kernel.

    Guarantees: the nests run in the order the kernels ran them, so every output is what it was;
    each nest keeps its own SSA names (nests of different kernels may reuse ``t0``, ``t1``; a code
    generator gives every nest a scope of its own); the merged kernel's ``group`` is ``()``, since
    its nests no longer share one Inductor group. Why: a kernel call from Python costs
    microseconds, which on small models is most of a kernel, and one shared library per run is
    built by one compiler process instead of several.

    >>> from torchvendor.ir.loop_ir import Buffer, LoopNest, Stmt
    >>> def copy(name, src, dst):  # a one-nest kernel: dst[i] = src[i]
    ...     body = (Stmt("t0", "load", (), (("buffer", src), ("index", "i0")), "float32"),
    ...             Stmt(None, "store", ("t0",), (("buffer", dst), ("index", "i0"), ("mode", None))))
    ...     return Kernel(name, (LoopNest("op0", ("4",), (), body),), (("4",), ()))
    >>> bufs = tuple(Buffer(n, "float32", ("4",), ("1",), "cpu", k)
    ...              for n, k in (("x", "input"), ("a", "intermediate"), ("y", "output")))
    >>> p = LoopProgram("p", "cpu", bufs, ("x",), (BufferRef("y"),), (copy("k0", "x", "a"), copy("k1", "a", "y")))
    >>> [(k.name, [n.name for n in k.nests], k.group) for k in merge_neighbours(p).kernels]
    [('k0', ['op0', 'op0'], ())]
    """
    ops: list = []
    for op in program.ops:
        if isinstance(op, Kernel) and ops and isinstance(ops[-1], Kernel):
            ops[-1] = replace(ops[-1], nests=ops[-1].nests + op.nests, group=())
        else:
            ops.append(op)
    return validate(replace(program, ops=tuple(ops)) if len(ops) < len(program.ops) else program)


def _reduces(kernel: Kernel) -> bool:
    return any(n.reduction_ranges for n in kernel.nests)


def merge_epilogues(program: LoopProgram, accept: Accept | None = None) -> LoopProgram:
    """``program`` with each reduction kernel that is directly followed by a pointwise kernel
    (a softmax's or layer norm's normalisation, var's division: the loop IR puts these in a kernel
    of their own off ``cpu``) merged into one kernel, named after the pointwise one, with the
    reduction's nests first, wherever ``accept(before, after, first, second)`` returns true
    (``None``: always). Pairs are taken left to right; a merged kernel is not merged again.

    ``accept`` is the backend's cost model, which the transform does not know: the CUDA
    reference generates both versions and keeps the merge when it takes fewer launches.
    Guarantees: as :func:`merge_neighbours` (nests in their order, outputs unchanged, ``group``
    of a merged kernel ``()``); a kernel that reads what the other writes still sees it, since
    the nests run one after another.

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> prog = capture(lambda x: (x - x.mean()).sin(), [torch.randn(4, 8)], level="loop").inference
    >>> [(k.name, k.kind) for k in prog.kernels]
    [('loop_kernel0', 'reduction'), ('loop_kernel1', 'pointwise')]
    >>> [(k.name, k.kind) for k in merge_epilogues(prog).kernels]
    [('loop_kernel1', 'reduction')]
    >>> merge_epilogues(prog, accept=lambda before, after, first, second: False) == prog
    True
    """
    ops = list(program.ops)
    out = program
    i = 0
    while i + 1 < len(ops):
        first, second = ops[i], ops[i + 1]
        if isinstance(first, Kernel) and isinstance(second, Kernel) and _reduces(first) and not _reduces(second):
            merged = replace(second, nests=first.nests + second.nests, group=())
            candidate = replace(out, ops=(*ops[:i], merged, *ops[i + 2:]))
            if accept is None or accept(out, candidate, first, second):
                ops[i:i + 2] = [merged]
                out = candidate
        i += 1
    return validate(out)


def _device_type(device: str) -> str:
    return device.split(":", 1)[0]


def host_onto_device(program: LoopProgram) -> LoopProgram:
    """``program`` with every buffer it declares on the host (``cpu``) that only kernels use
    (and copies onto the device) declared on the program's device instead; on a ``cpu``
    program, ``program`` itself.

    Why: Inductor computes a model's host scalars in host kernels (``torch.sqrt(torch.tensor(d))``,
    a log of a constant) and builds index tables on the host, which device kernels then read;
    a device kernel with host operands runs on device copies whose results come back, a
    synchronising copy per call that also keeps the partition out of a recorded command list
    (a CUDA graph). Declared on the device from the start, nothing crosses.

    Guarantees: inputs, buffers the program returns, and buffers an extern kernel reads or
    writes (the library would run on the host) stay where they are, views follow their base;
    a copy onto the device (``prims.device_put``) of a moved buffer becomes a clone on the
    device. Outputs are unchanged in value and device.

    >>> from torchvendor.ir.loop_ir import Buffer, ExternKernel, LoopNest, Stmt
    >>> host = Buffer("s", "float32", ("1",), ("1",), "cpu", "intermediate")        # a host scalar
    >>> dev = Buffer("d", "float32", ("1",), ("1",), "cuda", "output")
    >>> fill = Kernel("k0", (LoopNest("op0", ("1",), (), (
    ...     Stmt("t0", "constant", (), (("value", 2.0), ("dtype", "float32")), "float32"),
    ...     Stmt(None, "store", ("t0",), (("buffer", "s"), ("index", "i0"), ("mode", None))))),))
    >>> put = ExternKernel("d", "prims.device_put.default", (BufferRef("s"), TorchValue("device:cuda")), (), ("d",))
    >>> p = LoopProgram("p", "cuda", (host, dev), (), (BufferRef("d"),), (fill, put))
    >>> q = host_onto_device(p)
    >>> q.buffer("s").device, q.ops[1].op
    ('cuda', 'aten.clone.default')
    """
    if _device_type(program.device) == "cpu":
        return validate(program)
    root = program.root

    def is_put(op: object) -> bool:   # a copy onto the program's device
        args = getattr(op, "args", ())
        return (getattr(op, "op", None) == "prims.device_put.default" and len(args) > 1
                and isinstance(args[1], TorchValue) and args[1].value.startswith("device:")
                and _device_type(args[1].value[len("device:"):]) == _device_type(program.device))
    home = {b.name for b in program.buffers if b.view_of is None and b.kind != "input"
            and _device_type(b.device) == "cpu"}
    home -= {root(n) for n in program.returned}
    for op in program.ops:
        if isinstance(op, Kernel):
            continue
        puts = {op.args[0].name} if is_put(op) else set()
        home -= {root(n) for n in (*op.reads(), *op.writes()) if n not in puts}
    if not home:
        return validate(program)
    buffers = tuple(replace(b, device=program.device) if root(b.name) in home else b for b in program.buffers)
    ops = tuple(replace(op, op="aten.clone.default", args=op.args[:1], kernel="")
                if not isinstance(op, Kernel) and is_put(op) and root(op.args[0].name) in home else op
                for op in program.ops)
    return validate(replace(program, buffers=buffers, ops=ops))


def apply_transforms(program: LoopProgram, transforms: Sequence[Transform]) -> LoopProgram:
    """``program`` rewritten by each of ``transforms`` in order, validated after each; an invalid
    result (or a transform that returns no :class:`LoopProgram`) raises
    :class:`~torchvendor.ir.loop_ir.LoopIRValidationError` naming the transform.

    >>> from torchvendor.ir.loop_ir import Buffer
    >>> x = Buffer("x", "float32", ("4",), ("1",), "cpu", "input")
    >>> p = LoopProgram("p", "cpu", (x,), ("x",), (BufferRef("x"),), ())
    >>> apply_transforms(p, [merge_neighbours, host_onto_device]) == p
    True
    >>> def drop_buffers(program):
    ...     return replace(program, buffers=())
    >>> apply_transforms(p, [merge_neighbours, drop_buffers])
    Traceback (most recent call last):
    ...
    torchvendor.ir.loop_ir.invariants.LoopIRValidationError: after loop-IR transform drop_buffers: loop IR ...
      input 'x' is neither a buffer nor a scalar input
      output 'x' is not a buffer
    """
    for transform in transforms:
        name = getattr(transform, "__qualname__", None) or repr(transform)
        result = transform(program)
        if not isinstance(result, LoopProgram):
            raise LoopIRValidationError(f"loop-IR transform {name} returned {type(result).__name__}, not a LoopProgram")
        try:
            program = validate(result)
        except LoopIRValidationError as e:
            raise LoopIRValidationError(f"after loop-IR transform {name}: {e}") from e
    return program
