"""Loop IR kernel -> CUDA C: the code generator of the reference CUDA backend.

A loop IR :class:`Kernel` is a list of nests run in order. The generator cuts it into
*segments* (``segments.py``), each one ``__global__`` function, launched in order on one stream:

- **pointwise** segments (nests without reduction ranges over the same number of elements)
  map one flat index to each thread; where every access of a buffer is the flat index itself
  (contiguous), each thread moves ``16 bytes`` per buffer with one vector load/store, and a
  scalar twin of the function is launched when a pointer is not aligned;
- **row** segments (a reduction over ``L`` elements for each of ``R`` rows, with the pointwise
  nests around it) give each row to one warp (short rows) or one block (long rows); threads
  stride over the row, accumulate, combine with warp shuffles (and shared memory across
  warps), and every thread gets the result, so the nests of a softmax or a layer norm run in
  one launch. An intermediate buffer written by one nest and read only by later nests of the
  same segment at the same element is never stored: its value is recomputed where it is read;
- **long** reductions (few rows, very long) are split: each block reduces a slice of a row into
  a workspace, and a second launch combines the slices and runs the rest of the nest.

Nests that cannot share a segment (a read of another row, a different iteration space) start a
new one; stream order keeps them correct. Tiling (warp or block per row, threads per row,
vector width) is chosen from the shapes.

This module is that launch model and CUDA's tables (types, op spellings, math functions,
conversions, ``prelude.cuh``); the statements inside a segment (loads, stores, masks, indirect
indices, compute, vector lanes) are rendered by the SDK's :class:`~torchvendor.sdk.CStyleRenderer`,
as a vendor's GPU-style generator would render them.

Example (codegen needs no GPU)::

    >>> from torchvendor.ir.loop_ir import Buffer, Kernel, LoopNest, Stmt
    >>> x = Buffer("x", "float32", ("1024",), ("1",), "cuda", "input")
    >>> y = Buffer("y", "float32", ("1024",), ("1",), "cuda", "output")
    >>> body = (Stmt("t0", "load", (), (("buffer", "x"), ("index", "i0"))),
    ...         Stmt("t1", "relu", ("t0",)),
    ...         Stmt(None, "store", ("t1",), (("buffer", "y"), ("index", "i0"), ("mode", None))))
    >>> k = generate(Kernel("k0", (LoopNest("op0", ("1024",), (), body),)), (x, y), ())
    >>> [(l.name, l.kind, l.vector) for l in k.launches]
    [('k0_0', 'pointwise', 4)]
    >>> "tv_vec<float, 4>" in k.source          # 16-byte vector loads and stores
    True
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import sympy

from torchvendor.ir.loop_ir import Buffer, Kernel, LoopNest, Stmt, parse_expr
from torchvendor.sdk import CodegenError, CStyleRenderer, LoopKernel

from .segments import C, Part, X, accesses, canonical, classify, post_names, prod, row_col_steps

#: how the message of a failed ``device_assert`` starts (checks.py reports it as it is)
ASSERTION = CStyleRenderer.assertion

__all__ = ["generate", "CudaKernel", "CudaRenderer", "Launch", "CodegenError", "CTYPES"]


#: Loop IR dtype -> CUDA C type of a buffer element.
CTYPES = {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
          "int64": "long long", "int32": "int", "int16": "short", "int8": "signed char",
          "uint8": "unsigned char", "bool": "bool"}
_SIZES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
          "int8": 1, "uint8": 1, "bool": 1}


#: Tiling knobs (defaults tuned on an H100); ``TORCHVENDOR_CUDA_TILING="kmax=32,ept=8"`` overrides
#: some for experiments (the knobs end up in the source, so the kernel cache keeps them apart).
#: kmax: most columns a thread holds in registers (longer rows loop and reread); ept: columns per
#: thread a block-per-row tiling aims for; warp: longest row given to one warp; col_unroll: loads
#: in flight per thread of a column reduction; col_blocks: blocks per SM a column split aims for;
#: stream: 1 loads a row held in registers reads from its own part of a buffer with the
#: evict-first hint (``ld.global.cs``), 0 without it.
_DEFAULT_KNOBS = {"kmax": 32, "ept": 8, "warp": 512, "col_unroll": 8, "col_blocks": 2, "stream": 1}
_ZERO_OK = {"stream"}


def _knobs() -> dict[str, int]:
    """The tiling knobs: defaults, overridden by ``$TORCHVENDOR_CUDA_TILING``."""
    out = dict(_DEFAULT_KNOBS)
    for item in filter(None, os.environ.get("TORCHVENDOR_CUDA_TILING", "").split(",")):
        key, _, value = item.partition("=")
        if key.strip() not in out or not value.strip().isdigit() or int(value) < (key.strip() not in _ZERO_OK):
            kinds = {k: "int >= 0" if k in _ZERO_OK else "positive int" for k in out}
            raise CodegenError(f"TORCHVENDOR_CUDA_TILING: {item!r} is not one of "
                               f"{', '.join(f'{k}=<{v}>' for k, v in kinds.items())}")
        out[key.strip()] = int(value)
    return out


@dataclass(frozen=True)
class Launch:
    """One ``__global__`` function of the module and how to launch it.

    ``kind``: ``pointwise`` (``numel`` elements, ``vector`` per thread; ``aligned`` lists the
    arguments that must be ``align``-byte aligned for the vector function, else ``name + '_s'``
    runs), ``rows`` (``rows`` x ``rlen``, ``threads`` per row, ``rows_per_block`` rows per
    block), ``split`` (a long reduction: ``splits`` blocks per row into a workspace, then
    ``name + '_final'``), or ``column`` (a thread per row over a strided reduction, split in
    ``splits`` slices when the rows alone do not fill the GPU). Sizes are expressions of the
    size variables.
    """

    name: str
    kind: str
    numel: str = "1"
    rows: str = "1"
    rlen: str = "1"
    threads: int = 256
    rows_per_block: int = 1
    vector: int = 1
    align: int = 0
    aligned: tuple[int, ...] = ()
    splits: int = 1
    workspace: tuple[str, ...] = ()   # C types of the split workspace fields


@dataclass(frozen=True)
class CudaKernel:
    """A generated module: CUDA C ``source`` and the ``launches`` that run the kernel, in order."""

    name: str
    source: str
    launches: tuple[Launch, ...]
    buffers: tuple[str, ...]
    size_vars: tuple[str, ...]
    #: what each bounds check of the module guards, by the number ``tv_error[0]`` records
    checks: tuple[str, ...] = ()


# ---- the generator -----------------------------------------------------------------------------
_PRELUDE = (Path(__file__).parent / "prelude.cuh").read_text()  # the helpers every kernel calls

# op -> C template over the arguments; {t} is the result's compute type.
_UNARY = {"neg": "(-{0})", "abs": "abs({0})", "exp": "exp({0})", "exp2": "exp2({0})", "expm1": "expm1({0})",
          "log": "log({0})", "log2": "log2({0})", "log10": "log10({0})", "log1p": "log1p({0})",
          "sqrt": "sqrt({0})", "rsqrt": "({t})1 / sqrt({0})", "sin": "sin({0})", "cos": "cos({0})",
          "tan": "tan({0})", "asin": "asin({0})", "acos": "acos({0})", "atan": "atan({0})",
          "sinh": "sinh({0})", "cosh": "cosh({0})", "tanh": "tanh({0})", "asinh": "asinh({0})",
          "acosh": "acosh({0})", "atanh": "atanh({0})", "erf": "erf({0})", "erfc": "erfc({0})",
          "erfinv": "erfinv({0})", "lgamma": "lgamma({0})", "floor": "floor({0})", "ceil": "ceil({0})",
          "trunc": "trunc({0})", "round": "rint({0})", "sigmoid": "({t})1 / (({t})1 + exp(-{0}))",
          "relu": "tv_max({0}, ({t})0)", "reciprocal": "({t})1 / {0}", "square": "({0} * {0})",
          "sign": "tv_sign({0})", "signbit": "signbit({0})", "isinf": "isinf({0})", "isnan": "isnan({0})",
          "logical_not": "(!{0})", "bitwise_not": "(~{0})", "identity": "({0})", "cbrt": "cbrt({0})",
          "tgamma": "tgamma({0})"}
_BINARY = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "truediv": "({0} / {1})",
           "div": "({0} / {1})", "floordiv": "tv_ffloordiv({0}, {1})", "truncdiv": "({0} / {1})",
           "mod": "tv_cmod({0}, {1})", "fmod": "tv_cmod({0}, {1})", "remainder": "tv_pymod({0}, {1})",
           "pow": "pow({0}, {1})", "maximum": "tv_max({0}, {1})", "minimum": "tv_min({0}, {1})",
           "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
           "gt": "({0} > {1})", "ge": "({0} >= {1})", "logical_and": "({0} && {1})",
           "logical_or": "({0} || {1})", "logical_xor": "(!{0} != !{1})", "bitwise_and": "({0} & {1})",
           "bitwise_or": "({0} | {1})", "bitwise_xor": "({0} ^ {1})", "and_": "({0} & {1})",
           "or_": "({0} | {1})", "xor": "({0} ^ {1})", "bitwise_left_shift": "({0} << {1})",
           "bitwise_right_shift": "({0} >> {1})", "lshift": "({0} << {1})", "rshift": "({0} >> {1})",
           "atan2": "atan2({0}, {1})", "hypot": "hypot({0}, {1})", "copysign": "copysign({0}, {1})",
           "nextafter": "nextafter({0}, {1})", "int_truediv": "((double){0} / (double){1})"}
_CAST_ARGS = {"add", "sub", "mul", "truediv", "div", "floordiv", "truncdiv", "mod", "fmod", "remainder", "pow",
              "maximum", "minimum", "atan2", "hypot", "copysign", "nextafter"}

# reduction kind -> (fields (name, type or None = accumulator type), init, update with {v} and {i}, combine)
_RED = {
    "sum": (("v",), ("0",), "{a}v = {a}v + {v};", "{a}v = {a}v + {o}v;"),
    "prod": (("v",), ("1",), "{a}v = {a}v * {v};", "{a}v = {a}v * {o}v;"),
    "max": (("v",), ("tv_lowest<{t}>()",), "{a}v = tv_max({a}v, ({t}){v});", "{a}v = tv_max({a}v, {o}v);"),
    "min": (("v",), ("tv_highest<{t}>()",), "{a}v = tv_min({a}v, ({t}){v});", "{a}v = tv_min({a}v, {o}v);"),
    "any": (("v",), ("false",), "{a}v = {a}v || ({v} != 0);", "{a}v = {a}v || {o}v;"),
    "xor_sum": (("v",), ("0",), "{a}v = {a}v ^ {v};", "{a}v = {a}v ^ {o}v;"),
    "argmax": (("v", "i"), ("tv_lowest<{t}>()", "0"), "tv_arg({a}v, {a}i, ({t}){v}, (long long){i}, true);",
               "tv_arg({a}v, {a}i, {o}v, {o}i, true);"),
    "argmin": (("v", "i"), ("tv_highest<{t}>()", "0"), "tv_arg({a}v, {a}i, ({t}){v}, (long long){i}, false);",
               "tv_arg({a}v, {a}i, {o}v, {o}i, false);"),
    "welford_reduce": (("m", "m2", "w"), ("0", "0", "0"), "tv_welford1({a}m, {a}m2, {a}w, ({t}){v});",
                       "tv_welford({a}m, {a}m2, {a}w, {o}m, {o}m2, {o}w);"),
    "welford_combine": (("m", "m2", "w"), ("0", "0", "0"), "tv_welford({a}m, {a}m2, {a}w, {v0}, {v1}, {v2});",
                        "tv_welford({a}m, {a}m2, {a}w, {o}m, {o}m2, {o}w);"),
    "online_softmax_reduce": (("m", "s"), ("tv_lowest<{t}>()", "0"), "tv_osm1({a}m, {a}s, ({t}){v});",
                              "tv_osm({a}m, {a}s, {o}m, {o}s);"),
}
#: reduction kind -> (first pass field, its combine), (second, its combine), between the passes,
#: (first update, second update): the two-pass form of a reduction over a row held in registers.
_TWO_PASS = {
    "online_softmax_reduce": (("m", "{a}m = tv_max({a}m, {o}m);"), ("s", "{a}s = {a}s + {o}s;"), "",
                              ("{a}m = tv_max({a}m, {v});",
                               "{a}s = {a}s + ({a}m == tv_lowest<{t}>() ? ({t})0 : exp({v} - {a}m));")),
    "welford_reduce": (("m", "{a}m = {a}m + {o}m;"), ("m2", "{a}m2 = {a}m2 + {o}m2;"), "{a}m = {a}m / ({t})L; {a}w = ({t})L;",
                       ("{a}m = {a}m + {v};", "{a}m2 = {a}m2 + ({v} - {a}m) * ({v} - {a}m);")),
}
_SPLITTABLE = {"sum", "prod", "max", "min", "any", "xor_sum", "welford_reduce", "online_softmax_reduce",
               "argmax", "argmin"}


def _field_type(kind: str, fieldname: str, acc: str) -> str:
    if fieldname == "i":
        return "long long"
    if kind == "any":
        return "bool"
    return acc


@dataclass
class _Scope(CStyleRenderer.Scope):
    """The renderer's ``Scope`` with this launch model's part: the nest and its place in the
    segment, the buffers never stored (their loads recompute the value), and whether the
    statements run once per row (after a reduction: every thread computes, thread 0 stores)."""

    part: Part | None = None
    local_buffers: Mapping[str, Any] = field(default_factory=dict)
    once_per_row: bool = False


def _fold(fn: str, args: list[str]) -> str:
    return args[0] if len(args) == 1 else f"{fn}({_fold(fn, args[:-1])}, {args[-1]})"


_TYPE_OF_INDEX = {"TruncToInt": "trunc", "FloorToInt": "floor", "CeilToInt": "ceil", "RoundToInt": "rint"}


class CudaRenderer(CStyleRenderer):
    """Emits the CUDA C of one kernel: the SDK's C-style renderer with CUDA's tables (``long long``
    indices, CUDA math, ``__half``/``__nv_bfloat16`` storage, ``const`` values, ``static_cast``
    conversions, :data:`_RED` reductions) and its launch model (segments of a thread per element,
    a warp or block per row, split and column reductions), which replaces the base's walk:
    :meth:`render` returns a :class:`CudaKernel` (the source and its launches). Statements are
    the renderer's, rendered in a :class:`_Scope` (a row's thread, a vector lane, a recomputed
    local buffer); this launch model's hooks say where values live: :meth:`load_source`
    (recomputed, a row's earlier value, the row's registers), :meth:`store` (thread 0 of a row)
    and :meth:`reduction_value` (an accumulator's field)."""

    language = "CUDA"
    storage_types = CTYPES
    value_types = {**CTYPES, "float16": "float", "bfloat16": "float"}
    index_code = {
        **CStyleRenderer.index_code, "Mul": lambda a: "(" + " * ".join(a) + ")", "FloorDiv": "tv_ifloordiv({0}, {1})",
        "IntTrueDiv": "((double){0} / {1})", "CeilDiv": "(-tv_ifloordiv(-({0}), {1}))",
        "ModularIndexing": "(({0} / {1}) % {2})", "PythonMod": "tv_ipymod({0}, {1})", "Mod": "tv_ipymod({0}, {1})",
        "Identity": "({0})", "Abs": "tv_absi({0})", "Min": lambda a: _fold("tv_mini", a),
        "Max": lambda a: _fold("tv_maxi", a), **{k: f"((long long){fn}({{0}}))" for k, fn in _TYPE_OF_INDEX.items()}}
    code_for_op = {**CStyleRenderer.code_for_op, **_UNARY, **_BINARY,
                   "where": "({0} ? static_cast<{t}>({1}) : static_cast<{t}>({2}))", "fma": "fma({0}, {1}, {2})",
                   "rand": "tv_rand({0}, {1})", "randn": "tv_randn({0}, {1})",
                   "randint64": "tv_randint64({0}, {1}, {2}, {3})"}
    unsupported_ops = {k: v for k, v in CStyleRenderer.unsupported_ops.items()
                       if k not in ("rand", "randn", "randint64", "load_seed")}
    declaration = "const {t} {name} = {expr};"
    cast_code = "static_cast<{t}>({0})"
    load_code = {"*": cast_code}
    store_code: Mapping[str, str] = {}
    to_dtype_code = {"bfloat16": "__bfloat162float(__float2bfloat16({0}))", "float16": "__half2float(__float2half({0}))"}
    bitcast_code = "{t} {name}; {{ {s} tmp_ = {0}; memcpy(&{name}, &tmp_, sizeof({name})); }}"
    cast_operands = (frozenset(_UNARY) - {"logical_not", "isnan", "isinf", "signbit", "bitwise_not", "identity"}) | _CAST_ARGS
    yield_code = "{name} = {value};"
    fail_code = "tv_fail({check}, {value});"   # the host reads the record after the launches
    atomic_add_code = "atomicAdd(&{target}, {value});"
    atomic_add_dtypes = frozenset(CTYPES)
    index_type = "idx_t"                       # each function's typedef: int, or long long for big tensors

    def int_literal(self, v: int) -> str:
        return f"{v}LL" if abs(v) >= 2**31 else str(v)

    def rational_literal(self, e: Any) -> str:
        return f"({e.p}.0 / {e.q}.0)" if e.is_Rational else repr(float(e))

    def render_pow(self, base: str, exponent: Any, exp_text: str) -> str:
        if exponent.is_Integer and 0 <= int(exponent) <= 8:
            return "(" + " * ".join([base] * int(exponent)) + ")" if int(exponent) else "1"
        return f"tv_ipow((long long){base}, (long long){exp_text})"

    def value_type(self, dtype: str | None) -> str:
        return "auto" if dtype is None else super().value_type(dtype)

    def literal_type(self, dtype: str | None) -> str:
        return self.value_type(dtype)

    def inf_literal(self, ctype: str, negative: bool) -> str:
        return f"(-({ctype})INFINITY)" if negative else f"(({ctype})INFINITY)"

    def _acc_type(self, red: Stmt) -> str:
        """The C type a reduction accumulates its values in: its dtype's, except that argmax/argmin
        compare the source values (their dtype is the index's: accumulating values in it would
        truncate 2.7 and 2.2 to the same 2 and return the first)."""
        if red.attr("kind") in ("argmax", "argmin") and red.attr("src_dtype"):
            return self.value_type(red.attr("src_dtype"))
        return self.value_type(red.attr("dtype") or red.dtype)

    def __init__(self, used_elsewhere: frozenset[str] = frozenset(), sm_count: int = 132) -> None:
        self.used_elsewhere = used_elsewhere   # buffers read/written outside this kernel (or outputs)
        self.sm_count = sm_count
        self.knobs = _knobs()

    def _start(self, lk: Any) -> None:
        """The state of one kernel's rendering: the renderer's, and this launch model's."""
        self.begin(lk)
        self.kernel, self.size_vars = lk.kernel, tuple(lk.size_vars)
        self.order = [b.name for b in lk.buffers]
        self.launches: list[Launch] = []
        self.counter = 0
        self.static = not self.size_vars
        self.idx = "long long"
        self.persist = 0                       # K: each thread holds K columns of the row (0: loop)
        self.persist_exact = False             # ... and every thread has exactly K (L % threads == 0)
        self.cache: dict[tuple[str, str], str] = {}   # (buffer, element) -> register array
        self.cache_decl: list[str] = []
        self.row_vals: dict[tuple[str, str], str] | None = None  # in a row segment: stored per-row values
        self.red_seen: dict[tuple, str] = {}

    # -- segments --
    def segments(self) -> list[tuple[tuple[Any, Any] | None, list[Part]]]:
        segs: list[tuple[tuple[Any, Any] | None, list[Part]]] = []
        cur: list[LoopNest] = []
        for nest in self.kernel.nests:
            trial = self._plan(cur + [nest])
            if trial is None:
                if cur:
                    segs.append(self._plan(cur))  # type: ignore[arg-type]
                cur = [nest]
                if self._plan(cur) is None:
                    raise CodegenError(f"nest {nest.name} of {self.kernel.name} cannot be generated "
                                       f"(ranges {list(nest.ranges)}, reduction {list(nest.reduction_ranges)})")
            else:
                cur = cur + [nest]
        if cur:
            segs.append(self._plan(cur))  # type: ignore[arg-type]
        return segs

    def _plan(self, nests: list[LoopNest]) -> tuple[tuple[Any, Any] | None, list[Part]] | None:
        red = next((n for n in nests if n.reduction_ranges), None)
        shape = None if red is None else (prod(red.ranges), prod(red.reduction_ranges))
        out = []
        for n in nests:
            c = classify(n, shape)
            if c is None:
                return None
            out.append(c)
        if shape is None and any(sympy.expand(prod(n.ranges) - prod(nests[0].ranges)) for n in nests):
            return None
        # every buffer written in the segment is accessed at one element of its row/flat index
        written: dict[str, Any] = {}
        for c in out:
            for kind, buf, index, _ in accesses(c.nest):
                canon = canonical(index, c.env)
                if buf in written and sympy.expand(written[buf] - canon) != 0:
                    return None
                if kind != "load":
                    prev = [(canonical(i, o.env)) for o in out[: out.index(c)] for k2, b2, i, _ in accesses(o.nest)
                            if b2 == buf]
                    if any(sympy.expand(p - canon) != 0 for p in prev):
                        return None
                    written[buf] = canon
        return shape, out

    # -- buffers that stay in registers --
    def _locals(self, nests: list[Part]) -> dict[str, tuple[Part, Stmt]]:
        """Buffers written by one 'full'/'flat' nest of the segment and read only later in it, in
        column context: their loads recompute the value instead."""
        cands: dict[str, tuple[Part, Stmt]] = {}
        for c in nests:
            for st in c.nest.body:
                if st.op == "store" and c.role in ("full", "flat") and st.attr("mode") is None:
                    b = st.attr("buffer")
                    if b in cands or self._escapes(b):
                        cands[b] = None  # type: ignore[assignment]
                    else:
                        cands[b] = (c, st)
        loaded = {buf for c in nests for kind, buf, _, _ in accesses(c.nest) if kind == "load"}
        out = {b: v for b, v in cands.items() if v is not None and b in loaded}
        for k, c in enumerate(nests):
            for kind, buf, index, col in accesses(c.nest):
                if buf in out:
                    prod_nest = out[buf][0]
                    if kind != "load" and c is not prod_nest:
                        out.pop(buf)
                    elif kind == "load" and (not col or nests.index(prod_nest) >= k or c.role == "row"):
                        out.pop(buf)
        return _unclobbered(out, nests)

    def _escapes(self, name: str) -> bool:
        b = self.buffers.get(name)
        return b is None or b.kind != "intermediate" or b.view_of is not None or name in self.used_elsewhere or \
            any(o.view_of == name for o in self.buffers.values())

    # -- emission --
    def prelude(self) -> str:
        """The 16-bit float headers the kernel's buffers and values need, then ``prelude.cuh``
        (a float32 kernel that rounds through bfloat16, as autocast's backward does, needs them too)."""
        dtypes = {b.dtype for b in self.buffers.values()} | {
            d for nest in self.kernel.nests for st in nest.stmts() for d in (st.dtype, st.attr("dtype"))}
        heads = [f"#include <{h}>" for d, h in (("float16", "cuda_fp16.h"), ("bfloat16", "cuda_bf16.h")) if d in dtypes]
        return "\n".join([*heads, _PRELUDE])

    def render(self, lk: Any) -> CudaKernel:
        """The module of one kernel: its segments as ``__global__`` functions (each named
        :meth:`symbol` of ``<kernel>_<k>``) and how to launch them."""
        self._start(lk)
        segs = self.segments()
        big = any(not (s.is_Integer and int(s) < 2**31) for b in self.buffers.values() for s in
                  [prod(b.size), *(parse_expr(x) for x in b.stride)]) or not self.static
        self.idx = "long long" if big else "int"
        self.lines.append(self.prelude())
        for k, (shape, nests) in enumerate(segs):
            name = self.symbol(f"{self.kernel.name}_{k}")
            if shape is None:
                self._pointwise(name, nests)
            else:
                self._rows(name, shape, nests)
        return CudaKernel(self.kernel.name, "\n".join(self.lines) + "\n", tuple(self.launches),
                          tuple(self.order), self.size_vars, tuple(self.checks))

    def _params(self, written: set[str], extra: str = "") -> str:
        ps = []
        for n in self.order:
            t = CTYPES[self.buffers[n].dtype] if self.buffers[n].dtype in CTYPES else None
            if t is None:
                raise CodegenError(f"buffer {n}: dtype {self.buffers[n].dtype} is not supported")
            aliased = self.buffers[n].view_of is not None or any(o.view_of == n for o in self.buffers.values())
            ps.append(f"{t}* {n}" if n in written or aliased else f"const {t}* __restrict__ {n}")
        ps += [f"long long {s}" for s in self.size_vars]
        return ", ".join(ps) + extra

    def _written(self) -> set[str]:
        return {st.attr("buffer") for n in self.kernel.nests for st in n.stmts()
                if st.op in ("store", "store_reduction")}

    def _num(self, e: Any) -> str:
        return self.print_index(e)

    def _pointwise(self, name: str, nests: list[Part]) -> None:
        n_expr = prod(nests[0].nest.ranges)
        locals_ = self._locals(nests)
        # contiguous accesses (index == flat index) of a single-nest segment are vectorized
        vec_bufs: list[str] = []
        if len(nests) == 1:
            acc = accesses(nests[0].nest)
            cont = {b for _, b, i, _ in acc if sympy.expand(canonical(i, nests[0].env) - X) == 0}
            bad = {b for _, b, i, _ in acc if sympy.expand(canonical(i, nests[0].env) - X) != 0}
            vec_bufs = sorted((cont - bad) - set(locals_), key=self.order.index)
            vec_bufs = [b for b in vec_bufs if not any(st.op == "store" and st.attr("mode") for st in
                                                       nests[0].nest.stmts() if st.attr("buffer") == b)]
            if any(_in_masked(nests[0].nest.body, b) for b in vec_bufs):
                vec_bufs = []
        vec = 1
        if vec_bufs:
            vec = max(1, min(8, 16 // min(_SIZES[self.buffers[b].dtype] for b in vec_bufs)))
        written = self._written()
        for v in ([vec, 1] if vec > 1 else [1]):
            fname = name if v == vec else name + "_s"
            self.lines.append(f'extern "C" __global__ void __launch_bounds__(256) {fname}({self._params(written)}) {{')
            self.lines.append(f"  typedef {self.idx} idx_t;")
            self.lines.append(f"  const idx_t n = {self._num(n_expr)};")
            self.lines.append(f"  const idx_t base = ((idx_t)blockIdx.x * blockDim.x + threadIdx.x) * {v};")
            self.lines.append("  if (base >= n) return;")
            if v > 1:
                self.lines.append(f"  if (base + {v} <= n) {{")
                self.depth = 2
                loaded = {st.attr("buffer") for st in nests[0].nest.stmts() if st.op == "load"}
                self.open_lanes(vec_bufs, v, "base", loaded, written)
                self.lines.append(f"    #pragma unroll\n    for (int k = 0; k < {v}; k++) {{")
                self.lines.append("      const idx_t X = base + k;")
                for c in nests:
                    self.lines.append("      {")
                    self._nest_body(c, {"X": "X"}, "        ", locals_, lanes=(set(vec_bufs), "k"))
                    self.lines.append("      }")
                self.lines.append("    }")
                self.close_lanes(vec_bufs, v, "base", written)
                self.lines.append("    return;\n  }")
            self.lines.append(f"  for (idx_t X = base; X < n && X < base + {v}; X++) {{")
            for c in nests:
                self.lines.append("    {")
                self._nest_body(c, {"X": "X"}, "      ", locals_)
                self.lines.append("    }")
            self.lines.append("  }\n}\n")
        align = vec * max((_SIZES[self.buffers[b].dtype] for b in vec_bufs), default=0)
        self.launches.append(Launch(name, "pointwise", numel=str(n_expr), threads=256, vector=vec, align=align,
                                    aligned=tuple(self.order.index(b) for b in vec_bufs)))

    def _tiling(self, rows: Any, rlen: Any) -> tuple[int, int, int]:
        """(threads per row, rows per block, splits) from the shapes: a warp per row for many
        short rows, else a block per row with about ``ept`` columns per thread; few very long
        rows are split over several blocks."""
        if not (rows.is_Integer and rlen.is_Integer):
            return 256, 1, 1
        r, l = int(rows), int(rlen)
        kn = self.knobs
        if l <= kn["warp"] and r >= self.sm_count * 4:
            return 32, 4, 1          # a warp per row, four rows per block
        threads = max(64, min(1024, 1 << math.ceil(math.log2(max(1, -(-l // kn["ept"]))))))
        splits = 1
        if r < self.sm_count and l >= 65536:   # few long rows: split each row over several blocks
            splits = max(1, min((self.sm_count * 4) // max(r, 1), l // (threads * 16)))
        return threads, 1, splits

    def _rows(self, name: str, shape: tuple[Any, Any], nests: list[Part]) -> None:
        rows, rlen = shape
        threads, rpb, splits = self._tiling(rows, rlen)
        reds = [st for c in nests for st in c.nest.body if st.op == "reduction"]
        if splits > 1 and not (len(nests) == 1 and len(reds) == 1 and reds[0].attr("kind") in _SPLITTABLE):
            splits = 1
        locals_ = self._locals(nests)
        written = self._written()
        warp = threads == 32
        sync = "__syncwarp();" if warp else "__syncthreads();"
        if len(nests) == 1 and len(reds) >= 1 and self._columnar(nests[0], rows, rlen):
            self._column(name, rows, rlen, nests[0], written)
            return
        if splits > 1:
            self._split(name, rows, rlen, threads, splits, nests[0], reds[0], written)
            return
        self.persist = 0
        # kmax counts 4-byte values: 8-byte rows hold half as many (1024 threads have 64 registers)
        widest = max(_SIZES[b.dtype] for b in self.buffers.values())
        if rlen.is_Integer and -(-int(rlen) // threads) <= self.knobs["kmax"] * 4 // max(4, widest):
            self.persist = -(-int(rlen) // threads)   # the row's columns in registers, loads in flight
            self.persist_exact = int(rlen) % threads == 0
        self.cache, self.cache_decl, self.row_vals, self.red_seen = {}, [], {}, {}
        self.lines.append(f'extern "C" __global__ void __launch_bounds__({threads * rpb}) {name}({self._params(written)}) {{')
        self.lines.append(f"  typedef {self.idx} idx_t;")
        self.lines.append(f"  const idx_t R = {self._num(rows)}, L = {self._num(rlen)};")
        self.lines.append(f"  const idx_t X = (idx_t)blockIdx.x * {rpb} + threadIdx.y;")
        self.lines.append("  const int tid = threadIdx.x;")
        self.lines.append("  if (X >= R) return;")
        for c in nests:
            if c.nest.name in {p[0].nest.name for p in locals_.values()} and all(
                    st.attr("buffer") in locals_ for st in c.nest.stmts() if st.op in ("store", "store_reduction")):
                continue  # every value it stores is recomputed where it is read
            self.lines.append(f"  {{ // {c.nest.name} ({c.role})")
            if c.role == "full":
                self.lines.append(self._col_loop("    ", "tid", "L", threads))
                self._nest_body(c, {"X": "X", "C": "C"}, "      ", locals_)
                self.lines.append("    }")
            elif c.role == "row":
                self.lines.append("    if (tid == 0) {")
                self._nest_body(c, {"X": "X"}, "      ", locals_)
                self.lines.append("    }")
            else:
                self._reduce_nest(c, threads, "    ", locals_, warp)
            self.lines.append(f"  }}\n  {sync}")
        self.lines.append("}\n")
        at = len(self.lines) - 1 - next(i for i, l in enumerate(reversed(self.lines)) if "if (X >= R) return;" in l)
        self.lines[at + 1:at + 1] = self.cache_decl
        self.persist, self.row_vals = 0, None
        self.launches.append(Launch(name, "rows", rows=str(rows), rlen=str(rlen), threads=threads,
                                    rows_per_block=rpb))

    def _col_loop(self, ind: str, lo: str, hi: str, step: int) -> str:
        """The loop of a row's threads over its columns: with ``persist`` a fully unrolled loop
        over K columns per thread (so that cached loads stay in registers), else a strided loop."""
        if self.persist:
            head = f"{ind}#pragma unroll\n{ind}for (int k = 0; k < {self.persist}; k++) "
            if self.persist_exact:   # every thread has K columns: no bound test at all
                return head + f"{{\n{ind}  const idx_t C = {lo} + k * {step};"
            # a predicate, not a break (which would order the loads): the K loads issue together
            return head + f"if (const idx_t C = {lo} + k * {step}; C < {hi}) {{"
        return f"{ind}#pragma unroll 4\n{ind}for (idx_t C = {lo}; C < {hi}; C += {step}) {{"

    def _cached_load(self, c: Part, st: Stmt, expr: str) -> str:
        """In a persistent row segment, a load of a buffer the kernel never writes is read once per
        (buffer, element) and kept in a register array for the later nests (else ``expr``)."""
        buf = st.attr("buffer")
        if not self.persist or buf in self._written():
            return expr
        key = (buf, str(canonical(st.attr("index"), c.env)))
        if "C" not in key[1]:
            return expr
        arr = self.cache.get(key)
        if arr is not None:
            return f"{arr}[k]"
        arr = f"reg{len(self.cache)}"
        self.cache[key] = arr
        if self.knobs["stream"] and expr.startswith(f"{buf}[") and X in canonical(st.attr("index"), c.env).free_symbols:
            # read once, by this row alone: evict first, so that the L2's older lines stay (a
            # kernel after a large write, e.g. do_bench's cache flush, otherwise writes dirty lines
            # back while it reads: var_mean 4096x4096 34.2 -> 28.9 us on the H100)
            expr = f"tv_ldcs(&{expr})"
        self.cache_decl.append(f"  {CTYPES[self.buffers[buf].dtype]} {arr}[{self.persist}];")
        return f"{arr}[k] = {expr}"

    def _same_reduction(self, c: Part, red: Stmt) -> tuple | None:
        """A key for a reduction of a plain load inside a row segment (None elsewhere): two
        reductions with one key compute the same value (Inductor emits one welford per output)."""
        if self.row_vals is None or len(red.args) != 1:
            return None
        src = next((st for st in c.nest.body if st.name == red.args[0]), None)
        if src is None or src.op != "load":
            return None
        return (red.attr("kind"), red.attr("dtype"), src.attr("buffer"), str(canonical(src.attr("index"), c.env)))

    def _columnar(self, c: Part, rows: Any, rlen: Any) -> bool:
        """Whether neighbouring rows are neighbouring elements and the reduction strided
        (``x.sum(0)``, or the first half of Inductor's split of it): then a thread per row, walking
        its row, reads coalesced across the warp."""
        any_strided = False
        for kind, buf, index, col in accesses(c.nest):
            e = canonical(index, c.env)
            if kind != "load" or not col or C not in e.free_symbols:
                continue
            steps = row_col_steps(e, rows, rlen)
            if steps is None or steps[0] not in (0, 1):
                return False
            any_strided = any_strided or steps[1] != 1
        return any_strided

    def _column(self, name: str, rows: Any, rlen: Any, c: Part, written: set[str]) -> None:
        reds = [st for st in c.nest.body if st.op == "reduction"]
        splits = 1
        if rows.is_Integer and rlen.is_Integer:
            blocks = -(-int(rows) // 256)
            splits = max(1, min(-(-self.sm_count * self.knobs["col_blocks"] // blocks), int(rlen) // 32, 256))
        if splits > 1 and (len(reds) > 1 or reds[0].attr("kind") not in _SPLITTABLE):
            splits = 1
        head = [f"  typedef {self.idx} idx_t;", f"  const idx_t R = {self._num(rows)}, L = {self._num(rlen)};",
                "  const idx_t X = (idx_t)blockIdx.x * 256 + threadIdx.x;", "  if (X >= R) return;"]
        if splits == 1:
            self.lines.append(f'extern "C" __global__ void __launch_bounds__(256) {name}({self._params(written)}) {{')
            self.lines += head
            self._reduce_nest(c, 1, "  ", {}, True, column=True)
            self.lines.append("}\n")
            self.launches.append(Launch(name, "column", rows=str(rows), rlen=str(rlen), threads=256))
            return
        kind = reds[0].attr("kind")
        acc_t = self._acc_type(reds[0])
        fields = _RED[kind][0]
        ftypes = [_field_type(kind, f, acc_t) for f in fields]
        ws = "".join(f", {t}* ws{j}" for j, t in enumerate(ftypes))
        self.lines.append(f'extern "C" __global__ void __launch_bounds__(256) {name}({self._params(written, ws)}) {{')
        self.lines += head
        self.lines.append(f"  const idx_t chunk = (L + {splits} - 1) / {splits}, lo = blockIdx.y * chunk;")
        self.lines.append("  const idx_t hi = lo + chunk < L ? lo + chunk : L;")
        self._reduce_nest(c, 1, "  ", {}, True, loop=("lo", "hi"), partial=True, column=True)
        for j, f in enumerate(fields):
            self.lines.append(f"  ws{j}[blockIdx.y * R + X] = acc_{reds[0].name}_{f};")
        self.lines.append("}\n")
        self.lines.append(f'extern "C" __global__ void __launch_bounds__(256) {name}_final({self._params(written, ws)}) {{')
        self.lines += head
        self._reduce_nest(c, 1, "  ", {}, True, final=(splits, fields), column=True)
        self.lines.append("}\n")
        self.launches.append(Launch(name, "column", rows=str(rows), rlen=str(rlen), threads=256, splits=splits,
                                    workspace=tuple(ftypes)))

    def _split(self, name: str, rows: Any, rlen: Any, threads: int, splits: int, c: Part, red: Stmt,
               written: set[str]) -> None:
        kind = red.attr("kind")
        acc_t = self._acc_type(red)
        fields = _RED[kind][0]
        ftypes = [_field_type(kind, f, acc_t) for f in fields]
        ws = "".join(f", {t}* __restrict__ ws{j}" for j, t in enumerate(ftypes))
        # part 1: block (s, x) reduces slice s of row x into ws[x * S + s]
        self.lines.append(f'extern "C" __global__ void __launch_bounds__({threads}) {name}({self._params(written, ws)}) {{')
        self.lines.append(f"  typedef {self.idx} idx_t;")
        self.lines.append(f"  const idx_t L = {self._num(rlen)};")
        self.lines.append(f"  const idx_t X = blockIdx.y; const int tid = threadIdx.x;")
        self.lines.append(f"  const idx_t chunk = (L + {splits} - 1) / {splits}, lo = blockIdx.x * chunk;")
        self.lines.append(f"  const idx_t hi = lo + chunk < L ? lo + chunk : L;")
        self._reduce_nest(c, threads, "  ", {}, False, loop=("lo + tid", "hi"), partial=True)
        self.lines.append("  if (tid == 0) {")
        for j, f in enumerate(fields):
            self.lines.append(f"    ws{j}[X * {splits} + blockIdx.x] = acc_{red.name}_{f};")
        self.lines.append("  }\n}\n")
        # part 2: one warp per row combines the slices, then runs the rest of the nest
        self.lines.append(f'extern "C" __global__ void __launch_bounds__(32) {name}_final({self._params(written, ws.replace("* __restrict__", "*"))}) {{')
        self.lines.append(f"  typedef {self.idx} idx_t;")
        self.lines.append("  const idx_t X = blockIdx.x; const int tid = threadIdx.x;")
        self._reduce_nest(c, 32, "  ", {}, True, final=(splits, fields))
        self.lines.append("}\n")
        self.launches.append(Launch(name, "split", rows=str(rows), rlen=str(rlen), threads=threads, splits=splits,
                                    workspace=tuple(ftypes)))

    # -- statements: the renderer's, in a scope of this launch model (hooks below) --
    def _nest_body(self, c: Part, coords: Mapping[str, str], ind: str, locals_: Mapping[str, Any],
                   lanes: tuple[set[str], str] | None = None, prefix: str = "",
                   recompute: bool = False) -> dict[str, str]:
        """Bind the nest's loop variables from ``coords`` (X: row or flat index, C: column), then
        emit its body; returns the C value of each SSA name."""
        names = self._bind(ind, (*c.row_vars, *c.col_vars), c, coords, prefix=prefix)
        scope = _Scope(names=names, lanes=lanes, prefix=prefix, stores=not recompute, part=c, local_buffers=locals_)
        return self._stmts(scope, c.nest.body, ind)

    def _bind(self, ind: str, variables: Sequence[str], c: Part, coords: Mapping[str, str],
              names: dict[str, str] | None = None, prefix: str = "") -> dict[str, str]:
        """Declare loop variables as expressions of the coordinates, at indent ``ind``."""
        names = {} if names is None else names
        depth, self.depth = self.depth, len(ind) // 2
        for v in variables:
            names[v] = self.bind_index(prefix + v, c.env[v], coords)
        self.depth = depth
        return names

    def _stmts(self, scope: _Scope, body: Sequence[Stmt], ind: str, include: set[int] | None = None) -> dict[str, str]:
        """The renderer's :meth:`render_body` at indent ``ind``."""
        depth, self.depth = self.depth, len(ind) // 2
        try:
            return self.render_body(scope, body, include)
        finally:
            self.depth = depth

    def load_source(self, st: Stmt) -> str | None:
        """A load: recomputed (a local buffer), from the vector registers, from a value this row
        computed earlier, from the persistent row cache, or from memory."""
        scope, buf = self.scope, st.attr("buffer")
        if buf in scope.local_buffers:
            self._recompute(st)
            return None
        expr = super().load_source(st)
        key = (buf, str(canonical(st.attr("index"), scope.part.env)))
        if self.row_vals is not None and key in self.row_vals:
            expr = self.row_vals[key]   # a value this row computed earlier in the kernel
        return self._cached_load(scope.part, st, expr) if scope.top_level and not scope.once_per_row else expr

    def _recompute(self, st: Stmt) -> None:
        """A load of a buffer never stored: the nest that computes the element, rendered again."""
        scope = self.scope
        part, store = scope.local_buffers[st.attr("buffer")]
        t, nm = self.value_type(st.dtype), scope.prefix + st.name
        self.counter += 1
        p = f"l{self.counter}_"
        self.emit(f"{t} {nm};")
        self.emit("{")
        sub = self._nest_body(part, {"X": "X", "C": "C"}, "  " * (self.depth + 1), scope.local_buffers, prefix=p,
                              recompute=True)
        self.emit(f"  {nm} = {sub.get(store.args[0], p + store.args[0])};")
        self.emit("}")
        scope.values[st.name] = nm

    def store(self, st: Stmt, target: str, value: str) -> None:
        """A plain store: none for a local buffer; once per row, thread 0 stores, and the value is
        kept for later loads of the row."""
        scope, buf = self.scope, st.attr("buffer")
        if buf in scope.local_buffers:
            return
        key = (buf, str(canonical(st.attr("index"), scope.part.env)))
        if scope.once_per_row and scope.top_level and self.row_vals is not None and "C" not in key[1]:
            rv = f"rv{len(self.row_vals)}"
            self.cache_decl.append(f"  {self.storage_type(self.buffers[buf].dtype)} {rv};")
            self.row_vals[key] = rv
            self.emit(f"{rv} = {value};")
            value = rv
        self.emit(f"{'if (tid == 0) ' if scope.once_per_row else ''}{target} = {value};")

    def reduction_value(self, name: str, k: int) -> tuple[str, str | None]:
        """A field of a reduction's accumulator (``auto``-typed)."""
        red = next((s for s in self.scope.part.nest.body if s.name == name), None)
        if red is None or red.op != "reduction":
            raise CodegenError(f"getitem of {name} is not supported")
        return f"acc_{self.scope.prefix}{red.name}_{_RED[red.attr('kind')][0][k]}", None

    def _reduce_nest(self, c: Part, threads: int, ind: str, locals_: Mapping[str, Any], warp: bool,
                     loop: tuple[str, str] | None = None, partial: bool = False,
                     final: tuple[int, Sequence[str]] | None = None, column: bool = False) -> None:
        """Accumulate over the row (threads stride by ``threads``; ``column``: one thread walks
        the whole row), combine across the row's threads, then run the statements after the
        reduction. ``partial``: stop after combining (split first pass); ``final``: combine the
        workspace slices instead of reading the row (split second pass)."""
        reds = [st for st in c.nest.body if st.op == "reduction"]
        names: dict[str, str] = {}
        self._bind(ind, c.row_vars, c, {"X": "X"}, names)
        infos, dups = self._accumulators(c, reds, ind)
        two = final is None and loop is None and not column and self._two_pass_kind(infos)
        if two:
            self._two_pass(c, infos[0], names, threads, warp, ind, locals_)
        elif final is None:
            self._accumulate(c, reds, infos, names, threads, ind, locals_, loop, column)
        else:
            for red, kind, acc_t, fields, ftypes, upd, comb in infos:
                self.lines.append(f"{ind}for (int s = {'0' if column else 'tid'}; s < {final[0]}; "
                                  f"s += {1 if column else 32}) {{")
                for j, (f, ft) in enumerate(zip(fields, ftypes)):
                    at = "s * R + X" if column else f"X * {final[0]} + s"
                    self.lines.append(f"{ind}  const {ft} o_{f} = ws{j}[{at}];")
                self.lines += [ind + "  " + comb.format(a=f"acc_{red.name}_", o="o_"), f"{ind}}}"]
            threads, warp = 32, True
        for info in (() if column or two else infos):
            self._combine(info, threads, warp, ind)
        for name, orig, fields, ftypes in dups:
            for f, ft in zip(fields, ftypes):
                self.lines.append(f"{ind}const {ft} acc_{name}_{f} = acc_{orig}_{f};")
        if partial:
            return
        # the statements after the reduction, once per row (every thread computes, thread 0 stores)
        post = post_names(c.nest)
        after_roots = [st for st in c.nest.body if st.op != "reduction" and (
            st.name in post or st.op == "store_reduction" or (st.op == "store" and st.args[0] in post))]
        after_set = self.needed(c.nest.body, [], after_roots, stop={id(r) for r in reds})
        vals = {red.name: f"acc_{red.name}_{'i' if kind in ('argmax', 'argmin') else _RED[kind][0][0]}"
                for red, kind, *_ in infos}
        vals.update({name: f"acc_{name}_{'i' if 'i' in fields else fields[0]}" for name, _, fields, _ in dups})
        self._stmts(_Scope(names=names, values=vals, part=c, local_buffers=locals_, once_per_row=not column),
                    c.nest.body, ind, after_set)

    def _accumulators(self, c: Part, reds: list[Stmt], ind: str) -> tuple[list[tuple], list[tuple]]:
        """Declare and initialise each reduction's accumulator fields; a reduction equal to one
        earlier in the row (same kind of the same values) reuses that one's (``dups``)."""
        infos, dups = [], []
        for red in reds:
            kind = red.attr("kind")
            if kind not in _RED:
                raise CodegenError(f"reduction kind {kind!r} is not supported by the CUDA code generator")
            acc_t = self._acc_type(red)
            fields, inits, upd, comb = _RED[kind]
            ftypes = [_field_type(kind, f, acc_t) for f in fields]
            same = self._same_reduction(c, red)
            if same in self.red_seen:   # the same reduction of the same values, earlier in this row
                dups.append((red.name, self.red_seen[same], fields, ftypes))
                continue
            infos.append((red, kind, acc_t, fields, ftypes, upd, comb))
            for f, ft, init in zip(fields, ftypes, inits):
                if same is not None:      # visible to later nests of the segment
                    self.red_seen[same] = red.name
                    self.cache_decl.append(f"  {ft} acc_{red.name}_{f};")
                    self.lines.append(f"{ind}acc_{red.name}_{f} = {init.format(t=acc_t)};")
                else:
                    self.lines.append(f"{ind}{ft} acc_{red.name}_{f} = {init.format(t=acc_t)};")
        return infos, dups

    def _two_pass_kind(self, infos: list[tuple]) -> bool:
        """Whether the row's one reduction is an online softmax or a Welford over a row held in
        registers: then two passes over the registers replace the per-element update."""
        return bool(self.persist) and len(infos) == 1 and infos[0][1] in _TWO_PASS

    def _two_pass(self, c: Part, info: tuple, names: dict[str, str], threads: int, warp: bool, ind: str,
                  locals_: Mapping[str, Any]) -> None:
        """A row held in registers reduced in two passes, each with a cheap combine across the row's
        threads, instead of one pass of the online update (whose per-element and per-shuffle steps
        take a division or two ``exp`` and form one long dependent chain):

        - ``online_softmax_reduce``: the row's max, then the sum of ``exp(v - max)`` (one ``exp``
          per element; a row of only -inf keeps sum 0, as the online form gives);
        - ``welford_reduce``: the mean, then the sum of squared deviations (the two-pass variance,
          as accurate as Welford's), weight ``L``.
        """
        red, kind, acc_t, *_ = info
        a = f"acc_{red.name}_"
        first, second, between, update = _TWO_PASS[kind]
        pre_stores = [st for st in c.nest.body if st.op == "store" and st.args[0] not in post_names(c.nest)]
        for k, (fld, comb) in enumerate((first, second)):
            roots = pre_stores if k == 0 else []   # stores before the reduction run in the first pass
            include = self.needed(c.nest.body, list(red.args), roots)
            self.lines.append(self._col_loop(ind, "tid", "L", threads))
            self._bind(ind + "  ", c.col_vars, c, {"C": "C"}, names)
            vals = self._stmts(_Scope(names=names, part=c, local_buffers=locals_), c.nest.body, ind + "  ", include)
            v = f"({acc_t}){vals.get(red.args[0], red.args[0])}"
            self.lines += [ind + "  " + update[k].format(a=a, v=v, t=acc_t), f"{ind}}}"]
            self._combine((red, kind, acc_t, (fld,), (acc_t,), None, comb), threads, warp, ind)
            if k == 0 and between:
                self.lines.append(ind + between.format(a=a, t=acc_t))

    def _accumulate(self, c: Part, reds: list[Stmt], infos: list[tuple], names: dict[str, str], threads: int,
                    ind: str, locals_: Mapping[str, Any], loop: tuple[str, str] | None, column: bool) -> None:
        """The loop over this thread's columns of the row, updating the accumulators."""
        pre_stores = [st for st in c.nest.body if st.op == "store" and st.args[0] not in post_names(c.nest)]
        loop_set = self.needed(c.nest.body, [a for r in reds for a in r.args], pre_stores)
        lo, hi = loop or ("0" if column else "tid", "L")
        step = 1 if column else threads
        unroll = self.knobs["col_unroll"] if column else 4
        self.lines.append(self._col_loop(ind, lo, hi, step) if not column and loop is None else
                          f"{ind}#pragma unroll {unroll}\n{ind}for (idx_t C = {lo}; C < {hi}; C += {step}) {{")
        self._bind(ind + "  ", c.col_vars, c, {"C": "C"}, names)
        vals = self._stmts(_Scope(names=names, part=c, local_buffers=locals_), c.nest.body, ind + "  ", loop_set)
        for red, kind, acc_t, fields, ftypes, upd, comb in infos:
            args = [vals.get(x, x) for x in red.args]
            self.lines.append(ind + "  " + upd.format(a=f"acc_{red.name}_", v=args[0], i="C", t=acc_t,
                                                      **{f"v{j}": x for j, x in enumerate(args)}))
        self.lines.append(f"{ind}}}")

    def _combine(self, info: tuple, threads: int, warp: bool, ind: str) -> None:
        """Combine one reduction across the row's threads: a warp butterfly (every lane gets the
        result), then, for a block per row, the warps' results through shared memory."""
        red, kind, acc_t, fields, ftypes, upd, comb = info
        a, out = f"acc_{red.name}_", self.lines
        out.append(f"{ind}for (int off = 16; off > 0; off >>= 1) {{")
        out += [f"{ind}  const {ft} o_{f} = tv_shfl({a}{f}, off);" for f, ft in zip(fields, ftypes)]
        out += [ind + "  " + comb.format(a=a, o="o_"), f"{ind}}}"]
        if warp or threads <= 32:
            return
        out += [f"{ind}__shared__ {ft} sh_{red.name}_{f}[32];" for f, ft in zip(fields, ftypes)]
        out.append(f"{ind}if ((tid & 31) == 0) {{")
        out += [f"{ind}  sh_{red.name}_{f}[tid >> 5] = {a}{f};" for f in fields]
        out.append(f"{ind}}}\n{ind}__syncthreads();")
        out += [f"{ind}{a}{f} = sh_{red.name}_{f}[0];" for f in fields]
        out.append(f"{ind}for (int w = 1; w < {threads // 32}; w++) {{")
        out += [f"{ind}  const {ft} o_{f} = sh_{red.name}_{f}[w];" for f, ft in zip(fields, ftypes)]
        out += [ind + "  " + comb.format(a=a, o="o_"), f"{ind}}}"]


def _in_masked(body: Sequence[Stmt], buf: str) -> bool:
    return any(st.op == "masked" and any(s.attr("buffer") == buf for s in st.walk()) for st in body)



def _unclobbered(local: dict[str, tuple[Any, Stmt]], nests: list[Any]) -> dict[str, tuple[Any, Stmt]]:
    """The local buffers whose recomputation reads what their producer read. A load of a local
    buffer renders its producer's nest again at the load, so no buffer that nest reads (directly
    or through another local buffer) may be stored to from the producer's nest up to the last
    nest that recomputes it (whose own store comes after its loads). An in-place update (an
    optimizer's ``exp_avg.lerp_`` stored back into its input, then read by the parameter's update
    through a local ``exp_avg``) would otherwise be applied twice."""
    local = dict(local)
    at = {id(c): k for k, c in enumerate(nests)}
    loads = [{buf for kind, buf, _, _ in accesses(c.nest) if kind == "load"} for c in nests]
    stores = [{buf for kind, buf, _, _ in accesses(c.nest) if kind != "load"} for c in nests]
    while True:
        producer = {name: at[id(part)] for name, (part, _) in local.items()}

        def reads(name: str) -> tuple[set[str], int]:   # what recomputing ``name`` loads, from which nest on
            bufs, first = set(), producer[name]
            for buf in loads[producer[name]]:
                if buf in local and buf != name:
                    more, k = reads(buf)
                    bufs, first = bufs | more, min(first, k)
                else:
                    bufs.add(buf)
            return bufs, first

        def last_use(name: str) -> int:
            direct = [k for k, ls in enumerate(loads) if name in ls and k != producer[name]]
            via = [last_use(o) for o in local if o != name and name in loads[producer[o]]]
            return max(direct + via, default=producer[name])

        clobbered = set()
        for name in local:
            bufs, first = reads(name)
            if any(bufs & (stores[k] - local.keys()) for k in range(first, last_use(name))):
                clobbered.add(name)
        if not clobbered:
            return local
        for name in clobbered:
            local.pop(name)


def generate(kernel: Kernel, buffers: Sequence[Buffer], size_vars: Sequence[str],
             used_elsewhere: frozenset[str] = frozenset(), sm_count: int = 132) -> CudaKernel:
    """Generate the CUDA C module of one loop IR kernel.

    ``buffers`` are the kernel's arguments in order (pointers), ``size_vars`` the size symbols
    passed after them (``long long``); ``used_elsewhere`` names buffers other operations of the
    program read or write (only buffers outside it may stay in registers); ``sm_count`` steers
    the tiling. See the module docstring for an example.
    """
    return CudaRenderer(used_elsewhere, sm_count).render(LoopKernel(kernel, tuple(buffers), tuple(size_vars), None, "cuda"))
