"""Loop IR kernel -> C++ source: one exported function per kernel.

The generated function has the simulated accelerator's kernel signature
(``int32_t kernel(const tv_sim_launch*, void* args)``, ``sim_kernel.h``), so the same shared
library runs on the host (called through ctypes) and on the simulated device (launched through
the runtime table). ``args`` holds one pointer per buffer (``LoopKernel.buffers`` order), then
one int64 per size symbol. The function returns 0, or 3 when an indirect index was out of bounds.

Each loop nest becomes nested ``for`` loops over its ranges; the outermost loop is parallel
(OpenMP) when the nest is big, the innermost is left to the compiler's vectorizer (floating sums,
maxima and minima get ``omp simd reduction(...)``, which lets it reorder them). A reduction
nest keeps one accumulator per reduction inside the outer loops: statements that feed the
reduction run inside the reduction loops, statements that use its result after them. Three
layouts beat the naive loops by keeping memory traffic down: nests of a kernel that share their
outer range share one outer loop (a row at a time, in cache), row-invariant statements are
hoisted out of inner loops, and outer reductions (a sum over rows) update a block of 64
accumulators per row. SSA values become typed C++ locals; 16-bit floats are loaded to ``float``
and rounded back on store.

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> from torchvendor.sdk import loop_kernels
    >>> (lk,) = loop_kernels(capture(lambda x: x.relu() * 2, [torch.randn(16)], level="loop").inference)
    >>> src = generate(lk)
    >>> "extern \\"C\\" int32_t loop_kernel0(const void* launch, void* args)" in src
    True
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Sequence

import sympy

from torchvendor.ir.loop_ir import LoopNest, Stmt, parse_expr
from torchvendor.sdk import CodegenError, CStyleRenderer, LoopKernel

#: how the message of a failed ``device_assert`` starts (the host reports it as it is)
ASSERTION = "device assertion failed: "

__all__ = ["generate", "CodegenError", "CppRenderer", "PRELUDE"]


#: element type in memory / type of SSA values
STORAGE = {"float32": "float", "float64": "double", "float16": "uint16_t", "bfloat16": "uint16_t",
           "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t",
           "bool": "bool"}
VALUE = {**STORAGE, "float16": "float", "bfloat16": "float"}
FLOATS = {"float32", "float64", "float16", "bfloat16"}

PRELUDE = (Path(__file__).parent / "prelude.h").read_text()  # the helpers every kernel calls


# ---- the renderer: tables over the SDK's C-style renderer ---------------------------------------------

def _std(name: str, n: int = 1, cast: bool = False) -> str:
    args = ", ".join(("({t})" if cast else "") + f"{{{k}}}" for k in range(n))
    return f"std::{name}({args})"


_UNARY_STD = ("exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan", "asin", "acos",
              "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma", "floor", "ceil",
              "trunc", "cbrt", "tgamma", "isinf", "isnan", "signbit")


def _index_symbols(text: str) -> set[str]:
    return {x.name for x in parse_expr(text).free_symbols}


def _fold(fn: str, args: list[str]) -> str:
    out = args[0]
    for x in args[1:]:
        out = f"{fn}({out}, {x})"
    return out


def _int_or_float(int_form: str, float_form: str) -> Callable[[list, str, str], str]:
    """An op whose C form depends on whether its dtype is floating."""
    return lambda a, dtype, t: (float_form if dtype in FLOATS else int_form).format(*a, t=t)


class CppRenderer(CStyleRenderer):
    """C++ (OpenMP, the compiler's vectorizer) of one loop-IR kernel: ``std::`` math, 64-bit
    ``L`` index literals, 16-bit floats stored as ``uint16_t`` and computed in ``float``."""

    language = "C++"
    storage_types = STORAGE
    value_types = VALUE
    index_code = {
        **CStyleRenderer.index_code, "Abs": "std::abs((int64_t)({0}))", "TruncToInt": "(int64_t)std::trunc({0})",
        "FloorToInt": "(int64_t)std::floor({0})", "CeilToInt": "(int64_t)std::ceil({0})",
        "RoundToInt": "(int64_t)std::nearbyint({0})",
        "Min": lambda a: _fold("std::min<int64_t>", a), "Max": lambda a: _fold("std::max<int64_t>", a)}
    code_for_op = {
        **CStyleRenderer.code_for_op, **{k: _std(k) for k in _UNARY_STD},
        **{k: _std(k, 2, cast=True) for k in ("atan2", "hypot", "copysign", "fmod", "nextafter")},
        "truediv": "(({t}){0} / ({t}){1})", "div": "(({t}){0} / ({t}){1})",
        "floordiv": "tv_floordiv(({t}){0}, ({t}){1})", "remainder": "tv_remainder(({t}){0}, ({t}){1})",
        "truncdiv": _int_or_float("({0} / {1})", "std::trunc({0} / {1})"),
        "mod": _int_or_float("({0} % {1})", "std::fmod({0}, {1})"),
        "pow": _int_or_float("tv_ipow({0}, {1})", "std::pow(({t}){0}, ({t}){1})"),
        "abs": _int_or_float("({0} < 0 ? -{0} : {0})", "std::abs({0})"),
        "bitwise_not": lambda a, dtype, t: f"(!{a[0]})" if dtype == "bool" else f"(~{a[0]})",
        "maximum": "tv_max<{t}>({0}, {1})", "minimum": "tv_min<{t}>({0}, {1})", "where": "({0} ? ({t}){1} : ({t}){2})",
        "logical_xor": "((bool){0} != (bool){1})", "identity": "{0}", "relu": "tv_max<{t}>({0}, ({t})0)",
        "sigmoid": "(({t})1 / (({t})1 + std::exp(-{0})))", "reciprocal": "(({t})1 / {0})",
        "rsqrt": "(({t})1 / std::sqrt({0}))", "sign": "tv_sign<{t}>({0})", "round": "std::nearbyint({0})",
        "erfinv": "(({t})tv_erfinv((double){0}))", "fma": "std::fma({0}, {1}, {2})"}
    unsupported_ops = {**CStyleRenderer.unsupported_ops,
                       **dict.fromkeys(("rand", "randn", "randint64", "load_seed"),
                                       "the SDK keeps random ops as ATen calls; this kernel has one")}

    def __init__(self, lk: LoopKernel) -> None:
        self.lk = lk
        self.lines: list[str] = []
        self.depth = 1
        self.dtypes: dict[str, str] = {}  # SSA name -> dtype
        self.buffers = {b.name: b for b in lk.buffers}
        self.masked_value: tuple[str, str] | None = None  # (name, C type) a ``yield`` assigns
        self.checks: list[str] = []  # the message of each bounds check, by number

    def int_literal(self, v: int) -> str:
        return f"{v}L"

    def literal_type(self, dtype: str | None) -> str:
        return VALUE.get(dtype, "double")  # type: ignore[arg-type]

    # -- emission --
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def open(self, line: str) -> None:
        self.emit(line + " {")
        self.depth += 1

    def close(self) -> None:
        self.depth -= 1
        self.emit("}")

    def define(self, name: str | None, dtype: str, expr: str) -> None:
        if name is None:
            raise CodegenError(f"statement defines no value: {expr}")
        self.dtypes[name] = dtype
        self.emit(f"{VALUE[dtype]} {name} = {expr};")

    # -- memory --
    def loaded(self, buffer: str, index: str) -> tuple[str, str]:
        """(C expression, dtype) of an element: 16-bit floats widen to float."""
        dtype = self.buffers[buffer].dtype
        ref = f"{buffer}[{self.index(index)}]"
        if dtype == "float16":
            return f"tv_h2f({ref})", dtype
        if dtype == "bfloat16":
            return f"tv_b2f({ref})", dtype
        return ref, dtype

    def stored(self, buffer: str, value: str) -> str:
        """``value`` converted to the element type of ``buffer`` (16-bit floats rounded)."""
        dtype = self.buffers[buffer].dtype
        if dtype == "float16":
            return f"tv_f2h((float)({value}))"
        if dtype == "bfloat16":
            return f"tv_f2b((float)({value}))"
        return f"({STORAGE[dtype]})({value})"

    # -- statements (dispatched by ``statement``) --
    def stmt_load(self, st: Stmt) -> None:
        expr, dtype = self.loaded(st.attr("buffer"), st.attr("index"))
        self.define(st.name, dtype, expr)

    def stmt_store(self, st: Stmt) -> None:
        buffer = st.attr("buffer")
        target = f"{buffer}[{self.index(st.attr('index'))}]"
        if st.attr("mode") == "atomic_add":
            if self.buffers[buffer].dtype in ("float16", "bfloat16"):
                raise CodegenError("atomic_add into a 16-bit float buffer is not supported")
            self.emit("#pragma omp atomic")
            self.emit(f"{target} += {self.stored(buffer, st.args[0])};")
        else:
            self.emit(f"{target} = {self.stored(buffer, st.args[0])};")

    stmt_store_reduction = stmt_store

    def stmt_constant(self, st: Stmt) -> None:
        dtype = st.attr("dtype") or st.dtype or "float32"
        self.define(st.name, dtype, self.literal(st.attr("value"), dtype))

    def stmt_index_expr(self, st: Stmt) -> None:
        dtype = st.attr("dtype") or st.dtype or "int64"
        self.define(st.name, dtype, f"({VALUE[dtype]})({self.index(st.attr('expr'))})")

    def stmt_to_dtype(self, st: Stmt) -> None:
        dtype, src = st.attr("dtype"), st.args[0]
        if dtype == "bool":
            expr = f"({src} != 0)"
        elif dtype == "float16":
            expr = f"tv_h2f(tv_f2h((float)({src})))"
        elif dtype == "bfloat16":
            expr = f"tv_b2f(tv_f2b((float)({src})))"
        else:
            expr = f"({VALUE[dtype]})({src})"
        self.define(st.name, dtype, expr)

    def stmt_to_dtype_bitcast(self, st: Stmt) -> None:
        dtype, src_dtype = st.attr("dtype"), st.attr("src_dtype")
        if {dtype, src_dtype} & {"float16", "bfloat16"}:
            raise CodegenError("bitcasts of 16-bit floats are not supported")
        self.define(st.name, dtype, f"tv_bitcast<{VALUE[dtype]}, {VALUE[src_dtype]}>({st.args[0]})")

    def stmt_getitem(self, st: Stmt) -> None:
        src, k = st.args[0], int(st.attr("index"))
        self.define(st.name, self.dtypes[f"{src}_{k}"], f"{src}_{k}")

    def stmt_indirect_indexing(self, st: Stmt) -> None:
        """A value used as an index: negative values wrap (as eager indexing does), and where
        Inductor asks for the check, a value outside ``[0, size)`` is recorded (see
        :func:`index_check`), the kernel returns 3 and the index becomes 0 (no wild access)."""
        size, name = self.index(st.attr("size")), st.name
        self.emit(f"int64_t {name} = (int64_t)({st.args[0]});")
        if st.attr("wrap_neg", True):
            self.emit(f"if ({name} < 0) {name} += {size};")
        if st.attr("check", True):
            check = self.check(f"{self.indexed(name)} at index {name} = {st.args[0]}", st.attr("size"))
            self.emit(f"if ({name} < 0 || {name} >= {size}) {{ tv_fail({check}, {name}); tv_status = 3; {name} = 0; }}")

    def stmt_check_bounds(self, st: Stmt) -> None:
        expr, size = self.index(st.attr("expr")), self.index(st.attr("size"))
        check = self.check(f"index {st.attr('expr')}", st.attr("size"))
        self.emit(f"if (({expr}) < 0 || ({expr}) >= {size}) {{ tv_fail({check}, {expr}); tv_status = 3; }}")

    def stmt_device_assert(self, st: Stmt) -> None:
        """``torch._assert_async``: where the condition is false the kernel returns 3 with the message."""
        check = self.message(f"{ASSERTION}{st.attr('msg')}")
        self.emit(f"if (!({st.args[0]})) {{ tv_fail({check}, 0); tv_status = 3; }}")

    def check(self, what: str, size: str) -> int:
        """Number a bounds check; its message names what is indexed and the bound."""
        return self.message(f"{what}: outside [0, {size})")

    def message(self, message: str) -> int:
        """Number a failure message (a bounds check's, an assertion's)."""
        if message not in self.checks:
            self.checks.append(message)
        return self.checks.index(message)

    def indexed(self, symbol: str) -> str:
        """The buffers whose loads or stores use the indirect index ``symbol``."""
        used = [s.attr("buffer") for n in self.lk.kernel.nests for s in n.stmts()
                if s.op in ("load", "store", "store_reduction") and symbol in _index_symbols(s.attr("index"))]
        return "buffer " + ", ".join(dict.fromkeys(used)) if used else "an index expression"

    def stmt_masked(self, st: Stmt) -> None:
        dtype = st.dtype or "float32"
        other = st.attr("other")
        self.define(st.name, dtype, self.literal(other, dtype) if other is not None else f"({VALUE[dtype]})0")
        self.open(f"if ({st.args[0]})")
        outer, self.masked_value = self.masked_value, (st.name, VALUE[dtype])  # type: ignore[assignment]
        for inner in st.body:
            self.statement(inner)
        self.masked_value = outer
        self.close()

    def stmt_yield(self, st: Stmt) -> None:
        name, ctype = self.masked_value  # type: ignore[misc]
        self.emit(f"{name} = ({ctype})({st.args[0]});")

    def stmt_reduction(self, st: Stmt) -> None:
        raise AssertionError("reductions are emitted by the nest")

    def stmt_compute(self, st: Stmt) -> None:
        a = self.operands(st)
        dtype = st.dtype or "float32"
        expr = self.compute(st.op, a, dtype, VALUE.get(dtype, "float"))
        self.define(st.name, st.dtype or self._promote(a), expr)

    def error_function(self) -> str:
        """``<kernel>_error(int64_t* value)``: the message of the first failed bounds check since
        the last call (and the index it saw), or NULL."""
        whats = ", ".join('"' + m.replace("\\", "\\\\").replace('"', '\\"') + '"' for m in self.checks) or "0"
        return (f"static int64_t tv_error[2] = {{-1, 0}};\n"
                f"static inline void tv_fail(int64_t check, int64_t value) {{ if (tv_error[0] < 0) {{ tv_error[1] = value; tv_error[0] = check; }} }}\n"
                f'extern "C" const char* {self.lk.kernel.name}_error(int64_t* value) {{\n'
                f"  static const char* what[] = {{{whats}}};\n"
                f"  if (tv_error[0] < 0) return nullptr;\n"
                f"  *value = tv_error[1]; const char* out = what[tv_error[0]]; tv_error[0] = -1; return out;\n}}\n")

    def _promote(self, args: Sequence[str]) -> str:
        kinds = [self.dtypes.get(x, "float32") for x in args]
        return next((k for k in kinds if k in FLOATS), kinds[0] if kinds else "float32")




# ---- reductions ----------------------------------------------------------------------------------------

_INIT = {"sum": "0", "prod": "1", "xor_sum": "0", "any": "false"}


def _acc_dtype(w: CppRenderer, st: Stmt) -> str:
    """The accumulator's dtype: the attr for value reductions; the values' own for argmax/argmin
    (whose ``dtype`` is the int64 of the index)."""
    if st.attr("kind") in ("argmax", "argmin"):
        return st.attr("src_dtype") or w.dtypes.get(st.args[0], "float32")
    return st.attr("dtype") or st.dtype or "float32"


def _reduction_open(w: CppRenderer, st: Stmt) -> None:
    kind, dtype = st.attr("kind"), _acc_dtype(w, st)
    ct, n = VALUE[dtype], st.name
    if kind in _INIT:
        w.emit(f"{ct} {n}_acc = ({ct}){_INIT[kind]};")
    elif kind in ("max", "min", "argmax", "argmin"):
        big = f"std::numeric_limits<{ct}>::infinity()" if dtype in FLOATS else \
            f"std::numeric_limits<{ct}>::{'lowest' if 'max' in kind else 'max'}()"
        w.emit(f"{ct} {n}_acc = {'-' if 'max' in kind and dtype in FLOATS else ''}{big};")
        if kind in ("max", "min") and dtype in FLOATS:
            w.emit(f"int {n}_nan = 0;  // int, not bool: GCC vectorizes no bool reduction")
        if kind.startswith("arg"):
            w.emit(f"int64_t {n}_idx = 0; bool {n}_nan = false;")
    elif kind in ("welford_reduce", "welford_combine"):
        w.emit(f"{ct} {n}_mean = 0, {n}_m2 = 0, {n}_w = 0;")
    elif kind == "online_softmax_reduce":
        w.emit(f"{ct} {n}_max = -std::numeric_limits<{ct}>::infinity(), {n}_sum = 0;")
    else:
        raise CodegenError(f"reduction kind {kind!r} is not supported by the C++ code generator")


#: one update statement per reduction kind: ``n`` the reduction's name, ``v`` the value, ``ct`` the
#: accumulator's C type, ``cmp`` the comparison of max/min-like kinds, ``i`` the reduction index
_UPDATE = {
    "sum": "{n}_acc += ({ct}){v};",
    "prod": "{n}_acc *= ({ct}){v};",
    "xor_sum": "{n}_acc ^= ({ct}){v};",
    "any": "{n}_acc = {n}_acc || ({v} != 0);",
    # floats: the comparison alone vectorizes; NaNs go to the flag
    "float_minmax": "{{ {ct} v = ({ct}){v}; {n}_acc = v {cmp} {n}_acc ? v : {n}_acc; {n}_nan |= v != v; }}",
    "minmax": "{n}_acc = tv_{kind}<{ct}>({n}_acc, ({ct}){v});",
    "arg": "if (!{n}_nan && (({ct}){v} != ({ct}){v} || ({ct}){v} {cmp} {n}_acc)) "
           "{{ {n}_acc = ({ct}){v}; {n}_idx = {i}; {n}_nan = {n}_acc != {n}_acc; }}",
    "welford_reduce": "{{ {n}_w += 1; {ct} d = ({ct}){v} - {n}_mean; {n}_mean += d / {n}_w; "
                      "{n}_m2 += d * (({ct}){v} - {n}_mean); }}",
    "welford_combine": "if ({weight} != 0) {{ {ct} nw = {n}_w + {weight}; {ct} d = {mean} - {n}_mean; "
                       "{n}_mean += d * {weight} / nw; {n}_m2 += {m2} + d * d * {n}_w * {weight} / nw; {n}_w = nw; }}",
    "online_softmax_reduce": "{{ {ct} nm = tv_max<{ct}>({n}_max, ({ct}){v}); "
                             "if (nm != -std::numeric_limits<{ct}>::infinity()) "
                             "{{ {n}_sum = {n}_sum * std::exp({n}_max - nm) + std::exp(({ct}){v} - nm); }} {n}_max = nm; }}",
}


def _reduction_update(w: CppRenderer, st: Stmt, ridx: str) -> None:
    kind, dtype = st.attr("kind"), _acc_dtype(w, st)
    form = kind
    if kind in ("max", "min"):
        form = "float_minmax" if dtype in FLOATS else "minmax"
    elif kind in ("argmax", "argmin"):
        form = "arg"
    if form not in _UPDATE:
        return
    fields = dict(n=st.name, v=st.args[0], ct=VALUE[dtype], kind=kind, i=ridx,
                  cmp=">" if kind in ("max", "argmax") else "<")
    if kind == "welford_combine":
        fields.update(zip(("mean", "m2", "weight"), st.args))
    w.emit(_UPDATE[form].format(**fields))


def _reduction_close(w: CppRenderer, st: Stmt) -> None:
    kind, n = st.attr("kind"), st.name
    dtype = st.attr("dtype") or st.dtype or "float32"
    if kind in ("welford_reduce", "welford_combine"):
        for k, part in enumerate(("mean", "m2", "w")):
            w.define(f"{n}_{k}", dtype, f"{n}_{part}")
    elif kind == "online_softmax_reduce":
        w.define(f"{n}_0", dtype, f"{n}_max")
        w.define(f"{n}_1", dtype, f"{n}_sum")
    elif kind in ("argmax", "argmin"):
        w.define(n, "int64", f"{n}_idx")
    elif kind in ("max", "min") and dtype in FLOATS:
        w.define(n, dtype, f"{n}_nan ? std::numeric_limits<{VALUE[dtype]}>::quiet_NaN() : {n}_acc")
    else:
        w.define(n, dtype, f"{n}_acc")


# ---- nests and kernels -----------------------------------------------------------------------------------

def _uses(st: Stmt) -> set[str]:
    used = set(st.args)
    for inner in st.body or ():
        used |= _uses(inner)
    return used


def _symbols(st: Stmt) -> set[str]:
    names: set[str] = set()
    for key in ("index", "expr"):
        text = st.attr(key)
        if isinstance(text, str):
            names |= {x.name for x in parse_expr(text).free_symbols}
    for inner in st.body or ():
        names |= _symbols(inner)
    return names


def _numel(ranges: Sequence[str]) -> int | None:
    total = 1
    for r in ranges:
        if not r.isdigit():
            return None
        total *= int(r)
    return total


_PARALLEL_WORK = 1 << 15


def _loops(w: CppRenderer, variables: Sequence[str], ranges: Sequence[str], parallel: bool, simd: bool | str) -> int:
    """Open the loops; ``simd`` marks the innermost one ``omp simd`` (a string: its clauses)."""
    for k, (var, size) in enumerate(zip(variables, ranges)):
        if k == 0 and parallel:
            w.emit("#pragma omp parallel for")
        elif k == len(variables) - 1 and simd:
            w.emit("#pragma omp simd" + (f" {simd}" if isinstance(simd, str) else ""))
        w.open(f"for (int64_t {var} = 0; {var} < {w.index(size)}; ++{var})")
    return len(variables)


def _parallel(nests: Sequence[LoopNest]) -> bool:
    """Whether the outer loop is worth OpenMP threads: enough work, and more than one iteration."""
    works = [_numel((*n.ranges, *n.reduction_ranges)) for n in nests]
    work = None if None in works else sum(works)  # type: ignore[arg-type]
    return (work is None or work >= _PARALLEL_WORK) and (_numel(nests[0].ranges[:1]) or 2) > 1


def _simd_reduction_clauses(w: CppRenderer, reductions: Sequence[Stmt], inner: Sequence[Stmt]) -> str | bool:
    """``omp simd`` clauses for the innermost r loop, or False when it must stay scalar.

    Floating sums, maxima and minima vectorize only when their order may change (the compiler
    never does it without -ffast-math); ``reduction(...)`` clauses allow it, as Inductor's
    vectorized reductions do. Maxima and minima carry a NaN flag of their own (an OR reduction),
    since OpenMP's combining ``max`` drops NaNs. Only for plain loads and arithmetic inside.
    """
    if any(st.op in ("masked", "indirect_indexing", "check_bounds", "device_assert") for st in inner):
        return False
    clauses: dict[str, list[str]] = {}
    for st in reductions:
        kind = st.attr("kind")
        if kind not in ("sum", "max", "min") or _acc_dtype(w, st) not in ("float32", "float64"):
            return False
        clauses.setdefault("+" if kind == "sum" else kind, []).append(f"{st.name}_acc")
        if kind != "sum":
            clauses.setdefault("|", []).append(f"{st.name}_nan")
    return " ".join(f"reduction({op}:{','.join(names)})" for op, names in clauses.items())


def _split(nest: LoopNest) -> tuple[list[Stmt], list[Stmt], list[Stmt], list[Stmt]]:
    """(pre, inner, post, reductions) of a reduction nest's body."""
    # Split the body: what neither reads an r variable nor a reduction runs before the r loops,
    # what feeds the reductions inside them, what uses a reduction's result after them.
    rvars, rdep, after = set(nest.reduce_vars), set(), set()
    pre: list[Stmt] = []
    inner: list[Stmt] = []
    post: list[Stmt] = []
    reductions: list[Stmt] = []
    for st in nest.body:
        if st.op == "reduction":
            reductions.append(st)
            after.add(st.name)
        elif st.op == "store_reduction" or _uses(st) & after:
            post.append(st)
            if st.name:
                after.add(st.name)
        elif _symbols(st) & rvars or _uses(st) & rdep:
            inner.append(st)
            if st.name:
                rdep.add(st.name)
            if st.op == "indirect_indexing":  # its index symbol varies with r too
                rvars.add(st.name)
        else:
            pre.append(st)
    return pre, inner, post, reductions


# ---- outer reductions (a sum over rows: the reduced variable is not the contiguous one) ---------------
# Reducing one column at a time walks memory with a row's stride, one cache line per element.
# Instead a block of neighbouring outputs keeps one accumulator each, and every row updates the
# whole block with contiguous, vectorized loads, as Inductor's outer-reduction loops do.

_LANES = 64


def _is_outer_reduction(nest: LoopNest, inner: Sequence[Stmt]) -> bool:
    """Whether the loads feeding the reductions are contiguous along the last output variable
    and strided along the innermost reduced one."""
    if not nest.ranges or any(s.op in ("masked", "indirect_indexing", "check_bounds", "device_assert") for s in inner):
        return False
    loads = [parse_expr(s.attr("index")) for s in inner if s.op == "load"]
    return any(_coeff(e, nest.iter_vars[-1]) == 1 for e in loads) and \
        all(_coeff(e, nest.reduce_vars[-1]) != 1 for e in loads)


def _coeff(expr: sympy.Expr, var: str) -> sympy.Expr:
    """The coefficient of the loop variable named ``var`` in an index expression."""
    return next((expr.coeff(x) for x in expr.free_symbols if x.name == var), sympy.Integer(0))


def _acc_parts(w: CppRenderer, st: Stmt) -> list[tuple[str, str]]:
    """(suffix, C type) of each accumulator variable ``_reduction_open`` declares for ``st``."""
    kind, ct = st.attr("kind"), VALUE[_acc_dtype(w, st)]
    if kind in ("argmax", "argmin"):
        return [("acc", ct), ("idx", "int64_t"), ("nan", "bool")]
    if kind in ("welford_reduce", "welford_combine"):
        return [("mean", ct), ("m2", ct), ("w", ct)]
    if kind == "online_softmax_reduce":
        return [("max", ct), ("sum", ct)]
    if kind in ("max", "min") and _acc_dtype(w, st) in FLOATS:
        return [("acc", ct), ("nan", "int")]
    return [("acc", ct)]


def _lane_loop(w: CppRenderer, var: str, simd: bool = False) -> None:
    if simd:
        w.emit("#pragma omp simd")
    w.open("for (int64_t tv_j = 0; tv_j < tv_n; ++tv_j)")
    w.emit(f"const int64_t {var} = {var}_b + tv_j;")


def _lanes(w: CppRenderer, reductions: Sequence[Stmt], load: bool) -> None:
    """Copy every accumulator between its per-lane array and a local of the usual name."""
    for st in reductions:
        for part, ct in _acc_parts(w, st):
            name = f"{st.name}_{part}"
            w.emit(f"{ct} {name} = {name}_l[tv_j];" if load else f"{name}_l[tv_j] = {name};")


def _outer_reduction(w: CppRenderer, nest: LoopNest, parts: tuple[list[Stmt], ...]) -> None:
    pre, inner, post, reductions = parts
    last, size = nest.iter_vars[-1], w.index(nest.ranges[-1])
    _loops(w, nest.iter_vars[:-1], nest.ranges[:-1], _parallel([nest]), False)
    if len(nest.ranges) == 1 and _parallel([nest]):
        w.emit("#pragma omp parallel for")
    w.open(f"for (int64_t {last}_b = 0; {last}_b < {size}; {last}_b += {_LANES})")
    w.emit(f"const int64_t tv_n = std::min<int64_t>({_LANES}, {size} - {last}_b);")
    for st in reductions:
        for part, ct in _acc_parts(w, st):
            w.emit(f"{ct} {st.name}_{part}_l[{_LANES}];")
    _lane_loop(w, last)
    for st in reductions:
        _reduction_open(w, st)
    _lanes(w, reductions, load=False)
    w.close()
    ridx = "0L"
    for var, rsize in zip(nest.reduce_vars, nest.reduction_ranges):
        ridx = f"({ridx} * {w.index(rsize)} + {var})"
    r_opened = _loops(w, nest.reduce_vars, nest.reduction_ranges, False, False)
    _lane_loop(w, last, simd=True)
    _lanes(w, reductions, load=True)
    for st in [*pre, *inner]:
        w.statement(st)
    for st in reductions:
        _reduction_update(w, st, ridx)
    _lanes(w, reductions, load=False)
    w.close()
    for _ in range(r_opened):
        w.close()
    _lane_loop(w, last)
    _lanes(w, reductions, load=True)
    for st in pre:
        w.statement(st)
    for st in reductions:
        _reduction_close(w, st)
    for st in post:
        w.statement(st)
    for _ in range(len(nest.ranges) + 1):
        w.close()


def _row_invariant(w: CppRenderer, nest: LoopNest) -> list[Stmt]:
    """Statements of a pointwise nest that depend on its outermost variable only: computed once
    per row, before the inner loops (a per-row load there also keeps GCC's PRE from blocking
    the vectorization of the inner loop)."""
    allowed, hoisted = {nest.iter_vars[0], *w.lk.size_vars}, []
    for st in nest.body:
        if st.op in ("store", "store_reduction", "masked", "indirect_indexing", "check_bounds", "device_assert") or st.body:
            continue
        if _symbols(st) <= allowed and set(st.args) <= allowed and st.name:
            hoisted.append(st)
            allowed.add(st.name)
    return hoisted


def _nest(w: CppRenderer, nest: LoopNest, bound: int = 0) -> None:
    """Emit one nest in a block of its own (its SSA names are its own: a kernel's nests may come
    from several of Inductor's kernels, see ``CpuBackend.compile_program``); its first ``bound``
    loops are already open (shared with its group)."""
    w.emit(f"{{  // {nest.name}")
    w.depth += 1
    _nest_body(w, nest, bound)
    w.close()


def _nest_body(w: CppRenderer, nest: LoopNest, bound: int) -> None:
    parallel = bool(nest.ranges) and not bound and _parallel([nest])
    iter_vars, ranges = nest.iter_vars[bound:], nest.ranges[bound:]
    if not nest.reduction_ranges:
        simple = all(s.op not in ("masked", "indirect_indexing", "check_bounds", "device_assert") and s.attr("mode") != "atomic_add"
                     for s in nest.body)
        hoisted = _row_invariant(w, nest) if len(nest.ranges) > 1 else []
        opened = 0 if bound or not hoisted else _loops(w, iter_vars[:1], ranges[:1], parallel, False)
        for st in hoisted:
            w.statement(st)
        skip = 1 - bound if hoisted else 0
        opened += _loops(w, iter_vars[skip:], ranges[skip:], parallel and not skip, simple)
        for st in nest.body:
            if not any(st is h for h in hoisted):
                w.statement(st)
        for _ in range(opened):
            w.close()
        return
    pre, inner, post, reductions = _split(nest)
    if not bound and _is_outer_reduction(nest, inner):
        return _outer_reduction(w, nest, (pre, inner, post, reductions))
    opened = _loops(w, iter_vars, ranges, parallel, False)
    for st in pre:
        w.statement(st)
    for st in reductions:
        _reduction_open(w, st)
    ridx = "0L"
    for var, size in zip(nest.reduce_vars, nest.reduction_ranges):
        ridx = f"({ridx} * {w.index(size)} + {var})"
    simd = _simd_reduction_clauses(w, reductions, inner)
    r_opened = _loops(w, nest.reduce_vars, nest.reduction_ranges, False, simd)
    for st in nest.body:
        if st.op == "reduction":
            _reduction_update(w, st, ridx)
        elif any(st is x for x in inner):
            w.statement(st)
    for _ in range(r_opened):
        w.close()
    for st in reductions:
        _reduction_close(w, st)
    for st in post:
        w.statement(st)
    for _ in range(opened):
        w.close()


# ---- fusing the outer loop of a kernel's nests --------------------------------------------------------
# Inductor fused a kernel's nests; running them one after another over the whole tensor costs one
# memory pass each (softmax: four). When consecutive nests share their outermost range and every
# buffer one of them writes is touched by the others only at the same elements per outer
# iteration, one shared outer loop runs them row by row, the row staying in cache.

def _footprint(nest: LoopNest, index: str, sizes: set[str]) -> tuple[str, ...] | None:
    """What an access touches per outer iteration: its offset, its ``i0`` stride and the
    (stride, extent) of every other loop variable; None unless affine in the loop variables."""
    extents = dict(zip(nest.iter_vars, nest.ranges)) | dict(zip(nest.reduce_vars, nest.reduction_ranges))
    expr = parse_expr(index)
    loop_syms = [x for x in expr.free_symbols if x.name in extents]
    if any(x.name not in extents and x.name not in sizes for x in expr.free_symbols):
        return None  # an indirect index
    try:
        poly = sympy.Poly(expr, *loop_syms) if loop_syms else None
    except sympy.PolynomialError:
        return None
    if poly is not None and (poly.total_degree() > 1 or any(x in c.free_symbols for c in poly.coeffs() for x in loop_syms)):
        return None
    coeff = {x.name: expr.coeff(x) for x in loop_syms}
    offset = expr.subs({x: 0 for x in loop_syms})
    inner = sorted(f"{coeff[v]}*[{extents[v]}]" for v in coeff if v != "i0" and coeff[v] != 0)
    return (str(offset), str(coeff.get("i0", 0)), *inner)


def _accesses(nest: LoopNest) -> list[tuple[str, str, bool]]:
    """(buffer, index, writes) of every load and store of ``nest``."""
    return [(s.attr("buffer"), s.attr("index"), s.op != "load") for s in nest.stmts()
            if s.op in ("load", "store", "store_reduction")]


def _fusable(group: Sequence[LoopNest], sizes: set[str], base: dict[str, str] | None = None) -> bool:
    if any(not n.ranges or n.ranges[0] != group[0].ranges[0] for n in group):
        return False
    if any(s.op == "indirect_indexing" or s.attr("mode") == "atomic_add" for n in group for s in n.stmts()):
        return False
    # a view and its base are one memory (a kernel's nests may come from several of Inductor's
    # kernels, between which a buffer is read through a view of it): one entry per base buffer
    base = base or {}
    touched: dict[str, list[tuple[int, tuple[str, ...] | None, bool, str]]] = {}
    for k, nest in enumerate(group):
        for buffer, index, writes in _accesses(nest):
            touched.setdefault(base.get(buffer, buffer), []).append((k, _footprint(nest, index, sizes), writes, buffer))
    for uses in touched.values():
        shared = len({k for k, *_ in uses}) > 1 and any(writes for _, _, writes, _ in uses)
        footprints = {f for _, f, _, _ in uses}
        if shared and (None in footprints or len(footprints) > 1 or len({b for *_, b in uses}) > 1):
            return False
    return True


def _groups(lk: LoopKernel) -> list[list[LoopNest]]:
    """The kernel's nests, consecutive ones that may share their outer loop grouped."""
    sizes = set(lk.size_vars)
    base = {b.name: b.view_of for b in lk.buffers if b.view_of}
    groups: list[list[LoopNest]] = []
    for nest in lk.kernel.nests:
        if groups and _fusable([*groups[-1], nest], sizes, base):
            groups[-1].append(nest)
        else:
            groups.append([nest])
    return groups


def _group(w: CppRenderer, group: Sequence[LoopNest]) -> None:
    if len(group) == 1:
        return _nest(w, group[0])
    _loops(w, ["i0"], group[0].ranges[:1], _parallel(group), False)
    for nest in group:
        _nest(w, nest, bound=1)
    w.close()


def generator_sources() -> tuple[Path, ...]:
    """The files whose text decides the generated code: this module, its prelude and the SDK
    renderer it builds on (the kernel cache's key holds their hash)."""
    return Path(__file__), Path(__file__).parent / "prelude.h", Path(sys.modules[CStyleRenderer.__module__].__file__)


def generate(lk: LoopKernel) -> str:
    """The C++ translation unit of one kernel (see the module docstring)."""
    w = CppRenderer(lk)
    name = lk.kernel.name
    w.lines.append(f'extern "C" int32_t {name}(const void* launch, void* args) {{')
    w.emit("(void)launch;")
    w.emit("char* tv_args = (char*)args;")
    w.emit("int32_t tv_status = 0;")
    for k, b in enumerate(lk.buffers):
        w.emit(f"{STORAGE[b.dtype]}* __restrict__ {b.name} = *({STORAGE[b.dtype]}**)(tv_args + {8 * k});")
    for k, s in enumerate(lk.size_vars):
        w.emit(f"const int64_t {s} = *(int64_t*)(tv_args + {8 * (len(lk.buffers) + k)});")
    for group in _groups(lk):
        _group(w, group)
    w.emit("return tv_status;")
    w.lines.append("}")
    checks = w.error_function() if w.checks else ""
    return f"// {name}: generated by torchvendor_cpu from the loop IR\n{PRELUDE}\n{checks}" + "\n".join(w.lines) + "\n"
