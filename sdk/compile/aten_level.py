"""``Level.ATEN``: :class:`AtenBackend`, AOTAutograd's functional ATen graphs, decomposed with the
backend's table.

``compile(gm, example_inputs) -> callable`` receives one partition of an inference, forward or
backward graph (training works: AOTAutograd's backward graph is partitioned the same way), its
ops ``aten.*`` / ``prims.*`` after :attr:`AtenBackend.decompositions`.

Example::

    >>> import torch
    >>> from torchvendor.ir import decompositions
    >>> from torchvendor.sdk import AtenBackend, register_backend, last_report
    >>> class Acme(AtenBackend):
    ...     name = "doc_aten_level"
    ...     decompositions = decompositions.core_aten().keeping("aten.gelu")
    ...     def compile(self, gm, example_inputs):
    ...         return gm
    >>> _ = register_backend(Acme)
    >>> with torch.no_grad():
    ...     y = torch.compile(torch.nn.functional.gelu, backend="doc_aten_level")(torch.ones(2))
    >>> sorted(last_report().claimed_ops())
    ['aten.gelu.default']
"""
from __future__ import annotations

from typing import Any, ClassVar

from torchvendor.ir import decompositions as _decomp

from .aot_flow import AotFlow
from .levels import Level

__all__ = ["AtenBackend"]


class AtenBackend(AotFlow):
    """Subclass for ``Level.ATEN``: ``compile(gm, example_inputs)`` with each ATen partition."""

    level: ClassVar[Level] = Level.ATEN
    #: a table from ``torchvendor.ir.decompositions`` (None: ``core_aten()``)
    decompositions: ClassVar[Any] = None

    def _decompositions(self) -> Any:
        return _decomp.resolve(self.decompositions)
