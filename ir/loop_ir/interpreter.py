"""The reference interpreter of the loop IR: exact, not fast. It is the executable meaning of the
schema (``docs/loop_ir.md``): where a vendor's code generator and this file disagree, this file
says what the program computes.

A loop nest is evaluated over its whole iteration space at once: iteration variables are
broadcast ``arange`` s (``i*`` then ``r*`` dimensions), index expressions are evaluated on them,
loads gather from the buffer's flat storage, compute ops are eager torch ops, reductions reduce
the ``r`` dimensions, stores scatter. Extern kernels call the ATen op they name.

The file reads top to bottom, one table per kind of thing, each entry a small function:

- ``INDEX_EVALUATORS``: the functions of index expressions (``FloorDiv``, ``ModularIndexing``...),
  by sympy class name;
- ``COMPUTE_FUNCTIONS``: the torch function of each ``ops.*`` compute op of the schema's ``COMPUTE_OPS``, by name (anything else resolves to ``torch.<name>``);
- ``REDUCTIONS``: the kinds of ``reduction``;
- ``STATEMENTS``: one handler per statement kind, ``handler(st, ctx)`` over a :class:`Context`
  (what the nest sees: values, index symbols, buffers, shape, mask), returning the statement's
  value; a kind not listed is a compute op;
- then kernels (:func:`run_kernel`), extern kernels (:func:`run_extern`) and whole programs
  (:func:`run_program`).

Example::

    >>> import torch
    >>> from torchvendor.ir.loop_ir.schema import Buffer, Kernel, LoopNest, LoopProgram, Stmt
    >>> x = Buffer("x", "float32", ("2", "3"), ("3", "1"), "cpu", "input")
    >>> y = Buffer("y", "float32", ("2",), ("1",), "cpu", "output")
    >>> body = (Stmt("t0", "load", (), (("buffer", "x"), ("index", "3*i0 + r0"))),
    ...         Stmt("t1", "reduction", ("t0",), (("kind", "sum"), ("dtype", "float32"))),
    ...         Stmt(None, "store_reduction", ("t1",), (("buffer", "y"), ("index", "i0"))))
    >>> p = LoopProgram("inference", "cpu", (x, y), ("x",), ("y",),
    ...                 (Kernel("k0", (LoopNest("op0", ("2",), ("3",), body),)),))
    >>> run_program(p, [torch.ones(2, 3)])
    [tensor([3., 3.])]
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import operator
from typing import Any, Callable, Mapping, Sequence

import sympy
import torch

from .index_expr import parse_expr
from .schema import (BufferRef, ExternKernel, Kernel, LoopNest, LoopProgram, SizeExpr, Stmt, TorchValue,
                     operation_from_dict)

__all__ = ["run_program", "run_kernel", "run_extern", "eval_index", "load_kernel", "write_value", "LoopIRRuntimeError",
           "COMPUTE_FUNCTIONS", "STATEMENTS", "INDEX_EVALUATORS", "REDUCTIONS", "Context"]


class LoopIRRuntimeError(RuntimeError):
    """The interpreter met something it cannot execute; the message names the kernel and statement."""


def _dtype(name: str | None) -> torch.dtype | None:
    return None if name is None else getattr(torch, name)


# ---- index expressions -----------------------------------------------------------------------------
# An index expression is a sympy tree. Its leaves are integers, rationals, floats, booleans and
# symbols (size symbols, iteration variables ``i*``/``r*``, indirect indices); every other node is
# a function applied to its evaluated arguments, looked up by sympy class name in INDEX_EVALUATORS.
# Values are Python ints or int64 tensors (for iteration variables), so one expression evaluates a
# whole iteration space at once.

#: sympy class name -> the function computing that node from its evaluated arguments.
INDEX_EVALUATORS: dict[str, Callable[..., Any]] = {}


def _index_function(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            INDEX_EVALUATORS[name] = fn
        return fn

    return register


@_index_function("Add")
def _add(*args: Any) -> Any:
    return functools.reduce(operator.add, args)


@_index_function("Mul")
def _mul(*args: Any) -> Any:
    return functools.reduce(operator.mul, args)


@_index_function("Pow", "PowByNatural")
def _pow(base: Any, exponent: Any) -> Any:
    return base ** exponent


@_index_function("FloorDiv", "CleanDiv")
def _floor_div(a: Any, b: Any) -> Any:
    return a // b


@_index_function("IntTrueDiv")
def _int_true_div(a: Any, b: Any) -> Any:
    return a / b


@_index_function("CeilDiv")
def _ceil_div(a: Any, b: Any) -> Any:
    return -((-a) // b)


@_index_function("ModularIndexing")
def _modular_indexing(x: Any, divisor: Any, modulus: Any) -> Any:
    return (x // divisor) % modulus


@_index_function("PythonMod", "Mod")
def _mod(a: Any, b: Any) -> Any:
    return a % b


def _fold(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], python: Callable[..., int], args: tuple) -> Any:
    if all(isinstance(a, int) for a in args):
        return python(args)
    return functools.reduce(lambda a, b: fn(torch.as_tensor(a), torch.as_tensor(b)), args)


@_index_function("Min")
def _min(*args: Any) -> Any:
    return _fold(torch.minimum, min, args)


@_index_function("Max")
def _max(*args: Any) -> Any:
    return _fold(torch.maximum, max, args)


@_index_function("Identity")
def _identity(x: Any) -> Any:
    return x


@_index_function("Where")
def _where(condition: Any, a: Any, b: Any) -> Any:
    if isinstance(condition, bool):
        return a if condition else b
    return torch.where(condition, torch.as_tensor(a), torch.as_tensor(b))


def _to_int(python: Callable[[Any], int], tensor: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Any], Any]:
    def to_int(x: Any) -> Any:
        return tensor(x).long() if isinstance(x, torch.Tensor) else python(x)

    return to_int


INDEX_EVALUATORS.update(TruncToInt=_to_int(math.trunc, torch.trunc), FloorToInt=_to_int(math.floor, torch.floor),
                       CeilToInt=_to_int(math.ceil, torch.ceil), RoundToInt=_to_int(round, torch.round))
INDEX_EVALUATORS.update(BitwiseFn_bitwise_and=operator.and_, BitwiseFn_bitwise_or=operator.or_,
                       LShift=operator.lshift, RShift=operator.rshift, Abs=abs)  # abs: ints and tensors


def _comparison(method: str) -> Callable[[Any, Any], Any]:
    def compare(a: Any, b: Any) -> Any:
        return getattr(a if isinstance(a, torch.Tensor) else torch.as_tensor(a), method)(b)

    return compare


INDEX_EVALUATORS.update(StrictLessThan=_comparison("__lt__"), LessThan=_comparison("__le__"),
                       StrictGreaterThan=_comparison("__gt__"), GreaterThan=_comparison("__ge__"),
                       Equality=_comparison("__eq__"), Unequality=_comparison("__ne__"))


@_index_function("And")
def _and(*args: Any) -> Any:
    return functools.reduce(operator.and_, args)


@_index_function("Or")
def _or(*args: Any) -> Any:
    return functools.reduce(operator.or_, args)


@_index_function("Not")
def _not(x: Any) -> Any:
    return ~x if isinstance(x, torch.Tensor) else not x


def _evaluate(e: sympy.Basic, symbols: Mapping[str, Any]) -> Any:
    """The value of the sympy expression ``e``, with ``symbols`` bound."""
    if e.is_Integer:
        return int(e)
    if e.is_Symbol:
        try:
            return symbols[e.name]
        except KeyError:
            raise LoopIRRuntimeError(f"unbound symbol {e.name!r} in index expression (bound: {sorted(symbols)})") from None
    if e.is_Rational or e.is_Float:
        return float(e)
    if e is sympy.true or e is sympy.false:
        return bool(e)
    fn = INDEX_EVALUATORS.get(type(e).__name__)
    if fn is None:
        raise LoopIRRuntimeError(f"index function {type(e).__name__} is not supported by the interpreter")
    return fn(*(_evaluate(a, symbols) for a in e.args))


def eval_index(text: str, env: Mapping[str, Any]) -> Any:
    """Evaluate an index or size expression; symbols are looked up in ``env`` (ints or tensors).

    >>> eval_index("ModularIndexing(i0, 2, 3) + s0", {"i0": 7, "s0": 10})
    10
    """
    return _evaluate(parse_expr(text), env)


def _size(text: str, sizes: Mapping[str, int]) -> int:
    return int(eval_index(text, sizes))


# ---- compute ops ---------------------------------------------------------------------------------------
def _c_mod(a: Any, b: Any) -> Any:
    return torch.fmod(a, b)


def _truncdiv(a: Any, b: Any) -> Any:
    return torch.div(a, b, rounding_mode="trunc")


def _floordiv(a: Any, b: Any) -> Any:
    return torch.div(a, b, rounding_mode="floor")


#: Inductor ``ops.*`` names whose torch function differs from ``torch.<name>`` /
#: ``torch.special.<name>``. Anything else resolves there by name (``libdevice_`` stripped).
COMPUTE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.true_divide,
    "div": torch.true_divide, "int_truediv": lambda a, b: torch.true_divide(a.double() if not a.is_floating_point() else a, b),
    "floordiv": _floordiv, "truncdiv": _truncdiv, "mod": _c_mod, "remainder": torch.remainder,
    "fmod": torch.fmod, "pow": torch.pow, "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_not": torch.logical_not,
    "logical_xor": torch.logical_xor, "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor, "bitwise_not": torch.bitwise_not,
    "bitwise_left_shift": torch.bitwise_left_shift, "bitwise_right_shift": torch.bitwise_right_shift,
    "lshift": torch.bitwise_left_shift, "rshift": torch.bitwise_right_shift,
    "and_": torch.bitwise_and, "or_": torch.bitwise_or, "xor": torch.bitwise_xor,
    "where": torch.where, "identity": lambda x: x, "relu": torch.relu, "neg": torch.neg,
    "reciprocal": torch.reciprocal, "square": torch.square, "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid,
    "exp2": torch.exp2, "erfinv": torch.erfinv, "isinf": torch.isinf, "isnan": torch.isnan,
    "signbit": torch.signbit, "sign": torch.sign, "round": torch.round, "trunc": torch.trunc,
    "floor": torch.floor, "ceil": torch.ceil, "copysign": torch.copysign, "hypot": torch.hypot,
    "nextafter": torch.nextafter, "atan2": torch.atan2, "frexp": torch.frexp,
    "fma": lambda a, b, c: a * b + c, "round_decimal": lambda x, d: torch.round(x, decimals=int(d)),
    "ceil_to_int": lambda x, dt=None: torch.ceil(x).long(), "floor_to_int": lambda x, dt=None: torch.floor(x).long(),
    "trunc_to_int": lambda x, dt=None: torch.trunc(x).long(), "round_to_int": lambda x, dt=None: torch.round(x).long(),
    "erf": torch.erf, "erfc": torch.erfc, "lgamma": torch.lgamma, "digamma": torch.digamma,
    "log_ndtr": torch.special.log_ndtr, "ndtri": torch.special.ndtri,
}


def _compute_fn(op: str) -> Callable[..., Any]:
    fn = COMPUTE_FUNCTIONS.get(op)
    if fn is not None:
        return fn
    name = op.removeprefix("libdevice_")
    for ns in (torch, torch.special):
        fn = getattr(ns, name, None)
        if callable(fn):
            COMPUTE_FUNCTIONS[op] = fn
            return fn
    raise LoopIRRuntimeError(f"ops.{op} has no eager implementation in the loop IR interpreter")


# ---- random numbers ------------------------------------------------------------------------------------
_M64 = (1 << 64) - 1


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= (1 << 63) else v


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _lsr(x: torch.Tensor, k: int) -> torch.Tensor:
    return (x >> k) & ((1 << (64 - k)) - 1)


def _hash64(seed: Any, offset: Any) -> torch.Tensor:
    """splitmix64 of (seed, offset): the interpreter's counter-based RNG (int64, wrapping)."""
    x = torch.as_tensor(seed, dtype=torch.int64) * _GOLDEN + torch.as_tensor(offset, dtype=torch.int64)
    x = x + _GOLDEN
    x = (x ^ _lsr(x, 30)) * _MIX1
    x = (x ^ _lsr(x, 27)) * _MIX2
    return x ^ _lsr(x, 31)


def _uniform(seed: Any, offset: Any) -> torch.Tensor:
    return _lsr(_hash64(seed, offset), 40).to(torch.float32) * (1.0 / (1 << 24))


def _rand(seed: Any, offset: Any) -> torch.Tensor:
    return _uniform(seed, offset)


def _randn(seed: Any, offset: Any) -> torch.Tensor:
    u1 = _uniform(seed, torch.as_tensor(offset, dtype=torch.int64) * 2).clamp_min(1e-7)
    u2 = _uniform(seed, torch.as_tensor(offset, dtype=torch.int64) * 2 + 1)
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2 * math.pi * u2)


def _randint64(seed: Any, offset: Any, low: Any, high: Any) -> torch.Tensor:
    span = torch.as_tensor(high, dtype=torch.int64) - torch.as_tensor(low, dtype=torch.int64)
    return torch.as_tensor(low, dtype=torch.int64) + torch.remainder(_lsr(_hash64(seed, offset), 1), span)


COMPUTE_FUNCTIONS.update({"rand": _rand, "randn": _randn, "randint64": _randint64})


# ---- reductions --------------------------------------------------------------------------------------
# ``reduction(kind, values...)`` reduces the trailing ``reduction_dims`` dimensions of its (broadcast)
# inputs, keeping them with size 1. ``acc`` is the accumulation dtype (the statement's ``dtype``).

#: reduction kind -> ``fn(values, dims, acc)``; ``dims`` are the (negative) reduction dimensions
REDUCTIONS: dict[str, Callable[[list[torch.Tensor], tuple[int, ...], torch.dtype | None], Any]] = {}


def _reduction_kind(*kinds: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for kind in kinds:
            REDUCTIONS[kind] = fn
        return fn

    return register


def _accumulate_in(v: torch.Tensor, acc: torch.dtype | None) -> torch.Tensor:
    return v.to(acc) if acc else v


@_reduction_kind("sum")
def _sum(values: list[torch.Tensor], dims: tuple[int, ...], acc: torch.dtype | None) -> torch.Tensor:
    return _accumulate_in(values[0], acc).sum(dims, keepdim=True)


@_reduction_kind("prod")
def _prod(values: list[torch.Tensor], dims: tuple[int, ...], acc: torch.dtype | None) -> torch.Tensor:
    return functools.reduce(lambda out, d: out.prod(d, keepdim=True), dims, _accumulate_in(values[0], acc))


@_reduction_kind("max")
def _amax(values: list[torch.Tensor], dims: tuple[int, ...], acc: torch.dtype | None) -> torch.Tensor:
    return values[0].amax(dims, keepdim=True)


@_reduction_kind("min")
def _amin(values: list[torch.Tensor], dims: tuple[int, ...], acc: torch.dtype | None) -> torch.Tensor:
    return values[0].amin(dims, keepdim=True)


@_reduction_kind("any")
def _any(values: list[torch.Tensor], dims: tuple[int, ...], acc: torch.dtype | None) -> torch.Tensor:
    return (values[0] != 0).any(dim=dims, keepdim=True) if dims else values[0] != 0


@_reduction_kind("xor_sum")
def _xor_sum(values: list[torch.Tensor], dims: tuple[int, ...], acc: torch.dtype | None) -> torch.Tensor:
    out = values[0]
    for d in dims:
        out = functools.reduce(operator.xor, out.unbind(d)).unsqueeze(d)
    return out


@_reduction_kind("argmax")
def _arg_extreme(values: list[torch.Tensor], dims: tuple[int, ...], acc: torch.dtype | None, *,
                 largest: bool = True) -> torch.Tensor:
    """The flat index, within the reduction dimensions, of the first maximum (minimum)."""
    v = values[0]
    lead = v.shape[: v.dim() - len(dims)]
    flat = v.reshape(*lead, -1)
    return (flat.argmax(-1) if largest else flat.argmin(-1)).reshape(*lead, *([1] * len(dims)))


REDUCTIONS["argmin"] = functools.partial(_arg_extreme, largest=False)


@_reduction_kind("welford_reduce")
def _welford_reduce(values: list[torch.Tensor], dims: tuple[int, ...], acc: torch.dtype | None) -> tuple:
    """(mean, sum of squared deviations, count) of the values."""
    x = _accumulate_in(values[0], acc)
    mean = x.mean(dims, keepdim=True)
    m2 = ((x - mean) ** 2).sum(dims, keepdim=True)
    return (mean, m2, torch.full_like(mean, float(math.prod(x.shape[d] for d in dims))))


@_reduction_kind("welford_combine")
def _welford_combine(values: list[torch.Tensor], dims: tuple[int, ...], acc: torch.dtype | None) -> tuple:
    """Combine partial (mean, m2, weight) triples into one."""
    mean, m2, w = values
    total = w.sum(dims, keepdim=True)
    safe = torch.where(total == 0, torch.ones_like(total), total)
    new_mean = (mean * w).sum(dims, keepdim=True) / safe
    new_m2 = (m2 + w * (mean - new_mean) ** 2).sum(dims, keepdim=True)
    return (new_mean, new_m2, total)


@_reduction_kind("online_softmax_reduce")
def _online_softmax(values: list[torch.Tensor], dims: tuple[int, ...], acc: torch.dtype | None) -> tuple:
    """(max, sum of exp(value - max)): a softmax's two statistics in one pass."""
    m = values[0].amax(dims, keepdim=True)
    return (m, torch.exp(values[0] - m).sum(dims, keepdim=True))


def _reduce(kind: str, values: list[torch.Tensor], reduction_dims: int, acc: torch.dtype | None) -> Any:
    fn = REDUCTIONS.get(kind)
    if fn is None:
        raise LoopIRRuntimeError(f"reduction kind {kind!r} is not supported by the interpreter "
                                 f"(supported: {sorted(REDUCTIONS)})")
    return fn(values, tuple(range(-reduction_dims, 0)), acc)


# ---- kernels ------------------------------------------------------------------------------------------
class _FlatBuffers:
    """Flat element views of the buffers a kernel touches (cpu copies for other devices)."""

    def __init__(self, buffers: Mapping[str, torch.Tensor]) -> None:
        self.buffers = buffers
        self.flat: dict[str, torch.Tensor] = {}
        self.written: set[str] = set()

    def get(self, name: str) -> torch.Tensor:
        flat = self.flat.get(name)
        if flat is None:
            try:
                t = self.buffers[name]
            except KeyError:
                raise LoopIRRuntimeError(f"buffer {name!r} was not passed to the kernel") from None
            n = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
            flat = t.as_strided((max(n, 0),), (1,), t.storage_offset())
            if flat.device.type != "cpu":
                flat = flat.cpu()
            self.flat[name] = flat
        return flat

    def write_back(self) -> None:
        for name in self.written:
            t = self.buffers[name]
            if t.device.type != "cpu":
                n = self.flat[name].numel()
                t.as_strided((n,), (1,), t.storage_offset()).copy_(self.flat[name])


def _broadcast(v: Any, shape: Sequence[int]) -> torch.Tensor:
    t = torch.as_tensor(v)
    if t.dim() < len(shape):
        t = t.reshape(*([1] * (len(shape) - t.dim())), *t.shape)
    return t.expand(list(shape))


@dataclasses.dataclass
class Context:
    """What a statement of a loop nest sees while the nest runs over its whole iteration space.

    Every value is a tensor broadcastable to ``shape``: the nest's iteration sizes, pointwise
    dimensions first, then ``reduction_dims`` reduction dimensions. A statement handler reads
    its arguments and index symbols here:

    >>> ctx = Context({}, {"i0": torch.arange(3)}, _FlatBuffers({"x": torch.tensor([5.0, 6.0, 7.0])}),
    ...               [3], 0, None, "k0/op0")
    >>> STATEMENTS["load"](Stmt("t0", "load", (), (("buffer", "x"), ("index", "2 - i0"))), ctx)
    tensor([7., 6., 5.])
    """

    #: SSA values by statement name
    values: dict[str, Any]
    #: what index expressions may name: size symbols, the iteration variables (``i0``, ``i1``, ...
    #: then ``r0``, ...; each an int64 ``arange`` along its own dimension) and indirect indices
    symbols: dict[str, Any]
    buffers: _FlatBuffers
    shape: list[int]
    reduction_dims: int
    #: inside ``masked``: where its condition holds (loads and indirect indices elsewhere read 0)
    mask: torch.Tensor | None
    #: ``kernel/nest``, for error messages
    where: str

    def input(self, st: Stmt, k: int = 0) -> Any:
        """The value of the statement's ``k``-th argument."""
        return self.values[st.args[k]]

    def inputs(self, st: Stmt) -> list[Any]:
        return [self.values[name] for name in st.args]

    def index(self, text: str) -> Any:
        return eval_index(text, self.symbols)

    def full_rank(self, v: torch.Tensor) -> torch.Tensor:
        """``v`` with leading size-1 dimensions up to the rank of the iteration space."""
        return v.reshape(*([1] * (len(self.shape) - v.dim())), *v.shape) if v.dim() < len(self.shape) else v


# ---- statements ---------------------------------------------------------------------------------------
# One handler per statement kind: ``handler(st, ctx)`` returns the statement's value (stored under
# ``st.name``) or None. A kind not listed here is a compute op (COMPUTE_FUNCTIONS), and ``yield`` ends a
# ``masked`` block with the value of its argument.

#: statement op -> its handler
STATEMENTS: dict[str, Callable[[Stmt, Context], Any]] = {}


def _statement(op: str) -> Callable[[Callable[[Stmt, Context], Any]], Callable[[Stmt, Context], Any]]:
    def register(fn: Callable[[Stmt, Context], Any]) -> Callable[[Stmt, Context], Any]:
        STATEMENTS[op] = fn
        return fn

    return register


@_statement("load")
def _load(st: Stmt, ctx: Context) -> torch.Tensor:
    """``buffer[index]``; under a mask, masked-off lanes read element 0."""
    index = ctx.index(st.attr("index"))
    if ctx.mask is not None:
        index = torch.where(ctx.mask, torch.as_tensor(index), 0)
    return ctx.full_rank(ctx.buffers.get(st.attr("buffer"))[torch.as_tensor(index, dtype=torch.int64)])


def _scatter(st: Stmt, ctx: Context, shape: list[int]) -> None:
    name = st.attr("buffer")
    dst = ctx.buffers.get(name)
    index = _broadcast(torch.as_tensor(ctx.index(st.attr("index")), dtype=torch.int64), shape)
    value = _broadcast(ctx.input(st), shape).to(dst.dtype)
    dst.index_put_((index.reshape(-1),), value.reshape(-1), accumulate=st.attr("mode") == "atomic_add")
    ctx.buffers.written.add(name)


@_statement("store")
def _store(st: Stmt, ctx: Context) -> None:
    """``buffer[index] = value`` over the whole iteration space (``mode="atomic_add"``: +=)."""
    _scatter(st, ctx, ctx.shape)


@_statement("store_reduction")
def _store_reduction(st: Stmt, ctx: Context) -> None:
    """Store a reduced value: the reduction dimensions have size 1."""
    pointwise = ctx.shape[: len(ctx.shape) - ctx.reduction_dims]
    _scatter(st, ctx, pointwise + [1] * ctx.reduction_dims)


@_statement("load_seed")
def _load_seed(st: Stmt, ctx: Context) -> torch.Tensor:
    """An element of the seed buffer, at the argument's offset or the ``offset`` attribute."""
    offset = ctx.input(st) if st.args else torch.tensor(st.attr("offset"))
    return ctx.buffers.get(st.attr("buffer"))[torch.as_tensor(offset, dtype=torch.int64)]


@_statement("constant")
def _constant(st: Stmt, ctx: Context) -> torch.Tensor:
    return torch.tensor(st.attr("value"), dtype=_dtype(st.attr("dtype"))).reshape([1] * len(ctx.shape))


@_statement("index_expr")
def _index_expr(st: Stmt, ctx: Context) -> torch.Tensor:
    """An index expression used as a value, converted to ``dtype``."""
    return ctx.full_rank(torch.as_tensor(ctx.index(st.attr("expr"))).to(_dtype(st.attr("dtype"))))


@_statement("to_dtype")
def _to_dtype(st: Stmt, ctx: Context) -> torch.Tensor:
    return ctx.input(st).to(_dtype(st.attr("dtype")))


@_statement("to_dtype_bitcast")
def _to_dtype_bitcast(st: Stmt, ctx: Context) -> torch.Tensor:
    return ctx.input(st).contiguous().view(_dtype(st.attr("dtype")))


@_statement("indirect_indexing")
def _indirect_indexing(st: Stmt, ctx: Context) -> torch.Tensor:
    """A value turned into an index symbol (named like the statement) that later indices may use.

    ``wrap_neg`` (default true) adds ``size`` to negative values; ``check`` (default true) raises
    on an index outside ``[0, size)``.
    """
    x = ctx.input(st).to(torch.int64)
    size = ctx.index(st.attr("size"))
    if st.attr("wrap_neg", True):
        x = torch.where(x < 0, x + size, x)
    if ctx.mask is not None:
        x = torch.where(ctx.mask, x, 0)
    if st.attr("check", True) and x.numel() and (int(x.min()) < 0 or int(x.max()) >= int(size)):
        raise LoopIRRuntimeError(f"indirect index out of bounds [0, {size})")
    ctx.symbols[st.name] = x
    return x


@_statement("check_bounds")
def _check_bounds(st: Stmt, ctx: Context) -> None:
    """Nothing to do: indirect_indexing already checked."""


@_statement("device_assert")
def _device_assert(st: Stmt, ctx: Context) -> None:
    """``torch._assert_async``: a false condition (where the mask is on) raises with the message."""
    cond = torch.as_tensor(ctx.input(st)).to(torch.bool)
    if ctx.mask is not None:
        cond = cond | ~ctx.mask
    if not bool(cond.all()):
        raise LoopIRRuntimeError(f"device assertion failed: {st.attr('msg')}")


@_statement("reduction")
def _reduction(st: Stmt, ctx: Context) -> Any:
    """Reduce the reduction dimensions (kept, with size 1); see _reduce for the kinds."""
    inputs = [_broadcast(v, ctx.shape) for v in ctx.inputs(st)]
    return _reduce(st.attr("kind"), inputs, ctx.reduction_dims, _dtype(st.attr("dtype")))


@_statement("getitem")
def _getitem(st: Stmt, ctx: Context) -> Any:
    """An element of a tuple value (welford and online-softmax reductions, frexp)."""
    return ctx.input(st)[st.attr("index")]


@_statement("masked")
def _masked(st: Stmt, ctx: Context) -> torch.Tensor:
    """Run ``st.body`` where the argument is true; elsewhere the value is ``other``."""
    condition = ctx.input(st).to(torch.bool)
    inner = dataclasses.replace(ctx, mask=condition if ctx.mask is None else condition & ctx.mask)
    result = _run_block(st.body, inner)
    return torch.where(condition, result, torch.tensor(st.attr("other"), dtype=result.dtype))


_ABSENT = object()


def _compute(st: Stmt, ctx: Context) -> Any:
    """A compute op: the eager torch function of COMPUTE_FUNCTIONS on the arguments.

    With ``nargs``, positional argument ``k`` is the attribute ``arg<k>`` if present (a
    constant), else the next statement argument; other attributes are keyword arguments.
    """
    inputs = ctx.inputs(st)
    nargs = st.attr("nargs")
    if nargs is None:
        args = inputs
    else:
        remaining = iter(inputs)
        args = [st.attr(f"arg{k}", _ABSENT) for k in range(nargs)]
        args = [next(remaining) if a is _ABSENT else a for a in args]
    kwargs = {k: v for k, v in st.attrs if not (k.startswith("arg") and k[3:].isdigit()) and k != "nargs"}
    out = _compute_fn(st.op)(*args, **kwargs)
    if st.dtype is not None and isinstance(out, torch.Tensor) and st.op != "frexp":
        out = out.to(_dtype(st.dtype))
    return out


def _run_block(body: Sequence[Stmt], ctx: Context) -> Any:
    """Run statements in order; return the value of a ``yield`` (the end of a masked block)."""
    for st in body:
        try:
            if st.op == "yield":
                return ctx.input(st)
            value = STATEMENTS.get(st.op, _compute)(st, ctx)
            if st.name is not None:
                ctx.values[st.name] = value
        except LoopIRRuntimeError as e:
            raise LoopIRRuntimeError(f"{ctx.where}: {st.op} {st.name or ''}: {e}") from None
        except Exception as e:  # add the statement to torch's message
            raise LoopIRRuntimeError(f"{ctx.where}: while executing {st}: {type(e).__name__}: {e}") from e
    return None


def _run_nest(nest: LoopNest, buffers: _FlatBuffers, sizes: Mapping[str, int], where: str) -> None:
    iteration = [_size(s, sizes) for s in nest.ranges]
    reduction = [_size(s, sizes) for s in nest.reduction_ranges]
    if any(s == 0 for s in iteration):
        return
    shape = iteration + reduction
    symbols: dict[str, Any] = dict(sizes)
    names = [f"i{k}" for k in range(len(iteration))] + [f"r{k}" for k in range(len(reduction))]
    for k, (name, size) in enumerate(zip(names, shape)):
        along_k = [1] * len(shape)
        along_k[k] = size
        symbols[name] = torch.arange(size, dtype=torch.int64).reshape(along_k)
    _run_block(nest.body, Context({}, symbols, buffers, shape, len(reduction), None, where))


def run_kernel(kernel: Kernel, buffers: Mapping[str, torch.Tensor], sizes: Mapping[str, int] | None = None) -> None:
    """Execute a kernel on named tensors (read and written in place); ``sizes`` binds size symbols."""
    flat = _FlatBuffers(buffers)
    for nest in kernel.nests:
        _run_nest(nest, flat, dict(sizes or {}), f"{kernel.name}/{nest.name}")
    flat.write_back()


def load_kernel(text: str) -> Callable[[Mapping[str, torch.Tensor], Mapping[str, int]], None]:
    """Parse a kernel's JSON (as embedded in Inductor's wrapper) into a callable
    ``k(buffers, sizes)``."""
    kernel = operation_from_dict(json.loads(text))
    if not isinstance(kernel, Kernel):
        raise LoopIRRuntimeError("load_kernel expects a kernel")

    def call(buffers: Mapping[str, torch.Tensor], sizes: Mapping[str, int]) -> None:
        run_kernel(kernel, buffers, {k: int(v) for k, v in sizes.items()})

    call.kernel = kernel  # type: ignore[attr-defined]
    return call


# ---- extern kernels -----------------------------------------------------------------------------------
def _arg(v: Any, env: Mapping[str, Any], sizes: Mapping[str, int]) -> Any:
    if isinstance(v, BufferRef):
        return env[v.name]
    if isinstance(v, SizeExpr):
        return eval_index(v.expr, sizes)
    if isinstance(v, TorchValue):
        return v.resolve()
    if isinstance(v, tuple):
        return [_arg(x, env, sizes) for x in v]
    return v


def run_extern(ext: ExternKernel, env: dict[str, Any], sizes: Mapping[str, int]) -> None:
    """Execute an extern kernel on the tensors of ``env`` (outputs copied into their buffers)."""
    from ..fx_view import resolve_op

    if ext.op == "getitem":
        val = env[ext.args[0].name]
        for i in ext.args[1:]:
            val = val[i]
        write_value(env, ext.outputs[0], val)
        return
    try:
        fn = resolve_op(ext.op)
    except Exception as e:
        raise LoopIRRuntimeError(f"extern kernel {ext.name}: cannot resolve {ext.op!r}: {e}") from None
    args = [_arg(a, env, sizes) for a in ext.args]
    kwargs = {k: _arg(v, env, sizes) for k, v in ext.kwargs}
    result = fn(*args, **kwargs)
    if ext.outputs:
        if len(ext.outputs) == 1:
            write_value(env, ext.outputs[0], result)
        else:
            for name, r in zip(ext.outputs, result):
                write_value(env, name, r)
    elif not ext.mutated:
        env[ext.name] = result


def write_value(env: dict[str, Any], name: str, value: Any) -> None:
    """Bind an extern kernel's result to buffer ``name``: copied into the tensor already there
    (a preallocated output or a view of another buffer, whose aliases must see it), else bound.

    >>> env = {"out": torch.zeros(2)}
    >>> write_value(env, "out", torch.ones(2)); env["out"]
    tensor([1., 1.])
    """
    dst = env.get(name)
    if isinstance(dst, torch.Tensor) and isinstance(value, torch.Tensor):
        if dst.data_ptr() != value.data_ptr() or dst.stride() != value.stride():
            dst.copy_(value)
    else:
        env[name] = value


# ---- whole programs -----------------------------------------------------------------------------------
def _bind_sizes(program: LoopProgram, inputs: Sequence[Any]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    by_name = dict(zip(program.inputs, inputs))
    for name, expr in program.scalar_inputs:
        e = parse_expr(expr)
        if e.is_Symbol:
            sizes[e.name] = int(by_name[name])
    for name, value in by_name.items():
        if not isinstance(value, torch.Tensor):
            continue
        buf = program.buffer(name)
        for text, actual in zip((*buf.size, *buf.stride), (*value.shape, *value.stride())):
            e = parse_expr(text)
            if e.is_Symbol and e.name not in sizes:
                sizes[e.name] = int(actual)
    return sizes


def _written(program: LoopProgram) -> set[str]:
    return {n for op in program.ops for n in op.writes()}


def run_program(program: LoopProgram, inputs: Sequence[Any]) -> list[Any]:
    """Execute a whole program on its inputs (tensors and integers, in ``program.inputs`` order)
    and return its outputs.

    Intermediate buffers are allocated with their declared size and stride, aliases are
    ``as_strided`` views of their base, and operations run in order.
    """
    if len(inputs) != len(program.inputs):
        raise LoopIRRuntimeError(f"program {program.name!r} takes {len(program.inputs)} inputs "
                                 f"({list(program.inputs)}), got {len(inputs)}")
    sizes = _bind_sizes(program, inputs)
    env, restrided = _bind_inputs(program, inputs, sizes)
    _allocate(program, env, sizes)
    for op in program.ops:
        if isinstance(op, Kernel):
            run_kernel(op, {n: env[n] for n in (*op.reads(), *op.writes())}, sizes)
        else:
            run_extern(op, env, sizes)
    for original, copy in restrided:
        if original.data_ptr() != copy.data_ptr() and any(copy is env.get(n) for n in _written(program)):
            original.copy_(copy)
    return [_output(o, env, sizes) for o in program.outputs]


def _bind_inputs(program: LoopProgram, inputs: Sequence[Any], sizes: Mapping[str, int]
                 ) -> tuple[dict[str, Any], list[tuple[torch.Tensor, torch.Tensor]]]:
    """The environment of tensor inputs by name, and (input, copy) for each input interpreted on
    a copy with the declared strides (written back after the run if the program wrote it)."""
    env: dict[str, Any] = {}
    scalar = {n for n, _ in program.scalar_inputs}
    restrided: list[tuple[torch.Tensor, torch.Tensor]] = []
    for name, value in zip(program.inputs, inputs):
        if name in scalar:
            continue
        if isinstance(value, torch.Tensor):
            stride = [_size(s, sizes) for s in program.buffer(name).stride]
            if value.dim() == len(stride) and value.numel() > 1 and any(
                    st != got for st, got, n in zip(stride, value.stride(), value.shape) if n > 1):
                # Inductor compiled for the declared strides (AOTAutograd coerces e.g. tangents
                # to them); interpret on a copy with those strides.
                copy = torch.empty_strided(value.shape, stride, dtype=value.dtype, device=value.device)
                copy.copy_(value)
                restrided.append((value, copy))
                value = copy
        env[name] = value
    return env, restrided


def _allocate(program: LoopProgram, env: dict[str, Any], sizes: Mapping[str, int]) -> None:
    """Constants, intermediate and output buffers with their declared layout, then the views."""
    consts = dict(program.constants)
    for b in program.buffers:
        if b.name in env:
            continue
        size, device = [_size(s, sizes) for s in b.size], torch.device(b.device)
        if b.kind == "constant":
            env[b.name] = torch.tensor(consts[b.name], dtype=_dtype(b.dtype)).reshape(size).to(device)
        elif b.view_of is None:
            env[b.name] = torch.empty_strided(size, [_size(s, sizes) for s in b.stride], dtype=_dtype(b.dtype),
                                              device=device)
    for b in program.buffers:  # bases come first in the table
        if b.view_of is not None:
            base = env[b.view_of]
            env[b.name] = base.as_strided([_size(s, sizes) for s in b.size], [_size(s, sizes) for s in b.stride],
                                          base.storage_offset() + _size(b.offset, sizes))


def _output(o: Any, env: Mapping[str, Any], sizes: Mapping[str, int]) -> Any:
    """One program output: a buffer (by name or BufferRef), a size expression, or a constant."""
    if isinstance(o, str):
        return env[o]
    if isinstance(o, BufferRef):
        return env[o.name]
    if isinstance(o, SizeExpr):
        return eval_index(o.expr, sizes)
    return o
