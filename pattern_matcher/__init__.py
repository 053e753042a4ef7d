"""torchvendor.pattern_matcher: patterns, matching and rewriting over any GraphView.

The matcher never imports torch: it sees graphs only through
:class:`~torchvendor.ir.graph_view.GraphView`, so the same rules run on FX graphs (torch and ATen
level), loop-IR kernel bodies and ONNX graphs.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.pattern_matcher import P, W, Rule, Fused, PatternMatcher
    >>> g = DictGraph(); x, y = g.add_input("x"), g.add_input("y")
    >>> out = g.add_node("mul", [g.add_node("relu", [g.add_node("add", [x, x])]), y])
    >>> _ = g.add_output([out])
    >>> pm = PatternMatcher([Rule(P("mul", P("relu", P("add", W("a"), W("b"))), W("c")), Fused("acme.fused_mlp"))])
    >>> [m.captures for m in pm.match(g).matches]
    [{'a': %x, 'b': %x, 'c': %y}]
"""
from __future__ import annotations

from .context import MatchContext
from .errors import PatternError, RewriteError
from .explain import explain_rule
from .keymap import COMMUTATIVE_OPS, KEYMAPS, map_keys
from .match import Match, find_all
from .matcher import MatchReport, PatternMatcher
from .multi import Multi, MultiPattern
from .pattern import Alt, Op, Opt, P, Pattern, Star, Variadic, W, Wildcard
from .rewrite import RewriteResult
from .rule import Rule
from .template import AttrOf, Fused, T, Template

__all__ = [
    "P", "W", "Opt", "Star", "Multi", "Pattern", "Op", "Wildcard", "Alt", "Variadic", "MultiPattern",
    "T", "Template", "Fused", "AttrOf", "Rule", "PatternMatcher", "MatchReport", "RewriteResult", "Match",
    "find_all", "explain_rule", "MatchContext", "map_keys", "KEYMAPS", "COMMUTATIVE_OPS", "PatternError", "RewriteError",
]
