"""The recording ops handler: a (fused) scheduler node's ``LoopBody`` replayed into a
:class:`~torchvendor.ir.loop_ir.schema.Kernel`, as Inductor's own code generators replay it.

:func:`convert_nodes` runs each node's body on a :class:`Recorder`, which emits one
:class:`~torchvendor.ir.loop_ir.schema.Stmt` per ``ops.*`` call (SSA names ``t0, t1, ...``),
with its dtype from Inductor's dtype propagation where known.

    >>> import torch
    >>> dtype_name(torch.float32), dtype_name(None)
    ('float32', None)
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator, Sequence

import sympy
import torch

from ... import compat
from ..index_expr import format_expr
from ..schema import Kernel, LoopNest, Stmt
from .state import GraphState
from .unsupported import LoopIRUnsupported

__all__ = ["dtype_name", "Value", "Recorder", "convert_nodes"]


def dtype_name(d: torch.dtype | None) -> str | None:
    """The schema's name of a dtype (``float32``), None for None."""
    return None if d is None else str(d).removeprefix("torch.")


class Value:
    """An SSA value while replaying a LoopBody (``dtype`` feeds Inductor's dtype propagation)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: torch.dtype | None) -> None:
        self.name, self.dtype = name, dtype

    def __repr__(self) -> str:
        return self.name


def _attr_value(v: Any, rename: dict[Any, Any]) -> Any:
    if isinstance(v, torch.dtype):
        return dtype_name(v)
    if isinstance(v, sympy.Basic):
        return format_expr(v, rename)
    if isinstance(v, (tuple, list)):
        return tuple(_attr_value(x, rename) for x in v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise LoopIRUnsupported(f"loop IR cannot record an ops.* operand of type {type(v).__name__}: {v!r}")


class Recorder(compat.inductor().DefaultHandler):  # type: ignore[misc]
    """Replays a LoopBody into a list of :class:`Stmt` (one recorder per kernel)."""

    def __init__(self, state: GraphState, counter: Iterator[int], indirect: Iterator[int]) -> None:
        self.state, self.counter, self.indirect = state, counter, indirect
        self.stmts: list[Stmt] = []
        ns = compat.inductor()
        self._dtypes = ns.DtypePropagationOpsHandler() if ns.DtypePropagationOpsHandler else None

    # -- helpers ---------------------------------------------------------------------------------
    def _infer(self, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> torch.dtype | None:
        if self._dtypes is None:
            return None
        try:
            out = getattr(self._dtypes, name)(*args, **kwargs)
        except Exception:  # dtype metadata is best effort
            return None
        return out if isinstance(out, torch.dtype) else None

    def _emit(self, op: str, args: Sequence[Value], attrs: Sequence[tuple[str, Any]],
              dtype: torch.dtype | None, body: Sequence[Stmt] = (), define: bool = True) -> Value | None:
        name = f"t{next(self.counter)}" if define else None
        self.stmts.append(Stmt(name, op, tuple(a.name for a in args), tuple(attrs), dtype_name(dtype), tuple(body)))
        return Value(name, dtype) if name else None

    def _expr(self, e: Any) -> str:
        return format_expr(e, self.state.rename)

    def _real(self, name: str) -> str:
        return self.state.real_name(name)

    # -- generic ops ------------------------------------------------------------------------------
    def _default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if name in _UNSUPPORTED_OPS:
            raise LoopIRUnsupported(f"ops.{name} is not expressible in the loop IR yet")
        vals: list[Value] = []
        attrs: list[tuple[str, Any]] = []
        for i, a in enumerate(args):
            if isinstance(a, Value):
                vals.append(a)
            else:
                attrs.append((f"arg{i}", _attr_value(a, self.state.rename)))
        for k, v in kwargs.items():
            if isinstance(v, Value):
                raise LoopIRUnsupported(f"ops.{name}: SSA value passed as keyword {k!r}")
            attrs.append((k, _attr_value(v, self.state.rename)))
        if len(vals) == len(args) and not kwargs:
            attrs = []
        elif vals:
            attrs.append(("nargs", len(args)))
        return self._emit(name, vals, attrs, self._infer(name, args, kwargs))

    # -- ops with a meaning the schema names ------------------------------------------------------
    def load(self, name: str, index: sympy.Expr) -> Value:
        return self._emit("load", (), (("buffer", self._real(name)), ("index", self._expr(index))),
                          self.state.dtype_of(name))

    def store(self, name: str, index: sympy.Expr, value: Value, mode: Any = None) -> None:
        if value is None:  # the body of a side effect only (an assertion): its buffer holds nothing
            return
        self._emit("store", (value,), (("buffer", self._real(name)), ("index", self._expr(index)),
                                       ("mode", mode)), None, define=False)

    def store_reduction(self, name: str, index: sympy.Expr, value: Value) -> None:
        self._emit("store_reduction", (value,), (("buffer", self._real(name)), ("index", self._expr(index))),
                   None, define=False)

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value: Any) -> Any:
        values = tuple(value) if isinstance(value, (tuple, list)) else (value,)
        n_out = _reduction_outputs(reduction_type)
        out = self._emit("reduction", values, (("kind", reduction_type), ("dtype", dtype_name(dtype)),
                                               ("src_dtype", dtype_name(src_dtype))),
                         dtype if n_out == 1 else None)
        if n_out == 1:
            return out
        return tuple(self._emit("getitem", (out,), (("index", k),), dtype) for k in range(n_out))

    def constant(self, value: Any, dtype: torch.dtype) -> Value:
        return self._emit("constant", (), (("value", _attr_value(value, {})), ("dtype", dtype_name(dtype))), dtype)

    def load_seed(self, name: str, offset: Any) -> Value:
        args = (offset,) if isinstance(offset, Value) else ()
        attrs = (("buffer", self._real(name)),) + (() if args else (("offset", _attr_value(offset, self.state.rename)),))
        return self._emit("load_seed", args, attrs, torch.int64)

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> Value:
        return self._emit("index_expr", (), (("expr", self._expr(expr)), ("dtype", dtype_name(dtype))), dtype)

    def to_dtype(self, x: Value, dtype: torch.dtype, src_dtype: torch.dtype | None = None,
                 use_compute_types: bool = True) -> Value:
        return self._emit("to_dtype", (x,), (("dtype", dtype_name(dtype)), ("src_dtype", dtype_name(src_dtype))), dtype)

    def to_dtype_bitcast(self, x: Value, dtype: torch.dtype, src_dtype: torch.dtype) -> Value:
        return self._emit("to_dtype_bitcast", (x,), (("dtype", dtype_name(dtype)), ("src_dtype", dtype_name(src_dtype))),
                          dtype)

    def indirect_indexing(self, x: Value, size: Any, check: bool = True, wrap_neg: bool = True) -> sympy.Symbol:
        name = f"ind{next(self.indirect)}"
        self.stmts.append(Stmt(name, "indirect_indexing", (x.name,),
                               (("size", self._expr(size)), ("check", bool(check)), ("wrap_neg", bool(wrap_neg))),
                               "int64"))
        return sympy.Symbol(name, integer=True)

    def check_bounds(self, expr: sympy.Expr, size: sympy.Expr, lower: bool, upper: bool) -> None:
        self._emit("check_bounds", (), (("expr", self._expr(expr)), ("size", self._expr(size)),
                                        ("lower", bool(lower)), ("upper", bool(upper))), None, define=False)

    def device_assert_async(self, cond: Value, msg: str) -> None:
        """``torch._assert_async`` (``one_hot``'s class check): a ``device_assert`` statement that
        fails the kernel with ``msg`` where ``cond`` is false."""
        self._emit("device_assert", (cond,), (("msg", str(msg)),), None, define=False)

    def masked(self, mask: Value, body: Callable[[], Any], other: Any) -> Value:
        sub = Recorder(self.state, self.counter, self.indirect)
        with compat.inductor().V.set_ops_handler(sub):
            result = body()
        if not isinstance(result, Value):
            raise LoopIRUnsupported(f"masked sub-block returned {result!r}")
        sub.stmts.append(Stmt(None, "yield", (result.name,)))
        return self._emit("masked", (mask,), (("other", _attr_value(other, {})),), result.dtype, sub.stmts)

    def frexp(self, x: Value) -> tuple[Value, Value]:
        out = self._emit("frexp", (x,), (), None)
        return (self._emit("getitem", (out,), (("index", 0),), x.dtype),
                self._emit("getitem", (out,), (("index", 1),), torch.int32))

    def scan(self, *args: Any, **kwargs: Any) -> Any:
        raise LoopIRUnsupported("ops.scan (cumsum/cumprod lowered to scans) is not expressible in the loop IR yet")

    def sort(self, *args: Any, **kwargs: Any) -> Any:
        raise LoopIRUnsupported("ops.sort is not expressible in the loop IR yet")

    def bucketize(self, *args: Any, **kwargs: Any) -> Any:
        raise LoopIRUnsupported("ops.bucketize is not expressible in the loop IR yet")

    def output(self, *args: Any) -> None:  # the LoopBody's root block returns its stores' None
        return None


_UNSUPPORTED_OPS = {"partial_accumulate", "inline_asm_elementwise", "dot", "halide_clamp"}


def _reduction_outputs(kind: str) -> int:
    return 3 if kind in ("welford_reduce", "welford_combine") else 2 if kind == "online_softmax_reduce" else 1


def convert_nodes(snodes: Sequence[Any], state: GraphState, name: str) -> Kernel:
    """One kernel from the SchedulerNodes of a (possibly fused) scheduler node."""
    counter, indirect = itertools.count(), itertools.count()
    nests = []
    for snode in snodes:
        body, (iteration_sizes, reduction_sizes) = compat.loop_body_of(snode)
        if body is None:
            raise LoopIRUnsupported(f"scheduler node {snode.get_name()} has no LoopBody (a template?)")
        iteration_vars = [sympy.Symbol(f"i{k}", integer=True, nonnegative=True) for k in range(len(iteration_sizes))]
        reduction_vars = [sympy.Symbol(f"r{k}", integer=True, nonnegative=True) for k in range(len(reduction_sizes))]
        recorder = Recorder(state, counter, indirect)
        with compat.inductor().V.set_ops_handler(recorder):
            body(iteration_vars, reduction_vars)
        nests.append(LoopNest(snode.get_name(), tuple(format_expr(s, state.rename) for s in iteration_sizes),
                              tuple(format_expr(s, state.rename) for s in reduction_sizes), tuple(recorder.stmts)))
    return Kernel(name, tuple(nests), _tiling_group(snodes[0], state))


def _tiling_group(snode: Any, state: GraphState) -> tuple[tuple[str, ...], ...]:
    """The (pointwise, reduction) tiling Inductor's SIMD scheduling chose, if any (a hint)."""
    group = getattr(snode, "group", None)
    if not group:
        return ()
    try:
        return tuple(tuple(format_expr(e, state.rename) for e in (part if isinstance(part, (tuple, list)) else (part,)))
                     for part in group[1])
    except Exception:  # a hint only: a tiling we cannot print is left out
        return ()
