"""One C-family renderer of loop IR, for every code generator whose compiler takes C-like source.

A :class:`CStyleRenderer` turns loop-IR statements into C expressions and declarations from
tables, in the manner of tinygrad's C-style renderers: a subclass for a target (C++ with OpenMP,
CUDA C, OpenCL, SYCL, a CUDA dialect) overrides tables and a few small hooks, never the walk.

- **dtype tables**: :attr:`~CStyleRenderer.storage_types` (an element in memory) and
  :attr:`~CStyleRenderer.value_types` (the type values are computed in: 16-bit floats compute in
  ``float``);
- **the index printer**: :meth:`~CStyleRenderer.print_index` prints sympy index expressions
  through :attr:`~CStyleRenderer.index_code` (one entry per function of
  ``torchvendor.ir.loop_ir.INDEX_FUNCTIONS``), with :meth:`~CStyleRenderer.int_literal`,
  :meth:`~CStyleRenderer.rational_literal` and :meth:`~CStyleRenderer.render_pow` as hooks;
- **the op table**: :attr:`~CStyleRenderer.code_for_op` renders each compute op (a format
  template over the operands ``{0}, {1}, ...`` and the compute type ``{t}``, or a function of
  ``(operands, dtype, ctype)``); :attr:`~CStyleRenderer.unsupported_ops` declares the others
  with a reason. Every op of ``torchvendor.ir.loop_ir.COMPUTE_OPS`` and ``STATEMENT_OPS`` is in
  exactly one of the two (:meth:`~CStyleRenderer.coverage` says which are in neither);
- **statements** are dispatched by op (:meth:`~CStyleRenderer.statement`) to ``stmt_<op>``
  methods of the subclass, and compute ops to ``stmt_compute``;
- **the launch model** is the subclass's: how nests map to loops (CPU: nested ``for`` loops,
  OpenMP, SIMD reductions) or to threads and blocks (CUDA: a flat index per thread, a warp or a
  block per row, vector lanes), how accumulators are declared and combined. The base class keeps
  no opinion there; ``render`` is the subclass's entry point.

Example: a dialect that spells the float functions differently overrides one table entry::

    >>> class MyRenderer(CStyleRenderer):
    ...     language = "MyC"
    ...     code_for_op = {**CStyleRenderer.code_for_op, "exp": "my_expf({0})"}
    >>> r = MyRenderer()
    >>> r.compute("exp", ["t0"], "float32"), r.compute("add", ["t0", "t1"], "float32")
    ('my_expf(t0)', '(t0 + t1)')
    >>> r.index("FloorDiv(i0, 4) + 8*s0")
    '(8*s0 + tv_floordiv(i0, 4))'
    >>> try:
    ...     r.compute("digamma", ["t0"], "float32")
    ... except CodegenError as e:
    ...     print(e)
    ops.digamma is not supported by the MyC code generator (no C library function)
"""
from __future__ import annotations

import math
from typing import Any, Callable, ClassVar, Mapping, Union

from torchvendor.ir.loop_ir import COMPUTE_OPS, STATEMENT_OPS, Stmt, parse_expr

__all__ = ["CStyleRenderer", "CodegenError", "OpCode"]


class CodegenError(NotImplementedError):
    """The kernel uses something this code generator does not handle (named in the message)."""


#: A table entry: a format template over the operands (``{0}``...) and the compute type (``{t}``),
#: or a function ``(operands, dtype, ctype) -> str`` where the form depends on the dtype.
OpCode = Union[str, Callable[[list, str, str], str]]
IndexCode = Union[str, Callable[[list], str]]

FLOAT_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16"})


def _infix(op: str) -> str:
    return "({0} %s {1})" % op


def _call(fn: str, n: int = 1) -> str:
    return fn + "(" + ", ".join(f"{{{k}}}" for k in range(n)) + ")"


_MATH1 = ("exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "cbrt", "sin", "cos", "tan", "asin",
          "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma", "tgamma",
          "floor", "ceil", "trunc", "isinf", "isnan", "signbit")
_MATH2 = ("atan2", "hypot", "copysign", "nextafter")
_INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "and_": "&", "or_": "|", "xor": "^",
          "logical_and": "&&", "logical_or": "||", "bitwise_left_shift": "<<", "bitwise_right_shift": ">>",
          "lshift": "<<", "rshift": ">>"}


class CStyleRenderer:
    """Loop IR to C-family source through tables (see the module docstring).

    Class attributes are the tables a target overrides; the methods are the shared walk. A
    subclass renders one kernel per instance (its ``render``), emitting statements through
    :meth:`statement`.
    """

    #: name used in error messages ("... is not supported by the CUDA code generator")
    language: ClassVar[str] = "C"
    #: loop-IR dtype -> C type of an element in memory
    storage_types: ClassVar[Mapping[str, str]] = {
        "float32": "float", "float64": "double", "float16": "uint16_t", "bfloat16": "uint16_t", "int8": "int8_t",
        "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "bool": "bool"}
    #: loop-IR dtype -> C type values are computed in (16-bit floats compute in float)
    value_types: ClassVar[Mapping[str, str]] = {**storage_types, "float16": "float", "bfloat16": "float"}
    float_dtypes: ClassVar[frozenset[str]] = FLOAT_DTYPES
    #: sympy function (or ``Add``/``Mul``) name -> C form of its printed arguments
    index_code: ClassVar[Mapping[str, IndexCode]] = {
        "Add": lambda a: "(" + " + ".join(a) + ")", "Mul": lambda a: "*".join(a),
        "FloorDiv": "tv_floordiv({0}, {1})", "CleanDiv": "({0} / {1})", "CeilDiv": "(-tv_floordiv(-({0}), {1}))",
        "ModularIndexing": "tv_floormod(tv_floordiv({0}, {1}), {2})", "PythonMod": "tv_floormod({0}, {1})",
        "Mod": "tv_floormod({0}, {1})", "Identity": "{0}", "Where": "({0} ? {1} : {2})", "Abs": "tv_absi({0})",
        "IntTrueDiv": "((double)({0}) / (double)({1}))", "TruncToInt": "(int64_t)trunc({0})",
        "FloorToInt": "(int64_t)floor({0})", "CeilToInt": "(int64_t)ceil({0})", "RoundToInt": "(int64_t)rint({0})",
        "StrictLessThan": _infix("<"), "LessThan": _infix("<="), "StrictGreaterThan": _infix(">"),
        "GreaterThan": _infix(">="), "Equality": _infix("=="), "Unequality": _infix("!="),
        "BitwiseFn_bitwise_and": _infix("&"), "BitwiseFn_bitwise_or": _infix("|"), "LShift": _infix("<<"),
        "RShift": _infix(">>"), "Not": "(!{0})",
        "And": lambda a: "(" + " && ".join(a) + ")", "Or": lambda a: "(" + " || ".join(a) + ")",
        "Min": lambda a: _fold("tv_mini", a), "Max": lambda a: _fold("tv_maxi", a)}
    #: compute op -> C form (see :data:`OpCode`); ``libdevice_<name>`` uses ``<name>``'s entry
    code_for_op: ClassVar[Mapping[str, OpCode]] = {
        **{k: _infix(v) for k, v in _INFIX.items()}, **{k: _call(k) for k in _MATH1}, **{k: _call(k, 2) for k in _MATH2},
        "truediv": "({0} / {1})", "div": "({0} / {1})", "int_truediv": "((double){0} / (double){1})",
        "floordiv": "tv_floordiv({0}, {1})", "truncdiv": "({0} / {1})", "mod": "tv_cmod({0}, {1})",
        "fmod": "tv_cmod({0}, {1})", "remainder": "tv_pymod({0}, {1})", "pow": "pow({0}, {1})",
        "maximum": "tv_max({0}, {1})", "minimum": "tv_min({0}, {1})", "where": "({0} ? {1} : {2})",
        "logical_not": "(!{0})", "logical_xor": "(!{0} != !{1})", "bitwise_not": "(~{0})", "neg": "(-{0})",
        "abs": "abs({0})", "identity": "({0})", "relu": "tv_max({0}, ({t})0)", "reciprocal": "({t})1 / {0}",
        "square": "({0} * {0})", "rsqrt": "({t})1 / sqrt({0})", "sigmoid": "({t})1 / (({t})1 + exp(-{0}))",
        "sign": "tv_sign({0})", "round": "rint({0})", "erfinv": "erfinv({0})", "fma": "fma({0}, {1}, {2})"}
    #: op -> why this target does not render it (a :class:`CodegenError` names both)
    unsupported_ops: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys(("digamma", "log_ndtr", "ndtri"), "no C library function"),
        "frexp": "a two-result op", "round_decimal": "no C library function",
        **dict.fromkeys(("ceil_to_int", "floor_to_int", "trunc_to_int", "round_to_int"), "not produced on this target"),
        **dict.fromkeys(("rand", "randn", "randint64", "load_seed"), "random ops stay ATen calls")}

    # -- hooks of the index printer --------------------------------------------------------------
    def int_literal(self, v: int) -> str:
        """An integer constant of an index expression."""
        return str(v)

    def rational_literal(self, e: Any) -> str:
        """A non-integer constant of an index expression (a sympy Rational or Float)."""
        return repr(float(e))

    def render_pow(self, base: str, exponent: Any, exp_text: str) -> str:
        """``base ** exponent`` of integers: a product for a small natural power, else a call."""
        if exponent.is_Integer and int(exponent) >= 0:
            return "(" + "*".join([base] * int(exponent)) + ")" if int(exponent) else self.int_literal(1)
        return f"tv_ipow({base}, {exp_text})"

    def print_index(self, e: Any, names: Mapping[str, str] | None = None) -> str:
        """A sympy index expression as a C integer expression (symbols renamed through ``names``)."""
        names = names or {}
        if e.is_Integer:
            return self.int_literal(int(e))
        if e.is_Symbol:
            return names.get(e.name, e.name)
        if e.is_Rational or e.is_Float:
            return self.rational_literal(e)
        if e.is_Boolean and not e.args:
            return "true" if bool(e) else "false"
        a = [self.print_index(x, names) for x in e.args]
        name = "Add" if e.is_Add else "Mul" if e.is_Mul else type(e).__name__
        if e.is_Pow or name == "PowByNatural":
            return self.render_pow(a[0], e.args[1], a[1])
        code = self.index_code.get(name)
        if code is None:
            raise CodegenError(f"index function {name} is not supported by the {self.language} code generator")
        return code.format(*a) if isinstance(code, str) else code(a)

    def index(self, text: str, names: Mapping[str, str] | None = None) -> str:
        """An index expression of the schema (a string) as C."""
        return self.print_index(parse_expr(text), names)

    # -- values --------------------------------------------------------------------------------
    def value_type(self, dtype: str | None) -> str:
        """The C type values of ``dtype`` are computed in."""
        try:
            return self.value_types[dtype or "float32"]
        except KeyError:
            raise CodegenError(f"dtype {dtype} is not supported by the {self.language} code generator") from None

    def literal_type(self, dtype: str | None) -> str:
        """The C type of a constant of ``dtype`` (its cast)."""
        return self.value_type(dtype)

    def inf_literal(self, ctype: str, negative: bool) -> str:
        return f"(({ctype})({'-' if negative else ''}INFINITY))"

    def literal(self, value: Any, dtype: str | None) -> str:
        """A constant of ``dtype`` as C (NaN and infinities included)."""
        ctype = self.literal_type(dtype)
        if isinstance(value, bool) or dtype == "bool":
            return "true" if value else "false"
        if isinstance(value, float) or dtype in self.float_dtypes:
            v = float(value)
            if math.isnan(v):
                return f"(({ctype})NAN)"
            if math.isinf(v):
                return self.inf_literal(ctype, v < 0)
            return f"(({ctype}){v!r})"
        return f"(({ctype}){int(value)}LL)"

    def operands(self, st: Stmt, value: Callable[[str], str] = str) -> list[str]:
        """The operands of a compute op in position order: its SSA arguments (as ``value`` names
        them in C) and its constant operands (attrs ``arg<i>``; ``nargs`` counts both)."""
        nargs = st.attr("nargs")
        if nargs is None:
            return [value(x) for x in st.args]
        values, out, attrs = iter(st.args), [], dict(st.attrs)
        for k in range(int(nargs)):
            v = attrs.get(f"arg{k}", _SSA)
            if v is _SSA:
                out.append(value(next(values)))
            elif isinstance(v, bool):
                out.append("true" if v else "false")
            elif isinstance(v, int):
                out.append(self.int_literal(v))
            elif isinstance(v, float):
                out.append(self.literal(v, "float64"))
            else:
                raise CodegenError(f"ops.{st.op}: operand arg{k}={v!r} is not a number")
        return out

    def compute(self, op: str, args: list[str], dtype: str | None, ctype: str | None = None) -> str:
        """The C expression of compute op ``op`` over C operands ``args``."""
        name = op.removeprefix("libdevice_")
        code = self.code_for_op.get(name)
        if code is None:
            self.unsupported(op)
        ct = ctype or self.value_type(dtype)
        return code.format(*args, t=ct) if isinstance(code, str) else code(args, dtype or "float32", ct)

    def unsupported(self, op: str) -> None:
        """Raise the :class:`CodegenError` for an op this target does not render."""
        why = self.unsupported_ops.get(op.removeprefix("libdevice_"))
        raise CodegenError(f"ops.{op} is not supported by the {self.language} code generator"
                           + (f" ({why})" if why else ""))

    # -- statements ----------------------------------------------------------------------------
    def statement(self, st: Stmt, *context: Any) -> Any:
        """Render one statement: ``stmt_<op>`` of the subclass, or ``stmt_compute`` for a compute op."""
        if st.op in self.unsupported_ops:
            self.unsupported(st.op)
        handler = getattr(self, f"stmt_{st.op}", None) if st.op in STATEMENT_OPS else None
        return (handler or self.stmt_compute)(st, *context)

    def stmt_compute(self, st: Stmt, *context: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} renders no compute statements")

    @classmethod
    def rendered_ops(cls) -> set[str]:
        """The statement and compute ops this target renders."""
        stmts = {op for op in STATEMENT_OPS if hasattr(cls, f"stmt_{op}")}
        return (stmts | set(cls.code_for_op)) - set(cls.unsupported_ops)

    @classmethod
    def coverage(cls) -> list[str]:
        """Loop-IR ops this target neither renders nor declares unsupported (empty: complete)."""
        return [op for op in (*STATEMENT_OPS, *COMPUTE_OPS)
                if op not in cls.rendered_ops() and op not in cls.unsupported_ops]


_SSA = object()


def _fold(fn: str, args: list[str]) -> str:
    out = args[0]
    for x in args[1:]:
        out = f"{fn}({out}, {x})"
    return out
