"""How the CUDA code generator cuts a kernel's nests into segments (one ``__global__`` function
each): every nest's loop variables as expressions of a row or flat index ``X`` and a column ``C``
(:func:`classify`), index expressions in that canonical form (:func:`canonical`), and the address
steps a load takes from row to row and column to column (:func:`row_col_steps`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import sympy

from torchvendor.ir.loop_ir import LoopNest, Stmt, parse_expr

__all__ = ["X", "C", "Part", "prod", "decompose", "merge", "canonical", "classify", "row_col_steps", "accesses",
           "post_names"]


# ---- index algebra -------------------------------------------------------------------------------
def prod(sizes: Sequence[str]) -> Any:
    out = sympy.Integer(1)
    for s in sizes:
        out = out * parse_expr(s)
    return sympy.expand(out)


def decompose(sizes: Sequence[Any], flat: str) -> list[Any]:
    """Mixed-radix digits of the index ``flat`` over ``sizes`` (row-major), as index expressions."""
    out = []
    for k, size in enumerate(sizes):
        inner = prod([str(x) for x in sizes[k + 1:]])
        if size == 1:
            out.append(sympy.Integer(0))
        elif k == 0:
            out.append(parse_expr(flat if inner == 1 else f"FloorDiv({flat}, {inner})"))
        else:
            out.append(parse_expr(f"ModularIndexing({flat}, {inner}, {size})"))
    return out


def merge(e: Any) -> Any:
    """Fold ``b*FloorDiv(Y, b) + ModularIndexing(Y, 1, b)`` into ``Y`` (and ``b*ModularIndexing(Y,
    b, m) + ModularIndexing(Y, 1, b)`` into ``ModularIndexing(Y, 1, b*m)``), so that a
    multi-dimensional contiguous index is recognised as the flat index."""
    if not isinstance(e, sympy.Add):
        return e
    terms = list(e.args)
    changed = True
    while changed:
        changed = False
        for t1 in terms:
            c1, f1 = t1.as_coeff_Mul()
            if type(f1).__name__ != "ModularIndexing" or f1.args[1] != 1:
                continue
            y, _, b = f1.args
            for t2 in terms:
                c2, f2 = t2.as_coeff_Mul()
                if t2 is t1 or f2.args[:2] != (y, b) or c2 != c1 * b:
                    continue
                if type(f2).__name__ == "FloorDiv":
                    new = c1 * y
                elif type(f2).__name__ == "ModularIndexing":
                    new = c1 * _MODULAR(y, 1, b * f2.args[2])
                else:
                    continue
                terms = [t for t in terms if t is not t1 and t is not t2] + [new]
                changed = True
                break
            if changed:
                break
    return sympy.Add(*terms)


# ---- classifying nests into segments -----------------------------------------------------------
X, C = parse_expr("X"), parse_expr("C")
_MODULAR = type(parse_expr("ModularIndexing(X, 2, 3)"))


@dataclass
class Part:
    nest: LoopNest
    role: str                 # "flat", "reduce", "full" (row x col pointwise), "row" (once per row)
    env: dict[str, Any]       # loop variable -> expression of X (row / flat index) and C (column)
    row_vars: list[str] = field(default_factory=list)
    col_vars: list[str] = field(default_factory=list)
    row_sizes: list[Any] = field(default_factory=list)
    col_sizes: list[Any] = field(default_factory=list)


def canonical(index: str, env: Mapping[str, Any]) -> Any:
    e = parse_expr(index)
    return merge(sympy.expand(e.xreplace({s: env[s.name] for s in e.free_symbols if s.name in env})))


def split_at(sizes: list[Any], rows: Any) -> int | None:
    acc = sympy.Integer(1)
    for k in range(len(sizes) + 1):
        if sympy.expand(acc - rows) == 0:
            return k
        if k < len(sizes):
            acc = sympy.expand(acc * sizes[k])
    return None


def classify(nest: LoopNest, shape: tuple[Any, Any] | None) -> Part | None:
    isz = [parse_expr(s) for s in nest.ranges]
    rsz = [parse_expr(s) for s in nest.reduction_ranges]
    iv = [f"i{k}" for k in range(len(isz))]
    rv = [f"r{k}" for k in range(len(rsz))]
    if shape is None:  # flat pointwise
        if rsz:
            return None
        return Part(nest, "flat", dict(zip(iv, decompose(isz, "X"))), iv, [], isz, [])
    rows, rlen = shape
    if rsz:
        if sympy.expand(prod(nest.ranges) - rows) or sympy.expand(prod(nest.reduction_ranges) - rlen):
            return None
        env = dict(zip(iv, decompose(isz, "X")))
        env.update(zip(rv, decompose(rsz, "C")))
        return Part(nest, "reduce", env, iv, rv, isz, rsz)
    k = split_at(isz, rows)
    if k is None:
        return None
    if k == len(isz) and rlen != 1:
        return Part(nest, "row", dict(zip(iv, decompose(isz, "X"))), iv, [], isz, [])
    if sympy.expand(prod(nest.ranges[k:]) - rlen):
        return None
    env = dict(zip(iv[:k], decompose(isz[:k], "X")))
    env.update(zip(iv[k:], decompose(isz[k:], "C")))
    return Part(nest, "full", env, iv[:k], iv[k:], isz[:k], isz[k:])


def row_col_steps(e: Any, rows: Any, rlen: Any) -> tuple[int, int] | None:
    """(address step from one row to the next, from one column to the next) of index ``e`` of
    ``X`` (row) and ``C`` (column), or None if it has none. A polynomial index has its
    coefficients; a static one of ``FloorDiv``/``ModularIndexing`` digits (a row index cut in
    several dimensions) is sampled: the row step must hold across a warp's 32 rows."""
    if e.is_polynomial(X, C):
        if sympy.degree(e, X) > 1 or sympy.degree(e, C) > 1:
            return None
        cx, cc = e.coeff(X, 1), e.coeff(C, 1)
        return (int(cx), int(cc)) if cx.is_Integer and cc.is_Integer else None
    if not (rows.is_Integer and rlen.is_Integer and int(rows) >= 33 and int(rlen) >= 2):
        return None

    def at(x: int, col: int) -> int:
        v = e.xreplace({X: sympy.Integer(x), C: sympy.Integer(col)})
        return int(v) if v.is_Integer else 0
    row = {at(x + 1, 0) - at(x, 0) for x in range(32)}
    return (row.pop(), at(0, 1) - at(0, 0)) if len(row) == 1 else None


def accesses(nest: LoopNest) -> list[tuple[str, str, str, bool]]:
    """(kind, buffer, index, in column context) of every load/store of a nest."""
    out: list[tuple[str, str, str, bool]] = []
    post = post_names(nest)

    def walk(body: Sequence[Stmt]) -> None:
        for st in body:
            if st.op in ("load", "store", "store_reduction"):
                col = st.op != "store_reduction" and not (st.name in post)
                out.append((st.op, st.attr("buffer"), st.attr("index"), col))
            if st.body:
                walk(st.body)
    walk(nest.body)
    return out


def post_names(nest: LoopNest) -> set[str]:
    """SSA names that depend on a reduction result (run once per row, after the reduction)."""
    post: set[str] = set()
    for st in nest.body:
        if st.op == "reduction" or any(a in post for a in st.args):
            post.add(st.name) if st.name else None
    return post
