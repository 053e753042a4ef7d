"""Errors raised by the pattern matcher.

Example::

    >>> from torchvendor.pattern_matcher import P
    >>> try:
    ...     P(42)
    ... except PatternError as e:
    ...     print(str(e).split(":")[0])
    bad operator in P(42)
"""
from __future__ import annotations

__all__ = ["PatternError", "RewriteError"]


class PatternError(ValueError):
    """A pattern, template or rule is malformed; the message names the offending part."""


class RewriteError(RuntimeError):
    """A rewrite could not be applied to a match (e.g. a template refers to an unbound capture)."""
