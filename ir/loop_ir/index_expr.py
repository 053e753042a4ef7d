"""Index and size expressions as the schema spells them: strings that sympy parses.

:func:`parse_expr` reads one (a code generator's side), :func:`format_expr` writes one from
Inductor's sympy expression (the extraction's side); :data:`INDEX_FUNCTIONS` names the integer
functions they may call.

    >>> format_expr(parse_expr("1 + i0*4"))
    '4*i0 + 1'
"""
from __future__ import annotations

import re
from typing import Any

import sympy

from .. import compat

__all__ = ["INDEX_FUNCTIONS", "parse_expr", "format_expr"]

#: Names of the integer functions that may appear in index expressions (besides + - * and
#: integer powers): floor division, ``(x // div) % mod``, exact division, min/max, Python-style
#: modulo, and a few conversions. Their semantics are those of ``torch.utils._sympy.functions``.
INDEX_FUNCTIONS = ("FloorDiv", "ModularIndexing", "CleanDiv", "CeilDiv", "Min", "Max", "PythonMod",
                   "Mod", "Identity", "Where", "TruncToInt", "FloorToInt", "CeilToInt", "RoundToInt",
                   "IntTrueDiv", "BitwiseFn_bitwise_and", "BitwiseFn_bitwise_or", "LShift", "RShift",
                   "PowByNatural")


_PARSE_CACHE: dict[str, Any] = {}


def parse_expr(text: str) -> Any:
    """Parse an index or size expression of the schema into sympy (integer symbols).

    >>> e = parse_expr("FloorDiv(i0, 4) + 8*s0")
    >>> sorted(map(str, e.free_symbols)), type(e.args[-1]).__name__
    (['i0', 's0'], 'FloorDiv')
    """
    hit = _PARSE_CACHE.get(text)
    if hit is not None:
        return hit
    local: dict[str, Any] = dict(compat.sympy_index_functions())
    for name in set(re.findall(r"\b[a-zA-Z_]\w*\b", text)):
        if name not in local and re.fullmatch(r"(i|r|ind|s|u|q|tmp)\d+|[a-z]\w*", name):
            local[name] = sympy.Symbol(name, integer=True, nonnegative=not name.startswith("q"))
    expr = sympy.sympify(text, locals=local)
    _PARSE_CACHE[text] = expr
    return expr


class _IndexPrinter(sympy.printing.str.StrPrinter):
    # A printmethod nobody defines: Inductor's functions would otherwise print as ``a//b``.
    printmethod = "_torchvendor_loop_ir_str"

    def _print_Function(self, expr: Any) -> str:
        return f"{type(expr).__name__}({', '.join(self._print(a) for a in expr.args)})"

    def _print_Symbol(self, expr: Any) -> str:
        return expr.name

    # sympy's StrPrinter prints a class named Identity as the matrix "I"; Inductor's is a function.
    _print_Identity = _print_Function

    def parenthesize(self, item: Any, level: int, strict: bool = False) -> str:
        if isinstance(item, sympy.Function):  # a call never needs parentheses
            return self._print(item)
        return super().parenthesize(item, level, strict)


_PRINTER = _IndexPrinter()


def format_expr(expr: Any, rename: dict[Any, Any] | None = None) -> str:
    """The schema's string for an integer expression (size symbols renamed by ``rename``).

    >>> i0 = sympy.Symbol("i0", integer=True)
    >>> format_expr(8 * i0 + 1)
    '8*i0 + 1'
    >>> format_expr(4 * parse_expr("FloorDiv(i0, 3)"))
    '4*FloorDiv(i0, 3)'
    """
    if isinstance(expr, (int, bool)):
        return str(int(expr))
    expr = sympy.sympify(expr)
    if rename:
        expr = expr.xreplace(rename)
    return _PRINTER.doprint(expr)
