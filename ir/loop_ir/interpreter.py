"""The reference interpreter of the loop IR: exact, not fast.

A loop nest is evaluated over its whole iteration space at once: iteration variables are
broadcast ``arange`` s (``i*`` then ``r*`` dimensions), index expressions are evaluated on them,
loads gather from the buffer's flat storage, compute ops are eager torch ops, reductions reduce
the ``r`` dimensions, stores scatter. Extern kernels call the ATen op they name.

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

import json
import math
from typing import Any, Callable, Mapping, Sequence

import sympy
import torch

from .schema import (BufferRef, ExternKernel, Kernel, LoopNest, LoopProgram, SizeExpr, Stmt,
                     TorchValue, _op_from_dict, parse_expr)

__all__ = ["run_program", "run_kernel", "run_extern", "eval_index", "load_kernel", "LoopIRRuntimeError",
           "COMPUTE_OPS"]


class LoopIRRuntimeError(RuntimeError):
    """The interpreter met something it cannot execute; the message names the kernel and statement."""


def _dt(name: str | None) -> torch.dtype | None:
    return None if name is None else getattr(torch, name)


# ---- index expressions -----------------------------------------------------------------------------
def _minmax(fn: Callable[..., Any], args: list[Any]) -> Any:
    if all(isinstance(a, int) for a in args):
        return (min if fn is torch.minimum else max)(args)
    out = args[0]
    for a in args[1:]:
        out = fn(torch.as_tensor(out), torch.as_tensor(a))
    return out


def _ev(e: Any, env: Mapping[str, Any]) -> Any:
    if e.is_Integer:
        return int(e)
    if e.is_Symbol:
        try:
            return env[e.name]
        except KeyError:
            raise LoopIRRuntimeError(f"unbound symbol {e.name!r} in index expression (bound: {sorted(env)})") from None
    if e.is_Rational or e.is_Float:
        return float(e)
    if e is sympy.true:
        return True
    if e is sympy.false:
        return False
    name = type(e).__name__
    args = [_ev(a, env) for a in e.args]
    if isinstance(e, sympy.Add):
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    if isinstance(e, sympy.Mul):
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if isinstance(e, sympy.Pow):
        return args[0] ** args[1]
    if name in ("FloorDiv", "CleanDiv", "IntTrueDiv") and name != "IntTrueDiv":
        return args[0] // args[1]
    if name == "IntTrueDiv":
        return args[0] / args[1]
    if name == "CeilDiv":
        return -((-args[0]) // args[1])
    if name == "ModularIndexing":
        return (args[0] // args[1]) % args[2]
    if name in ("PythonMod", "Mod"):
        return args[0] % args[1]
    if name == "Min":
        return _minmax(torch.minimum, args)
    if name == "Max":
        return _minmax(torch.maximum, args)
    if name == "Identity":
        return args[0]
    if name == "Where":
        c, a, b = args
        return (a if c else b) if isinstance(c, bool) else torch.where(c, torch.as_tensor(a), torch.as_tensor(b))
    if name in ("TruncToInt", "FloorToInt", "CeilToInt", "RoundToInt"):
        f = {"TruncToInt": math.trunc, "FloorToInt": math.floor, "CeilToInt": math.ceil, "RoundToInt": round}[name]
        t = {"TruncToInt": torch.trunc, "FloorToInt": torch.floor, "CeilToInt": torch.ceil, "RoundToInt": torch.round}[name]
        return f(args[0]) if not isinstance(args[0], torch.Tensor) else t(args[0]).long()
    if name == "BitwiseFn_bitwise_and":
        return args[0] & args[1]
    if name == "BitwiseFn_bitwise_or":
        return args[0] | args[1]
    if name == "LShift":
        return args[0] << args[1]
    if name == "RShift":
        return args[0] >> args[1]
    if name == "PowByNatural":
        return args[0] ** args[1]
    rel = {"StrictLessThan": "__lt__", "LessThan": "__le__", "StrictGreaterThan": "__gt__",
           "GreaterThan": "__ge__", "Equality": "__eq__", "Unequality": "__ne__"}
    if name in rel:
        return getattr(args[0] if isinstance(args[0], torch.Tensor) else torch.as_tensor(args[0]), rel[name])(args[1])
    if name in ("And", "Or"):
        out = args[0]
        for a in args[1:]:
            out = (out & a) if name == "And" else (out | a)
        return out
    if name == "Not":
        return ~args[0] if isinstance(args[0], torch.Tensor) else not args[0]
    raise LoopIRRuntimeError(f"index function {name} is not supported by the interpreter")


def eval_index(text: str, env: Mapping[str, Any]) -> Any:
    """Evaluate an index or size expression; symbols are looked up in ``env`` (ints or tensors).

    >>> eval_index("ModularIndexing(i0, 2, 3) + s0", {"i0": 7, "s0": 10})
    10
    """
    return _ev(parse_expr(text), env)


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
COMPUTE_OPS: dict[str, Callable[..., Any]] = {
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
    fn = COMPUTE_OPS.get(op)
    if fn is not None:
        return fn
    name = op.removeprefix("libdevice_")
    for ns in (torch, torch.special):
        fn = getattr(ns, name, None)
        if callable(fn):
            COMPUTE_OPS[op] = fn
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


COMPUTE_OPS.update({"rand": _rand, "randn": _randn, "randint64": _randint64})


# ---- reductions --------------------------------------------------------------------------------------
def _reduce(kind: str, values: list[torch.Tensor], nred: int, acc: torch.dtype | None) -> Any:
    dims = tuple(range(-nred, 0))
    v = values[0]
    if kind == "sum":
        return (v.to(acc) if acc else v).sum(dims, keepdim=True)
    if kind == "prod":
        out = v.to(acc) if acc else v
        for d in dims:
            out = out.prod(d, keepdim=True)
        return out
    if kind in ("max", "min"):
        return (v.amax if kind == "max" else v.amin)(dims, keepdim=True)
    if kind == "any":
        return (v != 0).any(dim=dims, keepdim=True) if nred else v != 0
    if kind == "xor_sum":
        out = v
        for d in dims:
            parts = out.unbind(d)
            acc_v = parts[0]
            for p in parts[1:]:
                acc_v = acc_v ^ p
            out = acc_v.unsqueeze(d)
        return out
    if kind in ("argmax", "argmin"):
        lead = v.shape[: v.dim() - nred]
        flat = v.reshape(*lead, -1)
        idx = (flat.argmax if kind == "argmax" else flat.argmin)(-1)
        return idx.reshape(*lead, *([1] * nred))
    if kind == "welford_reduce":
        x = v.to(acc) if acc else v
        n = 1
        for d in dims:
            n *= x.shape[d]
        mean = x.mean(dims, keepdim=True)
        m2 = ((x - mean) ** 2).sum(dims, keepdim=True)
        return (mean, m2, torch.full_like(mean, float(n)))
    if kind == "welford_combine":
        mean, m2, w = values
        wt = w.sum(dims, keepdim=True)
        safe = torch.where(wt == 0, torch.ones_like(wt), wt)
        new_mean = (mean * w).sum(dims, keepdim=True) / safe
        new_m2 = (m2 + w * (mean - new_mean) ** 2).sum(dims, keepdim=True)
        return (new_mean, new_m2, wt)
    if kind == "online_softmax_reduce":
        m = v.amax(dims, keepdim=True)
        return (m, torch.exp(v - m).sum(dims, keepdim=True))
    raise LoopIRRuntimeError(f"reduction kind {kind!r} is not supported by the interpreter")


# ---- kernels ------------------------------------------------------------------------------------------
class _Flat:
    """Flat element views of the buffers a kernel touches (cpu copies for other devices)."""

    def __init__(self, buffers: Mapping[str, torch.Tensor]) -> None:
        self.buffers, self.flat, self.dirty = buffers, {}, set()

    def get(self, name: str) -> torch.Tensor:
        f = self.flat.get(name)
        if f is None:
            try:
                t = self.buffers[name]
            except KeyError:
                raise LoopIRRuntimeError(f"buffer {name!r} was not passed to the kernel") from None
            n = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
            f = t.as_strided((max(n, 0),), (1,), t.storage_offset())
            if f.device.type != "cpu":
                f = f.cpu()
            self.flat[name] = f
        return f

    def write_back(self) -> None:
        for name in self.dirty:
            t = self.buffers[name]
            if t.device.type != "cpu":
                n = self.flat[name].numel()
                t.as_strided((n,), (1,), t.storage_offset()).copy_(self.flat[name])


def _bcast(v: Any, shape: Sequence[int]) -> torch.Tensor:
    t = torch.as_tensor(v)
    if t.dim() < len(shape):
        t = t.reshape(*([1] * (len(shape) - t.dim())), *t.shape)
    return t.expand(list(shape))


def _run_nest(nest: LoopNest, flat: _Flat, sizes: Mapping[str, int], where: str) -> None:
    isz = [_size(s, sizes) for s in nest.ranges]
    rsz = [_size(s, sizes) for s in nest.reduction_ranges]
    full = isz + rsz
    if any(s == 0 for s in isz):
        return
    dims = len(full)
    env: dict[str, Any] = dict(sizes)
    for k, s in enumerate(full):
        shape = [1] * dims
        shape[k] = s
        env[(f"i{k}" if k < len(isz) else f"r{k - len(isz)}")] = torch.arange(s, dtype=torch.int64).reshape(shape)
    vals: dict[str, Any] = {}
    _run_block(nest.body, vals, env, flat, full, len(rsz), None, where)


def _run_block(body: Sequence[Stmt], vals: dict[str, Any], env: dict[str, Any], flat: _Flat,
               full: list[int], nred: int, mask: torch.Tensor | None, where: str) -> Any:
    dims = len(full)
    for st in body:
        try:
            a = [vals[n] for n in st.args]
            op = st.op
            if op == "load":
                idx = eval_index(st.attr("index"), env)
                if mask is not None:
                    idx = torch.where(mask, torch.as_tensor(idx), 0)
                src = flat.get(st.attr("buffer"))
                idx_t = torch.as_tensor(idx, dtype=torch.int64)
                out = src[idx_t]
                vals[st.name] = out.reshape(*([1] * (dims - out.dim())), *out.shape) if out.dim() < dims else out
            elif op in ("store", "store_reduction"):
                name = st.attr("buffer")
                dst = flat.get(name)
                shape = full if op == "store" else full[: dims - nred] + [1] * nred
                idx = _bcast(torch.as_tensor(eval_index(st.attr("index"), env), dtype=torch.int64), shape)
                v = _bcast(a[0], shape).to(dst.dtype)
                dst.index_put_((idx.reshape(-1),), v.reshape(-1), accumulate=st.attr("mode") == "atomic_add")
                flat.dirty.add(name)
            elif op == "load_seed":
                src = flat.get(st.attr("buffer"))
                off = a[0] if a else torch.tensor(st.attr("offset"))
                vals[st.name] = src[torch.as_tensor(off, dtype=torch.int64)]
            elif op == "constant":
                vals[st.name] = torch.tensor(st.attr("value"), dtype=_dt(st.attr("dtype"))).reshape([1] * dims)
            elif op == "index_expr":
                v = torch.as_tensor(eval_index(st.attr("expr"), env))
                vals[st.name] = v.to(_dt(st.attr("dtype"))).reshape(*([1] * (dims - v.dim())), *v.shape)
            elif op == "to_dtype":
                vals[st.name] = a[0].to(_dt(st.attr("dtype")))
            elif op == "to_dtype_bitcast":
                vals[st.name] = a[0].contiguous().view(_dt(st.attr("dtype")))
            elif op == "indirect_indexing":
                x = a[0].to(torch.int64)
                size = eval_index(st.attr("size"), env)
                if st.attr("wrap_neg", True):
                    x = torch.where(x < 0, x + size, x)
                if mask is not None:
                    x = torch.where(mask, x, 0)
                if st.attr("check", True) and x.numel() and (int(x.min()) < 0 or int(x.max()) >= int(size)):
                    raise LoopIRRuntimeError(f"indirect index out of bounds [0, {size})")
                env[st.name] = x
                vals[st.name] = x
            elif op == "check_bounds":
                pass
            elif op == "reduction":
                shape = full
                ins = [_bcast(v, shape) for v in a]
                vals[st.name] = _reduce(st.attr("kind"), ins, nred, _dt(st.attr("dtype")))
            elif op == "getitem":
                vals[st.name] = a[0][st.attr("index")]
            elif op == "masked":
                m = a[0].to(torch.bool)
                mm = m if mask is None else (m & mask)
                res = _run_block(st.body, vals, env, flat, full, nred, mm, where)
                other = st.attr("other")
                vals[st.name] = torch.where(m, res, torch.tensor(other, dtype=res.dtype))
            elif op == "yield":
                return a[0]
            else:
                args, k = [], iter(a)
                nargs = st.attr("nargs")
                if nargs is None:
                    args = list(a)
                else:
                    for i in range(nargs):
                        key = f"arg{i}"
                        args.append(st.attr(key) if any(kk == key for kk, _ in st.attrs) else next(k))
                kwargs = {kk: v for kk, v in st.attrs if not (kk.startswith("arg") and kk[3:].isdigit()) and kk != "nargs"}
                out = _compute_fn(op)(*args, **kwargs)
                if st.dtype is not None and isinstance(out, torch.Tensor) and op not in ("frexp",):
                    out = out.to(_dt(st.dtype))
                vals[st.name] = out
        except LoopIRRuntimeError as e:
            raise LoopIRRuntimeError(f"{where}: {st.op} {st.name or ''}: {e}") from None
        except Exception as e:  # add the statement to torch's message
            raise LoopIRRuntimeError(f"{where}: while executing {st}: {type(e).__name__}: {e}") from e
    return None


def run_kernel(kernel: Kernel, buffers: Mapping[str, torch.Tensor], sizes: Mapping[str, int] | None = None) -> None:
    """Execute a kernel on named tensors (read and written in place); ``sizes`` binds size symbols."""
    flat = _Flat(buffers)
    for nest in kernel.nests:
        _run_nest(nest, flat, dict(sizes or {}), f"{kernel.name}/{nest.name}")
    flat.write_back()


def load_kernel(text: str) -> Callable[[Mapping[str, torch.Tensor], Mapping[str, int]], None]:
    """Parse a kernel's JSON (as embedded in Inductor's wrapper) into a callable
    ``k(buffers, sizes)``."""
    kernel = _op_from_dict(json.loads(text))
    if not isinstance(kernel, Kernel):
        raise LoopIRRuntimeError("load_kernel expects a kernel")

    def call(buffers: Mapping[str, torch.Tensor], sizes: Mapping[str, int]) -> None:
        run_kernel(kernel, buffers, {k: int(v) for k, v in sizes.items()})

    call.kernel = kernel  # type: ignore[attr-defined]
    return call


# ---- extern kernels -----------------------------------------------------------------------------------
def _torch_value(v: str) -> Any:
    if v.startswith("device:"):
        return torch.device(v[len("device:"):])
    obj: Any = torch
    for part in v.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _arg(v: Any, env: Mapping[str, Any], sizes: Mapping[str, int]) -> Any:
    if isinstance(v, BufferRef):
        return env[v.name]
    if isinstance(v, SizeExpr):
        return eval_index(v.expr, sizes)
    if isinstance(v, TorchValue):
        return _torch_value(v.value)
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
        _write(env, ext.outputs[0], val)
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
            _write(env, ext.outputs[0], result)
        else:
            for name, r in zip(ext.outputs, result):
                _write(env, name, r)
    elif not ext.mutated:
        env[ext.name] = result


def _write(env: dict[str, Any], name: str, value: Any) -> None:
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
    env: dict[str, Any] = {}
    scalar = {n for n, _ in program.scalar_inputs}
    restrided: list[tuple[torch.Tensor, torch.Tensor]] = []
    for name, value in zip(program.inputs, inputs):
        if name in scalar:
            continue
        if isinstance(value, torch.Tensor):
            b = program.buffer(name)
            stride = [_size(s, sizes) for s in b.stride]
            if value.dim() == len(stride) and value.numel() > 1 and any(
                    st != got for st, got, n in zip(stride, value.stride(), value.shape) if n > 1):
                # Inductor compiled for the declared strides (AOTAutograd coerces e.g. tangents
                # to them); interpret on a copy with those strides.
                copy = torch.empty_strided(value.shape, stride, dtype=value.dtype, device=value.device)
                copy.copy_(value)
                restrided.append((value, copy))
                value = copy
        env[name] = value
    consts = dict(program.constants)
    for b in program.buffers:
        if b.name in env:
            continue
        dev = torch.device(b.device)
        if b.kind == "constant":
            env[b.name] = torch.tensor(consts[b.name], dtype=_dt(b.dtype)).reshape(
                [_size(s, sizes) for s in b.size]).to(dev)
        elif b.view_of is None:
            env[b.name] = torch.empty_strided([_size(s, sizes) for s in b.size], [_size(s, sizes) for s in b.stride],
                                              dtype=_dt(b.dtype), device=dev)
    for b in program.buffers:  # bases come first in the table
        if b.view_of is not None:
            base = env[b.view_of]
            env[b.name] = base.as_strided([_size(s, sizes) for s in b.size], [_size(s, sizes) for s in b.stride],
                                          base.storage_offset() + _size(b.offset, sizes))
    for op in program.ops:
        if isinstance(op, Kernel):
            run_kernel(op, {n: env[n] for n in (*op.reads(), *op.writes())}, sizes)
        else:
            run_extern(op, env, sizes)
    for original, copy in restrided:
        if original.data_ptr() != copy.data_ptr() and any(copy is env.get(n) for n in _written(program)):
            original.copy_(copy)
    outs: list[Any] = []
    for o in program.outputs:
        if isinstance(o, str):
            outs.append(env[o])
        elif isinstance(o, BufferRef):
            outs.append(env[o.name])
        elif isinstance(o, SizeExpr):
            outs.append(eval_index(o.expr, sizes))
        else:
            outs.append(o)
    return outs
