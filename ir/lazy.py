"""Lazy package exports (PEP 562): a name's submodule is imported on first use, so importing a
package stays cheap (torch's Inductor, say, loads only when something asks for the loop level).

>>> from torchvendor.ir.lazy import lazy_getattr
>>> getattr_ = lazy_getattr("torchvendor.ir", {"AtenProgram": "aten_ir"})
>>> getattr_("AtenProgram").__name__
'AtenProgram'
>>> getattr_("nothing")
Traceback (most recent call last):
AttributeError: module 'torchvendor.ir' has no attribute 'nothing'
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` that serves ``name`` from its submodule
    ``table[name]`` (relative to ``package``). The table stays readable as its ``lazy_table``
    (the import-graph test follows these imports too)."""
    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(importlib.import_module(f".{table[name]}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    __getattr__.lazy_table = dict(table)  # type: ignore[attr-defined]
    return __getattr__
