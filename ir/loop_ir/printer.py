"""Readable text for loop programs: the buffer table, then each kernel as a loop nest with its
SSA body, and extern kernels as calls.

Example output (softmax over the last dim of a [4, 8] tensor)::

    loop_program inference (device=cpu)
      inputs: arg0_1
      outputs: buf3
      buffers:
        arg0_1  float32[4, 8] stride=[8, 1]  input
        ...
      kernel loop_kernel0 (reduction)
        op0: for i0 in range(4):
          t0 = reduction ...
"""
from __future__ import annotations

from typing import Any

from .schema import BufferRef, ExternKernel, Kernel, LoopNest, LoopProgram, SizeExpr, Stmt, TorchValue

__all__ = ["format_program", "format_kernel", "format_stmt"]


def _val(v: Any) -> str:
    if isinstance(v, BufferRef):
        return v.name
    if isinstance(v, SizeExpr):
        return v.expr
    if isinstance(v, TorchValue):
        return v.value
    if isinstance(v, tuple):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    return repr(v)


def format_stmt(s: Stmt) -> str:
    """One statement, e.g. ``t2 = add(t0, t1)  # float32``."""
    a = {k: v for k, v in s.attrs}
    if s.op == "load":
        text = f"{s.name} = load {a['buffer']}[{a['index']}]"
    elif s.op == "store":
        mode = f"  (mode={a['mode']})" if a.get("mode") else ""
        return f"store {a['buffer']}[{a['index']}] = {s.args[0]}{mode}"
    elif s.op == "store_reduction":
        return f"store_reduction {a['buffer']}[{a['index']}] = {s.args[0]}"
    elif s.op == "constant":
        text = f"{s.name} = constant({a['value']!r})"
    elif s.op == "index_expr":
        text = f"{s.name} = index_expr({a['expr']})"
    elif s.op == "reduction":
        text = f"{s.name} = reduction[{a['kind']}]({', '.join(s.args)})"
    elif s.op == "yield":
        return f"yield {s.args[0]}"
    elif s.op == "check_bounds":
        return f"check_bounds({a['expr']} < {a['size']})"
    else:
        parts = list(s.args)
        parts += [f"{k}={_val(v)}" for k, v in s.attrs if k not in ("nargs",)]
        text = f"{s.name} = {s.op}({', '.join(parts)})"
    return f"{text}  # {s.dtype}" if s.dtype else text


def _body(stmts: tuple[Stmt, ...], indent: str, out: list[str]) -> None:
    for s in stmts:
        out.append(indent + format_stmt(s))
        if s.body:
            _body(s.body, indent + "    ", out)


def _nest(n: LoopNest, indent: str, out: list[str]) -> None:
    out.append(f"{indent}{n.name}:")
    ind = indent + "  "
    for v, r in zip(n.iter_vars, n.ranges):
        out.append(f"{ind}for {v} in range({r}):")
        ind += "  "
    if not n.reduction_ranges:
        _body(n.body, ind, out)
        return
    # Statements before the first one depending on a reduction run inside the r loops.
    after: set[str] = set()
    inner, post = [], []
    for s in n.body:
        if s.op == "reduction" or s.op == "store_reduction" or any(a in after for a in s.args):
            if s.name:
                after.add(s.name)
            post.append(s) if s.op != "reduction" else inner.append(s)
        else:
            inner.append(s)
    rind = ind
    for v, r in zip(n.reduce_vars, n.reduction_ranges):
        out.append(f"{rind}for {v} in range({r}):  # reduction")
        rind += "  "
    _body(tuple(inner), rind, out)
    _body(tuple(post), ind, out)


def format_kernel(k: Kernel | ExternKernel, indent: str = "  ") -> str:
    """A kernel as loop nests, or an extern kernel as a call."""
    out: list[str] = []
    if isinstance(k, ExternKernel):
        args = [_val(a) for a in k.args] + [f"{n}={_val(v)}" for n, v in k.kwargs]
        lhs = ", ".join(k.outputs) or k.name
        mut = f"  # mutates {', '.join(k.mutated)}" if k.mutated else ""
        return f"{indent}extern {k.name}: {lhs} = {k.op}({', '.join(args)}){mut}"
    out.append(f"{indent}kernel {k.name} ({k.kind})")
    for n in k.nests:
        _nest(n, indent + "  ", out)
    return "\n".join(out)


def format_program(p: LoopProgram) -> str:
    """The whole program as text (this is ``str(program)``)."""
    out = [f"loop_program {p.name} (device={p.device}, schema v{p.schema_version})"]
    ins = []
    scal = dict(p.scalar_inputs)
    for i in p.inputs:
        ins.append(f"{i}={scal[i]}" if i in scal else i)
    out.append(f"  inputs: {', '.join(ins)}")
    out.append(f"  outputs: {', '.join(_val(o) for o in p.outputs)}")
    if p.size_vars:
        out.append(f"  size_vars: {', '.join(p.size_vars)}")
    out.append("  buffers:")
    for b in p.buffers:
        extra = f" view_of={b.view_of}+{b.offset}" if b.view_of else (f" offset={b.offset}" if b.offset != "0" else "")
        out.append(f"    {b.name}: {b.dtype}[{', '.join(b.size)}] stride=[{', '.join(b.stride)}] {b.kind}{extra}"
                   + (f" @{b.device}" if b.device != p.device else ""))
    for op in p.ops:
        out.append(format_kernel(op))
    return "\n".join(out)
