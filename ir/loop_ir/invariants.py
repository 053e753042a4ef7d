"""The loop IR's invariant checker, as torch.fx's ``Graph.lint``: run it after every transform.

:func:`validate` checks what a code generator relies on and the schema alone does not hold:

- buffers: unique names, known dtypes, views of existing buffers; program inputs and outputs
  name buffers (or bound scalars);
- kernels: each SSA value is defined once, before its use (a ``masked`` body sees the values
  defined before it); loads and stores name buffers of the program; index and size expressions
  use only the nest's loop variables, the program's size symbols and indirect indices defined
  before them; ``reduction`` has a known kind and sits in a nest with reduction ranges;
  ``masked`` bodies end with ``yield``; statement dtypes are known;
- extern kernels: the buffers they read and write exist (or, for ``getitem``, an earlier
  extern's result).

It raises :class:`LoopIRValidationError` listing every problem with its place.

Example::

    >>> from torchvendor.ir.loop_ir import Buffer, Kernel, LoopNest, LoopProgram, Stmt
    >>> x = Buffer("x", "float32", ("4",), ("1",), "cpu", "input")
    >>> body = (Stmt("t1", "exp", ("t0",), (), "float32"),
    ...         Stmt(None, "store", ("t1",), (("buffer", "y"), ("index", "i0"))))
    >>> p = LoopProgram("p", "cpu", (x,), ("x",), (), (Kernel("k", (LoopNest("op0", ("4",), (), body),)),))
    >>> try:
    ...     validate(p)
    ... except LoopIRValidationError as e:
    ...     print(e)
    loop IR program 'p' is invalid:
      k/op0/t1 (exp): t0 is used before it is defined
      k/op0/store: no buffer 'y'
"""
from __future__ import annotations

import re
from typing import Iterable

from .index_expr import parse_expr
from .schema import REDUCTION_KINDS, BufferRef, ExternKernel, Kernel, LoopNest, LoopProgram, Stmt

__all__ = ["validate", "LoopIRValidationError", "SCHEMA_DTYPES"]

#: dtype names the loop IR may carry (torch's, spelled without ``torch.``)
SCHEMA_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "uint16",
                    "uint32", "uint64", "bool", "complex32", "complex64", "complex128", "float8_e4m3fn",
                    "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"})


class LoopIRValidationError(ValueError):
    """A loop IR program breaks an invariant; the message lists each problem and where."""


def validate(program: LoopProgram) -> LoopProgram:
    """Check ``program`` (see the module docstring); returns it, so it chains."""
    problems = [*_buffer_problems(program)]
    sizes = set(program.size_vars) | {v for _, v in program.scalar_inputs if re.fullmatch(r"\w+", v)}
    buffers = {b.name for b in program.buffers}
    results: set[str] = set()   # multi-output externs' tuples, which ``getitem`` externs read
    for op in program.ops:
        if isinstance(op, Kernel):
            for nest in op.nests:
                problems += _NestChecker(f"{op.name}/{nest.name}", nest, buffers, sizes).run()
        elif isinstance(op, ExternKernel):
            problems += [f"{op.name} ({op.op}): no buffer {n!r}" for n in (*op.reads(), *op.writes())
                         if n not in buffers and n not in results]
            results.add(op.name)
    if problems:
        raise LoopIRValidationError(f"loop IR program {program.name!r} is invalid:\n  " + "\n  ".join(problems))
    return program


def _buffer_problems(program: LoopProgram) -> Iterable[str]:
    seen: set[str] = set()
    for b in program.buffers:
        if b.name in seen:
            yield f"buffer {b.name!r} is declared twice"
        seen.add(b.name)
        if b.dtype not in SCHEMA_DTYPES:
            yield f"buffer {b.name!r}: unknown dtype {b.dtype!r}"
        if len(b.size) != len(b.stride):
            yield f"buffer {b.name!r}: {len(b.size)} sizes but {len(b.stride)} strides"
    for b in program.buffers:
        if b.view_of is not None and b.view_of not in seen:
            yield f"buffer {b.name!r} is a view of {b.view_of!r}, which is not a buffer"
    scalars = {k for k, _ in program.scalar_inputs}
    yield from (f"input {n!r} is neither a buffer nor a scalar input" for n in program.inputs
                if n not in seen and n not in scalars)
    yield from (f"output {o.name!r} is not a buffer" for o in program.outputs
                if isinstance(o, BufferRef) and o.name not in seen)


class _NestChecker:
    """Walks one nest in order, keeping the SSA values and indirect indices defined so far."""

    def __init__(self, where: str, nest: LoopNest, buffers: set[str], sizes: set[str]) -> None:
        self.where, self.nest, self.buffers = where, nest, buffers
        self.symbols = {*nest.iter_vars, *nest.reduce_vars, *sizes}
        self.problems: list[str] = []

    def run(self) -> list[str]:
        self.block(self.nest.body, set(), masked=False)
        return self.problems

    def block(self, body: Iterable[Stmt], defined: set[str], masked: bool) -> None:
        last = None
        for st in body:
            self.stmt(st, defined)
            last = st
        if masked and (last is None or last.op != "yield"):
            self.problem(last, "a masked body must end with yield")

    def problem(self, st: Stmt | None, text: str) -> None:
        at = "" if st is None else "/" + (f"{st.name} ({st.op})" if st.name else st.op)
        self.problems.append(f"{self.where}{at}: {text}")

    def stmt(self, st: Stmt, defined: set[str]) -> None:
        for a in st.args:
            if a not in defined:
                self.problem(st, f"{a} is used before it is defined")
        buffer = st.attr("buffer")
        if st.op in ("load", "store", "store_reduction", "load_seed") and buffer not in self.buffers:
            self.problem(st, f"no buffer {buffer!r}")
        for key in ("index", "expr", "size"):
            if isinstance(st.attr(key), str):
                self.expression(st, key, st.attr(key))
        if st.dtype is not None and st.dtype not in SCHEMA_DTYPES:
            self.problem(st, f"unknown dtype {st.dtype!r}")
        if st.op == "reduction":
            if st.attr("kind") not in REDUCTION_KINDS:
                self.problem(st, f"unknown reduction kind {st.attr('kind')!r}; known: {', '.join(REDUCTION_KINDS)}")
            if not self.nest.reduction_ranges:
                self.problem(st, "a reduction in a nest without reduction ranges")
        if st.op == "masked":
            self.block(st.body, set(defined), masked=True)
        if st.name is not None:
            if st.name in defined:
                self.problem(st, f"{st.name} is defined twice")
            defined.add(st.name)
            if st.op == "indirect_indexing":
                self.symbols.add(st.name)

    def expression(self, st: Stmt, key: str, text: str) -> None:
        try:
            names = {x.name for x in parse_expr(text).free_symbols}
        except Exception as e:  # noqa: BLE001 - any parse failure is the problem reported
            self.problem(st, f"{key} {text!r} does not parse: {e}")
            return
        unknown = sorted(names - self.symbols)
        if unknown:
            self.problem(st, f"{key} {text!r} uses {', '.join(unknown)}, not a loop variable, size symbol or "
                             "indirect index defined before it")
