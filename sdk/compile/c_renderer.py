"""One C-family code generator for loop IR: :class:`CStyleRenderer` renders a whole kernel.

``CStyleRenderer().render(lk)`` turns one loop-IR kernel (a :class:`~torchvendor.sdk.LoopKernel`,
or anything with its ``kernel``, ``buffers`` and ``size_vars``) into one C++ translation unit:

- **loop nests** become ``for`` loops; consecutive nests of a kernel that share their outer
  range and touch each written buffer at the same elements per outer iteration share one outer
  loop (a row at a time, in cache); statements that depend only on the outer variable are
  hoisted out of the inner loops;
- **reductions**: inner ones keep one accumulator per reduction inside the outer loops
  (statements feeding it run inside the reduction loops, those using its result after them);
  outer ones (a sum over rows) keep a block of :attr:`~CStyleRenderer.lanes` accumulators per
  row and update the whole block from contiguous loads (the **vector lanes**);
- **masks** become ``if`` blocks, **index expressions** C integer expressions, **indirect
  indices** wrap and are bounds-checked (a failed check makes the kernel return 3 and
  ``<kernel>_error`` name what was indexed); SSA values become typed locals, 16-bit floats are
  computed in ``float``. Extern kernels (library calls) are not rendered: a backend calls them.

A target (the reference CPU backend's OpenMP C++, the reference CUDA backend, a vendor's
dialect) subclasses it and changes **tables**, in the manner of tinygrad's C-style renderers, and
**named hooks**, never the statement code:

- tables: :attr:`~CStyleRenderer.storage_types` and :attr:`~CStyleRenderer.value_types`
  (dtypes in memory and in registers), :attr:`~CStyleRenderer.index_code` (the index printer,
  one entry per function of ``torchvendor.ir.loop_ir.INDEX_FUNCTIONS``),
  :attr:`~CStyleRenderer.code_for_op` (each compute op: a format template over the operands
  ``{0}, {1}, ...`` and the compute type ``{t}``, or a function of ``(operands, dtype, ctype)``)
  and :attr:`~CStyleRenderer.unsupported_ops` (op -> why; every op of ``COMPUTE_OPS`` and
  ``STATEMENT_OPS`` is in exactly one, :meth:`~CStyleRenderer.coverage` lists those in neither),
  :attr:`~CStyleRenderer.reduction_init` and :attr:`~CStyleRenderer.reduction_update` (an
  accumulator's start and its update per reduction kind), the spelling of statements
  (:attr:`~CStyleRenderer.declaration`, :attr:`~CStyleRenderer.cast_code`,
  :attr:`~CStyleRenderer.load_code`, :attr:`~CStyleRenderer.store_code`,
  :attr:`~CStyleRenderer.to_dtype_code`, :attr:`~CStyleRenderer.bitcast_code`,
  :attr:`~CStyleRenderer.cast_operands`, :attr:`~CStyleRenderer.yield_code`,
  :attr:`~CStyleRenderer.fail_code`, :attr:`~CStyleRenderer.index_type`,
  :attr:`~CStyleRenderer.atomic_add_code` and the vector lanes' ``lane*_code``), and
  :attr:`~CStyleRenderer.includes` and :attr:`~CStyleRenderer.helpers` (the C text the tables call);
- hooks: :meth:`~CStyleRenderer.prelude` (the text before the kernel),
  :meth:`~CStyleRenderer.symbol` (the name of every symbol the module exports),
  :meth:`~CStyleRenderer.annotate_loop` (lines above each loop, e.g. pragmas, from a
  :class:`Loop` that says what the walk knows of it) and :meth:`~CStyleRenderer.kernel_entry`
  (the launch model of "one function of loops": the function's head and how its arguments
  arrive); literals go through :meth:`~CStyleRenderer.int_literal`,
  :meth:`~CStyleRenderer.rational_literal`, :meth:`~CStyleRenderer.render_pow`,
  :meth:`~CStyleRenderer.inf_literal` and :meth:`~CStyleRenderer.literal_type`.

Statements are dispatched by op (:meth:`~CStyleRenderer.statement`) to ``stmt_<op>`` methods,
compute ops to ``stmt_compute``, and render in a :class:`Scope`: the C names of the loop
variables and SSA values, a prefix for values rendered twice, the buffers held in vector
registers. A **GPU-style launch model** (threads, warps, blocks; the reference CUDA backend)
replaces :meth:`~CStyleRenderer.render`: it calls :meth:`~CStyleRenderer.begin`, binds loop
variables to a thread's coordinates (:meth:`~CStyleRenderer.bind_index`), loads and stores a
thread's vector lanes (:meth:`~CStyleRenderer.open_lanes`, :meth:`~CStyleRenderer.close_lanes`)
and renders a nest's statements for a thread, a lane or a recomputed value
(:meth:`~CStyleRenderer.render_body`); where its values live elsewhere than in memory it says so
through :meth:`~CStyleRenderer.load_source` (registers, a value computed earlier),
:meth:`~CStyleRenderer.store` (one thread of a row stores) and
:meth:`~CStyleRenderer.reduction_value` (the parts of its accumulators).

Example: the base renders a whole kernel; a dialect overrides table entries::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> from torchvendor.sdk import loop_kernels
    >>> (lk,) = loop_kernels(capture(lambda x: x.sum(1), [torch.randn(4, 8)], level="loop").inference)
    >>> src = CStyleRenderer().render(lk)
    >>> print(src[src.index('extern "C" int32_t'):])  # doctest: +NORMALIZE_WHITESPACE
    extern "C" int32_t loop_kernel0(float* __restrict__ arg0_1, float* __restrict__ buf0) {
      int32_t tv_status = 0;
      {  // op0
        for (int64_t i0 = 0; i0 < 4L; ++i0) {
          float t1_acc = (float)0;
          for (int64_t r0 = 0; r0 < 8L; ++r0) {
            float t0 = arg0_1[(r0 + 8L*i0)];
            t1_acc += (float)t0;
          }
          float t1 = t1_acc;
          buf0[i0] = (float)(t1);
        }
      }
      return tv_status;
    }
    >>> class MyRenderer(CStyleRenderer):
    ...     language = "MyC"
    ...     code_for_op = {**CStyleRenderer.code_for_op, "exp": "my_expf({0})"}
    >>> r = MyRenderer()
    >>> r.compute("exp", ["t0"], "float32"), r.compute("add", ["t0", "t1"], "float32")
    ('my_expf(t0)', '(t0 + t1)')
    >>> r.index("FloorDiv(i0, 4) + 8*s0")
    '(8L*s0 + tv_floordiv(i0, 4L))'
    >>> try:
    ...     r.compute("digamma", ["t0"], "float32")
    ... except CodegenError as e:
    ...     print(e)
    ops.digamma is not supported by the MyC code generator (no C library function)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Mapping, Sequence, Union

import sympy

from torchvendor.ir.loop_ir import COMPUTE_OPS, STATEMENT_OPS, LoopNest, Stmt, parse_expr

__all__ = ["CStyleRenderer", "CodegenError", "Loop", "OpCode", "Scope"]


class CodegenError(NotImplementedError):
    """The kernel uses something this code generator does not handle (named in the message)."""


#: A table entry: a format template over the operands (``{0}``...) and the compute type (``{t}``),
#: or a function ``(operands, dtype, ctype) -> str`` where the form depends on the dtype.
OpCode = Union[str, Callable[[list, str, str], str]]
IndexCode = Union[str, Callable[[list], str]]

FLOAT_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16"})
#: statements that make a loop body more than plain loads, arithmetic and stores
_CONTROL = ("masked", "indirect_indexing", "check_bounds", "device_assert")


@dataclass(frozen=True)
class Loop:
    """A loop as :meth:`CStyleRenderer.annotate_loop` sees it, before the walk opens it.

    ``role``: ``output`` (over a nest's elements), ``reduce`` (over reduced elements), ``block``
    (the blocks of outputs of an outer reduction, ``step`` at a time) or ``lane`` (the outputs
    of one block). ``parallel``: the outermost loop of a nest or group with enough work
    (:attr:`CStyleRenderer.parallel_work`), its iterations independent. ``vector``: an innermost
    loop whose iterations may run in any order, provided the accumulators in ``reductions``
    (``(operator, names)``: ``+``, ``max``, ``min``, ``|``) are combined across them.
    """

    var: str
    extent: str
    role: str = "output"
    step: int = 1
    parallel: bool = False
    innermost: bool = False
    vector: bool = False
    reductions: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass
class Scope:
    """Where statements render (:meth:`CStyleRenderer.render_body`): what the walk of one loop
    over elements needs is the default; a GPU-style launch model, which renders a nest's body for
    a thread, a vector lane or a value recomputed where it is read, says how here.

    ``names``: loop variable or indirect index -> its C name (the index printer renames through
    it); ``values``: SSA name -> its C expression so far; ``prefix``: prepended to the C names of
    the values defined here (a body rendered twice in one function); ``lanes``: (the buffers held
    in vector registers, the lane variable), whose loads and stores go through
    :attr:`CStyleRenderer.lane_load_code` and :attr:`CStyleRenderer.lane_store_code`;
    ``stores``: False renders values only (a recomputation); ``top_level``: not inside a
    ``masked`` body.

    Example: a nest's body for one thread, its loop variable a digit of the thread's index::

        >>> import types
        >>> from torchvendor.ir.loop_ir import Buffer, Kernel, Stmt
        >>> x = Buffer("x", "float32", ("64",), ("1",), "cpu", "input")
        >>> r = CStyleRenderer()
        >>> r.begin(types.SimpleNamespace(kernel=Kernel("k", ()), buffers=(x,), size_vars=()))
        >>> body = (Stmt("t0", "load", (), (("buffer", "x"), ("index", "2*i0")), "float32"),
        ...         Stmt("t1", "exp", ("t0",), (), "float32"))
        >>> names = {"i0": r.bind_index("a_i0", "ModularIndexing(tid, 1, 32)", {"tid": "threadIdx.x"})}
        >>> r.render_body(Scope(names=names, prefix="a_"), body)
        {'t0': 'a_t0', 't1': 'a_t1'}
        >>> print("\\n".join(r.lines))
          const int64_t a_i0 = tv_floormod(tv_floordiv(threadIdx.x, 1L), 32L);
          float a_t0 = x[2L*a_i0];
          float a_t1 = std::exp(a_t0);
    """

    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)
    prefix: str = ""
    lanes: tuple[Any, str] | None = None
    stores: bool = True
    top_level: bool = True

    def arg(self, name: str) -> str:
        """The C expression of SSA value ``name``."""
        return self.values.get(name, self.prefix + name)


def _infix(op: str) -> str:
    return "({0} %s {1})" % op


def _std(name: str, n: int = 1, cast: bool = False) -> str:
    args = ", ".join(("({t})" if cast else "") + f"{{{k}}}" for k in range(n))
    return f"std::{name}({args})"


def _fold(fn: str, args: list[str]) -> str:
    out = args[0]
    for x in args[1:]:
        out = f"{fn}({out}, {x})"
    return out


def _int_or_float(int_form: str, float_form: str) -> Callable[[list, str, str], str]:
    """An op whose C form depends on whether its dtype is floating."""
    return lambda a, dtype, t: (float_form if dtype in FLOAT_DTYPES else int_form).format(*a, t=t)


_MATH1 = ("exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan", "asin", "acos",
          "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma", "floor", "ceil",
          "trunc", "cbrt", "tgamma", "isinf", "isnan", "signbit")
_INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "and_": "&", "or_": "|", "xor": "^",
          "logical_and": "&&", "logical_or": "||", "bitwise_left_shift": "<<", "bitwise_right_shift": ">>",
          "lshift": "<<", "rshift": ">>"}
STORAGE = {"float32": "float", "float64": "double", "float16": "uint16_t", "bfloat16": "uint16_t", "int8": "int8_t",
           "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t", "bool": "bool"}


class CStyleRenderer:
    """Loop IR to C-family source through tables and four hooks (see the module docstring).

    Class attributes are the tables a target overrides; :meth:`render` is the shared walk. One
    instance renders one kernel at a time (``render`` resets its state).
    """

    #: name used in error messages ("... is not supported by the CUDA code generator")
    language: ClassVar[str] = "C++"
    #: where statements render (:class:`Scope`; a launch model subclasses it for fields of its own)
    Scope: ClassVar[type[Scope]] = Scope
    #: loop-IR dtype -> C type of an element in memory
    storage_types: ClassVar[Mapping[str, str]] = STORAGE
    #: loop-IR dtype -> C type values are computed in (16-bit floats compute in float)
    value_types: ClassVar[Mapping[str, str]] = {**STORAGE, "float16": "float", "bfloat16": "float"}
    float_dtypes: ClassVar[frozenset[str]] = FLOAT_DTYPES
    #: sympy function (or ``Add``/``Mul``) name -> C form of its printed arguments
    index_code: ClassVar[Mapping[str, IndexCode]] = {
        "Add": lambda a: "(" + " + ".join(a) + ")", "Mul": lambda a: "*".join(a),
        "FloorDiv": "tv_floordiv({0}, {1})", "CleanDiv": "({0} / {1})", "CeilDiv": "(-tv_floordiv(-({0}), {1}))",
        "ModularIndexing": "tv_floormod(tv_floordiv({0}, {1}), {2})", "PythonMod": "tv_floormod({0}, {1})",
        "Mod": "tv_floormod({0}, {1})", "Identity": "{0}", "Where": "({0} ? {1} : {2})",
        "Abs": "std::abs((int64_t)({0}))", "IntTrueDiv": "((double)({0}) / (double)({1}))",
        "TruncToInt": "(int64_t)std::trunc({0})", "FloorToInt": "(int64_t)std::floor({0})",
        "CeilToInt": "(int64_t)std::ceil({0})", "RoundToInt": "(int64_t)std::nearbyint({0})",
        "StrictLessThan": _infix("<"), "LessThan": _infix("<="), "StrictGreaterThan": _infix(">"),
        "GreaterThan": _infix(">="), "Equality": _infix("=="), "Unequality": _infix("!="),
        "BitwiseFn_bitwise_and": _infix("&"), "BitwiseFn_bitwise_or": _infix("|"), "LShift": _infix("<<"),
        "RShift": _infix(">>"), "Not": "(!{0})",
        "And": lambda a: "(" + " && ".join(a) + ")", "Or": lambda a: "(" + " || ".join(a) + ")",
        "Min": lambda a: _fold("std::min<int64_t>", a), "Max": lambda a: _fold("std::max<int64_t>", a)}
    #: compute op -> C form (see :data:`OpCode`); ``libdevice_<name>`` uses ``<name>``'s entry
    code_for_op: ClassVar[Mapping[str, OpCode]] = {
        **{k: _infix(v) for k, v in _INFIX.items()}, **{k: _std(k) for k in _MATH1},
        **{k: _std(k, 2, cast=True) for k in ("atan2", "hypot", "copysign", "fmod", "nextafter")},
        "int_truediv": "((double){0} / (double){1})", "truediv": "(({t}){0} / ({t}){1})",
        "div": "(({t}){0} / ({t}){1})", "floordiv": "tv_floordiv(({t}){0}, ({t}){1})",
        "remainder": "tv_remainder(({t}){0}, ({t}){1})",
        "truncdiv": _int_or_float("({0} / {1})", "std::trunc({0} / {1})"),
        "mod": _int_or_float("({0} % {1})", "std::fmod({0}, {1})"),
        "pow": _int_or_float("tv_ipow({0}, {1})", "std::pow(({t}){0}, ({t}){1})"),
        "abs": _int_or_float("({0} < 0 ? -{0} : {0})", "std::abs({0})"),
        "bitwise_not": lambda a, dtype, t: f"(!{a[0]})" if dtype == "bool" else f"(~{a[0]})",
        "maximum": "tv_max<{t}>({0}, {1})", "minimum": "tv_min<{t}>({0}, {1})", "where": "({0} ? ({t}){1} : ({t}){2})",
        "logical_not": "(!{0})", "logical_xor": "((bool){0} != (bool){1})", "neg": "(-{0})", "identity": "{0}",
        "relu": "tv_max<{t}>({0}, ({t})0)", "square": "({0} * {0})",
        "sigmoid": "(({t})1 / (({t})1 + std::exp(-{0})))", "reciprocal": "(({t})1 / {0})",
        "rsqrt": "(({t})1 / std::sqrt({0}))", "sign": "tv_sign<{t}>({0})", "round": "std::nearbyint({0})",
        "erfinv": "(({t})tv_erfinv((double){0}))", "fma": "std::fma({0}, {1}, {2})"}
    #: op -> why this target does not render it (a :class:`CodegenError` names both)
    unsupported_ops: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys(("digamma", "log_ndtr", "ndtri"), "no C library function"),
        "frexp": "a two-result op", "round_decimal": "no C library function",
        **dict.fromkeys(("ceil_to_int", "floor_to_int", "trunc_to_int", "round_to_int"), "not produced on this target"),
        **dict.fromkeys(("rand", "randn", "randint64", "load_seed"),
                        "the SDK keeps random ops as ATen calls; this kernel has one")}
    #: reduction kind -> initial value of its one accumulator (other kinds: see ``_reduction_open``)
    reduction_init: ClassVar[Mapping[str, str]] = {"sum": "0", "prod": "1", "xor_sum": "0", "any": "false"}
    #: reduction form -> one update statement: ``n`` the reduction's name, ``v`` the value, ``ct``
    #: the accumulator's C type, ``cmp`` the comparison of max/min-like kinds, ``i`` the reduction index
    reduction_update: ClassVar[Mapping[str, str]] = {
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
    #: an ``atomic_add`` store (lines split on ``\\n``); a target with parallel loops adds its pragma
    atomic_add_code: ClassVar[str] = "{target} += {value};"
    #: the dtypes an ``atomic_add`` store may write (16-bit floats are converted, so not atomically)
    atomic_add_dtypes: ClassVar[frozenset[str]] = frozenset(STORAGE) - {"float16", "bfloat16"}
    #: how an SSA value is declared (``t`` its C type) and a value converted to C type ``t``
    declaration: ClassVar[str] = "{t} {name} = {expr};"
    cast_code: ClassVar[str] = "({t})({0})"
    #: storage dtype -> how an element read from memory becomes a value (``*``: any other dtype;
    #: else :attr:`cast_code`), how a value becomes an element, and ``to_dtype``'s conversions
    load_code: ClassVar[Mapping[str, str]] = {"float16": "tv_h2f({0})", "bfloat16": "tv_b2f({0})", "*": "{0}"}
    store_code: ClassVar[Mapping[str, str]] = {"float16": "tv_f2h((float)({0}))", "bfloat16": "tv_f2b((float)({0}))"}
    to_dtype_code: ClassVar[Mapping[str, str]] = {"bool": "({0} != 0)", "float16": "tv_h2f(tv_f2h((float)({0})))",
                                                  "bfloat16": "tv_b2f(tv_f2b((float)({0})))"}
    #: a bitcast of ``{0}`` from C type ``s`` to ``t``, declaring ``name``
    bitcast_code: ClassVar[str] = "{t} {name} = tv_bitcast<{t}, {s}>({0});"
    #: ops whose operands are converted to the result's compute type first (C's usual arithmetic
    #: conversions do it for the base; a target with overloaded math functions lists its own)
    cast_operands: ClassVar[frozenset[str]] = frozenset()
    #: what a ``masked`` body's ``yield`` assigns (``name`` of C type ``t``)
    yield_code: ClassVar[str] = "{name} = ({t})({value});"
    #: what a failed check does (``check``: the message's number, ``value``: what it saw)
    fail_code: ClassVar[str] = "tv_fail({check}, {value}); tv_status = 3;"
    #: the C type of index variables (indirect indices, :meth:`bind_index`)
    index_type: ClassVar[str] = "int64_t"
    #: vector registers (:class:`Scope` ``lanes``, :meth:`open_lanes`): a load and a store of one
    #: lane, the registers of a buffer read (``n`` lanes of C type ``t`` from ``{buffer} + {base}``),
    #: of a buffer written, and their write-back; ``tv_vec<T, N>`` (a struct of ``N`` elements
    #: aligned to its size) is the target's prelude's
    lane_load_code: ClassVar[str] = "vl_{buffer}.v[{lane}]"
    lane_store_code: ClassVar[str] = "vs_{buffer}.v[{lane}] = {value};"
    lanes_load_code: ClassVar[str] = \
        "const tv_vec<{t}, {n}> vl_{buffer} = *reinterpret_cast<const tv_vec<{t}, {n}>*>({buffer} + {base});"
    lanes_declare_code: ClassVar[str] = "tv_vec<{t}, {n}> vs_{buffer};"
    lanes_store_code: ClassVar[str] = "*reinterpret_cast<tv_vec<{t}, {n}>*>({buffer} + {base}) = vs_{buffer};"
    #: how a failed ``device_assert``'s message starts
    assertion: ClassVar[str] = "device assertion failed: "
    #: accumulators per row of an outer reduction (the vector lanes); work worth a parallel loop
    lanes: ClassVar[int] = 64
    parallel_work: ClassVar[int] = 1 << 15
    #: the C text of the prelude: includes, then the helpers the tables call (``tv_*``)
    includes: ClassVar[str] = "#include <cmath>\n#include <cstdint>\n#include <cstring>\n#include <limits>\n" \
                              "#include <algorithm>\n"
    helpers: ClassVar[str]  # set below the class (long C text)

    # -- the four named hooks --------------------------------------------------------------------
    def prelude(self) -> str:
        """The text before the kernel: a banner, :attr:`includes` and :attr:`helpers`."""
        return f"// {self.lk.kernel.name}: rendered from the loop IR by {type(self).__name__}\n\n" \
               f"{self.includes}{self.helpers}\n"

    def symbol(self, name: str) -> str:
        """The C name of a symbol the module exports (the kernel's function ``<kernel>``, its
        ``<kernel>_error``); a vendor prefixes here. Locals and ``static`` helpers are not symbols."""
        return name

    def annotate_loop(self, loop: Loop) -> list[str]:
        """Lines emitted just above ``loop`` (pragmas, attributes); none by default."""
        return []

    def kernel_entry(self) -> None:
        """The launch model: open the kernel's function and bind its arguments; declare
        ``int32_t tv_status = 0`` (the kernel returns it; a failed check sets it to 3). By
        default every buffer is a pointer argument, then every size symbol an ``int64_t``."""
        params = [f"{self.storage_type(b.dtype)}* __restrict__ {b.name}" for b in self.lk.buffers]
        params += [f"const int64_t {s}" for s in self.lk.size_vars]
        self.lines.append(f'extern "C" int32_t {self.symbol(self.lk.kernel.name)}({", ".join(params)}) {{')
        self.emit("int32_t tv_status = 0;")

    # -- the walk --------------------------------------------------------------------------------
    def begin(self, lk: Any) -> None:
        """Reset the state of one kernel's rendering (a launch model's own ``render`` calls it)."""
        self.lk, self.lines, self.depth = lk, [], 1
        self.dtypes: dict[str, str | None] = {}  # SSA name -> dtype
        self.buffers = {b.name: b for b in lk.buffers}
        self.masked_value: tuple[str, str] | None = None  # (name, C type) a ``yield`` assigns
        self.checks: list[str] = []  # the message of each check, by number (``tv_fail``)
        self.scope = Scope()  # where statements render now

    def render(self, lk: Any) -> str:
        """The C translation unit of one kernel: :meth:`prelude`, the error function when the
        kernel has checks, then the function :meth:`kernel_entry` opens, its nests as loops."""
        self.begin(lk)
        self.kernel_entry()
        for group in _groups(lk):
            self._group(group)
        self.emit("return tv_status;")
        self.lines.append("}")
        return self.prelude() + (self.error_function() if self.checks else "") + "\n".join(self.lines) + "\n"

    # -- the index printer -----------------------------------------------------------------------
    def int_literal(self, v: int) -> str:
        """An integer constant of an index expression."""
        return f"{v}L"

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

    def storage_type(self, dtype: str) -> str:
        """The C type of an element of ``dtype`` in memory."""
        try:
            return self.storage_types[dtype]
        except KeyError:
            raise CodegenError(f"dtype {dtype} is not supported by the {self.language} code generator") from None

    def literal_type(self, dtype: str | None) -> str:
        """The C type of a constant of ``dtype`` (its cast)."""
        return self.value_types.get(dtype, "double")  # type: ignore[arg-type]

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

    # -- emission ------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def open(self, line: str) -> None:
        self.emit(line + " {")
        self.depth += 1

    def close(self) -> None:
        self.depth -= 1
        self.emit("}")

    def define(self, name: str | None, dtype: str, expr: str) -> None:
        """Declare SSA value ``name`` of ``dtype`` as the C expression ``expr``."""
        if name is None:
            raise CodegenError(f"statement defines no value: {expr}")
        self.dtypes[name] = dtype
        self.emit(self.declaration.format(t=self.value_type(dtype), name=self.scope.prefix + name, expr=expr))

    def loop(self, loop: Loop) -> None:
        """Open ``loop``, with the lines :meth:`annotate_loop` gives above it."""
        for line in self.annotate_loop(loop):
            self.emit(line)
        step = f"++{loop.var}" if loop.step == 1 else f"{loop.var} += {loop.step}"
        self.open(f"for (int64_t {loop.var} = 0; {loop.var} < {loop.extent}; {step})")

    def message(self, message: str) -> int:
        """Number a failure message (a bounds check's, an assertion's)."""
        if message not in self.checks:
            self.checks.append(message)
        return self.checks.index(message)

    # -- statements ----------------------------------------------------------------------------
    def statement(self, st: Stmt) -> None:
        """Render one statement in :attr:`scope`: ``stmt_<op>``, or ``stmt_compute`` for a compute
        op; a value it defines is then known by its C name (``scope.prefix + name``)."""
        if st.op in self.unsupported_ops:
            self.unsupported(st.op)
        handler = getattr(self, f"stmt_{st.op}", None) if st.op in STATEMENT_OPS else None
        (handler or self.stmt_compute)(st)
        if st.name and st.name not in self.scope.values:
            self.scope.values[st.name] = self.scope.prefix + st.name

    def render_body(self, scope: Scope, body: Sequence[Stmt], include: set[int] | None = None) -> dict[str, str]:
        """Render the statements of ``body`` (those whose ``id`` is in ``include``, if given) in
        ``scope``, at the current depth; returns the C expression of each SSA value. A launch
        model that renders one nest several times (per thread, per lane, recomputed) calls this."""
        outer, self.scope = self.scope, scope
        try:
            for st in body:
                if include is None or id(st) in include:
                    self.statement(st)
        finally:
            self.scope = outer
        return scope.values

    @staticmethod
    def needed(body: Sequence[Stmt], names: Sequence[str], roots: Sequence[Stmt] = (),
               stop: set[int] | frozenset[int] = frozenset()) -> set[int]:
        """The ``id`` of ``roots`` and of every statement of ``body`` they or the values ``names``
        read, transitively (through operands, masked bodies and indirect indices), not going
        past the statements in ``stop``: the ``include`` of :meth:`render_body` for a launch
        model that renders a nest's body in parts (before a reduction, after it)."""
        by_name = {st.name: st for st in body if st.name}
        todo, seen = list(roots) + [by_name[n] for n in names if n in by_name], set()
        while todo:
            st = todo.pop()
            if id(st) in seen or id(st) in stop:
                continue
            seen.add(id(st))
            todo += [by_name[n] for n in _reads(st) if n in by_name]
        return seen

    def bind_index(self, name: str, expr: Any, coords: Mapping[str, str] | None = None) -> str:
        """Declare index variable ``name`` as an index expression (a string of the schema, or
        sympy) of launch coordinates, renamed through ``coords``: a loop variable as a digit of a
        thread's flat index, say (``ModularIndexing(x, 8, 4)``); returns ``name``."""
        expr = parse_expr(expr) if isinstance(expr, str) else expr
        self.emit(f"const {self.index_type} {name} = {self.print_index(expr, coords)};")
        return name

    def open_lanes(self, buffers: Sequence[str], n: int, base: str, loaded: set[str], written: set[str]) -> None:
        """Vector registers for ``n`` consecutive elements from ``base`` of each of ``buffers``: one
        wide load of those in ``loaded``, a declaration for those in ``written`` (a thread that
        moves ``n`` elements per buffer; then :class:`Scope` ``lanes`` names them and the lane)."""
        for b in buffers:
            t = self.storage_type(self.buffers[b].dtype)
            if b in loaded:
                self.emit(self.lanes_load_code.format(t=t, n=n, buffer=b, base=base))
            if b in written:
                self.emit(self.lanes_declare_code.format(t=t, n=n, buffer=b))

    def close_lanes(self, buffers: Sequence[str], n: int, base: str, written: set[str]) -> None:
        """One wide store of the vector registers of each of ``buffers`` in ``written``."""
        for b in buffers:
            if b in written:
                self.emit(self.lanes_store_code.format(t=self.storage_type(self.buffers[b].dtype), n=n, buffer=b, base=base))

    def convert(self, table: Mapping[str, str], dtype: str, value: str, ctype: str) -> str:
        """``value`` converted by ``table``'s entry for ``dtype`` (else ``*``, else :attr:`cast_code`)."""
        return table.get(dtype, table.get("*", self.cast_code)).format(value, t=ctype)

    def element(self, buffer: str, index: str) -> str:
        """The C reference to element ``index`` (an index expression of the schema) of ``buffer``."""
        return f"{buffer}[{self.index(index, self.scope.names)}]"

    def load_source(self, st: Stmt) -> str | None:
        """What load ``st`` reads: its vector lane (see :class:`Scope`) or its element. A launch
        model that keeps values elsewhere (registers, a value computed earlier) returns its own
        expression, or None after defining the value itself."""
        buffer, lanes = st.attr("buffer"), self.scope.lanes
        if lanes and buffer in lanes[0]:
            return self.lane_load_code.format(buffer=buffer, lane=lanes[1])
        return self.element(buffer, st.attr("index"))

    def store(self, st: Stmt, target: str, value: str) -> None:
        """Emit a plain store of ``value`` (converted to the element type) to ``target``; a launch
        model whose threads share an output (one thread of a row stores) guards it here."""
        self.emit(f"{target} = {value};")

    def stmt_load(self, st: Stmt) -> None:
        source = self.load_source(st)
        if source is None:
            return
        stored = self.buffers[st.attr("buffer")].dtype
        dtype = st.dtype or stored
        self.define(st.name, dtype, self.convert(self.load_code, stored, source, self.value_type(dtype)))

    def stmt_store(self, st: Stmt) -> None:
        if not self.scope.stores:
            return
        buffer, lanes, mode = st.attr("buffer"), self.scope.lanes, st.attr("mode")
        dtype = self.buffers[buffer].dtype
        value = self.convert(self.store_code, dtype, self.scope.arg(st.args[0]), self.storage_type(dtype))
        if lanes and buffer in lanes[0]:
            self.emit(self.lane_store_code.format(buffer=buffer, lane=lanes[1], value=value))
            return
        target = self.element(buffer, st.attr("index"))
        if mode == "atomic_add":
            if dtype not in self.atomic_add_dtypes:
                raise CodegenError(f"atomic_add into a {dtype} buffer is not supported by the {self.language} code generator")
            for line in self.atomic_add_code.format(target=target, value=value).split("\n"):
                self.emit(line)
        elif mode:
            raise CodegenError(f"store mode {mode!r} is not supported")
        else:
            self.store(st, target, value)

    stmt_store_reduction = stmt_store

    def stmt_constant(self, st: Stmt) -> None:
        dtype = st.attr("dtype") or st.dtype or "float32"
        self.define(st.name, dtype, self.literal(st.attr("value"), dtype))

    def stmt_index_expr(self, st: Stmt) -> None:
        dtype = st.attr("dtype") or st.dtype or "int64"
        expr = self.index(st.attr("expr"), self.scope.names)
        self.define(st.name, dtype, self.cast_code.format(expr, t=self.value_type(dtype)))

    def stmt_to_dtype(self, st: Stmt) -> None:
        dtype = st.attr("dtype")
        self.define(st.name, dtype, self.convert(self.to_dtype_code, dtype, self.scope.arg(st.args[0]),
                                                 self.value_type(dtype)))

    def stmt_to_dtype_bitcast(self, st: Stmt) -> None:
        dtype, src_dtype = st.attr("dtype"), st.attr("src_dtype")
        if {dtype, src_dtype} & {"float16", "bfloat16"}:
            raise CodegenError("bitcasts of 16-bit floats are not supported")
        self.dtypes[st.name] = dtype
        self.emit(self.bitcast_code.format(self.scope.arg(st.args[0]), name=self.scope.prefix + st.name,
                                           t=self.value_type(dtype), s=self.value_type(src_dtype)))

    def stmt_load_seed(self, st: Stmt) -> None:
        """The seed of a random op (a target that renders random ops leaves ``load_seed`` out of
        :attr:`unsupported_ops`)."""
        off = self.scope.arg(st.args[0]) if st.args else str(st.attr("offset"))
        self.define(st.name, "int64", f"({self.value_type('int64')}){st.attr('buffer')}[{off}]")

    def reduction_value(self, name: str, k: int) -> tuple[str, str | None]:
        """(C expression, dtype) of part ``k`` of multi-result reduction ``name`` (``getitem``)."""
        return f"{name}_{k}", self.dtypes[f"{name}_{k}"]

    def stmt_getitem(self, st: Stmt) -> None:
        expr, dtype = self.reduction_value(st.args[0], int(st.attr("index")))
        self.define(st.name, dtype, expr)  # type: ignore[arg-type]

    def stmt_indirect_indexing(self, st: Stmt) -> None:
        """A value used as an index: negative values wrap (as eager indexing does), and where
        Inductor asks for the check, a value outside ``[0, size)`` is recorded (see
        :meth:`error_function`), :attr:`fail_code` runs and the index becomes 0 (no wild access)."""
        scope, t = self.scope, self.index_type
        size, name = self.index(st.attr("size"), scope.names), scope.prefix + st.name
        self.emit(f"{t} {name} = ({t})({scope.arg(st.args[0])});")
        if st.attr("wrap_neg", True):
            self.emit(f"if ({name} < 0) {name} += {size};")
        if st.attr("check", True):
            check = self.message(f"{self.indexed(st.name)} at index {st.name} = {st.args[0]}: outside [0, {st.attr('size')})")
            self.emit(f"if ({name} < 0 || {name} >= {size}) {{ {self.fail_code.format(check=check, value=name)} {name} = 0; }}")
        scope.names[st.name] = scope.values[st.name] = name

    def stmt_check_bounds(self, st: Stmt) -> None:
        expr, size = self.index(st.attr("expr"), self.scope.names), self.index(st.attr("size"), self.scope.names)
        check = self.message(f"index {st.attr('expr')}: outside [0, {st.attr('size')})")
        self.emit(f"if (({expr}) < 0 || ({expr}) >= {size}) {{ {self.fail_code.format(check=check, value=expr)} }}")

    def stmt_device_assert(self, st: Stmt) -> None:
        """``torch._assert_async``: where the condition is false :attr:`fail_code` records the message."""
        check = self.message(f"{self.assertion}{st.attr('msg')}")
        self.emit(f"if (!({self.scope.arg(st.args[0])})) {{ {self.fail_code.format(check=check, value=0)} }}")

    def indexed(self, symbol: str) -> str:
        """The buffers whose loads or stores use the indirect index ``symbol``."""
        used = [s.attr("buffer") for n in self.lk.kernel.nests for s in n.stmts()
                if s.op in ("load", "store", "store_reduction") and symbol in _index_symbols(s.attr("index"))]
        return "buffer " + ", ".join(dict.fromkeys(used)) if used else "an index expression"

    def stmt_masked(self, st: Stmt) -> None:
        """``if (mask)`` around the body, in a scope of its own (no vector lanes: a masked body
        reads element by element); its ``yield`` assigns the value, else ``other``."""
        dtype, other = st.dtype or "float32", st.attr("other")
        ct, name = self.value_type(dtype), self.scope.prefix + st.name
        self.dtypes[st.name] = dtype
        self.emit(f"{ct} {name} = {self.literal(other, dtype) if other is not None else f'({ct})0'};")
        self.open(f"if ({self.scope.arg(st.args[0])})")
        inner = replace(self.scope, names=dict(self.scope.names), values=dict(self.scope.values), lanes=None,
                        top_level=False)
        outer, self.masked_value = self.masked_value, (name, ct)
        self.render_body(inner, st.body)
        self.masked_value = outer
        self.close()

    def stmt_yield(self, st: Stmt) -> None:
        name, ctype = self.masked_value  # type: ignore[misc]
        self.emit(self.yield_code.format(name=name, t=ctype, value=self.scope.arg(st.args[0])))

    def stmt_reduction(self, st: Stmt) -> None:
        raise AssertionError("reductions are emitted by the nest")

    def stmt_compute(self, st: Stmt) -> None:
        """A compute op in its result's type; the operands of :attr:`cast_operands` ops are first
        converted to it."""
        a = self.operands(st, self.scope.arg)
        dtype = st.dtype or "float32"
        ct = self.value_types.get(dtype, "float")
        args = [self.cast_code.format(x, t=ct) for x in a] if st.op.removeprefix("libdevice_") in self.cast_operands else a
        expr = self.compute(st.op, args, dtype, ct)
        kinds = [self.dtypes.get(x, "float32") for x in a]
        promoted = next((k for k in kinds if k in FLOAT_DTYPES), kinds[0] if kinds else "float32")
        self.define(st.name, st.dtype or promoted, expr)

    def error_function(self) -> str:
        """``<kernel>_error(int64_t* value)``: the message of the first failed check since the
        last call (and the index it saw), or NULL."""
        whats = ", ".join('"' + m.replace("\\", "\\\\").replace('"', '\\"') + '"' for m in self.checks) or "0"
        return (f"static int64_t tv_error[2] = {{-1, 0}};\n"
                f"static inline void tv_fail(int64_t check, int64_t value) {{ if (tv_error[0] < 0) {{ tv_error[1] = value; tv_error[0] = check; }} }}\n"
                f'extern "C" const char* {self.symbol(self.lk.kernel.name + "_error")}(int64_t* value) {{\n'
                f"  static const char* what[] = {{{whats}}};\n"
                f"  if (tv_error[0] < 0) return nullptr;\n"
                f"  *value = tv_error[1]; const char* out = what[tv_error[0]]; tv_error[0] = -1; return out;\n}}\n")

    # -- reductions ----------------------------------------------------------------------------
    def acc_dtype(self, st: Stmt) -> str:
        """The accumulator's dtype: the attr for value reductions; the values' own for argmax/argmin
        (whose ``dtype`` is the int64 of the index)."""
        if st.attr("kind") in ("argmax", "argmin"):
            return st.attr("src_dtype") or self.dtypes.get(st.args[0], "float32")
        return st.attr("dtype") or st.dtype or "float32"

    def acc_parts(self, st: Stmt) -> list[tuple[str, str]]:
        """(suffix, C type) of each accumulator variable :meth:`reduction_open` declares for ``st``."""
        kind, dtype = st.attr("kind"), self.acc_dtype(st)
        ct = self.value_type(dtype)
        if kind in ("argmax", "argmin"):
            return [("acc", ct), ("idx", "int64_t"), ("nan", "bool")]
        if kind in ("welford_reduce", "welford_combine"):
            return [("mean", ct), ("m2", ct), ("w", ct)]
        if kind == "online_softmax_reduce":
            return [("max", ct), ("sum", ct)]
        if kind in ("max", "min") and dtype in FLOAT_DTYPES:
            return [("acc", ct), ("nan", "int")]
        return [("acc", ct)]

    def reduction_open(self, st: Stmt) -> None:
        """Declare and initialise the accumulators of reduction ``st``."""
        kind, dtype = st.attr("kind"), self.acc_dtype(st)
        ct, n = self.value_type(dtype), st.name
        if kind in self.reduction_init:
            self.emit(f"{ct} {n}_acc = ({ct}){self.reduction_init[kind]};")
        elif kind in ("max", "min", "argmax", "argmin"):
            big = f"std::numeric_limits<{ct}>::infinity()" if dtype in FLOAT_DTYPES else \
                f"std::numeric_limits<{ct}>::{'lowest' if 'max' in kind else 'max'}()"
            self.emit(f"{ct} {n}_acc = {'-' if 'max' in kind and dtype in FLOAT_DTYPES else ''}{big};")
            if kind in ("max", "min") and dtype in FLOAT_DTYPES:
                self.emit(f"int {n}_nan = 0;  // int, not bool: GCC vectorizes no bool reduction")
            if kind.startswith("arg"):
                self.emit(f"int64_t {n}_idx = 0; bool {n}_nan = false;")
        elif kind in ("welford_reduce", "welford_combine"):
            self.emit(f"{ct} {n}_mean = 0, {n}_m2 = 0, {n}_w = 0;")
        elif kind == "online_softmax_reduce":
            self.emit(f"{ct} {n}_max = -std::numeric_limits<{ct}>::infinity(), {n}_sum = 0;")
        else:
            raise CodegenError(f"reduction kind {kind!r} is not supported by the {self.language} code generator")

    def reduction_step(self, st: Stmt, ridx: str) -> None:
        """Update the accumulators of ``st`` with its value (``ridx``: the flat reduction index)."""
        kind, dtype = st.attr("kind"), self.acc_dtype(st)
        form = kind
        if kind in ("max", "min"):
            form = "float_minmax" if dtype in FLOAT_DTYPES else "minmax"
        elif kind in ("argmax", "argmin"):
            form = "arg"
        if form not in self.reduction_update:
            return
        fields = dict(n=st.name, v=st.args[0], ct=self.value_type(dtype), kind=kind, i=ridx,
                      cmp=">" if kind in ("max", "argmax") else "<")
        if kind == "welford_combine":
            fields.update(zip(("mean", "m2", "weight"), st.args))
        self.emit(self.reduction_update[form].format(**fields))

    def reduction_close(self, st: Stmt) -> None:
        """Define the reduction's SSA value(s) from its accumulators."""
        kind, n = st.attr("kind"), st.name
        dtype = st.attr("dtype") or st.dtype or "float32"
        if kind in ("welford_reduce", "welford_combine"):
            for k, part in enumerate(("mean", "m2", "w")):
                self.define(f"{n}_{k}", dtype, f"{n}_{part}")
        elif kind == "online_softmax_reduce":
            self.define(f"{n}_0", dtype, f"{n}_max")
            self.define(f"{n}_1", dtype, f"{n}_sum")
        elif kind in ("argmax", "argmin"):
            self.define(n, "int64", f"{n}_idx")
        elif kind in ("max", "min") and dtype in FLOAT_DTYPES:
            self.define(n, dtype, f"{n}_nan ? std::numeric_limits<{self.value_type(dtype)}>::quiet_NaN() : {n}_acc")
        else:
            self.define(n, dtype, f"{n}_acc")

    def vector_reductions(self, reductions: Sequence[Stmt], inner: Sequence[Stmt]) -> tuple | None:
        """The (operator, accumulators) an innermost reduction loop combines when its iterations
        may be reordered, or None when it must stay in order: floating sums, maxima and minima
        over plain loads and arithmetic (maxima and minima with their NaN flag, an OR)."""
        if any(st.op in _CONTROL for st in inner):
            return None
        clauses: dict[str, list[str]] = {}
        for st in reductions:
            kind = st.attr("kind")
            if kind not in ("sum", "max", "min") or self.acc_dtype(st) not in ("float32", "float64"):
                return None
            clauses.setdefault("+" if kind == "sum" else kind, []).append(f"{st.name}_acc")
            if kind != "sum":
                clauses.setdefault("|", []).append(f"{st.name}_nan")
        return tuple((op, tuple(names)) for op, names in clauses.items())

    # -- loops and nests -----------------------------------------------------------------------
    def loops(self, variables: Sequence[str], ranges: Sequence[str], parallel: bool = False,
              vector: bool | tuple | None = False, role: str = "output", innermost: bool = False) -> int:
        """Open a loop per variable: the first ``parallel``, the last ``innermost`` (and ``vector``:
        True, or the reductions it combines)."""
        for k, (var, size) in enumerate(zip(variables, ranges)):
            last = k == len(variables) - 1
            self.loop(Loop(var, self.index(size), role, parallel=k == 0 and parallel, innermost=last and innermost,
                           vector=last and bool(vector), reductions=vector if last and isinstance(vector, tuple) else ()))
        return len(variables)

    def parallel(self, nests: Sequence[LoopNest]) -> bool:
        """Whether the outer loop is worth threads: enough work, and more than one iteration."""
        works = [_numel((*n.ranges, *n.reduction_ranges)) for n in nests]
        work = None if None in works else sum(works)  # type: ignore[arg-type]
        return (work is None or work >= self.parallel_work) and (_numel(nests[0].ranges[:1]) or 2) > 1

    def _group(self, group: Sequence[LoopNest]) -> None:
        if len(group) == 1:
            return self._nest(group[0])
        innermost = all(len(n.ranges) == 1 and not n.reduction_ranges for n in group)
        self.loops(["i0"], group[0].ranges[:1], self.parallel(group), innermost=innermost)
        for nest in group:
            self._nest(nest, bound=1)
        self.close()

    def _nest(self, nest: LoopNest, bound: int = 0) -> None:
        """One nest in a block of its own (its SSA names are its own: a kernel's nests may come
        from several of Inductor's kernels); its first ``bound`` loops are open already."""
        self.emit(f"{{  // {nest.name}")
        self.depth += 1
        if not nest.reduction_ranges:
            self._pointwise(nest, bound)
        else:
            self._reduction(nest, bound)
        self.close()

    def _pointwise(self, nest: LoopNest, bound: int) -> None:
        parallel = bool(nest.ranges) and not bound and self.parallel([nest])
        iter_vars, ranges = nest.iter_vars[bound:], nest.ranges[bound:]
        simple = all(s.op not in _CONTROL and s.attr("mode") != "atomic_add" for s in nest.body)
        hoisted = self._row_invariant(nest) if len(nest.ranges) > 1 else []
        opened = 0 if bound or not hoisted else self.loops(iter_vars[:1], ranges[:1], parallel)
        for st in hoisted:
            self.statement(st)
        skip = 1 - bound if hoisted else 0
        opened += self.loops(iter_vars[skip:], ranges[skip:], parallel and not skip, simple, innermost=True)
        for st in nest.body:
            if not any(st is h for h in hoisted):
                self.statement(st)
        for _ in range(opened):
            self.close()

    def _reduction(self, nest: LoopNest, bound: int) -> None:
        pre, inner, post, reductions = _split(nest)
        if not bound and _is_outer_reduction(nest, inner):
            return self._outer_reduction(nest, (pre, inner, post, reductions))
        parallel = bool(nest.ranges) and not bound and self.parallel([nest])
        opened = self.loops(nest.iter_vars[bound:], nest.ranges[bound:], parallel)
        for st in pre:
            self.statement(st)
        for st in reductions:
            self.reduction_open(st)
        ridx = self._reduction_index(nest)
        vector = self.vector_reductions(reductions, inner)
        r_opened = self.loops(nest.reduce_vars, nest.reduction_ranges, False, vector or False, "reduce", True)
        for st in nest.body:
            if st.op == "reduction":
                self.reduction_step(st, ridx)
            elif any(st is x for x in inner):
                self.statement(st)
        for _ in range(r_opened):
            self.close()
        for st in reductions:
            self.reduction_close(st)
        for st in post:
            self.statement(st)
        for _ in range(opened):
            self.close()

    def _reduction_index(self, nest: LoopNest) -> str:
        ridx = self.int_literal(0)
        for var, size in zip(nest.reduce_vars, nest.reduction_ranges):
            ridx = f"({ridx} * {self.index(size)} + {var})"
        return ridx

    def _row_invariant(self, nest: LoopNest) -> list[Stmt]:
        """Statements of a pointwise nest that depend on its outermost variable only: computed once
        per row, before the inner loops (a per-row load there also keeps GCC's PRE from blocking
        the vectorization of the inner loop)."""
        allowed, hoisted = {nest.iter_vars[0], *self.lk.size_vars}, []
        for st in nest.body:
            if st.op in ("store", "store_reduction", *_CONTROL) or st.body:
                continue
            if _symbols(st) <= allowed and set(st.args) <= allowed and st.name:
                hoisted.append(st)
                allowed.add(st.name)
        return hoisted

    # -- outer reductions (a sum over rows: the reduced variable is not the contiguous one) ----
    # Reducing one column at a time walks memory with a row's stride, one cache line per element.
    # Instead a block of neighbouring outputs keeps one accumulator each (the lanes), and every
    # row updates the whole block with contiguous loads, as Inductor's outer-reduction loops do.
    def _lane_loop(self, var: str, vector: bool = False) -> None:
        self.loop(Loop("tv_j", "tv_n", "lane", innermost=True, vector=vector))
        self.emit(f"const int64_t {var} = {var}_b + tv_j;")

    def _lanes(self, reductions: Sequence[Stmt], load: bool) -> None:
        """Copy every accumulator between its per-lane array and a local of the usual name."""
        for st in reductions:
            for part, ct in self.acc_parts(st):
                name = f"{st.name}_{part}"
                self.emit(f"{ct} {name} = {name}_l[tv_j];" if load else f"{name}_l[tv_j] = {name};")

    def _outer_reduction(self, nest: LoopNest, parts: tuple[list[Stmt], ...]) -> None:
        pre, inner, post, reductions = parts
        last, size, parallel = nest.iter_vars[-1], self.index(nest.ranges[-1]), self.parallel([nest])
        self.loops(nest.iter_vars[:-1], nest.ranges[:-1], parallel)
        self.loop(Loop(f"{last}_b", size, "block", self.lanes, parallel=len(nest.ranges) == 1 and parallel))
        self.emit(f"const int64_t tv_n = std::min<int64_t>({self.lanes}, {size} - {last}_b);")
        for st in reductions:
            for part, ct in self.acc_parts(st):
                self.emit(f"{ct} {st.name}_{part}_l[{self.lanes}];")
        self._lane_loop(last)
        for st in reductions:
            self.reduction_open(st)
        self._lanes(reductions, load=False)
        self.close()
        ridx = self._reduction_index(nest)
        r_opened = self.loops(nest.reduce_vars, nest.reduction_ranges, role="reduce")
        self._lane_loop(last, vector=True)
        self._lanes(reductions, load=True)
        for st in [*pre, *inner]:
            self.statement(st)
        for st in reductions:
            self.reduction_step(st, ridx)
        self._lanes(reductions, load=False)
        self.close()
        for _ in range(r_opened):
            self.close()
        self._lane_loop(last)
        self._lanes(reductions, load=True)
        for st in pre:
            self.statement(st)
        for st in reductions:
            self.reduction_close(st)
        for st in post:
            self.statement(st)
        for _ in range(len(nest.ranges) + 1):
            self.close()


_SSA = object()


# ---- analysis of nests (no C here) --------------------------------------------------------------

def _index_symbols(text: str) -> set[str]:
    return {x.name for x in parse_expr(text).free_symbols}


def _uses(st: Stmt) -> set[str]:
    used = set(st.args)
    for inner in st.body or ():
        used |= _uses(inner)
    return used


def _reads(st: Stmt) -> set[str]:
    """What a statement reads: its operands, what its masked body reads, the symbols of its index
    expressions (the indirect indices among them)."""
    return _uses(st) | _symbols(st, ("index", "expr", "size"))


def _symbols(st: Stmt, keys: tuple[str, ...] = ("index", "expr")) -> set[str]:
    """The symbols of a statement's (and its masked body's) index expressions under ``keys``."""
    names: set[str] = set()
    for key in keys:
        text = st.attr(key)
        if isinstance(text, str):
            names |= _index_symbols(text)
    for inner in st.body or ():
        names |= _symbols(inner, keys)
    return names


def _numel(ranges: Sequence[str]) -> int | None:
    total = 1
    for r in ranges:
        if not r.isdigit():
            return None
        total *= int(r)
    return total


def _split(nest: LoopNest) -> tuple[list[Stmt], list[Stmt], list[Stmt], list[Stmt]]:
    """(pre, inner, post, reductions) of a reduction nest's body: what neither reads an r
    variable nor a reduction runs before the r loops, what feeds the reductions inside them,
    what uses a reduction's result after them."""
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


def _is_outer_reduction(nest: LoopNest, inner: Sequence[Stmt]) -> bool:
    """Whether the loads feeding the reductions are contiguous along the last output variable
    and strided along the innermost reduced one."""
    if not nest.ranges or any(s.op in _CONTROL for s in inner):
        return False
    loads = [parse_expr(s.attr("index")) for s in inner if s.op == "load"]
    return any(_coeff(e, nest.iter_vars[-1]) == 1 for e in loads) and \
        all(_coeff(e, nest.reduce_vars[-1]) != 1 for e in loads)


def _coeff(expr: sympy.Expr, var: str) -> sympy.Expr:
    """The coefficient of the loop variable named ``var`` in an index expression."""
    return next((expr.coeff(x) for x in expr.free_symbols if x.name == var), sympy.Integer(0))


# Sharing the outer loop of a kernel's nests: Inductor fused a kernel's nests; running them one
# after another over the whole tensor costs one memory pass each (softmax: four). When
# consecutive nests share their outermost range and every buffer one of them writes is touched by
# the others only at the same elements per outer iteration, one shared outer loop runs them row
# by row, the row staying in cache.

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


def _fusable(group: Sequence[LoopNest], sizes: set[str], base: dict[str, str] | None = None) -> bool:
    """Whether the nests of ``group`` may share their outer loop (see above)."""
    if any(not n.ranges or n.ranges[0] != group[0].ranges[0] for n in group):
        return False
    if any(s.op == "indirect_indexing" or s.attr("mode") == "atomic_add" for n in group for s in n.stmts()):
        return False
    # a view and its base are one memory (a kernel's nests may come from several of Inductor's
    # kernels, between which a buffer is read through a view of it): one entry per base buffer
    base = base or {}
    touched: dict[str, list[tuple[int, tuple[str, ...] | None, bool, str]]] = {}
    for k, nest in enumerate(group):
        for s in nest.stmts():
            if s.op in ("load", "store", "store_reduction"):
                buffer = s.attr("buffer")
                touched.setdefault(base.get(buffer, buffer), []).append(
                    (k, _footprint(nest, s.attr("index"), sizes), s.op != "load", buffer))
    for uses in touched.values():
        shared = len({k for k, *_ in uses}) > 1 and any(writes for _, _, writes, _ in uses)
        footprints = {f for _, f, _, _ in uses}
        if shared and (None in footprints or len(footprints) > 1 or len({b for *_, b in uses}) > 1):
            return False
    return True


def _groups(lk: Any) -> list[list[LoopNest]]:
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

#: the helpers the default tables and statements call (``tv_*``), after :attr:`~CStyleRenderer.includes`
CStyleRenderer.helpers = r"""template <class T> static inline T tv_max(T a, T b) { return (a != a || a > b) ? a : b; }
template <class T> static inline T tv_min(T a, T b) { return (a != a || a < b) ? a : b; }
static inline int64_t tv_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t tv_floormod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline double tv_floordiv(double a, double b) { return std::floor(a / b); }
static inline float tv_floordiv(float a, float b) { return std::floor(a / b); }
template <class T> static inline T tv_remainder(T a, T b) { T r = std::fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t tv_remainder(int64_t a, int64_t b) { return tv_floormod(a, b); }
static inline int32_t tv_remainder(int32_t a, int32_t b) { return (int32_t)tv_floormod(a, b); }
static inline int64_t tv_ipow(int64_t b, int64_t e) { int64_t r = 1; while (e-- > 0) r *= b; return r; }
static inline float tv_h2f(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
  if (e == 0) { if (m == 0) u = s; else { int k = -1; do { k++; m <<= 1; } while (!(m & 0x400)); u = s | ((uint32_t)(112 - k) << 23) | ((m & 0x3ff) << 13); } }
  else if (e == 31) u = s | 0x7f800000u | (m << 13); else u = s | ((e + 112) << 23) | (m << 13);
  float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t tv_f2h(float f) {
  uint32_t u; std::memcpy(&u, &f, 4); uint32_t s = (u >> 16) & 0x8000; int32_t e = (int32_t)((u >> 23) & 0xff) - 112; uint32_t m = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
  if (e >= 31) return (uint16_t)(s | 0x7c00);
  if (e <= 0) { if (e < -10) return (uint16_t)s; m |= 0x800000; uint32_t sh = (uint32_t)(14 - e); uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1))) r++; return (uint16_t)(s | r); }
  uint32_t r = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff; if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++; return (uint16_t)(s | r); }
static inline float tv_b2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t tv_f2b(float f) { uint32_t u; std::memcpy(&u, &f, 4); if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
template <class T> static inline T tv_sign(T x) { return (x != x) ? x : (T)((x > 0) - (x < 0)); }
static inline double tv_erfinv(double y) {
  if (y <= -1) return y == -1 ? -INFINITY : NAN; if (y >= 1) return y == 1 ? INFINITY : NAN;
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 6.25) { w -= 3.125; x = -3.6444120640178196996e-21; x = -1.685059138182016589e-19 + x * w; x = 1.2858480715256400167e-18 + x * w;
    x = 1.115787767802518096e-17 + x * w; x = -1.333171662854620906e-16 + x * w; x = 2.0972767875968561637e-17 + x * w; x = 6.6376381343583238325e-15 + x * w;
    x = -4.0545662729752068639e-14 + x * w; x = -8.1519341976054721522e-14 + x * w; x = 2.6335093153082322977e-12 + x * w; x = -1.2975133253453532498e-11 + x * w;
    x = -5.4154120542946279317e-11 + x * w; x = 1.051212273321532285e-09 + x * w; x = -4.1126339803469836976e-09 + x * w; x = -2.9070369957882005086e-08 + x * w;
    x = 4.2347877827932403518e-07 + x * w; x = -1.3654692000834678645e-06 + x * w; x = -1.3882523362786468719e-05 + x * w; x = 0.0001867342080340571352 + x * w;
    x = -0.00074070253416626697512 + x * w; x = -0.0060336708714301490533 + x * w; x = 0.24015818242558961693 + x * w; x = 1.6536545626831027356 + x * w; }
  else if (w < 16.0) { w = std::sqrt(w) - 3.25; x = 2.2137376921775787049e-09; x = 9.0756561938885390979e-08 + x * w; x = -2.7517406297064545428e-07 + x * w;
    x = 1.8239629214389227755e-08 + x * w; x = 1.5027403968909827627e-06 + x * w; x = -4.013867526981545969e-06 + x * w; x = 2.9234449089955446044e-06 + x * w;
    x = 1.2475304481671778723e-05 + x * w; x = -4.7318229009055733981e-05 + x * w; x = 6.8284851459573175448e-05 + x * w; x = 2.4031110387097893999e-05 + x * w;
    x = -0.0003550375203628474796 + x * w; x = 0.00095328937973738049703 + x * w; x = -0.0016882755560235047313 + x * w; x = 0.0024914420961078508066 + x * w;
    x = -0.0037512085075692412107 + x * w; x = 0.005370914553590063617 + x * w; x = 1.0052589676941592334 + x * w; x = 3.0838856104922207635 + x * w; }
  else { w = std::sqrt(w) - 5.0; x = -2.7109920616438573243e-11; x = -2.5556418169965252055e-10 + x * w; x = 1.5076572693500548083e-09 + x * w;
    x = -3.7894654401267369937e-09 + x * w; x = 7.6157012080783393804e-09 + x * w; x = -1.4960026627149240478e-08 + x * w; x = 2.9147953450901080826e-08 + x * w;
    x = -6.7711997758452339498e-08 + x * w; x = 2.2900482228026654717e-07 + x * w; x = -9.9298272942317002539e-07 + x * w; x = 4.5260625972231537039e-06 + x * w;
    x = -1.9681778105531670567e-05 + x * w; x = 7.5995277030017761139e-05 + x * w; x = -0.00021503011930044477347 + x * w; x = -0.00013871931833623122026 + x * w;
    x = 1.0103004648645343977 + x * w; x = 4.8499064014085844221 + x * w; }
  return x * y; }
template <class To, class From> static inline To tv_bitcast(From v) { static_assert(sizeof(To) == sizeof(From), "bitcast size"); To t; std::memcpy(&t, &v, sizeof(To)); return t; }
"""
