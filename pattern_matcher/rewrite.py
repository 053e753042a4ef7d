"""Applying replacements to accepted matches.

For each match the replacement is built just before the match's earliest output, its outputs take
over the users of the matched outputs (``replace_uses``), and the matched nodes are erased (they
have no users left: containment guarantees it). Matches may feed each other (back to back,
adjacent, inside list arguments): a capture bound to the output of an already rewritten match is
resolved to its replacement, so no stale node is ever referenced.

Valid matches (see :mod:`.validity`) always have their inputs computed before their earliest
output, so inserting the replacement there keeps the graph in topological order.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.pattern_matcher import P, PatternMatcher, Rule, Template
    >>> g = DictGraph(); x = g.add_input("x"); c = g.add_node("clone", [x]); _ = g.add_output([c])
    >>> PatternMatcher([Rule(P("clone", "x"), Template("x"))]).rewrite(g).replaced   # identity
    1
    >>> [g.op(n) for n in g.nodes()]
    ['placeholder', 'output']
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Sequence

from ..ir.graph_view import MutableGraphView

from .context import MatchContext
from .errors import RewriteError
from .match import Match
from .template import Template
from .validity import late_capture

__all__ = ["RewriteResult", "apply_matches"]


@dataclass
class RewriteResult:
    """Counts of a rewrite: total and per rule name, nodes created and erased, passes run."""

    replaced: int = 0
    by_rule: Counter = field(default_factory=Counter)
    created: int = 0
    erased: int = 0
    passes: int = 0

    def merge(self, other: "RewriteResult") -> None:
        self.replaced += other.replaced
        self.by_rule.update(other.by_rule)
        self.created += other.created
        self.erased += other.erased


class _CountingView:
    """Counts the nodes a custom replacement creates."""

    def __init__(self, view: MutableGraphView) -> None:
        self.view, self.created = view, 0

    def create(self, *args: Any, **kwargs: Any) -> Hashable:
        self.created += 1
        return self.view.create(*args, **kwargs)


def apply_matches(view: MutableGraphView, ctx: MatchContext, matches: Sequence[Match]) -> RewriteResult:
    """Replace each of ``matches`` (non-overlapping, valid) by its rule's replacement."""
    result = RewriteResult()
    replaced: dict[Hashable, Hashable] = {}

    def resolve(n: Hashable) -> Hashable:
        while n in replaced:
            n = replaced[n]
        return n

    for m in matches:
        rule = m.rule
        first = m.outputs[0]
        if len(m.outputs) > 1:  # (positions are numbered on first use: single outputs never ask)
            pos = ctx.positions
            first = min(m.outputs, key=pos.__getitem__)
            if late_capture(m, pos, pos[first]) is not None:
                raise RewriteError(f"{m!r} has an input computed after its first output; it is not a valid match")
        out_meta = [_meta(view, o, rule.name) for o in m.outputs]
        common = {k: v for k, v in out_meta[0].items() if k not in ("dtype", "shape")}
        repl = rule.replacement
        if isinstance(repl, Template):  # creates one node per step: no counting wrapper
            new = repl.instantiate(view, m, resolve, first, out_meta, common)
            created = len(repl.steps)
        else:
            counting = _CountingView(view)
            new = _custom(repl, counting, m, resolve, first, common)
            created = counting.created
        if len(new) != len(m.outputs):
            raise RewriteError(f"replacement of rule {rule.name!r} returned {len(new)} outputs for a match with "
                               f"{len(m.outputs)}: {m!r}")
        for old, nw in zip(m.outputs, new):
            view.replace_uses(old, nw)
            replaced[old] = nw
        for n in reversed(m.nodes):  # users before producers (nodes are in topological order)
            view.erase(n)
        result.replaced += 1
        result.by_rule[rule.name] += 1
        result.created += created
        result.erased += len(m.nodes)
    return result


def _meta(view: MutableGraphView, node: Hashable, rule: str) -> dict[str, Any]:
    meta = {k: v for k, v in view.meta(node).items() if k in ("dtype", "shape", "stack_trace")}
    meta["pattern_rule"] = rule
    return meta


def _custom(fn: Any, view: _CountingView, m: Match, resolve: Any, before: Hashable,
            common: Mapping[str, Any]) -> list[Hashable]:
    """Run a callable replacement ``fn(match, emit)``; ``emit`` creates nodes at the right place."""

    def emit(op: Any, inputs: Sequence[Hashable], attrs: Mapping[str, Any] | None = None) -> Hashable:
        return view.create(op, [resolve(i) for i in inputs], attrs, before=before, meta=common)

    out = fn(m, emit)
    if out is None:
        raise RewriteError(f"replacement function of rule {m.rule.name!r} returned None; "
                           f"return the new output node (or a list, one per pattern output)")
    return [resolve(o) for o in (list(out) if isinstance(out, (list, tuple)) else [out])]
