"""The ATen -> ONNX operator table: one converter per core ATen op that has an exact ONNX form.

A converter is ``fn(b, node, *args, **kwargs) -> value name`` (a list for a multi-output op):
``b`` is the :class:`~.builder.Builder`, ``node`` the FX node (its metadata gives the output dtype
and shape), and the arguments are the node's, with FX nodes replaced by their :class:`~.builder.Val`.
A converter may also register a ``check(node) -> reason | None``: the ONNX level then leaves
the node to eager PyTorch when the op's arguments fall outside what the ONNX form computes
exactly (an unused second output of max pooling, a static size, ...).

Type promotion is explicit in ONNX: every converter casts its inputs to the dtype torch computes
in (the result dtype for arithmetic, the promoted input dtype for comparisons).
"""
from __future__ import annotations

import functools
import math
import operator
from typing import Any, Callable

import torch
import torch.fx as fx

from ..fx_view import op_key
from .builder import INT64_MAX, INT64_MIN, ONNX_DTYPES, Builder, ExportError, Val

__all__ = ["CONVERTERS", "CONVERTER_CHECKS", "op_name", "unsupported_reason", "register", "result_meta", "all_static"]

CONVERTERS: dict[str, Callable[..., Any]] = {}
CONVERTER_CHECKS: dict[str, Callable[[fx.Node], str | None]] = {}


def op_name(target: Any) -> str:
    """The op key of an FX call's target: ``aten.add.Tensor``, ``operator.getitem``."""
    return op_key(target)


def register(*keys: str, check: Callable[[fx.Node], str | None] | None = None) -> Callable[..., Any]:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        for key in keys:
            CONVERTERS[key] = fn
            if check is not None:
                CONVERTER_CHECKS[key] = check
        return fn
    return wrap


def unsupported_reason(node: fx.Node) -> str | None:
    """Why ``node`` cannot be exported to ONNX, or None when it can."""
    key = op_name(node.target)
    if key == "operator.getitem":
        return None
    if key not in CONVERTERS:
        return f"{key} has no ONNX mapping"
    for n in (node, *[a for a in node.all_input_nodes]):
        v = n.meta.get("val", n.meta.get("example_value"))
        for t in v if isinstance(v, (tuple, list)) else (v,):
            if isinstance(t, torch.Tensor) and t.dtype not in ONNX_DTYPES:
                return f"dtype {t.dtype} has no ONNX tensor type"
            if not isinstance(t, (torch.Tensor, torch.SymInt, int, type(None))):
                return f"a {type(t).__name__} value has no ONNX form"
    if not isinstance(node.meta.get("val"), (torch.Tensor, tuple, list)):
        return "the result is not a tensor"
    check = CONVERTER_CHECKS.get(key)
    return check(node) if check is not None else None


# ---- helpers -----------------------------------------------------------------------------------

def result_meta(node: fx.Node, i: int | None = None) -> torch.Tensor:
    """The node's result as its metadata knows it (a fake tensor): element ``i`` of a tuple result."""
    v = node.meta["val"]
    return v if i is None else v[i]


def _meta_arg(a: Any) -> Any:
    if isinstance(a, Val):
        return torch.empty((1,) * a.rank, dtype=a.dtype, device="meta") if not a.sym else 1
    return a


def _common(*args: Any) -> torch.dtype:
    """The dtype torch computes a binary op in (``torch.result_type`` of the arguments)."""
    metas = [_meta_arg(a) for a in args if a is not None]
    if len(metas) == 1:
        m = metas[0]
        return m.dtype if isinstance(m, torch.Tensor) else _scalar_dtype(m)
    return torch.result_type(metas[0], metas[1]) if len(metas) == 2 else \
        torch.result_type(torch.empty(0, dtype=torch.result_type(metas[0], metas[1]), device="meta"), metas[2])


def _scalar_dtype(v: Any) -> torch.dtype:
    return torch.bool if isinstance(v, bool) else torch.int64 if isinstance(v, int) else torch.get_default_dtype()


def _as(b: Builder, a: Any, dtype: torch.dtype) -> str:
    return b.scalar(a, dtype) if not isinstance(a, Val) or a.sym else b.cast(a, dtype)


def _axis(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def all_static(*dims: Any) -> bool:
    """Whether every size is a known int (none symbolic)."""
    return all(isinstance(d, int) for d in dims)


# ---- elementwise -------------------------------------------------------------------------------

def _unary(onnx_op: str) -> Callable[..., str]:
    def convert(b: Builder, node: fx.Node, x: Val, *_: Any, **__: Any) -> str:
        return b.op(onnx_op, [b.cast(x, result_meta(node).dtype)])
    return convert


for _key, _onnx in {"abs": "Abs", "neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "sin": "Sin",
                    "cos": "Cos", "tan": "Tan", "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh",
                    "cosh": "Cosh", "tanh": "Tanh", "asinh": "Asinh", "acosh": "Acosh", "atanh": "Atanh",
                    "erf": "Erf", "sigmoid": "Sigmoid", "relu": "Relu", "reciprocal": "Reciprocal",
                    "sign": "Sign", "round": "Round"}.items():
    register(f"aten.{_key}.default")(_unary(_onnx))


def _float_input(node: fx.Node) -> str | None:
    x = node.args[0].meta.get("val")
    return None if x is not None and x.dtype.is_floating_point else "the ONNX op takes floating-point inputs"


register("aten.floor.default", check=_float_input)(_unary("Floor"))
register("aten.ceil.default", check=_float_input)(_unary("Ceil"))


@register("aten.rsqrt.default")
def _rsqrt(b: Builder, node: fx.Node, x: Val) -> str:
    return b.op("Reciprocal", [b.op("Sqrt", [b.cast(x, result_meta(node).dtype)])])


@register("aten.expm1.default")
def _expm1(b: Builder, node: fx.Node, x: Val) -> str:
    dt = result_meta(node).dtype
    return b.op("Sub", [b.op("Exp", [b.cast(x, dt)]), b.const(1, dt)])


@register("aten.log1p.default")
def _log1p(b: Builder, node: fx.Node, x: Val) -> str:
    dt = result_meta(node).dtype
    return b.op("Log", [b.op("Add", [b.cast(x, dt), b.const(1, dt)])])


@register("aten.isnan.default", check=_float_input)
def _isnan(b: Builder, node: fx.Node, x: Val) -> str:
    return b.op("IsNaN", [x.name])


@register("aten.logical_not.default")
def _logical_not(b: Builder, node: fx.Node, x: Val) -> str:
    return b.cast(b.op("Not", [b.cast(x, torch.bool)]), result_meta(node).dtype, torch.bool)


@register("aten.bitwise_not.default")
def _bitwise_not(b: Builder, node: fx.Node, x: Val) -> str:
    return b.op("Not" if x.dtype is torch.bool else "BitwiseNot", [x.name])


_ON_BOOL = {"Add": "Or", "Mul": "And", "Max": "Or", "Min": "And"}  # torch's arithmetic on bool tensors


def _binary(onnx_op: str, *, alpha: bool = False) -> Callable[..., str]:
    def convert(b: Builder, node: fx.Node, x: Any, y: Any, *, alpha: Any = 1) -> str:
        dt = result_meta(node).dtype
        other = _as(b, y, dt)
        if dt is torch.bool:
            return b.op(_ON_BOOL[onnx_op], [_as(b, x, dt), other]) if onnx_op in _ON_BOOL else \
                _raise(f"{onnx_op} of bool tensors")
        if alpha != 1:
            other = b.op("Mul", [other, b.scalar(alpha, dt)])
        return b.op(onnx_op, [_as(b, x, dt), other])
    return convert


register("aten.add.Tensor", "aten.add.Scalar")(_binary("Add", alpha=True))
register("aten.sub.Tensor", "aten.sub.Scalar")(_binary("Sub", alpha=True))
register("aten.mul.Tensor", "aten.mul.Scalar")(_binary("Mul"))
register("aten.div.Tensor", "aten.div.Scalar")(_binary("Div"))
register("aten.maximum.default")(_binary("Max"))
register("aten.minimum.default")(_binary("Min"))
register("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Scalar", "aten.pow.Scalar")(_binary("Pow"))
register("aten.fmod.Tensor", "aten.fmod.Scalar")(
    lambda b, node, x, y: b.op("Mod", [_as(b, x, result_meta(node).dtype), _as(b, y, result_meta(node).dtype)], fmod=1))


def _float_mode(node: fx.Node) -> str | None:
    mode = node.kwargs.get("rounding_mode")
    if mode == "floor" and result_meta(node).dtype.is_floating_point:
        return None
    return f"div with rounding_mode={mode!r} on {result_meta(node).dtype} has no exact ONNX form"


@register("aten.div.Tensor_mode", "aten.div.Scalar_mode", check=_float_mode)
def _div_floor(b: Builder, node: fx.Node, x: Any, y: Any, *, rounding_mode: str) -> str:
    dt = result_meta(node).dtype
    return b.op("Floor", [b.op("Div", [_as(b, x, dt), _as(b, y, dt)])])


@register("aten.remainder.Tensor", "aten.remainder.Scalar")
def _remainder(b: Builder, node: fx.Node, x: Any, y: Any) -> str:
    dt = result_meta(node).dtype
    a, m = _as(b, x, dt), _as(b, y, dt)
    if not dt.is_floating_point:
        return b.op("Mod", [a, m], fmod=0)  # the sign of the divisor, as torch
    return b.op("Sub", [a, b.op("Mul", [b.op("Floor", [b.op("Div", [a, m])]), m])])


def _compare(onnx_op: str, negate: bool = False) -> Callable[..., str]:
    def convert(b: Builder, node: fx.Node, x: Any, y: Any) -> str:
        dt = _common(x, y)
        out = b.op(onnx_op, [_as(b, x, dt), _as(b, y, dt)])
        return b.op("Not", [out]) if negate else out
    return convert


for _key, (_onnx, _neg) in {"eq": ("Equal", False), "ne": ("Equal", True), "lt": ("Less", False),
                            "le": ("LessOrEqual", False), "gt": ("Greater", False),
                            "ge": ("GreaterOrEqual", False)}.items():
    register(f"aten.{_key}.Tensor", f"aten.{_key}.Scalar")(_compare(_onnx, _neg))


def _logical(onnx_op: str) -> Callable[..., str]:
    def convert(b: Builder, node: fx.Node, x: Any, y: Any) -> str:
        out = b.op(onnx_op, [_as(b, x, torch.bool), _as(b, y, torch.bool)])
        return b.cast(out, result_meta(node).dtype, torch.bool)
    return convert


def _bitwise(onnx_op: str) -> Callable[..., str]:
    def convert(b: Builder, node: fx.Node, x: Any, y: Any) -> str:
        dt = result_meta(node).dtype
        op = {"BitwiseAnd": "And", "BitwiseOr": "Or", "BitwiseXor": "Xor"}[onnx_op] if dt is torch.bool else onnx_op
        return b.op(op, [_as(b, x, dt), _as(b, y, dt)])
    return convert


for _key, _onnx in {"and": "And", "or": "Or", "xor": "Xor"}.items():
    register(f"aten.logical_{_key}.default")(_logical(_onnx))
    register(f"aten.bitwise_{_key}.Tensor", f"aten.bitwise_{_key}.Scalar")(_bitwise(f"Bitwise{_onnx}"))


@register("aten.where.self")
def _where(b: Builder, node: fx.Node, cond: Val, x: Any, y: Any) -> str:
    dt = result_meta(node).dtype
    return b.op("Where", [b.cast(cond, torch.bool), _as(b, x, dt), _as(b, y, dt)])


@register("aten.clamp.default", "aten.clamp.Tensor", "aten.hardtanh.default")
def _clamp(b: Builder, node: fx.Node, x: Val, lo: Any = None, hi: Any = None) -> str:
    dt = result_meta(node).dtype
    out = b.cast(x, dt)
    if isinstance(lo, Val) or isinstance(hi, Val):  # tensor bounds broadcast: Max then Min
        out = out if lo is None else b.op("Max", [out, _as(b, lo, dt)])
        return out if hi is None else b.op("Min", [out, _as(b, hi, dt)])
    return b.op("Clip", [out, None if lo is None else b.const(lo, dt), None if hi is None else b.const(hi, dt)])


@register("aten.leaky_relu.default")
def _leaky_relu(b: Builder, node: fx.Node, x: Val, slope: float = 0.01) -> str:
    return b.op("LeakyRelu", [x.name], alpha=float(slope))


@register("aten.gelu.default")
def _gelu(b: Builder, node: fx.Node, x: Val, *, approximate: str = "none") -> str:
    dt, xs = x.dtype, x.name
    half = b.op("Mul", [xs, b.const(0.5, dt)])
    if approximate == "tanh":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = b.op("Mul", [b.op("Mul", [xs, xs]), xs])
        inner = b.op("Add", [xs, b.op("Mul", [cube, b.const(0.044715, dt)])])
        t = b.op("Tanh", [b.op("Mul", [inner, b.const(math.sqrt(2 / math.pi), dt)])])
    else:  # 0.5 x (1 + erf(x / sqrt 2))
        t = b.op("Erf", [b.op("Mul", [xs, b.const(math.sqrt(0.5), dt)])])
    return b.op("Mul", [half, b.op("Add", [t, b.const(1.0, dt)])])


# ---- backward formulas ---------------------------------------------------------------------------

@register("aten.threshold_backward.default")
def _threshold_backward(b: Builder, node: fx.Node, grad: Val, x: Val, threshold: float) -> str:
    dt = result_meta(node).dtype
    mask = b.op("LessOrEqual", [x.name, b.const(threshold, x.dtype)])
    return b.op("Where", [mask, b.const(0, dt), b.cast(grad, dt)])


@register("aten.tanh_backward.default")
def _tanh_backward(b: Builder, node: fx.Node, grad: Val, y: Val) -> str:
    one_minus = b.op("Sub", [b.const(1, y.dtype), b.op("Mul", [y.name, y.name])])
    return b.op("Mul", [grad.name, one_minus])


@register("aten.sigmoid_backward.default")
def _sigmoid_backward(b: Builder, node: fx.Node, grad: Val, y: Val) -> str:
    return b.op("Mul", [grad.name, b.op("Mul", [y.name, b.op("Sub", [b.const(1, y.dtype), y.name])])])


@register("aten.gelu_backward.default", check=lambda n: None if n.kwargs.get("approximate", "none") == "none"
          and (len(n.args) < 3 or n.args[2] == "none") else "the tanh approximation's gradient is not mapped")
def _gelu_backward(b: Builder, node: fx.Node, grad: Val, x: Val, approximate: str = "none") -> str:
    dt, xs = x.dtype, x.name
    cdf = b.op("Mul", [b.op("Add", [b.op("Erf", [b.op("Mul", [xs, b.const(math.sqrt(0.5), dt)])]),
                                    b.const(1.0, dt)]), b.const(0.5, dt)])
    pdf = b.op("Mul", [b.op("Exp", [b.op("Mul", [b.op("Mul", [xs, xs]), b.const(-0.5, dt)])]),
                       b.const(1 / math.sqrt(2 * math.pi), dt)])
    return b.op("Mul", [grad.name, b.op("Add", [cdf, b.op("Mul", [xs, pdf])])])


@register("aten._softmax_backward_data.default")
def _softmax_backward(b: Builder, node: fx.Node, grad: Val, out: Val, dim: int, input_dtype: Any) -> str:
    gy = b.op("Mul", [grad.name, out.name])
    s = b.op("ReduceSum", [gy, b.ints([dim])], keepdims=1)
    return b.op("Sub", [gy, b.op("Mul", [out.name, s])])


@register("aten._log_softmax_backward_data.default")
def _log_softmax_backward(b: Builder, node: fx.Node, grad: Val, out: Val, dim: int, input_dtype: Any) -> str:
    s = b.op("ReduceSum", [grad.name, b.ints([dim])], keepdims=1)
    return b.op("Sub", [grad.name, b.op("Mul", [b.op("Exp", [out.name]), s])])


# ---- reductions ------------------------------------------------------------------------------------

def _reduce(onnx_op: str, *, cast_first: bool = True) -> Callable[..., str]:
    def convert(b: Builder, node: fx.Node, x: Val, dim: Any = None, keepdim: bool = False, **_: Any) -> str:
        dt = result_meta(node).dtype
        xs = b.cast(x, dt) if cast_first else x.name
        if isinstance(dim, int):
            dim = [dim]
        if x.rank == 0:  # torch reduces a 0-d tensor over dim 0 or -1 to itself
            return xs
        axes = [b.ints(list(dim))] if dim else []
        return b.op(onnx_op, [xs, *axes], keepdims=int(bool(keepdim)))
    return convert


register("aten.sum.dim_IntList", "aten.sum.default")(_reduce("ReduceSum"))
register("aten.mean.dim", "aten.mean.default")(_reduce("ReduceMean"))
register("aten.amax.default")(_reduce("ReduceMax"))
register("aten.amin.default")(_reduce("ReduceMin"))
register("aten.prod.dim_int", "aten.prod.default")(_reduce("ReduceProd"))


def _arg_check(node: fx.Node) -> str | None:
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    if dim is None and keepdim:
        return "argmax/argmin over all dims with keepdim=True"
    return None if node.args[0].meta["val"].dim() > 0 else "a 0-d input"


def _argreduce(onnx_op: str) -> Callable[..., str]:
    def convert(b: Builder, node: fx.Node, x: Val, dim: int | None = None, keepdim: bool = False) -> str:
        xs = x.name
        if dim is None:
            xs, dim = b.op("Reshape", [xs, b.ints([-1])]), 0
        return b.op(onnx_op, [xs], axis=dim, keepdims=int(keepdim), select_last_index=0)
    return convert


register("aten.argmax.default", check=_arg_check)(_argreduce("ArgMax"))
register("aten.argmin.default", check=_arg_check)(_argreduce("ArgMin"))


def _max_dim(onnx_op: str) -> Callable[..., list[str]]:
    def convert(b: Builder, node: fx.Node, x: Val, dim: int, keepdim: bool = False) -> list[str]:
        values = b.op(f"Reduce{onnx_op}", [x.name, b.ints([dim])], keepdims=int(keepdim))
        return [values, b.op(f"Arg{onnx_op}", [x.name], axis=dim, keepdims=int(keepdim), select_last_index=0)]
    return convert


register("aten.max.dim", check=_arg_check)(_max_dim("Max"))
register("aten.min.dim", check=_arg_check)(_max_dim("Min"))


def _var_check(node: fx.Node) -> str | None:
    x = node.args[0].meta["val"]
    dims = node.args[1] if len(node.args) > 1 and node.args[1] is not None else list(range(x.dim()))
    sizes = [x.shape[d] for d in dims]
    return None if all_static(*sizes) and x.dtype.is_floating_point else "var needs static reduced sizes (float)"


@register("aten.var.correction", check=_var_check)
def _var(b: Builder, node: fx.Node, x: Val, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> str:
    dims = list(range(x.rank)) if dim is None else list(dim)
    n = math.prod(x.shape[d] for d in dims)
    axes = b.ints(dims)
    d = b.op("Sub", [x.name, b.op("ReduceMean", [x.name, axes], keepdims=1)])
    s = b.op("ReduceSum", [b.op("Mul", [d, d]), axes], keepdims=int(keepdim))
    return b.op("Div", [s, b.const(max(n - (1 if correction is None else correction), 0), x.dtype)])


@register("aten.cumsum.default")
def _cumsum(b: Builder, node: fx.Node, x: Val, dim: int, *, dtype: Any = None) -> str:
    xs = b.cast(x, result_meta(node).dtype)
    return xs if x.rank == 0 else b.op("CumSum", [xs, b.const(dim, torch.int64)])


# ---- linear algebra, convolution, pooling, normalization ------------------------------------------

register("aten.mm.default", "aten.bmm.default")(lambda b, node, x, y: b.op("MatMul", [x.name, y.name]))


@register("aten.addmm.default")
def _addmm(b: Builder, node: fx.Node, bias: Val, x: Val, y: Val, *, beta: Any = 1, alpha: Any = 1) -> str:
    if not result_meta(node).dtype.is_floating_point:
        return b.op("Add", [b.op("MatMul", [x.name, y.name]), bias.name]) if beta == 1 and alpha == 1 else \
            _raise(f"integer addmm with beta={beta}, alpha={alpha}")
    # beta scales the bias before Gemm, whose own beta is left at 1: ONNX Runtime's CPU Gemm
    # returned the bias unscaled when K = 0 (an empty product) in releases before the fix
    # (measured on the GPU host: addmm's OpInfo sample of K = 0, beta = 0.2, came back 5x too large)
    if beta == 0:
        return b.op("Gemm", [x.name, y.name], alpha=float(alpha))
    c = bias.name if beta == 1 else b.op("Mul", [bias.name, b.const(beta, bias.dtype)])
    return b.op("Gemm", [x.name, y.name, c], alpha=float(alpha))


def _raise(message: str) -> str:
    raise ExportError(message)


def _conv_check(node: fx.Node) -> str | None:
    stride, padding, dilation, transposed, output_padding = node.args[3:8]
    if not all(isinstance(p, int) for p in (*stride, *padding, *dilation, *output_padding)):
        return "symbolic convolution parameters"
    if transposed and any(o >= s for o, s in zip(output_padding, stride)):
        return "output_padding not below the stride (torch allows it up to the dilation; ONNX does not)"
    return None


@register("aten.convolution.default", check=_conv_check)
def _convolution(b: Builder, node: fx.Node, x: Val, w: Val, bias: Val | None, stride: list, padding: list,
                 dilation: list, transposed: bool, output_padding: list, groups: int) -> str:
    inputs = [x.name, w.name] + ([bias.name] if bias is not None else [])
    n = w.rank - 2  # spatial dimensions: torch repeats a one-element parameter list over them, ONNX does not
    stride, padding, dilation, output_padding = ([*v] * n if len(v) == 1 else list(v)
                                                 for v in (stride, padding, dilation, output_padding))
    attrs = dict(strides=stride, pads=padding * 2, dilations=dilation, group=groups)
    if transposed:
        return b.op("ConvTranspose", inputs, output_padding=output_padding, **attrs)
    return b.op("Conv", inputs, **attrs)


def _only_first_output_used(node: fx.Node) -> str | None:
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            return "its second output (the indices, or the saved statistics) is used, and ONNX defines it otherwise"
    return None


def _pool_check(node: fx.Node) -> str | None:
    ceil_mode = node.args[5] if len(node.args) > 5 else node.kwargs.get("ceil_mode", False)
    if ceil_mode:
        return "ceil_mode=True"
    if node.args[0].meta["val"].dim() != 4:
        return "an unbatched (3-d) input"
    return _only_first_output_used(node)


@register("aten.max_pool2d_with_indices.default", check=_pool_check)
def _max_pool(b: Builder, node: fx.Node, x: Val, kernel: list, stride: list = (), padding: Any = 0,
              dilation: Any = 1, ceil_mode: bool = False) -> list:
    k = list(kernel) * (2 // len(kernel))
    s = list(stride or k) * (2 // len(stride or k))
    p = [padding] * 2 if isinstance(padding, int) else list(padding) * (2 // len(padding))
    d = [dilation] * 2 if isinstance(dilation, int) else list(dilation) * (2 // len(dilation))
    return [b.op("MaxPool", [x.name], kernel_shape=k, strides=s, pads=p * 2, dilations=d), None]


def _pool_params(kernel: list, stride: Any, padding: Any) -> tuple[list, list, list]:
    k = list(kernel) * (2 // len(kernel))
    s = list(stride or k) * (2 // len(stride or k))
    p = [padding] * 2 if isinstance(padding, int) else list(padding) * (2 // len(padding))
    return k, s, p


def _avg_check(node: fx.Node) -> str | None:
    args = list(node.args) + [None] * 7
    if args[6] is not None or node.kwargs.get("divisor_override") is not None:
        return "divisor_override"
    x, out = node.args[0].meta["val"], result_meta(node)
    if x.dim() != 4:
        return "an unbatched (3-d) input"
    if args[4] or node.kwargs.get("ceil_mode"):
        # without padding a partial last window averages what it covers on both sides; ONNX's
        # output size is ceil((H - k) / s) + 1, torch's too unless it drops a window starting
        # past the input, which the static output size shows
        k, s, p = _pool_params(args[1], args[2], args[3] if args[3] is not None else 0)
        sizes = [*x.shape[2:], *out.shape[2:]]
        if any(p) or not all_static(*sizes) or \
                any(-(-(h - kk) // ss) + 1 != o for h, kk, ss, o in zip(x.shape[2:], k, s, out.shape[2:])):
            return "ceil_mode=True with padding, or with a window torch drops"
    return None


@register("aten.avg_pool2d.default", check=_avg_check)
def _avg_pool(b: Builder, node: fx.Node, x: Val, kernel: list, stride: list = (), padding: Any = 0,
              ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> str:
    k, s, p = _pool_params(kernel, stride, padding)
    if ceil_mode:  # no padding (the check): a partial window is averaged over what it covers
        return b.op("AveragePool", [x.name], kernel_shape=k, strides=s, ceil_mode=1, count_include_pad=0)
    return b.op("AveragePool", [x.name], kernel_shape=k, strides=s, pads=p * 2,
                count_include_pad=int(count_include_pad))


def _adaptive_check(node: fx.Node) -> str | None:
    x, size = node.args[0].meta["val"], list(node.args[1])
    if x.dim() != 4 or not all_static(*x.shape[2:]) or any(i % o for i, o in zip(x.shape[2:], size)):
        return "adaptive pooling to a size that does not divide the (static) input"
    return None


@register("aten._adaptive_avg_pool2d.default", check=_adaptive_check)
def _adaptive_avg_pool(b: Builder, node: fx.Node, x: Val, size: list) -> str:
    if list(size) == [1, 1]:
        return b.op("GlobalAveragePool", [x.name])
    k = [i // o for i, o in zip(x.shape[2:], size)]
    return b.op("AveragePool", [x.name], kernel_shape=k, strides=k)


def _ln_check(node: fx.Node) -> str | None:
    shape = node.args[1]
    return None if all_static(*shape) else "a symbolic normalized shape"


@register("aten.native_layer_norm.default", check=_ln_check)
def _layer_norm(b: Builder, node: fx.Node, x: Val, shape: list, w: Val | None, bias: Val | None,
                eps: float) -> list[str]:
    scale = w.name if w is not None else b.const([1.0] * math.prod(shape), x.dtype, tuple(shape))
    inputs = [x.name, scale] + ([bias.name] if bias is not None else [])
    return b.op("LayerNormalization", inputs, 3, axis=-len(shape), epsilon=float(eps))


def _bn_check(node: fx.Node) -> str | None:
    if node.args[1] is None or node.args[2] is None:
        return "batch norm without affine weights"
    return _only_first_output_used(node)


@register("aten._native_batch_norm_legit_no_training.default", check=_bn_check)
def _batch_norm(b: Builder, node: fx.Node, x: Val, w: Val, bias: Val, mean: Val, var: Val, momentum: float,
                eps: float) -> list:
    return [b.op("BatchNormalization", [x.name, w.name, bias.name, mean.name, var.name], epsilon=float(eps)),
            None, None]


def _softmax_check(node: fx.Node) -> str | None:
    return "half_to_float" if node.args[2] else None if node.args[0].meta["val"].dim() else "a 0-d input"


register("aten._softmax.default", check=_softmax_check)(
    lambda b, node, x, dim, half_to_float: b.op("Softmax", [x.name], axis=dim))
register("aten._log_softmax.default", check=_softmax_check)(
    lambda b, node, x, dim, half_to_float: b.op("LogSoftmax", [x.name], axis=dim))


# ---- shapes, views, indexing -----------------------------------------------------------------------

@register("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def _view(b: Builder, node: fx.Node, x: Val, shape: list) -> str:
    return b.op("Reshape", [x.name, b.ints(shape)], allowzero=1)


@register("aten.permute.default")
def _permute(b: Builder, node: fx.Node, x: Val, dims: list) -> str:
    return b.op("Transpose", [x.name], perm=[_axis(d, x.rank) for d in dims])


@register("aten.transpose.int")
def _transpose(b: Builder, node: fx.Node, x: Val, d0: int, d1: int) -> str:
    perm = list(range(x.rank))
    if x.rank:
        a, c = _axis(d0, x.rank), _axis(d1, x.rank)
        perm[a], perm[c] = perm[c], perm[a]
    return b.op("Transpose", [x.name], perm=perm)


@register("aten.t.default")
def _t(b: Builder, node: fx.Node, x: Val) -> str:
    return b.op("Transpose", [x.name], perm=[1, 0]) if x.rank == 2 else x.name


@register("aten.expand.default")
def _expand(b: Builder, node: fx.Node, x: Val, size: list, *, implicit: bool = False) -> str:
    # -1 keeps a dimension: ONNX's Expand broadcasts both ways, so 1 keeps it too
    return b.op("Expand", [x.name, b.ints([1 if isinstance(s, int) and s == -1 else s for s in size])])


@register("aten.unsqueeze.default")
def _unsqueeze(b: Builder, node: fx.Node, x: Val, dim: int) -> str:
    return b.op("Unsqueeze", [x.name, b.ints([_axis(dim, x.rank + 1)])])


def _squeeze_dims(x: Val | torch.Tensor, dims: Any) -> list[int] | None:
    shape = tuple(x.shape)
    rank = len(shape)
    dims = range(rank) if dims is None else [dims] if isinstance(dims, int) else dims
    dims = [_axis(d, rank) for d in dims] if rank else []
    if not all_static(*(shape[d] for d in dims)):
        return None
    return [d for d in dims if shape[d] == 1]


@register("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
          check=lambda n: None if _squeeze_dims(n.args[0].meta["val"], n.args[1] if len(n.args) > 1 else None)
          is not None else "squeeze of a dimension of symbolic size")
def _squeeze(b: Builder, node: fx.Node, x: Val, dims: Any = None) -> str:
    axes = _squeeze_dims(x, dims)
    return b.op("Squeeze", [x.name, b.ints(axes)]) if axes else x.name


@register("aten.cat.default")
def _cat(b: Builder, node: fx.Node, tensors: list, dim: int = 0) -> str:
    out = result_meta(node)
    keep = [t for t in tensors if not (t.rank == 1 and t.shape[0] == 0 and out.dim() != 1)]  # legacy empty inputs
    if not keep:
        return b.op("Identity", [tensors[0].name])
    return b.op("Concat", [b.cast(t, out.dtype) for t in keep], axis=_axis(dim, out.dim()))


@register("aten.slice.Tensor")
def _slice(b: Builder, node: fx.Node, x: Val, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> str:
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    return b.op("Slice", [x.name, b.ints([start]), b.ints([end]), b.ints([dim]), b.ints([step])])


@register("aten.select.int")
def _select(b: Builder, node: fx.Node, x: Val, dim: int, index: Any) -> str:
    return b.op("Gather", [x.name, b.scalar(index, torch.int64)], axis=dim)


@register("aten.index_select.default", check=lambda n: None if n.args[0].meta["val"].dim() else "a 0-d input")
def _index_select(b: Builder, node: fx.Node, x: Val, dim: int, index: Val) -> str:
    return b.op("Gather", [x.name, index.name], axis=dim)


@register("aten.embedding.default")
def _embedding(b: Builder, node: fx.Node, weight: Val, indices: Val, *_: Any) -> str:
    return b.op("Gather", [weight.name, indices.name], axis=0)


@register("aten.gather.default", check=lambda n: None if n.args[0].meta["val"].dim() else "a 0-d input")
def _gather(b: Builder, node: fx.Node, x: Val, dim: int, index: Val, *, sparse_grad: bool = False) -> str:
    return b.op("GatherElements", [x.name, index.name], axis=dim)


def _scatter_check(node: fx.Node) -> str | None:
    if node.args[0].meta["val"].dim() == 0:
        return "a 0-d input"
    return "scatter with a reduce argument" if node.kwargs.get("reduce") or len(node.args) > 4 else None


@register("aten.scatter.src", "aten.scatter.value", check=_scatter_check)
def _scatter(b: Builder, node: fx.Node, x: Val, dim: int, index: Val, src: Any) -> str:
    # ONNX's updates have the index's shape; torch reads the leading part of a larger src
    shape = b.op("Shape", [index.name])
    if isinstance(src, Val) and not src.sym:
        updates = b.op("Slice", [b.cast(src, x.dtype), b.ints([0] * x.rank), shape])
    else:
        updates = b.op("Expand", [_as(b, src, x.dtype), shape])
    return b.op("ScatterElements", [x.name, index.name, updates], axis=_axis(dim, x.rank))


def _index_check(node: fx.Node) -> str | None:
    used = [i for i in node.args[1] if i is not None]
    if not used or any(i.meta["val"].dtype not in (torch.int64, torch.int32) for i in used):
        return "indexing by a boolean mask (a data-dependent shape)"
    return None


def _nd_indices(b: Builder, x: Val, indices: list) -> tuple[list[int], list[int], str, str, str]:
    """Several index tensors as GatherND/ScatterND see them: the indexed axes, the others, ``x``
    with the indexed axes moved to the front, the indices broadcast and stacked on a last axis,
    and their broadcast shape."""
    axes = [i for i, t in enumerate(indices) if t is not None]
    rest = [d for d in range(x.rank) if d not in axes]
    xs = x.name if axes == list(range(len(axes))) else b.op("Transpose", [x.name], perm=axes + rest)
    idx = [b.cast(indices[a], torch.int64) for a in axes]
    shape = b.op("Shape", [functools.reduce(lambda s, i: b.op("Add", [s, i]), idx)])
    last = b.ints([-1])
    stacked = b.op("Concat", [b.op("Unsqueeze", [b.op("Expand", [i, shape]), last]) for i in idx], axis=-1)
    return axes, rest, xs, stacked, shape


def _torch_order(axes: list[int], rest: list[int], n: int) -> list[int] | None:
    """The permutation from GatherND's layout (the ``n`` broadcast index dimensions first) to
    torch's, which puts them where the first indexed dimension was when the indexed dimensions are
    adjacent; None when the layouts agree."""
    if axes[0] == 0 or axes != list(range(axes[0], axes[-1] + 1)):
        return None
    return [n + i for i in range(axes[0])] + list(range(n)) + [n + i for i in range(axes[0], len(rest))]


@register("aten.index.Tensor", check=_index_check)
def _index(b: Builder, node: fx.Node, x: Val, indices: list) -> str:
    used = [i for i, t in enumerate(indices) if t is not None]
    if len(used) == 1:
        return b.op("Gather", [x.name, indices[used[0]].name], axis=used[0])
    axes, rest, xs, stacked, _ = _nd_indices(b, x, indices)
    perm = _torch_order(axes, rest, result_meta(node).dim() - len(rest))
    out = b.op("GatherND", [xs, stacked])
    return out if perm is None else b.op("Transpose", [out], perm=perm)


def _one_mask(node: fx.Node) -> bool:
    """``x[mask] = v`` with one boolean mask over ``x``'s leading dimensions."""
    indices, x = node.args[1], node.args[0].meta["val"]
    mask = indices[0].meta["val"] if len(indices) == 1 and isinstance(indices[0], fx.Node) else None
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    if accumulate and x.dtype is torch.bool:
        return False
    return mask is not None and mask.dtype is torch.bool and 0 < mask.dim() <= x.dim() and \
        [str(d) for d in mask.shape] == [str(d) for d in x.shape[:mask.dim()]]


def _index_put_check(node: fx.Node) -> str | None:
    if _one_mask(node):
        return None
    return _index_check(node) or (None if node.args[0].meta["val"].dim() else "a 0-d input")


def _masked_put(b: Builder, x: Val, mask: Val, values: Val, accumulate: bool) -> str:
    vals = _as(b, values, x.dtype)
    if all_static(*values.shape) and math.prod(values.shape) == 1:  # one value: a Where
        cond = b.op("Unsqueeze", [mask.name, b.ints(list(range(mask.rank, x.rank)))]) if mask.rank < x.rank \
            else mask.name
        v = b.op("Reshape", [vals, b.ints([])])
        return b.op("Where", [cond, b.op("Add", [x.name, v]) if accumulate else v, x.name])
    # one value per selected position (how many: known at run time): ScatterND at the mask's
    # nonzero positions, in torch's (row-major) order
    where = b.op("Transpose", [b.op("NonZero", [mask.name])], perm=[1, 0])
    slots = b.op("Concat", [b.op("Shape", [where], start=0, end=1), b.op("Shape", [x.name], start=mask.rank)], axis=0)
    vals = b.op("Expand", [vals, slots])
    return b.op("ScatterND", [x.name, where, vals], **({"reduction": "add"} if accumulate else {}))


@register("aten.index_put.default", check=_index_put_check)
def _index_put(b: Builder, node: fx.Node, x: Val, indices: list, values: Val, accumulate: bool = False) -> str:
    if _one_mask(node):
        return _masked_put(b, x, indices[0], values, accumulate)
    axes, rest, xs, stacked, shape = _nd_indices(b, x, list(indices) + [None] * (x.rank - len(indices)))
    n = max(indices[a].rank for a in axes)
    slots = b.op("Concat", [shape, b.op("Shape", [xs], start=len(axes))], axis=0)  # GatherND's result shape
    perm = _torch_order(axes, rest, n)
    vals = _as(b, values, x.dtype)
    if perm is None:
        vals = b.op("Expand", [vals, slots])
    else:  # values broadcast against torch's layout of the indexed result, then moved to GatherND's
        vals = b.op("Expand", [vals, b.op("Gather", [slots, b.ints(perm)], axis=0)])
        vals = b.op("Transpose", [vals], perm=[perm.index(i) for i in range(len(perm))])
    out = b.op("ScatterND", [xs, stacked, vals], **({"reduction": "add"} if accumulate else {}))
    if xs == x.name:
        return out
    order = axes + rest
    return b.op("Transpose", [out], perm=[order.index(i) for i in range(x.rank)])


def _scatter_along(b: Builder, x: Val, src: str, dim: int, start: Any, step: int) -> str:
    """``x`` with positions ``start, start + step, ...`` of dimension ``dim`` replaced by ``src``
    (``x``'s rank, as many positions along ``dim`` as it has): ScatterElements with those indices."""
    dim = _axis(dim, x.rank)
    size = b.op("Shape", [x.name], start=dim, end=dim + 1)
    if isinstance(start, int) and start < 0:  # from the end, clamped at 0 as torch does
        start = b.op("Max", [b.op("Add", [size, b.ints([start])]), b.ints([0])])
    else:
        start = b.ints([start])
    count = b.op("Shape", [src], start=dim, end=dim + 1)
    zero = b.const(0, torch.int64)
    positions = b.op("Range", [zero, b.op("Squeeze", [count, b.ints([0])]), b.const(1, torch.int64)])
    positions = b.op("Add", [b.op("Mul", [positions, b.const(step, torch.int64)]), start])
    shape = [1] * x.rank
    shape[dim] = -1
    index = b.op("Expand", [b.op("Reshape", [positions, b.ints(shape)]), b.op("Shape", [src])])
    return b.op("ScatterElements", [x.name, index, src], axis=dim)


def _slice_scatter_check(node: fx.Node) -> str | None:
    start = node.args[3] if len(node.args) > 3 else node.kwargs.get("start")
    step = node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)
    if node.args[0].meta["val"].dim() == 0:
        return "a 0-d input"
    return None if isinstance(start, (int, type(None))) and isinstance(step, int) else "a symbolic start or step"


@register("aten.slice_scatter.default", check=_slice_scatter_check)
def _slice_scatter(b: Builder, node: fx.Node, x: Val, src: Val, dim: int = 0, start: Any = None, end: Any = None,
                   step: int = 1) -> str:
    # ``end`` is implied by ``src``'s size along ``dim``
    return _scatter_along(b, x, b.cast(src, x.dtype), dim, 0 if start is None else start, step)


@register("aten.select_scatter.default", check=lambda n: None if isinstance(n.args[3], int) and n.args[0].meta[
    "val"].dim() else "a symbolic index or a 0-d input")
def _select_scatter(b: Builder, node: fx.Node, x: Val, src: Val, dim: int, index: int) -> str:
    dim = _axis(dim, x.rank)
    return _scatter_along(b, x, b.op("Unsqueeze", [b.cast(src, x.dtype), b.ints([dim])]), dim, index, 1)


@register("aten.split_with_sizes.default")
def _split(b: Builder, node: fx.Node, x: Val, sizes: list, dim: int = 0) -> list[str]:
    outs = b.op("Split", [x.name, b.ints(sizes)], len(sizes), axis=dim)
    return [outs] if len(sizes) == 1 else outs


def _pad_check(node: fx.Node) -> str | None:
    return None if all(isinstance(p, int) for p in node.args[1]) else "symbolic padding"


@register("aten.constant_pad_nd.default", check=_pad_check)
def _pad(b: Builder, node: fx.Node, x: Val, pad: list, value: Any = 0) -> str:
    begins, ends = [0] * x.rank, [0] * x.rank
    for i in range(len(pad) // 2):  # torch's pad starts with the last dimension
        begins[x.rank - 1 - i], ends[x.rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    out = x.name
    if any(p > 0 for p in begins + ends):
        out = b.op("Pad", [out, b.ints([max(p, 0) for p in begins + ends]), b.const(value, x.dtype)], mode="constant")
    cut = [d for d in range(x.rank) if begins[d] < 0 or ends[d] < 0]  # negative padding removes elements
    if not cut:
        return out
    return b.op("Slice", [out, b.ints([-min(begins[d], 0) for d in cut]),
                          b.ints([min(ends[d], 0) or INT64_MAX for d in cut]), b.ints(cut)])


@register("aten.flip.default")
def _flip(b: Builder, node: fx.Node, x: Val, dims: list) -> str:
    n = len(dims)
    return b.op("Slice", [x.name, b.ints([-1] * n), b.ints([INT64_MIN] * n), b.ints(list(dims)), b.ints([-1] * n)])


@register("aten.repeat.default")
def _repeat(b: Builder, node: fx.Node, x: Val, repeats: list) -> str:
    xs = x.name
    if len(repeats) > x.rank:
        xs = b.op("Reshape", [xs, b.ints([1] * (len(repeats) - x.rank) + list(x.shape))], allowzero=1) \
            if all_static(*x.shape) else _raise("repeat adding dimensions to a symbolic shape")
    return b.op("Tile", [xs, b.ints(repeats)])


# ---- copies, casts and new tensors -------------------------------------------------------------------

for _key in ("clone.default", "alias.default", "lift_fresh_copy.default", "detach.default", "_to_copy.default",
             "prims.convert_element_type.default"):
    register(_key if _key.startswith("prims") else f"aten.{_key}")(
        lambda b, node, x, *_, **__: b.cast(x, result_meta(node).dtype))


@register("aten.copy.default")
def _copy(b: Builder, node: fx.Node, dst: Val, src: Val, non_blocking: bool = False) -> str:
    return b.op("Expand", [b.cast(src, dst.dtype), b.op("Shape", [dst.name])])


def _filled(b: Builder, node: fx.Node, shape: str, value: Any) -> str:
    from onnx import helper

    dt = result_meta(node).dtype
    tensor = helper.make_tensor("value", ONNX_DTYPES[dt], [1], [bool(value) if dt is torch.bool else value])
    return b.op("ConstantOfShape", [shape], value=tensor)


@register("aten.full.default")
def _full(b: Builder, node: fx.Node, size: list, value: Any, **_: Any) -> str:
    return _filled(b, node, b.ints(size), value) if not isinstance(value, Val) else _raise("a tensor fill value")


@register("aten.full_like.default")
def _full_like(b: Builder, node: fx.Node, x: Val, value: Any, **_: Any) -> str:
    return _filled(b, node, b.op("Shape", [x.name]), value)


@register("aten.empty.memory_format", "aten.empty_strided.default", "aten.empty_permuted.default")
def _empty(b: Builder, node: fx.Node, size: list, *_: Any, **__: Any) -> str:
    return _filled(b, node, b.ints(size), 0)  # any value will do


@register("aten.scalar_tensor.default")
def _scalar_tensor(b: Builder, node: fx.Node, value: Any, **_: Any) -> str:
    return b.scalar(value, result_meta(node).dtype)


@register("aten.arange.start_step", check=lambda n: None if result_meta(n).dtype in (torch.int64, torch.int32, torch.float32,
                                                                           torch.float64)
          else "a half-precision arange")
def _arange(b: Builder, node: fx.Node, start: Any, end: Any, step: Any = 1, **_: Any) -> str:
    dt = result_meta(node).dtype
    if not dt.is_floating_point:
        return b.op("Range", [b.scalar(start, dt), b.scalar(end, dt), b.scalar(step, dt)])
    # torch's CPU kernel computes start + i * step in double for each i; ONNX's Range adds step
    # repeatedly (its error grows with i), so the floats are made from an integer range
    f64 = torch.float64
    first, last, delta = (b.scalar(v, f64) for v in (start, end, step))
    count = b.cast(b.op("Ceil", [b.op("Div", [b.op("Sub", [last, first]), delta])]), torch.int64, f64)
    i = b.op("Range", [b.const(0, torch.int64), count, b.const(1, torch.int64)])
    return b.cast(b.op("Add", [first, b.op("Mul", [b.cast(i, f64, torch.int64), delta])]), dt, f64)



# ---- attention ---------------------------------------------------------------------------------

def _sdpa_check(node: fx.Node) -> str | None:
    q, dropout = node.args[0].meta["val"], node.args[3] if len(node.args) > 3 else 0.0
    if dropout:
        return "attention with dropout (random)"
    if node.kwargs.get("scale") is None and not all_static(q.shape[-1]):
        return "attention with the default scale of a symbolic head size"
    return None


def _scores(b: Builder, q: Val, k: Val, is_causal: bool, attn_mask: Val | None, scale: float | None,
            dt: torch.dtype) -> tuple[str, str, str, float]:
    """q, k (cast to ``dt``), the masked attention scores ``q k^T * scale + mask``, and the scale."""
    qs, ks = b.cast(q, dt), b.cast(k, dt)
    kt = b.op("Transpose", [ks], perm=[*range(k.rank - 2), k.rank - 1, k.rank - 2])
    factor = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = b.op("Mul", [b.op("MatMul", [qs, kt]), b.const(factor, dt)])
    minus_inf = b.const(float("-inf"), dt)
    if is_causal:  # top-left aligned, as torch's is_causal
        size = b.op("Concat", [b.op("Shape", [qs], start=-2, end=-1), b.op("Shape", [ks], start=-2, end=-1)], axis=0)
        ones = b.op("ConstantOfShape", [size], value=_tensor_one())
        scores = b.op("Where", [b.cast(b.op("Trilu", [ones], upper=0), torch.bool), scores, minus_inf])
    if attn_mask is not None:
        scores = (b.op("Where", [attn_mask.name, scores, minus_inf]) if attn_mask.dtype is torch.bool
                  else b.op("Add", [scores, b.cast(attn_mask, dt)]))
    return qs, ks, scores, factor


def _accumulation(q: Val) -> torch.dtype:
    return q.dtype if q.dtype in (torch.float32, torch.float64) else torch.float32  # half types accumulate in float


@register("aten._scaled_dot_product_flash_attention_for_cpu.default", check=_sdpa_check)
def _sdpa(b: Builder, node: fx.Node, q: Val, k: Val, v: Val, dropout_p: float = 0.0, is_causal: bool = False, *,
          attn_mask: Val | None = None, scale: float | None = None) -> list[str]:
    # softmax(q k^T * scale + mask) v, and the rows' logsumexp; like torch's kernel, a row with
    # every key masked gives zeros (not ONNX Softmax's NaN) and a logsumexp of 0
    dt = _accumulation(q)
    _, _, scores, _ = _scores(b, q, k, is_causal, attn_mask, scale, dt)
    axes = b.ints([-1])
    top = b.op("ReduceMax", [scores, axes], keepdims=1)
    dead = b.op("IsInf", [top], detect_positive=0)
    top = b.op("Where", [dead, b.const(0.0, dt), top])
    e = b.op("Exp", [b.op("Sub", [scores, top])])
    total = b.op("ReduceSum", [e, axes], keepdims=1)
    p = b.op("Div", [e, b.op("Where", [dead, b.const(1.0, dt), total])])
    out = b.op("MatMul", [p, b.cast(v, dt)])
    lse = b.op("Where", [dead, b.const(0.0, dt), b.op("Add", [top, b.op("Log", [total])])])
    lse = b.op("Squeeze", [lse, axes])
    return [b.cast(out, result_meta(node, 0).dtype, dt), b.cast(lse, result_meta(node, 1).dtype, dt)]


def _sdpa_backward_check(node: fx.Node) -> str | None:
    q = node.args[1].meta["val"]
    if node.args[6]:
        return "attention with dropout (random)"
    if node.kwargs.get("scale") is None and not all_static(q.shape[-1]):
        return "attention with the default scale of a symbolic head size"
    return None


@register("aten._scaled_dot_product_flash_attention_for_cpu_backward.default", check=_sdpa_backward_check)
def _sdpa_backward(b: Builder, node: fx.Node, grad: Val, q: Val, k: Val, v: Val, out: Val, lse: Val,
                   dropout_p: float, is_causal: bool, *, attn_mask: Val | None = None,
                   scale: float | None = None) -> list[str]:
    # P = exp(scores - logsumexp) (0 where masked); dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)),
    # dQ = dS K * scale, dK = dS^T Q * scale
    dt = _accumulation(q)
    qs, ks, scores, factor = _scores(b, q, k, is_causal, attn_mask, scale, dt)
    t = lambda x, rank: b.op("Transpose", [x], perm=[*range(rank - 2), rank - 1, rank - 2])  # noqa: E731
    p = b.op("Exp", [b.op("Sub", [scores, b.op("Unsqueeze", [b.cast(lse, dt), b.ints([-1])])])])
    go, vs = b.cast(grad, dt), b.cast(v, dt)
    dv = b.op("MatMul", [t(p, q.rank), go])
    rows = b.op("ReduceSum", [b.op("Mul", [go, b.cast(out, dt)]), b.ints([-1])], keepdims=1)
    ds = b.op("Mul", [p, b.op("Sub", [b.op("MatMul", [go, t(vs, v.rank)]), rows])])
    dq = b.op("Mul", [b.op("MatMul", [ds, ks]), b.const(factor, dt)])
    dk = b.op("Mul", [b.op("MatMul", [t(ds, q.rank), qs]), b.const(factor, dt)])
    return [b.cast(dq, result_meta(node, 0).dtype, dt), b.cast(dk, result_meta(node, 1).dtype, dt), b.cast(dv, result_meta(node, 2).dtype, dt)]


def _tensor_one() -> Any:
    from onnx import TensorProto, helper

    return helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
