"""The pattern language: operator patterns, wildcards, alternatives, optional ops and variadics.

A pattern is a small DAG of pattern nodes that is matched against a dataflow graph seen through a
:class:`~torchvendor.ir.graph_view.GraphView`:

- ``P(op, *args, ...)`` (:class:`Op`) matches one operation node whose operator key is ``op`` (a
  key, a collection of keys, or a predicate on the key) and whose inputs match ``args`` in order.
  A plain string argument is shorthand for a named wildcard: ``P("add", "a", "b")``.
- ``W(name=None, ...)`` (:class:`Wildcard`) matches any value. Wildcards with the same name must
  bind the same node; wildcards with different names *may* bind the same node (``add(a, b)``
  matches ``add(x, x)``).
- ``p | q`` (:class:`Alt`) tries ``p`` then ``q``; ``Opt(op, p)`` matches ``op(p)`` or just ``p``.
- ``Star(name)`` (:class:`Variadic`) inside an argument list matches any number of inputs.
- Constraints on any node: ``attrs={"dim": 1}`` (a value, or a predicate that receives the value
  or ``None`` when absent), ``dtype="float32"`` (or a set), ``shape=(None, 64)`` (ints, ``None``
  for any, or a predicate), ``where=lambda view, node: ...``.
- Commutative operators (``commutative=True``, or the key is in the matcher's commutative set)
  match their first two operands in both orders; backtracking stays local to that node.

Reusing the same pattern object twice means the same graph node (a DAG pattern); naming an
:class:`Op` (``name="r"``) captures the node it matches. Matching is a graph homomorphism: two
pattern nodes may map to one graph node when everything they say about it agrees.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.pattern_matcher import find_all
    >>> pat = P("mul", P("relu", P("add", "a", "b")), "c")
    >>> pat
    mul(relu(add(a, b)), c)
    >>> g = DictGraph(); x, y = g.add_input("x"), g.add_input("y")
    >>> m = g.add_node("mul", [y, g.add_node("relu", [g.add_node("add", [x, x])])])
    >>> [(k, v) for k, v in sorted(find_all(g, pat)[0].captures.items())]
    [('a', %x), ('b', %x), ('c', %y)]
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Collection, Hashable, Iterator, Mapping, Sequence, Union

from .context import MatchContext
from .errors import PatternError

__all__ = ["Pattern", "Op", "Wildcard", "Alt", "Variadic", "P", "W", "Opt", "Star", "OpSpec", "as_pattern"]

#: What ``P`` accepts as its operator: a key, a collection of keys, or a predicate on the key.
OpSpec = Union[str, Collection[str], Callable[[str], bool]]
Env = dict  # slot -> node (or tuple of nodes for a variadic); a slot is a name or an unnamed Op
#: A continuation: called once the pattern matched; True stops the search, False backtracks.
Then = Callable[[], bool]

_KIND_OP, _KIND_WILD, _KIND_STAR = "op", "wildcard", "variadic"


class _Constraints:
    """Attribute, dtype, shape and predicate constraints on one node."""

    __slots__ = ("attrs", "dtype", "shape", "where")

    def __init__(self, owner: str, attrs: Mapping[str, Any] | None, dtype: str | Collection[str] | None,
                 shape: Sequence[int | None] | Callable[[tuple], bool] | None,
                 where: Callable[[Any, Any], bool] | None) -> None:
        if attrs is not None and not isinstance(attrs, Mapping):
            raise PatternError(f"attrs of {owner} must be a mapping name -> value or predicate, got {attrs!r}")
        self.attrs = dict(attrs or {})
        self.dtype = frozenset([dtype] if isinstance(dtype, str) else dtype) if dtype is not None else None
        if shape is not None and not callable(shape):
            if not isinstance(shape, (tuple, list)) or not all(d is None or isinstance(d, int) for d in shape):
                raise PatternError(f"shape of {owner} must be a tuple of ints/None or a predicate, got {shape!r}")
            shape = tuple(shape)
        self.shape = shape
        if where is not None and not callable(where):
            raise PatternError(f"where= of {owner} must be callable(view, node) -> bool, got {where!r}")
        self.where = where

    def ok(self, ctx: MatchContext, node: Hashable) -> bool:
        if self.attrs:
            attrs = ctx.attrs(node)
            for key, want in self.attrs.items():
                have = attrs.get(key)
                if callable(want):
                    if not want(have):
                        return False
                elif key not in attrs or have != want:
                    return False
        if self.dtype is not None or self.shape is not None:
            meta = ctx.meta(node)
            if self.dtype is not None and meta.get("dtype") not in self.dtype:
                return False
            if self.shape is not None:
                shape = meta.get("shape")
                if shape is None:
                    return False
                if callable(self.shape):
                    if not self.shape(tuple(shape)):
                        return False
                elif len(shape) != len(self.shape) or any(w is not None and w != d for w, d in zip(self.shape, shape)):
                    return False
        return self.where is None or bool(self.where(ctx.view, node))

    def describe(self) -> str:
        parts = [f"{k}={v!r}" for k, v in self.attrs.items()]
        if self.dtype is not None:
            parts.append(f"dtype={sorted(self.dtype)}")
        if self.shape is not None:
            parts.append(f"shape={self.shape!r}")
        if self.where is not None:
            parts.append("where=...")
        return ", ".join(parts)


def _constraints(owner: str, attrs: Any, dtype: Any, shape: Any, where: Any) -> _Constraints | None:
    if attrs is None and dtype is None and shape is None and where is None:
        return None
    return _Constraints(owner, attrs, dtype, shape, where)


class Pattern:
    """Base class of pattern nodes. Combine with ``|`` for alternatives."""

    def __or__(self, other: "Pattern | str") -> "Alt":
        return Alt(self, other)

    def __ror__(self, other: "Pattern | str") -> "Alt":
        return Alt(other, self)

    def children(self) -> tuple["Pattern", ...]:
        return ()

    #: True only for unconstrained wildcards, which argument lists bind inline.
    plain = False

    def _m(self, ctx: MatchContext, node: Hashable, env: Env, k: Then) -> bool:  # pragma: no cover
        raise NotImplementedError

    def match(self, ctx: MatchContext, node: Hashable, env: Env, then: Then) -> bool:
        """Match ``node``; for each way it matches, call ``then()`` with ``env`` extended by the
        bindings. Stops and returns True as soon as ``then()`` returns True (the search is
        continuation-passing: backtracking happens by returning False). ``env`` is restored.
        """
        return self._m(ctx, node, env, then)

    def walk(self) -> Iterator["Pattern"]:
        """Every distinct pattern node reachable from here (shared nodes once), parents first."""
        seen: set[int] = set()
        stack: list[Pattern] = [self]
        while stack:
            p = stack.pop()
            if id(p) in seen:
                continue
            seen.add(id(p))
            yield p
            stack.extend(reversed(p.children()))

    def slot_kinds(self) -> dict[Hashable, str]:
        """Every binding slot (names and unnamed ops) mapped to ``"op"``, ``"wildcard"`` or ``"variadic"``."""
        kinds: dict[Hashable, str] = {}
        for p in self.walk():
            found = [p._slot_kind()]
            star = p.variadic() if isinstance(p, Op) else None
            if star is not None:
                found.append((star.name, _KIND_STAR))
            for slot, kind in found:
                if slot is not None and kinds.setdefault(slot, kind) != kind:
                    raise PatternError(f"name {slot!r} is used both for a {kinds[slot]} and a {kind} in {self!r}")
        return kinds

    def _slot_kind(self) -> tuple[Hashable | None, str]:
        return None, ""

    def anchor_keys(self) -> frozenset[str] | None:
        """Operator keys a node must have to match this pattern at the root; ``None``: any op."""
        return None

    def admits(self, key: str, in_keys: tuple[str, ...], same01: bool, commutative: frozenset[str]) -> bool:
        """A necessary condition for matching at a node with operator ``key`` whose inputs have
        the keys ``in_keys`` (``same01``: its first two inputs are one node). The matcher caches
        the answer per distinct (key, input keys) signature, so most rules anchored on a key are
        skipped at a node without a call."""
        return True


def as_pattern(value: "Pattern | str", where: str) -> Pattern:
    """A pattern from a pattern or a wildcard name; anything else is a :class:`PatternError`."""
    if isinstance(value, Pattern):
        return value
    if isinstance(value, str):
        return Wildcard(value)
    if isinstance(value, Variadic):
        raise PatternError(f"Star(...) may only appear directly in the argument list of P(...), not in {where}")
    raise PatternError(f"{where}: expected a pattern (P(...), W(...)) or a wildcard name, got {value!r}"
                       f" of type {type(value).__name__}; to constrain a non-graph operand use attrs=")


class Wildcard(Pattern):
    """Matches any value (a graph input, a constant or an operation's result).

    >>> W("x"), W(dtype="float32")
    (x, _)
    """

    def __init__(self, name: str | None = None, *, kind: str | Collection[str] | None = None,
                 attrs: Mapping[str, Any] | None = None, dtype: str | Collection[str] | None = None,
                 shape: Any = None, where: Callable[[Any, Any], bool] | None = None) -> None:
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise PatternError(f"wildcard name must be an identifier, got {name!r}")
        self.name = name
        allowed = {"input", "constant", "op"}
        self.kinds = frozenset([kind] if isinstance(kind, str) else kind) if kind is not None else None
        if self.kinds is not None and not self.kinds <= allowed:
            raise PatternError(f"W({name!r}, kind=...) must be among {sorted(allowed)}, got {sorted(self.kinds)}")
        self.cons = _constraints(f"W({name!r})", attrs, dtype, shape, where)
        #: No constraint: matching only binds the name (done inline by the argument matcher).
        self.plain = self.kinds is None and self.cons is None

    def _slot_kind(self) -> tuple[Hashable | None, str]:
        return self.name, _KIND_WILD

    def accepts(self, ctx: MatchContext, node: Hashable) -> bool:
        if self.kinds is not None and ctx.kind(node) not in self.kinds:
            return False
        return self.cons is None or self.cons.ok(ctx, node)

    def _m(self, ctx: MatchContext, node: Hashable, env: Env, k: Then) -> bool:
        if not self.plain and not self.accepts(ctx, node):
            return False
        name = self.name
        if name is None:
            return k()
        bound = env.get(name)
        if bound is not None:
            return bound is node and k()
        env[name] = node
        try:
            return k()
        finally:
            del env[name]

    def __repr__(self) -> str:
        return self.name or "_"


class Variadic:
    """Any number (at least ``min``) of consecutive inputs, each matching ``elem``; see :func:`Star`.

    Only valid directly inside the argument list of an :class:`Op`, at most once per list. A named
    variadic binds the tuple of nodes it matched.
    """

    def __init__(self, name: str | None = None, elem: Pattern | str | None = None, min: int = 0) -> None:
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise PatternError(f"Star name must be an identifier, got {name!r}")
        self.name = name
        self.elem = as_pattern(elem, f"Star({name!r}, elem=...)") if elem is not None else Wildcard()
        if not isinstance(min, int) or min < 0:
            raise PatternError(f"Star({name!r}, min=...) must be a non-negative int, got {min!r}")
        self.min = min
        self._copies: list[Pattern] = []

    def elements(self, count: int) -> tuple[Pattern, ...]:
        """``count`` element patterns; unnamed operations get a fresh copy per position."""
        if not any(isinstance(p, Op) and p.name is None for p in self.elem.walk()):
            return (self.elem,) * count
        while len(self._copies) < count:
            self._copies.append(_fresh_copy(self.elem, {}))
        return tuple(self._copies[:count])

    def __repr__(self) -> str:
        return f"*{self.name or '_'}"


def _fresh_copy(p: "Pattern", memo: dict[int, "Pattern"]) -> "Pattern":
    """A copy of ``p`` whose unnamed operations are new objects (new binding slots)."""
    if id(p) in memo:
        return memo[id(p)]
    q = copy.copy(p)
    q.__dict__.pop("_compiled", None)
    if isinstance(p, Op):
        q.args = tuple(a if isinstance(a, Variadic) else _fresh_copy(a, memo) for a in p.args)  # type: ignore[attr-defined]
    elif isinstance(p, Alt):
        q.branches = tuple(_fresh_copy(b, memo) for b in p.branches)  # type: ignore[attr-defined]
    memo[id(p)] = q
    return q


class Op(Pattern):
    """Matches one operation node; see the module docstring. ``P`` is an alias.

    >>> P("aten.cat.default", Star("xs"), attrs={"dim": 1})
    cat(*xs, dim=1)
    >>> P({"add", "sub"}, "a", "b", name="s")
    s=add|sub(a, b)
    """

    def __init__(self, op: OpSpec, *args: Pattern | str | Variadic, name: str | None = None,
                 commutative: bool | None = None, attrs: Mapping[str, Any] | None = None,
                 dtype: str | Collection[str] | None = None, shape: Any = None,
                 where: Callable[[Any, Any], bool] | None = None) -> None:
        if isinstance(op, str):
            self.keys: frozenset[str] | None = frozenset([op])
            self.pred: Callable[[str], bool] | None = None
        elif callable(op):
            self.keys, self.pred = None, op
        elif isinstance(op, Collection) and op and all(isinstance(k, str) for k in op):
            self.keys, self.pred = frozenset(op), None
        else:
            raise PatternError(f"bad operator in P({op!r}): expected an operator key such as 'aten.add.Tensor', "
                               f"a non-empty collection of keys, or a predicate on the key")
        self._label = op if isinstance(op, str) else ("|".join(sorted(self.keys)) if self.keys else
                                                       getattr(op, "__name__", "<pred>"))
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise PatternError(f"P({self._label!r}, name=...) must be an identifier, got {name!r}")
        self.name = name
        where_ = f"argument list of P({self._label!r})"
        stars = [i for i, a in enumerate(args) if isinstance(a, Variadic)]
        if len(stars) > 1:
            raise PatternError(f"{where_} has {len(stars)} Star(...) arguments; at most one is allowed")
        self.args: tuple[Pattern, ...] = tuple(a if isinstance(a, Variadic) else as_pattern(a, where_)
                                               for a in args)  # type: ignore[misc]
        self.star_at = stars[0] if stars else -1
        if commutative and self.star_at >= 0:
            raise PatternError(f"P({self._label!r}) cannot be both commutative and variadic")
        self.commutative = commutative
        self.cons = _constraints(f"P({self._label!r})", attrs, dtype, shape, where)
        self._quick = tuple((i, a.keys) for i, a in enumerate(self.args)
                            if isinstance(a, Op) and a.keys is not None and self.star_at < 0)
        self.slot_kinds()  # a name used for two kinds of node is an error here, not at match time

    # -- structure -------------------------------------------------------------------------------
    def children(self) -> tuple[Pattern, ...]:
        return tuple(a.elem if isinstance(a, Variadic) else a for a in self.args)

    def _slot_kind(self) -> tuple[Hashable | None, str]:
        return (self.name if self.name is not None else self), _KIND_OP

    def anchor_keys(self) -> frozenset[str] | None:
        return self.keys

    @property
    def label(self) -> str:
        """The operator as the pattern spells it (a key, keys joined by ``|``, or a predicate's name)."""
        return self._label

    def variadic(self) -> Variadic | None:
        return self.args[self.star_at] if self.star_at >= 0 else None  # type: ignore[return-value]

    # -- matching --------------------------------------------------------------------------------
    def accepts(self, ctx: MatchContext, node: Hashable) -> bool:
        """Whether ``node`` passes this pattern node's local tests (operator, kind, constraints)."""
        key = ctx._ops.get(node)
        if key is None:
            key = ctx.op(node)
        if self.keys is not None:
            if key not in self.keys:
                return False
        elif not self.pred(key):  # type: ignore[misc]
            return False
        kind = ctx._kinds.get(node)
        if (kind if kind is not None else ctx.kind(node)) != "op":
            return False
        return self.cons is None or self.cons.ok(ctx, node)

    def _quick_ok(self, ctx: MatchContext, ins: Sequence[Hashable]) -> bool:
        """Cheap necessary test: operator keys of the inputs matched by keyed ``P`` arguments."""
        ops = ctx._ops
        for i, keys in self._quick:
            x = ins[i]
            key = ops.get(x)
            if (key if key is not None else ctx.op(x)) not in keys:
                return False
        return True

    def admits(self, key: str, in_keys: tuple[str, ...], same01: bool, commutative: frozenset[str]) -> bool:
        if self.keys is not None:
            if key not in self.keys:
                return False
        elif not self.pred(key):  # type: ignore[misc]
            return False
        if self.star_at >= 0:
            return len(in_keys) >= len(self.args) - 1 + self.variadic().min  # type: ignore[union-attr]
        if len(in_keys) != len(self.args):
            return False
        if all(in_keys[i] in ks for i, ks in self._quick):
            return True
        swap = (key in commutative) if self.commutative is None else self.commutative
        if not swap or len(in_keys) < 2 or same01:
            return False
        flipped = (in_keys[1], in_keys[0], *in_keys[2:])
        return all(flipped[i] in ks for i, ks in self._quick)

    def _swappable(self, ctx: MatchContext, node: Hashable, ins: Sequence[Hashable]) -> bool:
        if self.commutative is None:
            return ctx._ops[node] in ctx.commutative and len(ins) >= 2 and ins[0] is not ins[1]
        return self.commutative and len(ins) >= 2 and ins[0] is not ins[1]

    def _m(self, ctx: MatchContext, node: Hashable, env: Env, k: Then) -> bool:
        slot = self if self.name is None else self.name
        bound = env.get(slot)
        if bound is not None:
            return bound is node and k()
        key = ctx._ops.get(node)  # accepts(), inlined: this is the hottest path
        if key is None:
            key = ctx.op(node)
        if self.keys is not None:
            if key not in self.keys:
                return False
        elif not self.pred(key):  # type: ignore[misc]
            return False
        kind = ctx._kinds.get(node)
        if (kind if kind is not None else ctx.kind(node)) != "op":
            return False
        if self.cons is not None and not self.cons.ok(ctx, node):
            return False
        ins = ctx._inputs.get(node)
        if ins is None:
            ins = ctx.inputs(node)
        args = self.args
        if self.star_at >= 0:
            env[slot] = node
            try:
                return self._m_variadic(ctx, ins, env, k)
            finally:
                del env[slot]
        if len(ins) != len(args):
            return False
        straight = self._quick_ok(ctx, ins)
        swapped = None
        if self._swappable(ctx, node, ins):
            swapped = (ins[1], ins[0], *ins[2:])
            if not self._quick_ok(ctx, swapped):
                swapped = None
        if not straight and swapped is None:
            return False
        env[slot] = node
        try:
            if straight and _m_seq(ctx, args, ins, 0, env, k):
                return True
            if swapped is None:
                return False
            if self.commutative is None:  # add(x, y, alpha=2) is not symmetric; asked only on success
                return _m_seq(ctx, args, swapped, 0, env,
                              lambda: ctx.attrs(node).get("alpha", 1) in (1, None) and k())
            return _m_seq(ctx, args, swapped, 0, env, k)
        finally:
            del env[slot]

    def _m_variadic(self, ctx: MatchContext, ins: Sequence[Hashable], env: Env, k: Then) -> bool:
        star: Variadic = self.args[self.star_at]  # type: ignore[assignment]
        count = len(ins) - (len(self.args) - 1)
        if count < star.min:
            return False
        s = self.star_at
        pats = self.args[:s] + star.elements(count) + self.args[s + 1:]
        if star.name is None:
            return _m_seq(ctx, pats, ins, 0, env, k)
        group = tuple(ins[s:s + count])
        bound = env.get(star.name)
        if bound is not None:
            return bound == group and _m_seq(ctx, pats, ins, 0, env, k)
        env[star.name] = group
        try:
            return _m_seq(ctx, pats, ins, 0, env, k)
        finally:
            del env[star.name]

    def __repr__(self) -> str:
        short = self._label.split(".")
        label = short[1] if len(short) == 3 and short[0] in ("aten", "prims") else self._label
        inner = [repr(a) for a in self.args]
        if self.cons is not None:
            inner.append(self.cons.describe())
        text = f"{label}({', '.join(inner)})"
        return f"{self.name}={text}" if self.name else text


def _m_seq(ctx: MatchContext, pats: Sequence[Pattern], ins: Sequence[Hashable], i: int, env: Env, k: Then) -> bool:
    """Match ``pats[i:]`` against ``ins[i:]`` position by position, then call ``k``.

    Plain wildcards (no constraint) are bound inline: they are most leaves.
    """
    n = len(pats)
    bound_here: list[str] = []
    try:
        while i < n:
            p = pats[i]
            if not p.plain:
                break
            name = p.name  # type: ignore[attr-defined]
            if name is not None:
                have = env.get(name)
                if have is None:
                    env[name] = ins[i]
                    bound_here.append(name)
                elif have is not ins[i]:
                    return False
            i += 1
        if i == n:
            return k()
        if i == n - 1:
            return pats[i]._m(ctx, ins[i], env, k)
        j = i + 1
        return pats[i]._m(ctx, ins[i], env, lambda: _m_seq(ctx, pats, ins, j, env, k))
    finally:
        for name in bound_here:
            del env[name]


class Alt(Pattern):
    """Alternatives: matches whatever any branch matches, branches tried in order.

    >>> P("relu", "x") | P("aten.gelu.default", "x")
    (relu(x) | gelu(x))
    """

    def __init__(self, *branches: Pattern | str) -> None:
        if len(branches) < 2:
            raise PatternError(f"Alt(...) needs at least two branches, got {len(branches)}")
        flat: list[Pattern] = []
        for b in branches:
            p = as_pattern(b, "Alt(...)")
            flat.extend(p.branches if isinstance(p, Alt) else [p])
        self.branches = tuple(flat)
        self.slot_kinds()

    def children(self) -> tuple[Pattern, ...]:
        return self.branches

    def anchor_keys(self) -> frozenset[str] | None:
        keys: set[str] = set()
        for b in self.branches:
            k = b.anchor_keys()
            if k is None:
                return None
            keys |= k
        return frozenset(keys)

    def admits(self, key: str, in_keys: tuple[str, ...], same01: bool, commutative: frozenset[str]) -> bool:
        return any(b.admits(key, in_keys, same01, commutative) for b in self.branches)

    def _m(self, ctx: MatchContext, node: Hashable, env: Env, k: Then) -> bool:
        for b in self.branches:
            if b._m(ctx, node, env, k):
                return True
        return False

    def __repr__(self) -> str:
        return "(" + " | ".join(map(repr, self.branches)) + ")"


#: Short alias: ``P("aten.relu.default", W("x"))``.
P = Op
#: Short alias for :class:`Wildcard`.
W = Wildcard


def Opt(op: OpSpec, inner: Pattern | str, **kwargs: Any) -> Alt:
    """An optional single-input operation: matches ``op(inner)`` or ``inner`` alone.

    >>> Opt("aten.clone.default", P("relu", "x"))
    (clone(relu(x)) | relu(x))
    """
    return Alt(Op(op, inner, **kwargs), inner)


def Star(name: str | None = None, elem: Pattern | str | None = None, *, min: int = 0) -> Variadic:
    """A variadic argument: ``P("aten.cat.default", Star("xs"))`` matches ``cat([...])`` with any count.

    >>> Star("xs", elem=P("relu", W()))
    *xs
    """
    return Variadic(name, elem, min)
