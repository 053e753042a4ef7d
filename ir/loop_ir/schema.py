"""The loop IR schema: frozen, JSON-serializable dataclasses describing what Inductor hands a
code generator after lowering and fusion.

A :class:`LoopProgram` is a table of :class:`Buffer` s and an ordered list of operations, each a
:class:`Kernel` (one or more fused :class:`LoopNest` s, each an SSA body of :class:`Stmt` s over
an iteration space) or an :class:`ExternKernel` (a library call such as ``aten.mm``).

Index expressions and sizes are strings that sympy parses (see :func:`parse_expr`): iteration
variables are ``i0, i1, ...`` (pointwise) and ``r0, r1, ...`` (reduction), size symbols
``s0, s1, ...``, indirect indices ``ind0, ind1, ...``; integer functions are spelled
``FloorDiv(a, b)``, ``ModularIndexing(x, div, mod)`` (= ``(x // div) % mod``), ``Min``, ``Max``,
``CleanDiv``, ``PythonMod`` and the other names of :data:`INDEX_FUNCTIONS`.

Example::

    >>> b = Buffer("x", "float32", ("4",), ("1",), "cpu", "input")
    >>> y = Buffer("y", "float32", ("4",), ("1",), "cpu", "output")
    >>> body = (Stmt("t0", "load", (), (("buffer", "x"), ("index", "i0")), "float32"),
    ...         Stmt("t1", "exp", ("t0",), (), "float32"),
    ...         Stmt(None, "store", ("t1",), (("buffer", "y"), ("index", "i0"), ("mode", None))))
    >>> p = LoopProgram("forward", "cpu", (b, y), ("x",), ("y",),
    ...                 (Kernel("kernel0", (LoopNest("op0", ("4",), (), body),)),))
    >>> LoopProgram.from_json(p.to_json()) == p
    True
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator, Literal, Union

__all__ = ["SCHEMA_VERSION", "Buffer", "Stmt", "LoopNest", "Kernel", "ExternKernel", "BufferRef",
           "SizeExpr", "TorchValue", "LoopProgram", "Operation", "BufferKind", "encode_value", "decode_value", "STATEMENT_OPS",
           "COMPUTE_OPS", "REDUCTION_KINDS", "operation_to_dict", "operation_from_dict", "format_program",
           "format_kernel", "format_stmt"]

#: Bumped on any incompatible change of the JSON form; readers reject other versions.
SCHEMA_VERSION = 1

BufferKind = Literal["input", "output", "intermediate", "constant"]

#: Statement ops with a meaning of their own (memory, structure, conversions, indirect indices).
STATEMENT_OPS = ("load", "store", "store_reduction", "reduction", "masked", "yield", "constant", "index_expr",
                 "to_dtype", "to_dtype_bitcast", "getitem", "indirect_indexing", "check_bounds", "load_seed",
                 "device_assert")

#: Compute ops: Inductor's ``ops.*`` names with the semantics of the torch function of that name
#: (``docs/loop_ir.md``); ``libdevice_<name>`` spells ``<name>``. A code generator renders each
#: or declares it unsupported (``torchvendor.sdk.CStyleRenderer.unsupported_ops``).
COMPUTE_OPS = (
    "add", "sub", "mul", "truediv", "div", "int_truediv", "floordiv", "truncdiv", "mod", "remainder", "fmod",
    "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not",
    "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift",
    "bitwise_right_shift", "lshift", "rshift", "and_", "or_", "xor", "where", "identity", "relu", "neg", "abs",
    "reciprocal", "square", "rsqrt", "sigmoid", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt",
    "cbrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "atan2", "hypot", "copysign", "nextafter", "erf", "erfc", "erfinv", "lgamma", "tgamma", "digamma", "floor",
    "ceil", "trunc", "round", "sign", "signbit", "isinf", "isnan", "fma", "frexp", "round_decimal", "ceil_to_int",
    "floor_to_int", "trunc_to_int", "round_to_int", "log_ndtr", "ndtri", "rand", "randn", "randint64")

#: ``reduction`` kinds (its ``kind`` attr).
REDUCTION_KINDS = ("sum", "prod", "max", "min", "any", "xor_sum", "argmax", "argmin", "welford_reduce",
                   "welford_combine", "online_softmax_reduce")


@dataclass(frozen=True)
class BufferRef:
    """A tensor argument of an extern kernel: the buffer called ``name``. JSON: ``{"buffer": name}``."""

    name: str


@dataclass(frozen=True)
class SizeExpr:
    """A symbolic integer argument (e.g. a size ``s0*4``). JSON: ``{"expr": "4*s0"}``."""

    expr: str


@dataclass(frozen=True)
class TorchValue:
    """A torch enum-like argument of an extern kernel, by its Python spelling:
    ``torch.float32``, ``torch.contiguous_format``, ``torch.strided``, ``device:cpu``.
    JSON: ``{"torch": "torch.float32"}``.

    >>> TorchValue("torch.float32").resolve(), TorchValue("device:cpu").resolve()
    (torch.float32, device(type='cpu'))
    """

    value: str

    def resolve(self) -> Any:
        """The torch object this names."""
        import torch

        if self.value.startswith("device:"):
            return torch.device(self.value[len("device:"):])
        obj: Any = torch
        for part in self.value.split(".")[1:]:
            obj = getattr(obj, part)
        return obj


@dataclass(frozen=True)
class Buffer:
    """A tensor the program reads or writes.

    ``size``/``stride``/``offset`` are integer expressions (strings). Element ``k`` of the
    buffer's flat storage is ``data_ptr + k`` elements: index expressions in loads and stores
    are such flat offsets. A buffer with ``view_of`` set is an alias: its elements are
    ``as_strided(view_of, size, stride, offset)`` of the other buffer's storage (Inductor's
    ``ReinterpretView``/``NonOwningLayout``), and writes through either are visible in both.
    ``kind``: ``input`` (a program input), ``output`` (produced and returned), ``intermediate``
    or ``constant`` (a tensor baked into the program; its values are in
    :attr:`LoopProgram.constants`).
    """

    name: str
    dtype: str
    size: tuple[str, ...]
    stride: tuple[str, ...]
    device: str
    kind: BufferKind
    offset: str = "0"
    view_of: str | None = None


@dataclass(frozen=True)
class Stmt:
    """One SSA statement of a loop body.

    ``name`` is the value it defines (``None`` for ``store``/``store_reduction``), ``op`` an
    Inductor ``ops.*`` name, ``args`` the SSA values it reads, ``attrs`` its other operands as
    ``(key, value)`` pairs. ``dtype`` is the result dtype where known. ``body`` holds the
    sub-block of ``masked`` (ending with a ``yield``). See ``docs/loop_ir.md`` for the op table.

    >>> s = Stmt("t1", "reduction", ("t0",), (("kind", "sum"), ("dtype", "float32")), "float32")
    >>> s.attr("kind")
    'sum'
    """

    name: str | None
    op: str
    args: tuple[str, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()
    dtype: str | None = None
    body: tuple["Stmt", ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        """The attribute ``key``, or ``default``."""
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def walk(self) -> Iterator["Stmt"]:
        """This statement, then those of its sub-block, recursively."""
        yield self
        for s in self.body:
            yield from s.walk()


@dataclass(frozen=True)
class LoopNest:
    """One Inductor scheduler node: ``for i in ranges: for r in reduction_ranges: body``.

    Pointwise nests have no ``reduction_ranges``. In a reduction nest, statements that depend
    on a ``reduction`` result (and ``store_reduction``) run once per ``i`` after the ``r`` loops.
    """

    name: str
    ranges: tuple[str, ...]
    reduction_ranges: tuple[str, ...]
    body: tuple[Stmt, ...]

    @property
    def iter_vars(self) -> tuple[str, ...]:
        return tuple(f"i{k}" for k in range(len(self.ranges)))

    @property
    def reduce_vars(self) -> tuple[str, ...]:
        return tuple(f"r{k}" for k in range(len(self.reduction_ranges)))

    def stmts(self) -> Iterator[Stmt]:
        """Every statement, sub-blocks included, in order."""
        for s in self.body:
            yield from s.walk()


@dataclass(frozen=True)
class Kernel:
    """A fused kernel: loop nests that Inductor fused, to be run in order.

    Nests of a kernel share the outer iteration group Inductor chose (``group``: the total
    iteration and reduction sizes, as strings), so a code generator may fuse their loops; running
    them one after another is always correct.
    """

    name: str
    nests: tuple[LoopNest, ...]
    group: tuple[tuple[str, ...], ...] = ()

    @property
    def kind(self) -> Literal["pointwise", "reduction"]:
        return "reduction" if any(n.reduction_ranges for n in self.nests) else "pointwise"

    def reads(self) -> tuple[str, ...]:
        """Buffers loaded, in first-use order."""
        return _unique(s.attr("buffer") for n in self.nests for s in n.stmts() if s.op in ("load", "load_seed"))

    def writes(self) -> tuple[str, ...]:
        """Buffers stored, in first-use order."""
        return _unique(s.attr("buffer") for n in self.nests for s in n.stmts()
                       if s.op in ("store", "store_reduction"))


@dataclass(frozen=True)
class ExternKernel:
    """A library call: ``op(*args, **kwargs)`` whose result is written to ``outputs``.

    ``op`` is an operator key such as ``aten.mm.default`` (resolvable with
    ``torchvendor.ir.fx_view.resolve_op``) or ``getitem`` (take ``args[1:]`` indices of a
    multi-output extern's tuple, named by ``args[0]``); tensor arguments are
    :class:`BufferRef` s. With one output and a tensor result the result is copied into the
    output buffer; ops that mutate an argument in place have ``mutated`` set and no outputs.
    ``kernel`` is Inductor's name for the call (e.g. ``extern_kernels.mm``), for reference.
    """

    name: str
    op: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    outputs: tuple[str, ...]
    kernel: str = ""
    mutated: tuple[str, ...] = ()

    def reads(self) -> tuple[str, ...]:
        return _unique(v.name for v in _iter_refs((self.args, self.kwargs)))

    def writes(self) -> tuple[str, ...]:
        return _unique((*self.outputs, *self.mutated))


Operation = Union[Kernel, ExternKernel]


@dataclass(frozen=True)
class LoopProgram:
    """A whole Inductor graph at loop level (one of a capture's forward, backward or inference).

    ``inputs`` are the graph's inputs in calling order: buffer names, or names bound in
    ``scalar_inputs`` to a size expression (``("arg0_1", "s0")`` means "the integer passed here
    is s0"). ``outputs`` are :class:`BufferRef` s, :class:`SizeExpr` s (integer outputs) or
    ``None``. ``ops`` run in order.
    ``output_names`` are the names of the traced graph's outputs (AOTAutograd's saved values
    keep theirs between forward and backward). ``constants`` map constant buffers to their
    flat values.
    """

    name: str
    device: str
    buffers: tuple[Buffer, ...]
    inputs: tuple[str, ...]
    outputs: tuple[Any, ...]
    ops: tuple[Operation, ...]
    scalar_inputs: tuple[tuple[str, str], ...] = ()
    size_vars: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    constants: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    schema_version: int = SCHEMA_VERSION

    # -- lookups ---------------------------------------------------------------------------------
    def buffer(self, name: str) -> Buffer:
        """The buffer called ``name``; ``KeyError`` lists the known names."""
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(f"no buffer {name!r} in program {self.name!r}; buffers: "
                       f"{[b.name for b in self.buffers]}")

    def root(self, name: str) -> str:
        """The buffer whose storage ``name`` lives in: its base through every ``view_of``
        (itself if it is no view; a name that is no buffer, e.g. a scalar input, as it is)."""
        views = self._views
        while name in views:
            name = views[name]
        return name

    @property
    def returned(self) -> set[str]:
        """Names of the buffers the program returns (its tensor outputs)."""
        return {o.name for o in self.outputs if isinstance(o, BufferRef)}

    @cached_property
    def _views(self) -> dict[str, str]:
        return {b.name: b.view_of for b in self.buffers if b.view_of}

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        return tuple(o for o in self.ops if isinstance(o, Kernel))

    @property
    def extern_kernels(self) -> tuple[ExternKernel, ...]:
        return tuple(o for o in self.ops if isinstance(o, ExternKernel))

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict (see ``docs/loop_ir.md``)."""
        return {
            "schema_version": self.schema_version, "name": self.name, "device": self.device,
            "size_vars": list(self.size_vars),
            "inputs": list(self.inputs),
            "scalar_inputs": {k: v for k, v in self.scalar_inputs},
            "outputs": [encode_value(o) for o in self.outputs],
            "output_names": list(self.output_names),
            "buffers": [_buffer_to_dict(b) for b in self.buffers],
            "constants": {k: encode_value(v) for k, v in self.constants},
            "ops": [operation_to_dict(o) for o in self.ops],
        }

    def to_json(self, indent: int | None = 1) -> str:
        """Serialize; :meth:`from_json` gives back an equal program."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LoopProgram":
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"loop IR schema_version {version!r} is not supported by this reader "
                             f"(expects {SCHEMA_VERSION})")
        return cls(
            name=d["name"], device=d["device"],
            buffers=tuple(_buffer_from_dict(b) for b in d["buffers"]),
            inputs=tuple(d["inputs"]),
            outputs=tuple(decode_value(o) for o in d["outputs"]),
            ops=tuple(operation_from_dict(o) for o in d["ops"]),
            scalar_inputs=tuple((k, v) for k, v in d.get("scalar_inputs", {}).items()),
            size_vars=tuple(d.get("size_vars", ())),
            output_names=tuple(d.get("output_names", ())),
            constants=tuple((k, decode_value(v)) for k, v in d.get("constants", {}).items()),
            schema_version=version,
        )

    @classmethod
    def from_json(cls, text: str) -> "LoopProgram":
        """Parse the output of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        return format_program(self)


# ---- value encoding ------------------------------------------------------------------------------
def encode_value(v: Any) -> Any:
    """A JSON-ready form of an attribute or argument value (tuples become lists)."""
    if isinstance(v, BufferRef):
        return {"buffer": v.name}
    if isinstance(v, SizeExpr):
        return {"expr": v.expr}
    if isinstance(v, TorchValue):
        return {"torch": v.value}
    if isinstance(v, Stmt):
        return _stmt_to_dict(v)
    if isinstance(v, float) and not math.isfinite(v):
        return {"float": repr(v)}
    if isinstance(v, (tuple, list)):
        return [encode_value(x) for x in v]
    if isinstance(v, dict):
        return {"dict": [[k, encode_value(x)] for k, x in v.items()]}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"loop IR cannot serialize a value of type {type(v).__name__}: {v!r}")


def decode_value(v: Any) -> Any:
    """Inverse of :func:`encode_value`."""
    if isinstance(v, list):
        return tuple(decode_value(x) for x in v)
    if isinstance(v, dict):
        if "buffer" in v:
            return BufferRef(v["buffer"])
        if "expr" in v:
            return SizeExpr(v["expr"])
        if "float" in v:
            return float(v["float"])
        if "torch" in v:
            return TorchValue(v["torch"])
        if "dict" in v:
            return {k: decode_value(x) for k, x in v["dict"]}
        if "op" in v:
            return _stmt_from_dict(v)
        raise ValueError(f"unknown encoded loop IR value {v!r}")
    return v


def _buffer_to_dict(b: Buffer) -> dict[str, Any]:
    return {"name": b.name, "dtype": b.dtype, "size": list(b.size), "stride": list(b.stride),
            "offset": b.offset, "device": b.device, "kind": b.kind, "view_of": b.view_of}


def _buffer_from_dict(d: dict[str, Any]) -> Buffer:
    return Buffer(d["name"], d["dtype"], tuple(d["size"]), tuple(d["stride"]), d["device"], d["kind"],
                  d.get("offset", "0"), d.get("view_of"))


def _stmt_to_dict(s: Stmt) -> dict[str, Any]:
    d: dict[str, Any] = {"name": s.name, "op": s.op, "args": list(s.args),
                         "attrs": {k: encode_value(v) for k, v in s.attrs}, "dtype": s.dtype}
    if s.body:
        d["body"] = [_stmt_to_dict(x) for x in s.body]
    return d


def _stmt_from_dict(d: dict[str, Any]) -> Stmt:
    return Stmt(d["name"], d["op"], tuple(d["args"]),
                tuple((k, decode_value(v)) for k, v in d.get("attrs", {}).items()), d.get("dtype"),
                tuple(_stmt_from_dict(x) for x in d.get("body", ())))


def operation_to_dict(o: Operation) -> dict[str, Any]:
    """The JSON-ready form of one kernel or extern kernel (an entry of ``to_dict()["ops"]``)."""
    if isinstance(o, Kernel):
        return {"type": "kernel", "name": o.name, "kind": o.kind,
                "group": [list(g) for g in o.group],
                "nests": [{"name": n.name, "ranges": list(n.ranges),
                           "reduction_ranges": list(n.reduction_ranges),
                           "iter_vars": list(n.iter_vars), "reduce_vars": list(n.reduce_vars),
                           "body": [_stmt_to_dict(s) for s in n.body]} for n in o.nests]}
    return {"type": "extern", "name": o.name, "op": o.op, "kernel": o.kernel,
            "args": [encode_value(a) for a in o.args],
            "kwargs": {k: encode_value(v) for k, v in o.kwargs},
            "outputs": list(o.outputs), "mutated": list(o.mutated)}


def operation_from_dict(d: dict[str, Any]) -> Operation:
    """The kernel or extern kernel of an :func:`operation_to_dict` form."""
    if d["type"] == "kernel":
        return Kernel(d["name"], tuple(
            LoopNest(n["name"], tuple(n["ranges"]), tuple(n["reduction_ranges"]),
                     tuple(_stmt_from_dict(s) for s in n["body"])) for n in d["nests"]),
            tuple(tuple(g) for g in d.get("group", ())))
    if d["type"] == "extern":
        return ExternKernel(d["name"], d["op"], tuple(decode_value(a) for a in d["args"]),
                            tuple((k, decode_value(v)) for k, v in d["kwargs"].items()),
                            tuple(d["outputs"]), d.get("kernel", ""), tuple(d.get("mutated", ())))
    raise ValueError(f"unknown loop IR operation type {d.get('type')!r}")


def _unique(items: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in items if i is not None))


def _iter_refs(v: Any) -> Iterator[BufferRef]:
    if isinstance(v, BufferRef):
        yield v
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _iter_refs(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _iter_refs(x)


# ---- text form (``str(program)``) ---------------------------------------------------------------
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
