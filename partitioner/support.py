"""Support oracles: "can the backend run this node?", kept apart from the grouping algorithm.

An oracle is called as ``oracle(view, node)`` (or ``oracle(node)`` for a one-argument callable)
and answers with a *support result*:

- ``True`` (or any truthy non-string value): supported;
- ``False`` / ``None``: unsupported, with a generic reason;
- an :class:`Unsupported` (falsy) or a plain ``str``: unsupported, the string is the reason.

The combinators below build oracles that the partitioner can evaluate once per operator key
instead of once per node when they look only at the key (``op_only``), which is what makes a
100k-node graph with a handful of distinct operators cheap.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> g = DictGraph(); x = g.add_input("x")
    >>> s = g.add_node("aten.sin.default", [x]); r = g.add_node("aten.relu.default", [s])
    >>> oracle = chain(supported_ops({"aten.relu.default", "aten.add.Tensor"}),
    ...                dtypes("float32", "float16"))
    >>> str(oracle(g, s))
    'aten.sin.default is not in the supported operator set'
    >>> bool(oracle(g, r))
    True
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Collection, Hashable, Iterable, Union

from ..ir.graph_view import GraphView

__all__ = ["Unsupported", "SupportResult", "SupportRule", "as_oracle", "check", "supported_ops",
           "unsupported_ops", "predicate", "dtypes", "chain", "any_chain", "op_matches"]


@dataclass(frozen=True)
class Unsupported:
    """An unsupported answer that carries its reason; falsy, so ``if oracle(...)`` reads well.

    >>> bool(Unsupported("no fp64 kernels")), str(Unsupported("no fp64 kernels"))
    (False, 'no fp64 kernels')
    """

    reason: str = "not supported by the backend"

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.reason


SupportResult = Union[bool, Unsupported, str, None]

_DEFAULT_REASON = "not supported by the backend"


def check(result: Any) -> str | None:
    """Normalise a support result: ``None`` when supported, else the reason string.

    >>> check(True), check(False), check("needs static shapes"), check(Unsupported("x"))
    (None, 'not supported by the backend', 'needs static shapes', 'x')
    """
    if isinstance(result, Unsupported):
        return result.reason or _DEFAULT_REASON
    if isinstance(result, str):
        return result or _DEFAULT_REASON
    if result is None or result is False:
        return _DEFAULT_REASON
    return None if result else _DEFAULT_REASON


def op_matches(op: str, keys: Collection[str]) -> bool:
    """Whether operator key ``op`` is named by ``keys``: exactly, or by a dotted prefix.

    ``"aten.add"`` names every overload (``"aten.add.Tensor"``, ``"aten.add.Scalar"``), and
    ``"aten"`` the whole namespace, as Torch-TensorRT's ``torch_executed_ops`` does.

    >>> op_matches("aten.add.Tensor", {"aten.add"}), op_matches("aten.addmm.default", {"aten.add"})
    (True, False)
    """
    if op in keys:
        return True
    i = op.rfind(".")
    while i > 0:
        if op[:i] in keys:
            return True
        i = op.rfind(".", 0, i)
    return False


class SupportRule:
    """A composable oracle. ``op_only`` rules depend on the operator key alone and are
    evaluated once per distinct key by the partitioner (through :meth:`by_op`).

    Subclass and override :meth:`__call__` (and :meth:`by_op` for key-only rules), or use the
    factory functions of this module.
    """

    op_only: bool = False

    def __call__(self, view: GraphView, node: Hashable) -> SupportResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def by_op(self, op: str) -> SupportResult:
        """The answer for every node with operator key ``op`` (only for ``op_only`` rules)."""
        raise TypeError(f"{type(self).__name__} depends on more than the operator key")

    def evaluate(self, view: GraphView, node: Hashable, op: str) -> SupportResult:
        """``self(view, node)`` when the caller already knows ``op == view.op(node)``; rules
        combining key-only and node-level parts answer the key-only part from a per-key cache."""
        return self.by_op(op) if self.op_only else self(view, node)

    def __and__(self, other: Any) -> "SupportRule":
        return chain(self, other)

    def __or__(self, other: Any) -> "SupportRule":
        return any_chain(self, other)


class _OpSet(SupportRule):
    op_only = True

    def __init__(self, keys: Iterable[str], allow: bool, reason: str | None) -> None:
        self.keys, self.allow, self.reason = frozenset(keys), allow, reason

    def by_op(self, op: str) -> SupportResult:
        if op_matches(op, self.keys) == self.allow:
            return True
        if self.reason:
            return Unsupported(self.reason)
        return Unsupported(f"{op} is not in the supported operator set" if self.allow
                           else f"{op} is declared unsupported")

    def __call__(self, view: GraphView, node: Hashable) -> SupportResult:
        return self.by_op(view.op(node))

    def __repr__(self) -> str:
        return f"{'supported' if self.allow else 'unsupported'}_ops({sorted(self.keys)})"


def supported_ops(keys: Iterable[str], reason: str | None = None) -> SupportRule:
    """Supported iff the operator key is in ``keys`` (exactly or by dotted prefix, see
    :func:`op_matches`).

    >>> bool(supported_ops({"aten.relu"}).by_op("aten.relu.default"))
    True
    """
    return _OpSet(keys, True, reason)


def unsupported_ops(keys: Iterable[str], reason: str | None = None) -> SupportRule:
    """Unsupported iff the operator key is in ``keys``; everything else is supported.

    >>> str(unsupported_ops({"aten.sin"}).by_op("aten.sin.default"))
    'aten.sin.default is declared unsupported'
    """
    return _OpSet(keys, False, reason)


class _Predicate(SupportRule):
    def __init__(self, fn: Callable[..., Any], reason: str | None, op_only: bool) -> None:
        self.fn, self.reason, self.op_only = fn, reason, op_only

    def _wrap(self, result: Any) -> SupportResult:
        why = check(result)
        if why is None:
            return True
        return Unsupported(self.reason if self.reason and why == _DEFAULT_REASON else why)

    def by_op(self, op: str) -> SupportResult:
        if not self.op_only:
            return super().by_op(op)
        return self._wrap(self.fn(op))

    def __call__(self, view: GraphView, node: Hashable) -> SupportResult:
        return self._wrap(self.fn(view.op(node)) if self.op_only else self.fn(view, node))


def predicate(fn: Callable[..., Any], reason: str | None = None, *, op_only: bool = False) -> SupportRule:
    """Wrap ``fn(view, node)`` (or ``fn(op_key)`` with ``op_only=True``) as a rule; a bare
    ``False`` answer gets ``reason``.

    >>> rule = predicate(lambda op: not op.startswith("aten.sin"), "no trig", op_only=True)
    >>> str(rule.by_op("aten.sin.default"))
    'no trig'
    """
    return _Predicate(fn, reason, op_only)


def dtypes(*allowed: str) -> SupportRule:
    """Supported iff ``view.meta(node)["dtype"]`` is one of ``allowed`` (or unknown).

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> g = DictGraph(); n = g.add_node("relu", dtype="float64")
    >>> str(dtypes("float32")(g, n))
    'dtype float64 not supported (allowed: float32)'
    """
    allowed_set = frozenset(allowed)

    def fn(view: GraphView, node: Hashable) -> SupportResult:
        dt = view.meta(node).get("dtype")
        if dt is None or dt in allowed_set:
            return True
        return Unsupported(f"dtype {dt} not supported (allowed: {', '.join(sorted(allowed_set))})")

    return _Predicate(fn, None, False)


class _Chain(SupportRule):
    def __init__(self, rules: list[SupportRule], any_: bool) -> None:
        self.rules, self.any = rules, any_
        self.op_only = all(r.op_only for r in rules)
        self._cache: dict[tuple[int, str], str | None] = {}  # key-only sub-answers, per op key

    def _combine(self, answers: Iterable[Callable[[], SupportResult]]) -> SupportResult:
        reasons = []
        for get in answers:
            why = check(get())
            if self.any and why is None:
                return True
            if not self.any and why is not None:
                return Unsupported(why)
            if why is not None:
                reasons.append(why)
        return True if not self.any else Unsupported("; ".join(dict.fromkeys(reasons)) or _DEFAULT_REASON)

    def by_op(self, op: str) -> SupportResult:
        if not self.op_only:
            return super().by_op(op)
        return self._combine((lambda r=r: r.by_op(op)) for r in self.rules)

    def __call__(self, view: GraphView, node: Hashable) -> SupportResult:
        return self.evaluate(view, node, view.op(node))

    def evaluate(self, view: GraphView, node: Hashable, op: str) -> SupportResult:
        if self.op_only:
            return self.by_op(op)
        cache = self._cache
        reasons = []
        for r in self.rules:
            if r.op_only:
                key = (id(r), op)
                why = cache[key] if key in cache else cache.setdefault(key, check(r.by_op(op)))
            else:
                why = check(r.evaluate(view, node, op))
            if self.any and why is None:
                return True
            if not self.any and why is not None:
                return Unsupported(why)
            if why is not None:
                reasons.append(why)
        return True if not self.any else Unsupported("; ".join(dict.fromkeys(reasons)) or _DEFAULT_REASON)


def chain(*oracles: Any) -> SupportRule:
    """Supported iff every oracle says so; the first refusal's reason is kept (fx ``chain``).

    >>> str(chain(supported_ops({"a"}), unsupported_ops({"a"}, "banned")).by_op("a"))
    'banned'
    """
    return _Chain([as_oracle(o) for o in oracles], any_=False)


def any_chain(*oracles: Any) -> SupportRule:
    """Supported iff some oracle says so; otherwise every reason is listed (fx ``any_chain``).

    >>> bool(any_chain(supported_ops({"a"}), supported_ops({"b"})).by_op("b"))
    True
    """
    return _Chain([as_oracle(o) for o in oracles], any_=True)


class _Callable(SupportRule):
    def __init__(self, fn: Callable[..., Any], arity: int) -> None:
        self.fn, self.arity = fn, arity

    def __call__(self, view: GraphView, node: Hashable) -> SupportResult:
        return self.fn(node) if self.arity == 1 else self.fn(view, node)


def as_oracle(oracle: Any) -> SupportRule:
    """Turn what users pass as ``support`` into a :class:`SupportRule`.

    Accepted: a rule; a set/list/tuple/frozenset of operator keys (:func:`supported_ops`); a
    callable of one argument ``fn(node)`` or two ``fn(view, node)``.

    >>> as_oracle({"aten.relu"}).op_only
    True
    """
    if isinstance(oracle, SupportRule):
        return oracle
    if isinstance(oracle, (set, frozenset, list, tuple)):
        return supported_ops(oracle)
    if not callable(oracle):
        raise TypeError(f"support oracle must be a SupportRule, a collection of operator keys or a "
                        f"callable fn(view, node) / fn(node); got {type(oracle).__name__}")
    try:
        params = [p for p in inspect.signature(oracle).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        arity = 1 if len(params) == 1 else 2
    except (TypeError, ValueError):  # builtins without a signature
        arity = 2
    return _Callable(oracle, arity)
