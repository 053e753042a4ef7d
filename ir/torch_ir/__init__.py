"""torchvendor.ir.torch_ir: the torch level, the FX graph Dynamo hands a backend.

Each IR level is a package with the same module roles (``torch_ir/``, ``aten_ir/``, ``loop_ir/``):

- :mod:`.capture`: the level's Dynamo backend hook (:func:`torch_ir_hook`) and its capture
  (:func:`capture_torch`); here also the capture driver (``compile_and_record``, :func:`closure_modules`)
  that the ATen and loop levels build on;
- :mod:`.program`: the captured program, :class:`TorchProgram` (print, ``run``,
  ``run_backward``, ``to_json``/``from_json``; the contract of :mod:`torchvendor.ir.program`);
- no interpreter of its own: torch-level graphs are FX graphs, run by
  :func:`torchvendor.ir.fx_graph.run_graph` (``torch.fx.Interpreter``), as ATen-level ones are.

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> from torchvendor.ir.torch_ir import TorchProgram
    >>> p = capture(torch.nn.ReLU(), [torch.randn(3)], level="torch")
    >>> isinstance(p, TorchProgram), TorchProgram.from_json(p.to_json()).run(torch.tensor([-1.0, 2.0, 0.5]))
    (True, [tensor([0.0000, 2.0000, 0.5000])])
"""
from __future__ import annotations

from torchvendor.ir.lazy import lazy_getattr

_LAZY = {
    "torch_ir_hook": "capture", "capture_torch": "capture", "closure_modules": "capture",
    "TorchProgram": "program", "OutputSlot": "program",
}
__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY)
