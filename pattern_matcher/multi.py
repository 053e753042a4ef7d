"""Multi-output patterns, matched by anchored expansion.

``Multi(p0, p1, ...)`` matches several output nodes that share captures, e.g. the Q, K and V
projections of one input, or ``(relu(add(x, y)), mul(x, z))``. The first output is the anchor:
it is matched at a candidate node like a single pattern. Every later output must reach, through
operator arguments, a capture bound by the outputs before it; its candidates are found by walking
*users* up from that bound node along the operators on the path (``x`` → users that are ``mul``),
so no cross product of candidate lists is ever formed.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.pattern_matcher import P, find_all
    >>> pat = Multi(P("relu", P("add", "x", "y")), P("mul", "x", "z"))
    >>> g = DictGraph(); a, b = g.add_input("a"), g.add_input("b")
    >>> r = g.add_node("relu", [g.add_node("add", [a, b])]); m = g.add_node("mul", [a, b])
    >>> [(m.outputs, m["x"]) for m in find_all(g, pat)]     # add and mul commute: x is a or b
    [((%relu, %mul), %a), ((%relu, %mul), %b)]
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Hashable, Iterator

from .context import MatchContext
from .errors import PatternError
from .pattern import Alt, Env, Op, Pattern, Variadic, as_pattern

__all__ = ["Multi", "MultiPattern"]


def _definite(p: Pattern) -> Iterator[Pattern]:
    """Pattern nodes bound by every match of ``p``: reachable without crossing alternatives or variadics."""
    seen: set[int] = set()
    stack = [p]
    while stack:
        q = stack.pop()
        if id(q) in seen:
            continue
        seen.add(id(q))
        yield q
        if isinstance(q, Op):
            stack.extend(a for a in q.args if not isinstance(a, Variadic))


def _slot(q: Pattern) -> Hashable | None:
    return q._slot_kind()[0]


class MultiPattern:
    """Several output patterns that share captures; see the module docstring. ``Multi`` is an alias."""

    def __init__(self, *outputs: Pattern | str) -> None:
        if len(outputs) < 2:
            raise PatternError(f"Multi(...) needs at least two outputs, got {len(outputs)}; use the pattern itself")
        self.outputs = tuple(as_pattern(o, "Multi(...)") for o in outputs)
        self.climbs: list[tuple[Hashable, tuple[Op, ...]]] = []
        bound = {s for q in _definite(self.outputs[0]) if (s := _slot(q)) is not None}
        for k, out in enumerate(self.outputs[1:], start=1):
            if not isinstance(out, Op):
                raise PatternError(f"output {k} of Multi(...) must be an operator pattern P(...), got {out!r}")
            if _slot(out) in bound:
                raise PatternError(f"output {k} of Multi(...) is the same node as an earlier output: {out!r}")
            self.climbs.append(self._climb_path(k, out, bound))
            bound |= {s for q in _definite(out) if (s := _slot(q)) is not None}
        self.slot_kinds()  # validates that names are used consistently across outputs

    @staticmethod
    def _climb_path(k: int, root: Op, bound: set[Hashable]) -> tuple[Hashable, tuple[Op, ...]]:
        """The shallowest already-bound slot under ``root`` and the operators above it, bottom-up."""
        queue: deque[tuple[Pattern, tuple[Op, ...]]] = deque([(root, ())])
        seen: set[int] = set()
        while queue:
            q, path = queue.popleft()
            if id(q) in seen:
                continue
            seen.add(id(q))
            if path and _slot(q) in bound:
                return _slot(q), tuple(reversed(path))  # type: ignore[return-value]
            if isinstance(q, Op):
                queue.extend((a, path + (q,)) for a in q.args if not isinstance(a, (Variadic, Alt)))
        raise PatternError(f"output {k} of Multi(...), {root!r}, shares no capture with the outputs before it "
                           f"(through operator arguments, outside alternatives and Star); name a shared input, "
                           f"e.g. W('x'), in both")

    def slot_kinds(self) -> dict[Hashable, str]:
        kinds: dict[Hashable, str] = {}
        for out in self.outputs:
            for slot, kind in out.slot_kinds().items():
                if kinds.setdefault(slot, kind) != kind:
                    raise PatternError(f"name {slot!r} is used both for a {kinds[slot]} and a {kind} in {self!r}")
        return kinds

    def anchor_keys(self) -> frozenset[str] | None:
        return self.outputs[0].anchor_keys()

    def admits(self, key: str, in_keys: tuple[str, ...], same01: bool, commutative: frozenset[str]) -> bool:
        return self.outputs[0].admits(key, in_keys, same01, commutative)

    def match(self, ctx: MatchContext, anchor: Hashable, env: Env, then: Callable[[tuple[Hashable, ...]], bool]) -> bool:
        """Match with the first output at ``anchor``; call ``then(outputs)`` per match (see
        :meth:`Pattern.match`)."""
        return self.outputs[0]._m(ctx, anchor, env, lambda: self._expand(ctx, 1, env, (anchor,), then))

    def _expand(self, ctx: MatchContext, k: int, env: Env, roots: tuple[Hashable, ...],
                then: Callable[[tuple[Hashable, ...]], bool]) -> bool:
        if k == len(self.outputs):
            return then(roots)
        slot, path = self.climbs[k - 1]
        frontier = [env[slot]]
        for op in path:
            seen: dict[Hashable, None] = {}
            for node in frontier:
                for user in ctx.users(node):
                    if user not in seen and op.accepts(ctx, user):
                        seen[user] = None
            frontier = list(seen)
            if not frontier:
                return False
        out = self.outputs[k]
        for cand in frontier:
            if cand in roots:
                continue
            more = roots + (cand,)
            if out._m(ctx, cand, env, lambda: self._expand(ctx, k + 1, env, more, then)):
                return True
        return False

    def __repr__(self) -> str:
        return "Multi(" + ", ".join(map(repr, self.outputs)) + ")"


#: Short alias for :class:`MultiPattern`.
Multi = MultiPattern
