"""``capture``: one entry point for the three IR levels (``torchvendor.ir.capture``).

``capture(fn_or_module, example_inputs, level=...)`` runs ``fn`` once under
``torch.compile(fullgraph=True)`` with a torchvendor backend and returns the program at that
level (:class:`~torchvendor.ir.program.Program`: ``level``, ``str()``, ``run``, ``run_backward``):

- ``"torch"``: :class:`~torchvendor.ir.torch_ir.TorchProgram`, Dynamo's FX graph;
- ``"aten"``: :class:`~torchvendor.ir.aten_ir.AtenProgram`, AOTAutograd's graphs;
- ``"loop"``: delegated to ``torchvendor.ir.loop_ir.capture_loop`` (Inductor's loop IR).

How it captures: each call compiles a freshly made entry function (a new code object), so the
capture gets its own Dynamo cache entry and never resets global Dynamo state, never hits the
recompile limit, and leaves other compiled functions alone. The example inputs are cloned first,
so a function that mutates its inputs does not mutate the caller's tensors; a module is called
as is (its buffers update as in one eager call, e.g. BatchNorm running statistics).

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> p = capture(lambda x, y: (x * y).sum(dim=1), [torch.randn(2, 3), torch.randn(2, 3)], level="aten")
    >>> "aten.sum.dim_IntList" in str(p)
    True
    >>> p.run(torch.ones(2, 3), torch.ones(2, 3))
    [tensor([3., 3.])]
"""
from __future__ import annotations

from typing import Any, Callable, Literal, Mapping, Sequence

import torch

from .decompositions import DecompositionTable
from .program import Program

__all__ = ["capture", "CAPTURE_LEVELS"]

CAPTURE_LEVELS = ("torch", "aten", "loop")


def _capture_device(example_inputs: Sequence[Any]) -> str:
    """The device type a loop-level capture lowers for: that of the first tensor input not on
    ``cpu`` (a CPU tensor beside device tensors is a scalar or bookkeeping), else ``cpu``."""
    from .program import flatten_inputs

    types = [x.device.type for x in flatten_inputs(example_inputs) if isinstance(x, torch.Tensor)]
    return next((t for t in types if t != "cpu"), "cpu")


def capture(fn_or_module: Callable[..., Any] | torch.nn.Module, example_inputs: Sequence[Any],
            level: Literal["torch", "aten", "loop"] = "torch", *, training: bool = False, dynamic: bool = False,
            decompositions: DecompositionTable | Mapping[Any, Any] | None = None) -> Program:
    """Capture ``fn_or_module`` called on ``example_inputs`` at IR ``level``.

    Args:
        fn_or_module: a function or an ``nn.Module``; it must compile to a single graph
            (``fullgraph=True``): a graph break raises torch's error naming it.
        example_inputs: the positional arguments (tensors, Python scalars, or nested
            lists/tuples/dicts of them). ``"input<i>"`` names the ``i``-th flattened leaf.
        level: ``"torch"``, ``"aten"`` or ``"loop"``.
        training: capture for training: ``run_backward`` becomes available (at ATen level the
            backward graph is captured). Needs example inputs with ``requires_grad=True`` or
            trainable parameters: those of the module, or, as ``torch.compile`` trains them,
            those of the modules a function reads from its closure or globals (gradients keyed
            ``"<variable>.<name>"``, see :func:`~torchvendor.ir.torch_ir.closure_modules`).
            Gradients of parameters are keyed as ``named_parameters()`` names them (a tied
            parameter by its first name). With False the capture runs under ``no_grad``.
        dynamic: symbolic sizes (``torch.compile(dynamic=True)``): ``run`` accepts other sizes
            without recapture. Sizes 0 and 1 are specialized by Dynamo.
        decompositions: ATen level only: a table from :mod:`torchvendor.ir.decompositions`
            (default :func:`~torchvendor.ir.decompositions.core_aten`).

    >>> import torch
    >>> p = capture(torch.nn.Linear(3, 2), [torch.randn(4, 3)], level="aten", training=True)
    >>> sorted(p.run_backward(torch.randn(4, 3)))
    ['bias', 'weight']
    """
    if level not in CAPTURE_LEVELS:
        raise ValueError(f"unknown IR level {level!r}; choose one of {CAPTURE_LEVELS}")
    if decompositions is not None and level == "torch":
        raise ValueError("decompositions apply to the ATen level; torch IR is not decomposed")
    if level == "torch":
        from .torch_ir.capture import capture_torch

        return capture_torch(fn_or_module, example_inputs, training=training, dynamic=dynamic)
    if level == "aten":
        from .aten_ir.capture import capture_aten

        return capture_aten(fn_or_module, example_inputs, training=training, dynamic=dynamic,
                            decompositions=decompositions)
    if decompositions is not None:
        raise ValueError("decompositions are chosen by Inductor at the loop level; pass decompositions=None")
    from .loop_ir.capture import capture_loop

    return capture_loop(fn_or_module, example_inputs, training=training, dynamic=dynamic,
                        device=_capture_device(example_inputs))
