"""Replacement templates: a replacement graph built once and instantiated per match.

A template is a small DAG of :class:`T` operations whose inputs are other ``T`` nodes or
references to the pattern's captures by name (``"x"``; ``"*xs"`` splices a variadic capture).
Attribute values are constants, :class:`AttrOf` references to a matched node's attribute, or
callables that receive the :class:`~torchvendor.pattern_matcher.Match`. Instantiating a template
calls ``MutableGraphView.create`` once per ``T`` (no tracing); the template's outputs replace the
pattern's outputs in order, and the output nodes inherit the dtype, shape and stack trace of the
nodes they replace.

:func:`Fused` is the common case: one vendor op taking the captures as inputs.

Example::

    >>> from torchvendor.pattern_matcher import P
    >>> pat = P("mul", P("add", "a", "b"), "c")
    >>> Template(T("add", T("mul", "a", "c"), T("mul", "b", "c")))   # a*c + b*c
    Template(add(mul(a, c), mul(b, c)))
    >>> Fused("acme.fused_mul_add").bind(pat)
    Template(acme.fused_mul_add(a, b, c))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Sequence, Union

from .errors import PatternError, RewriteError

__all__ = ["T", "AttrOf", "Template", "Fused", "Replacement"]

_MISSING = object()


class AttrOf:
    """An attribute value copied from a matched node: ``AttrOf("r", "dim", default=-1)``."""

    def __init__(self, name: str, key: str, default: Any = _MISSING) -> None:
        self.name, self.key, self.default = name, key, default

    def get(self, match: Any) -> Any:
        attrs = match.attrs(self.name)
        if self.key in attrs:
            return attrs[self.key]
        if self.default is _MISSING:
            raise RewriteError(f"AttrOf({self.name!r}, {self.key!r}): node {match.view.name(match[self.name])} "
                               f"has no attribute {self.key!r}; it has {sorted(attrs)}")
        return self.default

    def __repr__(self) -> str:
        return f"AttrOf({self.name!r}, {self.key!r})"


class T:
    """One operation of a replacement template: ``T(op, *inputs, attrs=None, **more_attrs)``."""

    def __init__(self, op: str | Callable[..., Any], *inputs: "T | str", attrs: Mapping[str, Any] | None = None,
                 **more_attrs: Any) -> None:
        if not (isinstance(op, str) or callable(op)):
            raise PatternError(f"T({op!r}): the operator must be a key or a callable")
        for i in inputs:
            if not isinstance(i, (T, str)):
                raise PatternError(f"T({op!r}): input {i!r} must be T(...) or a capture name ('x', or '*xs')")
        self.op, self.inputs = op, inputs
        self.attrs = {**(attrs or {}), **more_attrs}

    def __repr__(self) -> str:
        label = self.op if isinstance(self.op, str) else getattr(self.op, "__name__", repr(self.op))
        short = label.split(".")
        label = short[1] if len(short) == 3 and short[0] == "aten" else label
        parts = [repr(i) if isinstance(i, T) else i for i in self.inputs]
        parts += [f"{k}={v!r}" for k, v in self.attrs.items()]
        return f"{label}({', '.join(parts)})"


@dataclass(frozen=True)
class _Step:
    op: Any
    refs: tuple[tuple[str, Any], ...]  # ("cap", name) | ("splice", name) | ("new", step index)
    attrs: tuple[tuple[str, Any], ...]


class Template:
    """A replacement graph: ``Template(out0, out1, ...)``, each output a ``T`` or a capture name."""

    def __init__(self, *outputs: T | str) -> None:
        if not outputs:
            raise PatternError("Template() needs at least one output")
        self.outputs_spec = outputs
        self.steps: list[_Step] = []
        index: dict[int, int] = {}

        def emit(t: T) -> int:
            if id(t) in index:
                return index[id(t)]
            refs = []
            for i in t.inputs:
                if isinstance(i, T):
                    refs.append(("new", emit(i)))
                elif i.startswith("*"):
                    refs.append(("splice", i[1:]))
                else:
                    refs.append(("cap", i))
            self.steps.append(_Step(t.op, tuple(refs), tuple(t.attrs.items())))
            index[id(t)] = len(self.steps) - 1
            return index[id(t)]

        self.outputs: tuple[tuple[str, Any], ...] = tuple(
            ("new", emit(o)) if isinstance(o, T) else ("cap", o) for o in outputs)
        for o in outputs:
            if not isinstance(o, (T, str)):
                raise PatternError(f"Template output {o!r} must be T(...) or a capture name")

    def names(self) -> set[str]:
        """Capture names the template refers to."""
        out = {r for s in self.steps for k, r in s.refs if k != "new"}
        out |= {r for k, r in self.outputs if k == "cap"}
        for s in self.steps:
            out |= {v.name for _, v in s.attrs if isinstance(v, AttrOf)}
        return out

    def bind(self, pattern: Any) -> "Template":
        """Check the template against ``pattern`` (names exist, output count agrees); return self."""
        kinds = pattern.slot_kinds()
        names = {k for k in kinds if isinstance(k, str)}
        missing = self.names() - names
        if missing:
            raise PatternError(f"template {self!r} refers to {sorted(missing)}, which {pattern!r} does not bind; "
                               f"it binds {sorted(names)}")
        n_out = len(getattr(pattern, "outputs", (pattern,)))
        if len(self.outputs) != n_out:
            raise PatternError(f"template {self!r} has {len(self.outputs)} outputs but {pattern!r} has {n_out}")
        for s in self.steps:
            for k, r in s.refs:
                if k == "splice" and kinds.get(r) != "variadic":
                    raise PatternError(f"template splices '*{r}' but {r!r} is not a Star(...) capture of {pattern!r}")
                if k == "cap" and kinds.get(r) == "variadic":
                    raise PatternError(f"template uses variadic capture {r!r} as one input; write '*{r}'")
        return self

    def instantiate(self, view: Any, match: Any, resolve: Callable[[Hashable], Hashable], before: Hashable,
                    output_meta: Sequence[Mapping[str, Any]], common_meta: Mapping[str, Any]) -> list[Hashable]:
        """Create the template's nodes before ``before``; return the nodes that replace each output."""
        made: list[Hashable] = []
        out_step = {ref: i for i, (k, ref) in enumerate(self.outputs) if k == "new"}
        for idx, step in enumerate(self.steps):
            ins: list[Hashable] = []
            for kind, ref in step.refs:
                if kind == "new":
                    ins.append(made[ref])
                elif kind == "cap":
                    ins.append(resolve(match[ref]))
                else:
                    ins.extend(resolve(x) for x in match[ref])
            attrs = {k: (v.get(match) if isinstance(v, AttrOf) else v(match) if callable(v) else v)
                     for k, v in step.attrs}
            meta = output_meta[out_step[idx]] if idx in out_step else common_meta
            made.append(view.create(step.op, ins, attrs, before=before, meta=meta))
        return [made[ref] if kind == "new" else resolve(match[ref]) for kind, ref in self.outputs]

    def __repr__(self) -> str:
        return f"Template({', '.join(map(repr, self.outputs_spec))})"


class Fused:
    """One fused operation replacing the whole match.

    ``inputs`` are capture names (default: every capture, in pattern order; variadics spliced).
    A multi-output pattern gets one projection per output: ``project = (key, attr_name)``, by
    default ``operator.getitem`` with the index as second positional argument (the FX adapter's
    ``arg1``); for DictGraph or ONNX pass your own.
    """

    def __init__(self, op: str | Callable[..., Any], inputs: Sequence[str] | None = None,
                 attrs: Mapping[str, Any] | None = None, *,
                 project: tuple[str, str] = ("operator.getitem", "arg1")) -> None:
        self.op, self.inputs, self.attrs, self.project = op, inputs, dict(attrs or {}), project

    def bind(self, pattern: Any) -> Template:
        kinds = pattern.slot_kinds()
        names = self.inputs
        if names is None:
            names = [k for k, v in kinds.items() if isinstance(k, str) and v != "op"]
        refs = [f"*{n}" if kinds.get(n) == "variadic" else n for n in names]
        fused = T(self.op, *refs, attrs=self.attrs)
        n_out = len(getattr(pattern, "outputs", (pattern,)))
        if n_out == 1:
            return Template(fused).bind(pattern)
        key, attr = self.project
        return Template(*[T(key, fused, **{attr: i}) for i in range(n_out)]).bind(pattern)


#: What a rule may use as its replacement.
Replacement = Union[Template, Fused, T, str, Callable[..., Any]]
