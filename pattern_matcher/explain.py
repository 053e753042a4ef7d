"""Why a rule does or does not match a graph, in words: the matcher's own diagnosis, on any IR.

:func:`explain_rule` runs the rule with :class:`~.matcher.PatternMatcher`; a rule that matches
says where, one whose structural matches are all refused says which validity rule failed
(containment, cycle, placement, the rule's ``check=``). One that matches nothing but whose anchor
op is present re-walks the pattern greedily at each anchor (alternatives and operand orders
tried as the matcher tries them) and reports, for the nearest candidates (those that got
furthest into the pattern), which constraint failed: the op, an attribute, a dtype or shape, an
input count, or a name bound to two nodes. Like the rest of the package it never imports torch:
IR-specific hints come through the ``is_size`` hook.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.pattern_matcher import P, W, Rule
    >>> g = DictGraph(); x = g.add_input("x")
    >>> _ = g.add_output([g.add_node("relu", [g.add_node("add", [x, x])])])
    >>> for line in explain_rule(g, Rule(P("relu", P("mul", W("a"), W("b"))))):
    ...     print(line)
    rule 'relu(mul(a, b))': no match; nearest candidates:
      at relu: add is add, the pattern wants mul (after 1 pattern op(s) matched)
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from ..ir.graph_view import GraphView
from .context import MatchContext
from .match import find_all
from .matcher import PatternMatcher
from .multi import MultiPattern
from .pattern import Alt, Op, Wildcard
from .rule import Rule

__all__ = ["explain_rule"]

#: ``is_size(ctx, node)``: whether an input node is a symbolic size
SizeTest = Callable[[MatchContext, Any], bool]


def _no_sizes(ctx: MatchContext, node: Any) -> bool:
    return False


def _constraint_failure(ctx: MatchContext, cons: Any, node: Any, is_size: SizeTest) -> str | None:
    """Which of a pattern node's constraints ``node`` fails, in words (None: all hold)."""
    name = ctx.view.name(node)
    if cons is None:
        return None
    attrs = ctx.attrs(node)
    for key, want in cons.attrs.items():
        have = attrs.get(key)
        if callable(want):
            if not want(have):
                return f"{name}: attribute {key}={have!r} fails the pattern's test"
        elif key not in attrs:
            sized = any(is_size(ctx, i) for i in ctx.inputs(node))
            return (f"{name}: has no attribute {key!r} (the pattern wants {want!r}); " +
                    ("under dynamic shapes a size is an input node, not an attribute" if sized else
                     "the call leaves it to its default"))
        elif have != want:
            return f"{name}: attribute {key}={have!r}, the pattern wants {want!r}"
    meta = ctx.meta(node)
    if cons.dtype is not None and meta.get("dtype") not in cons.dtype:
        return f"{name}: dtype {meta.get('dtype')}, the pattern wants one of {sorted(cons.dtype)}"
    if cons.shape is not None:
        shape = meta.get("shape")
        ok = shape is not None and (cons.shape(tuple(shape)) if callable(cons.shape) else
                                    len(shape) == len(cons.shape) and all(w is None or w == d for w, d in
                                                                          zip(cons.shape, shape)))
        if not ok:
            return f"{name}: shape {tuple(shape) if shape is not None else None} fails the pattern's shape={cons.shape!r}"
    if cons.where is not None and not cons.where(ctx.view, node):
        return f"{name}: fails the pattern's where= predicate"
    return None


class _Miss(Exception):
    """A diagnosis: how many pattern operations matched before ``reason``."""

    def __init__(self, depth: int, reason: str) -> None:
        super().__init__(reason)
        self.depth, self.reason = depth, reason


def _diagnose(ctx: MatchContext, p: Any, node: Any, env: dict, depth: list[int], is_size: SizeTest) -> None:
    """Match ``p`` at ``node`` greedily (trying alternatives and operand orders); raise the deepest _Miss."""
    name = ctx.view.name
    if isinstance(p, Alt):
        return _first_fit([lambda t, d, b=b: _diagnose(ctx, b, node, t, d, is_size) for b in p.branches], env, depth)
    slot = p.name if isinstance(p, Wildcard) else (p.name or p)
    if slot is not None and slot in env:
        if env[slot] is not node:
            raise _Miss(depth[0], f"{slot if isinstance(slot, str) else p!r} is {name(env[slot])} elsewhere in the "
                                  f"pattern but {name(node)} here")
        return
    if isinstance(p, Wildcard):
        if p.kinds is not None and ctx.kind(node) not in p.kinds:
            raise _Miss(depth[0], f"{name(node)} is a graph {ctx.kind(node)}, {p!r} wants {sorted(p.kinds)}")
        why = _constraint_failure(ctx, p.cons, node, is_size)
        if why:
            raise _Miss(depth[0], why)
    else:
        _diagnose_op(ctx, p, node, env, depth, is_size)
    if slot is not None:
        env[slot] = node


def _diagnose_op(ctx: MatchContext, p: Op, node: Any, env: dict, depth: list[int], is_size: SizeTest) -> None:
    name, key = ctx.view.name, ctx.op(node)
    if not (key in p.keys if p.keys is not None else p.pred(key)) or ctx.kind(node) != "op":
        raise _Miss(depth[0], f"{name(node)} is {key}, the pattern wants {p.label}")
    why = _constraint_failure(ctx, p.cons, node, is_size)
    if why:
        raise _Miss(depth[0], why)
    ins = list(ctx.inputs(node))
    args = list(p.args)
    if p.star_at >= 0:
        star = p.variadic()
        count = len(ins) - (len(args) - 1)
        if count < star.min:
            raise _Miss(depth[0], f"{name(node)} has {len(ins)} inputs, fewer than {p!r} needs")
        args = args[:p.star_at] + list(star.elements(count)) + args[p.star_at + 1:]
    elif len(ins) != len(args):
        extra = [name(i) for i in ins[len(args):] if is_size(ctx, i)] if len(ins) > len(args) else []
        hint = (f"; {', '.join(extra)} {'is a symbolic size' if len(extra) == 1 else 'are symbolic sizes'} "
                f"(dynamic shapes): accept them with Star() after the tensor operands") if extra else ""
        raise _Miss(depth[0], f"{name(node)} ({key}) has {len(ins)} input(s), the pattern gives {len(args)}{hint}")
    depth[0] += 1
    orders = [ins]
    swap = ctx.op(node) in ctx.commutative if p.commutative is None else p.commutative
    if swap and len(ins) >= 2 and ins[0] is not ins[1]:
        orders.append([ins[1], ins[0], *ins[2:]])
    def operands(order: list[Any], trial: dict, d: list[int]) -> None:
        for sub, value in zip(args, order):
            _diagnose(ctx, sub, value, trial, d, is_size)
    _first_fit([functools.partial(operands, order) for order in orders], env, depth)


def _first_fit(attempts: list[Callable[[dict, list[int]], None]], env: dict, depth: list[int]) -> None:
    """Run each attempt on a copy of ``env``; keep the first that fits, else raise the deepest miss."""
    best: _Miss | None = None
    for attempt in attempts:
        trial, d = dict(env), [depth[0]]
        try:
            attempt(trial, d)
        except _Miss as miss:
            best = miss if best is None or miss.depth > best.depth else best
            continue
        env.update(trial)
        depth[0] = d[0]
        return
    raise best  # type: ignore[misc]


def _near_misses(ctx: MatchContext, rule: Rule, limit: int, is_size: SizeTest) -> list[str]:
    pattern = rule.pattern
    root = pattern.outputs[0] if isinstance(pattern, MultiPattern) else pattern
    keys = rule.anchor_keys()
    anchors = [n for n in ctx.positions if ctx.kind(n) == "op" and (keys is None or ctx.op(n) in keys)]
    if not anchors:
        return [f"no node has its anchor op ({', '.join(sorted(keys or ()))}): nothing almost matched"]
    misses: list[tuple[int, int, str]] = []
    for i, node in enumerate(anchors):
        try:
            _diagnose(ctx, root, node, {}, [0], is_size)
        except _Miss as miss:
            misses.append((-miss.depth, i, f"at {ctx.view.name(node)}: {miss.reason} "
                                           f"(after {miss.depth} pattern op(s) matched)"))
            continue
        if isinstance(pattern, MultiPattern):
            misses.append((-99, i, f"at {ctx.view.name(node)}: the first output matches, but not the others "
                                   f"({', '.join(map(repr, pattern.outputs[1:]))})"))
    misses.sort()
    return [text for _, _, text in misses[:limit]] + (
        [f"... and {len(misses) - limit} more candidate(s)"] if len(misses) > limit else [])


def explain_rule(view: GraphView, rule: Rule, *, limit: int = 3, is_size: SizeTest = _no_sizes) -> list[str]:
    """Why ``rule`` matches ``view`` or not, as lines (see the module docstring).

    ``is_size(ctx, node)`` tells an input that is a symbolic size (dynamic shapes), for the
    hint on input counts; the IR's adapter knows (FX: a SymInt value)."""
    matcher = PatternMatcher([rule])
    ctx = matcher.context(view)
    report = matcher.match(view, ctx)
    head = f"rule {rule.name!r}"
    if report.matches:
        at = ", ".join(view.name(m.anchor) for m in report.matches[:limit])
        return [f"{head}: {len(report.matches)} match(es), at {at}" + (" ..." if len(report.matches) > limit else "")]
    if report.examples:
        lines = [f"{head}: no valid match; {report.candidates} structural match(es) rejected:"]
        lines += [f"  {e.split(': ', 1)[-1]}" for e in report.examples[:limit]]
        if any("used outside the match" in e for e in report.examples):
            lines.append("  (an interior value used outside: in a training forward graph the backward saves it; "
                         "make it an extra output of the match and of the fused op, see docs/patterns.md)")
        return lines
    structural = find_all(view, rule.pattern, commutative=matcher.commutative)
    if structural:
        return [f"{head}: {len(structural)} structural match(es), all refused by the rule's check="]
    return [f"{head}: no match; nearest candidates:"] + [f"  {t}" for t in _near_misses(ctx, rule, limit, is_size)]
