"""torchvendor.ir.aten_ir: the ATen/prim level, AOTAutograd's functionalized graphs.

The same module roles as every IR level (``torch_ir/``, ``aten_ir/``, ``loop_ir/``):

- :mod:`.capture`: the level's Dynamo backend hook (:func:`aten_ir_hook`: AOTAutograd with a
  decomposition table, each graph handed to a callback) and its capture (:func:`capture_aten`);
- :mod:`.program`: the captured program, :class:`AtenProgram` (inference, or forward and
  backward graphs; print, ``run``, ``run_backward``, ``to_json``/``from_json``);
- no interpreter of its own: ATen graphs are FX graphs, run by
  :func:`torchvendor.ir.fx_graph.run_graph`; the decomposition tables are shared
  (:mod:`torchvendor.ir.decompositions`).

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> from torchvendor.ir.aten_ir import AtenProgram
    >>> p = capture(torch.nn.SiLU(), [torch.randn(3)], level="aten")
    >>> isinstance(p, AtenProgram), "aten.sigmoid" in str(AtenProgram.from_json(p.to_json()))
    (True, True)
"""
from __future__ import annotations

from torchvendor.ir.lazy import lazy_getattr

_LAZY = {"aten_ir_hook": "capture", "capture_aten": "capture", "AtenProgram": "program"}
__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)
