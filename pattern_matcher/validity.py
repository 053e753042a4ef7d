"""Whether a structural match may be replaced: containment, inputs outside, no cycle when fused.

A match ``M`` (its operation nodes) can be replaced by one fused node, or by a replacement graph,
only when

1. *containment*: every user of an interior node (a matched node that is not an output) is in ``M``
   (an interior value used outside would be lost);
2. *inputs outside*: no captured input is itself a node of ``M``;
3. *no cycle*: no path leaves ``M`` and comes back into it (fusing it would create a cycle);
4. *placement* (multi-output only): every input is computed before the earliest output, so the
   replacement can be inserted there without reordering the graph. Single-output matches always
   satisfy it (their output is their last node). With it, replacing any set of disjoint valid
   matches together never creates a cycle either, so no whole-graph check is ever needed.

The cycle check only walks nodes strictly between the match's first and last topological
positions: a node after the last matched node cannot reach back into the match. For a
single-output pattern whose output is its last node, the walk ends at once.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.pattern_matcher import P, find_all, MatchContext
    >>> g = DictGraph(); x = g.add_input("x"); r = g.add_node("relu", [x]); n = g.add_node("neg", [r])
    >>> _ = g.add_output([n, r])                      # relu leaks to the graph output
    >>> ctx = MatchContext(g); _ = ctx.index_positions()
    >>> invalid_reason(ctx, find_all(g, P("neg", P("relu", "x")))[0])
    'interior node relu is used outside the match by output'
"""
from __future__ import annotations

from typing import Hashable, Mapping

from .context import MatchContext
from .match import Match

__all__ = ["invalid_reason", "creates_cycle", "late_capture"]


def invalid_reason(ctx: MatchContext, m: Match) -> str | None:
    """Why ``m`` cannot be replaced, or ``None`` when it can (``ctx.positions`` are numbered on first use)."""
    nodes, outputs = m.nodes, m.outputs
    inside = set(nodes)
    users = ctx.users
    single = len(outputs) == 1
    out0 = outputs[0]
    for n in nodes:
        if n is out0 if single else n in outputs:
            continue
        for u in users(n):
            if u not in inside:
                return f"interior node {ctx.view.name(n)} is used outside the match by {ctx.view.name(u)}"
    bindings = m.bindings
    for key in m.capture_names:
        value = bindings.get(key)
        if type(value) is tuple:
            hit = next((v for v in value if v in inside), None)
        else:
            hit = value if value is not None and value in inside else None
        if hit is not None:
            return f"capture {key!r} is bound to {ctx.view.name(hit)}, a node of the match itself"
    if not single or out0 is not nodes[-1]:
        return _placement_reason(ctx, m, inside)
    return None


def _placement_reason(ctx: MatchContext, m: Match, inside: set[Hashable]) -> str | None:
    """Rules 3 and 4, for matches whose output is not their last node (multi-output ones)."""
    name = ctx.view.name
    cycle = creates_cycle(ctx, inside, m.outputs)
    if cycle is not None:
        return f"fusing would create a cycle through {name(cycle)}"
    if len(m.outputs) > 1:
        pos = ctx.positions
        first = min(m.outputs, key=pos.__getitem__)
        late = late_capture(m, pos, pos[first])
        if late is not None:
            return (f"placement: input {name(late)} is computed after output {name(first)}; "
                    f"replacing the match would need the graph reordered")
    return None


def late_capture(m: Match, pos: Mapping[Hashable, int], limit: int) -> Hashable | None:
    """A captured input whose position is after ``limit``, or ``None``."""
    for key in m.capture_names:
        value = m.bindings.get(key)
        for v in (value if isinstance(value, tuple) else (value,)):
            if v is not None and pos.get(v, -1) > limit:
                return v
    return None


def creates_cycle(ctx: MatchContext, inside: set[Hashable], outputs: tuple[Hashable, ...]) -> Hashable | None:
    """An outside node on a path from ``inside`` back into ``inside``, or ``None``.

    Assumes containment (only ``outputs`` have outside users); walks only positions below the
    last node of ``inside``.
    """
    pos = ctx.positions
    last = max(pos[n] for n in inside)
    stack: list[Hashable] = []
    seen: set[Hashable] = set()
    for o in outputs:
        for u in ctx.users(o):
            if u not in inside and u not in seen and pos[u] < last:
                seen.add(u)
                stack.append(u)
    while stack:
        v = stack.pop()
        for u in ctx.users(v):
            if u in inside:
                return v
            if u not in seen and pos[u] < last:
                seen.add(u)
                stack.append(u)
    return None
