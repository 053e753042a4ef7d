"""The one-pass matcher: many rules, indexed by anchor operator, overlaps resolved by priority.

:class:`PatternMatcher` visits every node once, in topological order. Rules are indexed by the
operator keys their pattern can be anchored on, so a node only tries the rules that could match
it. At each (rule, node) pair the first structural match that passes the rule's check and the
validity rules (containment, inputs outside the match, no cycle when fused; see
:mod:`.validity`) becomes a candidate. Candidates are then accepted greedily by priority (higher
first), then anchor position, then rule order, skipping any that shares a node with one already
accepted. Valid matches can be replaced together without creating a cycle (see :mod:`.validity`). Total work is O(V + E + work at candidate anchors): no per-match whole-graph walk.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.pattern_matcher import P, Fused, Rule
    >>> g = DictGraph(); a, b, c = g.add_input("a"), g.add_input("b"), g.add_input("c")
    >>> m = g.add_node("mul", [c, g.add_node("relu", [g.add_node("add", [a, b])])])
    >>> _ = g.add_output([m])
    >>> pm = PatternMatcher([Rule(P("mul", P("relu", P("add", "a", "b")), "c"), Fused("acme.fused"))])
    >>> pm.rewrite(g).replaced
    1
    >>> [g.op(n) for n in g.nodes()]
    ['placeholder', 'placeholder', 'placeholder', 'acme.fused', 'output']
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Collection, Hashable, Iterable

from ..ir.graph_view import GraphView, MutableGraphView

from .compiled import compile_pattern
from .context import MatchContext, paused_gc
from .errors import PatternError
from .keymap import COMMUTATIVE_OPS
from .match import Match, Searcher
from .pattern import Pattern
from .rewrite import RewriteResult, apply_matches
from .rule import Rule
from .validity import invalid_reason

__all__ = ["PatternMatcher", "MatchReport"]

#: up to this many rules at a key are run directly; above, the input-key signature filters them
_DIRECT_RULES = 2


@dataclass
class MatchReport:
    """What one matching pass found: accepted matches and why other candidates were dropped."""

    matches: list[Match]
    candidates: int = 0
    rejected: Counter = field(default_factory=Counter)  # reason kind -> count
    examples: list[str] = field(default_factory=list)   # a few readable rejection messages

    def _reject(self, rule: Rule, node_name: str, reason: str) -> None:
        kind = reason.split(" ")[0].rstrip(":")
        self.rejected["cycle" if kind == "fusing" else kind] += 1
        if len(self.examples) < 20:
            self.examples.append(f"{rule.name} at {node_name}: {reason}")


class PatternMatcher:
    """Match (and optionally rewrite) many rules in one pass over any GraphView.

    ``rules`` are :class:`Rule` objects or ``(pattern, replacement)`` pairs. ``commutative`` is the
    set of operator keys whose first two operands may be swapped (default: add/mul/max/min and
    friends in every IR's spelling, see :data:`~torchvendor.pattern_matcher.keymap.COMMUTATIVE_OPS`).
    Matchers compose with ``+`` (rules of the left one come first).
    """

    def __init__(self, rules: Iterable[Rule | tuple[Any, Any]], *,
                 commutative: Collection[str] = COMMUTATIVE_OPS) -> None:
        self.rules: list[Rule] = []
        for r in rules:
            if isinstance(r, Rule):
                self.rules.append(r)
            elif isinstance(r, tuple) and 1 <= len(r) <= 2:
                self.rules.append(Rule(*r))
            else:
                raise PatternError(f"PatternMatcher rules must be Rule(...) or (pattern, replacement), got {r!r}")
        self.commutative = frozenset(commutative)
        self._by_key: dict[str, list[int]] = {}
        self._generic: list[int] = []
        for i, rule in enumerate(self.rules):
            keys = rule.anchor_keys()
            if keys is None:
                self._generic.append(i)
            else:
                for k in keys:
                    self._by_key.setdefault(k, []).append(i)
        self._dispatch: dict[str, tuple[int, ...]] = {}
        # Ahead of time: the first pass finds the code ready. Rules whose code is shared (they
        # differ only in constants) form a group; None: no rule shares code with another.
        codes = [compile_pattern(r.pattern, self.commutative) if isinstance(r.pattern, Pattern) else None
                 for r in self.rules]
        count = Counter(id(c.code) for c in codes if c is not None)
        shared = [id(c.code) if c is not None and count[id(c.code)] > 1 else None for c in codes]
        self._groups: list[int | None] | None = shared if any(g is not None for g in shared) else None

    def __add__(self, other: "PatternMatcher") -> "PatternMatcher":
        return PatternMatcher(self.rules + other.rules, commutative=self.commutative | other.commutative)

    def __len__(self) -> int:
        return len(self.rules)

    def _rules_for(self, key: str) -> tuple[int, ...]:
        """Indices of the rules that may anchor at a node with operator ``key``."""
        try:
            return self._dispatch[key]
        except KeyError:
            found = self._by_key.get(key, [])
            ids = tuple(sorted(set(found) | set(self._generic))) if self._generic else tuple(found)
            self._dispatch[key] = ids
            return ids

    # -- matching ----------------------------------------------------------------------------------
    def context(self, view: GraphView) -> MatchContext:
        """A fresh :class:`MatchContext` for one pass over ``view`` (positions numbered on demand)."""
        return MatchContext(view, self.commutative)

    def _anchor_nodes(self, ctx: MatchContext) -> tuple[Iterable[Hashable], bool]:
        """The nodes a pass visits, and whether each has an anchor key of some rule: only those
        when the view indexes nodes by operator (FX does, by target), else every node in
        topological order."""
        if not self._generic and self._by_key:
            found = ctx.anchors(self._by_key.keys())
            if found is not None:
                return found, True
        elif not self._by_key and not self._generic:
            return (), True
        return ctx.index_positions(), False

    def candidates(self, view: GraphView, ctx: MatchContext | None = None,
                   report: MatchReport | None = None) -> list[Match]:
        """For each (rule, anchor node), the first valid match, in anchor then rule order."""
        ctx = ctx or self.context(view)
        out: list[Match] = []
        runs = self._runs(ctx, self._acceptor(ctx, out, report))
        ops, rules, commutative = ctx._ops, self.rules, self.commutative
        dispatch = dict(self._dispatch)  # key -> rule ids, extended locally (a dict hit per node)
        admitted: dict[tuple, tuple[int, ...]] = {}  # (key, input keys, same01) -> rules worth trying
        groups = self._groups
        anchors, indexed = self._anchor_nodes(ctx)
        if indexed and len(self._by_key) == 1 and groups is None:
            (key, ids), = self._by_key.items()  # every anchor has this key: the rules are known
            if len(ids) <= _DIRECT_RULES:
                fns = [runs[i] for i in ids]
                for node in anchors:
                    for fn in fns:
                        fn(node)
                return out
        for node in anchors:
            key = ops[node]
            ids = dispatch.get(key)
            if ids is None:
                ids = dispatch[key] = self._rules_for(key)
            if not ids:
                continue
            if len(ids) > _DIRECT_RULES:  # several rules: skip those whose root cannot fit the inputs
                ins = ctx.inputs(node)
                sig = (key, tuple([ops[i] for i in ins]), len(ins) >= 2 and ins[0] is ins[1])
                ids = admitted.get(sig)  # type: ignore[assignment]
                if ids is None:
                    ids = admitted[sig] = tuple(i for i in dispatch[key]
                                                if rules[i].pattern.admits(key, sig[1], sig[2], commutative))
            if groups is None:
                for i in ids:
                    runs[i](node)
                continue
            failed: set[Any] = set()  # code shared by rules that failed here before any constant
            for i in ids:
                grp = groups[i]
                if grp is None:
                    runs[i](node)
                elif grp not in failed and runs[i](node) is None:
                    failed.add(grp)
        return out

    def _acceptor(self, ctx: MatchContext, out: list[Match], report: MatchReport | None) -> Any:
        """(accept, accept_valid): the first tests a match against the validity rules and keeps it
        if valid; the second keeps a match the compiled code already found valid. Both return
        True to stop at this (rule, anchor) and False to backtrack to the next match."""
        name = ctx.view.name

        def accept(m: Match) -> bool:
            if report is not None:
                report.candidates += 1
            reason = invalid_reason(ctx, m)
            if reason is None:
                out.append(m)
                return True
            if report is not None:
                report._reject(m.rule, name(m.anchor), reason)
            return False

        def accept_valid(m: Match) -> bool:
            if report is not None:
                report.candidates += 1
            out.append(m)
            return True

        return accept, accept_valid

    def _runs(self, ctx: MatchContext, acceptors: Any) -> Any:
        """``run(anchor)`` per rule index, built on first use (a :class:`Searcher` each)."""
        rules = self.rules
        accept, accept_valid = acceptors

        class Lazy(dict):
            def __missing__(self, i: int) -> Any:
                rule = rules[i]
                run = self[i] = Searcher(ctx, rule.pattern, accept, rule.check, rule, on_valid=accept_valid).runner()
                return run

        return Lazy()

    def match(self, view: GraphView, ctx: MatchContext | None = None) -> MatchReport:
        """Non-overlapping valid matches of all rules, found in one pass; see the module docstring."""
        with paused_gc():
            return self._match(view, ctx)

    def _match(self, view: GraphView, ctx: MatchContext | None) -> MatchReport:
        ctx = ctx or self.context(view)
        report = MatchReport([])
        cands = self.candidates(view, ctx, report)  # in (anchor position, rule order) already
        by_priority = len({r.priority for r in self.rules}) > 1
        if by_priority:  # stable: ties keep anchor then rule order
            cands.sort(key=lambda m: -m.rule.priority)
        claimed: set[Hashable] = set()
        accepted: list[Match] = []
        for m in cands:
            if claimed.isdisjoint(m.nodes):
                claimed.update(m.nodes)
                accepted.append(m)
            else:
                report._reject(m.rule, view.name(m.anchor), "overlap with a match of higher precedence")
        if by_priority:
            pos = ctx.positions
            accepted.sort(key=lambda m: pos[m.anchor])
        report.matches = accepted
        return report

    def rewrite(self, view: MutableGraphView, *, max_passes: int = 1) -> RewriteResult:
        """Match and replace, up to ``max_passes`` passes (stopping early when nothing changes).

        Rules without a replacement are matched but left alone. Matched nodes are erased.
        """
        total = RewriteResult()
        for _ in range(max_passes):
            with paused_gc():
                ctx = self.context(view)
                report = self._match(view, ctx)
                todo = [m for m in report.matches if m.rule.replacement is not None]
                result = apply_matches(view, ctx, todo)
            total.merge(result)
            total.passes += 1
            if result.replaced == 0:
                break
        return total
