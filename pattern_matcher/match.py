"""Matches and exhaustive structural matching.

A :class:`Match` records how a pattern maps onto a graph: the matched operation nodes, the output
nodes (one per pattern output), and the named bindings. :func:`find_all` lists every structural
match (a graph homomorphism satisfying all constraints) without the containment, cycle and overlap
rules that :class:`~torchvendor.pattern_matcher.PatternMatcher` adds for rewriting.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.pattern_matcher import P
    >>> g = DictGraph(); x, y = g.add_input("x"), g.add_input("y")
    >>> s = g.add_node("add", [x, y])
    >>> [m.captures for m in find_all(g, P("add", "a", "b"))]      # add is commutative
    [{'a': %x, 'b': %y}, {'a': %y, 'b': %x}]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Hashable, Mapping, Union

from ..ir.graph_view import GraphView

from .compiled import compile_pattern
from .context import MatchContext
from .keymap import COMMUTATIVE_OPS
from .multi import MultiPattern
from .pattern import Op, Pattern

__all__ = ["Match", "AnyPattern", "Searcher", "find_all", "search_at"]

AnyPattern = Union[Pattern, MultiPattern]


@dataclass(eq=False)
class Match:
    """One occurrence of a pattern in a graph.

    ``nodes`` are the matched operation nodes in topological order when positions are known;
    ``outputs`` the nodes matched by the pattern's outputs; ``bindings`` every named slot (named
    wildcards, named ops, and named variadics bound to tuples); ``captures`` the subset that are
    inputs of the match (wildcards and variadics).
    """

    view: GraphView
    pattern: AnyPattern
    anchor: Hashable
    outputs: tuple[Hashable, ...]
    nodes: tuple[Hashable, ...]
    bindings: Mapping[str, Any]
    capture_names: tuple[str, ...]
    rule: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def captures(self) -> dict[str, Any]:
        return {k: self.bindings[k] for k in self.capture_names if k in self.bindings}

    def __getitem__(self, name: str) -> Any:
        try:
            return self.bindings[name]
        except KeyError:
            raise KeyError(f"match of {self.pattern!r} has no binding {name!r}; bound: {sorted(self.bindings)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.bindings

    def attrs(self, name: str) -> Mapping[str, Any]:
        """Attributes of the node bound to ``name``."""
        return self.view.attrs(self[name])

    def meta(self, name: str) -> Mapping[str, Any]:
        """Metadata (dtype, shape) of the node bound to ``name``."""
        return self.view.meta(self[name])

    def key(self) -> tuple:
        """Identity of a match: outputs, named bindings and matched nodes."""
        return (self.outputs, frozenset(self.bindings.items()), frozenset(self.nodes))

    def __repr__(self) -> str:
        name = self.view.name
        binds = ", ".join(f"{k}={tuple(map(name, v)) if isinstance(v, tuple) else name(v)}"
                          for k, v in sorted(self.bindings.items()))
        return f"Match({', '.join(name(o) for o in self.outputs)}: {binds})"


class _Compiled:
    """Slot bookkeeping of a pattern, computed once."""

    __slots__ = ("pattern", "op_slots", "capture_names", "name_slots")

    def __init__(self, pattern: AnyPattern) -> None:
        kinds = pattern.slot_kinds()
        self.pattern = pattern
        self.op_slots = frozenset(s for s, k in kinds.items() if k == "op")
        self.capture_names = tuple(s for s, k in kinds.items() if k != "op")  # names only: unnamed have no slot
        self.name_slots = tuple(s for s in kinds if isinstance(s, str))


def compiled(pattern: AnyPattern) -> _Compiled:
    """The slot bookkeeping of ``pattern``, computed on first use and kept on the pattern."""
    comp = pattern.__dict__.get("_compiled")
    if comp is None:
        comp = pattern.__dict__["_compiled"] = _Compiled(pattern)
    return comp


class Searcher:
    """Searches one pattern's matches at anchor after anchor (built once per pass and rule).

    Each structural match that passes ``check`` goes to ``on_match``; the search at an anchor
    stops when it returns True and backtracks to the next match otherwise. Single-output
    patterns run as compiled code (:mod:`.compiled`) with the interpreter's search order; the
    rest run on the interpreter.
    """

    __slots__ = ("ctx", "pattern", "on_match", "check", "rule", "comp", "env", "anchor", "_multi", "_run", "_on_valid")

    def __init__(self, ctx: MatchContext, pattern: AnyPattern, on_match: Callable[[Match], bool],
                 check: Callable[[Match], bool] | None = None, rule: Any = None, *, use_compiled: bool = True,
                 on_valid: Callable[[Match], bool] | None = None) -> None:
        """``on_valid``: where compiled code sends a match it found valid (containment, no
        capture inside; see :meth:`~torchvendor.pattern_matcher.compiled.CompiledPattern.bind`)
        instead of ``on_match``, which then sees only the others."""
        self.ctx, self.pattern, self.on_match, self.check, self.rule = ctx, pattern, on_match, check, rule
        self.comp = compiled(pattern)
        self.env: dict = {}
        self.anchor: Hashable = None
        self._multi = isinstance(pattern, MultiPattern)
        code = None
        if use_compiled and not self._multi:
            code = compile_pattern(pattern, ctx.commutative)  # type: ignore[arg-type]
        self._on_valid = on_valid
        self._run = None
        if code is not None:
            self._run = code.bind(ctx, self._emit_compiled, self._emit_valid if on_valid is not None else None)

    def runner(self) -> Callable[[Hashable], bool | None]:
        """The fastest callable equivalent to :meth:`run` (compiled code may answer ``None`` for
        False, see :meth:`~torchvendor.pattern_matcher.compiled.CompiledPattern.bind`)."""
        return self._run if self._run is not None else self.run

    def run(self, anchor: Hashable) -> bool:
        """Search at ``anchor``; True when ``on_match`` accepted a match."""
        if self._run is not None:
            return self._run(anchor) is True
        self.anchor = anchor
        if self._multi:
            return self.pattern.match(self.ctx, anchor, self.env, self._emit)  # type: ignore[call-arg]
        return self.pattern._m(self.ctx, anchor, self.env, self._emit_single)  # type: ignore[union-attr]

    def _emit_single(self) -> bool:
        return self._emit((self.anchor,))

    def _compiled_match(self, anchor: Hashable, bindings: dict, op_nodes: tuple, in_order: bool) -> Match | None:
        """The Match a compiled pattern found, or None when the rule's ``check`` refuses it."""
        if not in_order:
            nodes = list(dict.fromkeys(op_nodes))
            nodes.sort(key=self.ctx.positions.__getitem__)
            op_nodes = tuple(nodes)
        m = Match(self.ctx.view, self.pattern, anchor, (anchor,), op_nodes, bindings,
                  self.comp.capture_names, self.rule)
        return m if self.check is None or self.check(m) else None

    def _emit_compiled(self, anchor: Hashable, bindings: dict, op_nodes: tuple, in_order: bool) -> bool:
        m = self._compiled_match(anchor, bindings, op_nodes, in_order)
        return m is not None and self.on_match(m)

    def _emit_valid(self, anchor: Hashable, bindings: dict, op_nodes: tuple, in_order: bool) -> bool:
        m = self._compiled_match(anchor, bindings, op_nodes, in_order)
        return m is not None and self._on_valid(m)  # type: ignore[misc]

    def _emit(self, roots: tuple[Hashable, ...]) -> bool:
        env, comp, pos = self.env, self.comp, self.ctx.positions
        op_slots = comp.op_slots
        nodes = list(dict.fromkeys(v for s, v in env.items() if s in op_slots or isinstance(s, Op)))
        if pos:
            nodes.sort(key=pos.__getitem__)
        bindings = {s: v for s, v in env.items() if isinstance(s, str)}
        m = Match(self.ctx.view, self.pattern, self.anchor, roots, tuple(nodes), bindings, comp.capture_names,
                  self.rule)
        if self.check is not None and not self.check(m):
            return False
        return self.on_match(m)


def search_at(ctx: MatchContext, pattern: AnyPattern, anchor: Hashable, on_match: Callable[[Match], bool],
              check: Callable[[Match], bool] | None = None, rule: Any = None) -> bool:
    """One-off :class:`Searcher` run at ``anchor``."""
    return Searcher(ctx, pattern, on_match, check, rule).run(anchor)


def find_all(view: GraphView, pattern: AnyPattern, *, commutative: Collection[str] = COMMUTATIVE_OPS,
             check: Callable[[Match], bool] | None = None) -> list[Match]:
    """Every distinct structural match of ``pattern`` in ``view``, anchors in topological order.

    No containment, cycle or overlap rule is applied (see :class:`PatternMatcher` for those).
    Commutative operators yield both operand orders when they bind differently.
    """
    ctx = MatchContext(view, commutative)
    nodes = ctx.index_positions()
    keys = pattern.anchor_keys()
    out: list[Match] = []
    seen: set[tuple] = set()

    def collect(m: Match) -> bool:
        k = m.key()
        if k not in seen:
            seen.add(k)
            out.append(m)
        return False  # keep enumerating

    searcher = Searcher(ctx, pattern, collect, check)
    for node in nodes:
        if keys is not None and ctx.op(node) not in keys:
            continue
        searcher.run(node)
    return out
