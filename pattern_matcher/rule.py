"""A rule: a pattern, an optional replacement, a priority and a check on the whole match.

Example::

    >>> from torchvendor.pattern_matcher import P, Fused
    >>> r = Rule(P("mul", P("relu", P("add", "a", "b")), "c"), Fused("acme.fused_mlp"), priority=2)
    >>> r
    Rule('acme.fused_mlp', mul(relu(add(a, b)), c), priority=2)
"""
from __future__ import annotations

from typing import Any, Callable

from .errors import PatternError
from .match import AnyPattern, Match
from .multi import MultiPattern
from .pattern import Alt, Pattern, Wildcard
from .template import Fused, T, Template

__all__ = ["Rule"]


def _check_root(p: Pattern, where: str) -> None:
    if isinstance(p, Wildcard):
        raise PatternError(f"{where}: the pattern's root is a wildcard ({p!r}); a rule needs an operation to anchor on")
    if isinstance(p, Alt):
        for b in p.branches:
            _check_root(b, where)


class Rule:
    """``Rule(pattern, replacement=None, *, name=None, priority=0, check=None)``.

    - ``pattern``: a :class:`Pattern` or a :class:`MultiPattern`;
    - ``replacement``: a :class:`Template`, a :class:`T` (one-output template), :class:`Fused`, an
      operator key string (shorthand for ``Fused(key)``), a callable ``fn(match, emit)`` that builds
      the replacement with ``emit(op, inputs, attrs=None)`` and returns the new output node(s), or
      ``None`` for a match-only rule (e.g. to mark fusion groups for the partitioner);
    - ``priority``: higher wins when matches overlap; ties go to the earlier anchor, then the
      earlier rule;
    - ``check``: ``fn(match) -> bool``, sees the whole match before it is accepted.
    """

    def __init__(self, pattern: AnyPattern, replacement: Any = None, *, name: str | None = None,
                 priority: int = 0, check: Callable[[Match], bool] | None = None) -> None:
        if not isinstance(pattern, (Pattern, MultiPattern)):
            raise PatternError(f"Rule pattern must be a Pattern or Multi(...), got {pattern!r}")
        _check_root(pattern.outputs[0] if isinstance(pattern, MultiPattern) else pattern, f"Rule({pattern!r})")
        pattern.slot_kinds()  # validate names early
        self.pattern = pattern
        if isinstance(replacement, str):
            replacement = Fused(replacement)
        label = replacement.op if isinstance(replacement, (Fused, T)) else None
        if isinstance(replacement, T):
            replacement = Template(replacement)
        if isinstance(replacement, (Template, Fused)):
            replacement = replacement.bind(pattern)
        elif replacement is not None and not callable(replacement):
            raise PatternError(f"Rule replacement must be a Template, T, Fused, op key, callable or None; "
                               f"got {replacement!r}")
        self.replacement = replacement
        if not isinstance(priority, int):
            raise PatternError(f"Rule priority must be an int, got {priority!r}")
        self.priority = priority
        if check is not None and not callable(check):
            raise PatternError(f"Rule check must be callable(match) -> bool, got {check!r}")
        self.check = check
        if name is None:
            if label is None and isinstance(replacement, Template) and replacement.steps:
                label = replacement.steps[-1].op
            name = label if isinstance(label, str) else repr(pattern)
        self.name = name

    def anchor_keys(self) -> frozenset[str] | None:
        return self.pattern.anchor_keys()

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, {self.pattern!r}, priority={self.priority})"
