"""Operator keys across IRs, so that one pattern can be written once and used on every IR.

Each IR names operators its own way: ``aten.add.Tensor`` (ATen FX graphs), ``operator.add`` /
``torch.relu`` (torch-level FX graphs), ``Add`` (ONNX), ``add`` (loop IR kernel bodies). Write a
pattern with *generic* keys (the loop-IR spelling: ``add``, ``mul``, ``relu``, ``exp``...) and
translate it with :func:`map_keys`, using one of the tables below or your own mapping.

Example::

    >>> from torchvendor.pattern_matcher import P
    >>> generic = P("mul", P("relu", P("add", "a", "b")), "c")
    >>> map_keys(generic, "onnx")
    Mul(Relu(Add(a, b)), c)
    >>> map_keys(generic, "aten")
    mul(relu(add(a, b)), c)
"""
from __future__ import annotations

from typing import Callable, Mapping

from .errors import PatternError

__all__ = ["KEYMAPS", "COMMUTATIVE_OPS", "map_keys"]

# generic name -> (aten keys, torch-level keys, onnx op_type)
_TABLE: dict[str, tuple[tuple[str, ...], tuple[str, ...], str | None]] = {
    "add": (("aten.add.Tensor",), ("operator.add", "torch.add", "operator.iadd"), "Add"),
    "sub": (("aten.sub.Tensor",), ("operator.sub", "torch.sub"), "Sub"),
    "mul": (("aten.mul.Tensor",), ("operator.mul", "torch.mul"), "Mul"),
    "truediv": (("aten.div.Tensor",), ("operator.truediv", "torch.div"), "Div"),
    "neg": (("aten.neg.default",), ("operator.neg", "torch.neg"), "Neg"),
    "relu": (("aten.relu.default",), ("torch.relu", "torch.nn.functional.relu"), "Relu"),
    "exp": (("aten.exp.default",), ("torch.exp",), "Exp"),
    "log": (("aten.log.default",), ("torch.log",), "Log"),
    "sqrt": (("aten.sqrt.default",), ("torch.sqrt",), "Sqrt"),
    "rsqrt": (("aten.rsqrt.default",), ("torch.rsqrt",), None),  # ONNX has no Rsqrt
    "tanh": (("aten.tanh.default",), ("torch.tanh",), "Tanh"),
    "sigmoid": (("aten.sigmoid.default",), ("torch.sigmoid",), "Sigmoid"),
    "erf": (("aten.erf.default",), ("torch.erf", "torch.special.erf"), "Erf"),
    "sin": (("aten.sin.default",), ("torch.sin",), "Sin"),
    "cos": (("aten.cos.default",), ("torch.cos",), "Cos"),
    "abs": (("aten.abs.default",), ("torch.abs",), "Abs"),
    "maximum": (("aten.maximum.default",), ("torch.maximum",), "Max"),
    "minimum": (("aten.minimum.default",), ("torch.minimum",), "Min"),
    "pow": (("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor"), ("operator.pow", "torch.pow"), "Pow"),
    "matmul": (("aten.mm.default", "aten.bmm.default", "aten.matmul.default"), ("operator.matmul", "torch.matmul"),
               "MatMul"),
    "softmax": (("aten._softmax.default",), ("torch.softmax", "torch.nn.functional.softmax"), "Softmax"),
    "gelu": (("aten.gelu.default",), ("torch.nn.functional.gelu",), "Gelu"),
    "where": (("aten.where.self",), ("torch.where",), "Where"),
}

#: Named tables: ``"aten"``, ``"torch"``, ``"onnx"``, ``"loop"`` (generic names are loop-IR keys).
KEYMAPS: dict[str, dict[str, tuple[str, ...]]] = {
    "aten": {g: a for g, (a, _, _) in _TABLE.items()},
    "torch": {g: t for g, (_, t, _) in _TABLE.items()},
    "onnx": {g: (o,) for g, (_, _, o) in _TABLE.items() if o is not None},
    "loop": {g: (g,) for g in _TABLE},
}

#: Operator keys whose first two operands commute, in every IR's spelling (``add`` with an
#: ``alpha`` other than 1 is never swapped).
COMMUTATIVE_OPS: frozenset[str] = frozenset(
    k for g in ("add", "mul", "maximum", "minimum") for table in KEYMAPS.values() for k in table[g]
) | {"torch.add", "torch.mul", "aten.add.Scalar", "aten.mul.Scalar", "and", "or", "xor",
     "operator.and_", "operator.or_", "operator.xor", "aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor",
     "aten.eq.Tensor", "aten.ne.Tensor", "And", "Or", "Xor", "Equal", "eq", "ne", "Sum"}


def map_keys(pattern, table: str | Mapping[str, str | tuple[str, ...]] | Callable[[str], object], *,
             strict: bool = True):
    """A copy of ``pattern`` (single- or multi-output) with operator keys translated by ``table``.

    ``table`` is a name from :data:`KEYMAPS`, a mapping ``key -> key or keys``, or a function.
    With ``strict`` a key missing from a mapping is a :class:`PatternError`; otherwise it is kept.
    Predicate operators and constraints are kept as they are. Shared pattern nodes stay shared.
    """
    from .multi import MultiPattern
    from .pattern import Alt, Op, Pattern, Variadic, Wildcard

    if isinstance(table, str):
        if table not in KEYMAPS:
            raise PatternError(f"unknown key table {table!r}; known: {sorted(KEYMAPS)}")
        table = KEYMAPS[table]

    def tr(key: str) -> object:
        if callable(table):
            return table(key)
        if key in table:
            return table[key]
        if strict:
            raise PatternError(f"operator key {key!r} has no translation in the key table "
                               f"(known: {sorted(table)[:20]}...); pass strict=False to keep it")
        return key

    memo: dict[int, Pattern] = {}

    def copy(p: Pattern) -> Pattern:
        if id(p) in memo:
            return memo[id(p)]
        if isinstance(p, Op):
            if p.keys is not None:
                new_keys: set[str] = set()
                for k in p.keys:
                    t = tr(k)
                    new_keys |= {t} if isinstance(t, str) else set(t)  # type: ignore[arg-type]
                op: object = next(iter(new_keys)) if len(new_keys) == 1 else frozenset(new_keys)
            else:
                op = p.pred
            args = [Variadic(a.name, copy(a.elem), a.min) if isinstance(a, Variadic) else copy(a) for a in p.args]
            q: Pattern = Op(op, *args, name=p.name, commutative=p.commutative)  # type: ignore[arg-type]
            q.cons = p.cons  # type: ignore[attr-defined]
        elif isinstance(p, Alt):
            q = Alt(*[copy(b) for b in p.branches])
        elif isinstance(p, Wildcard):
            q = p
        else:
            raise PatternError(f"cannot translate pattern node {p!r} of type {type(p).__name__}")
        memo[id(p)] = q
        return q

    if isinstance(pattern, MultiPattern):
        return MultiPattern(*[copy(o) for o in pattern.outputs])
    return copy(pattern)
