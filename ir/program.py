"""The common contract of every captured program, at every IR level.

``capture(fn, example_inputs, level=...)`` returns a :class:`Program`. Each level (torch,
aten, loop) subclasses it and implements four things:

- ``level``: ``"torch"``, ``"aten"`` or ``"loop"``;
- ``__str__``: readable text of the whole program;
- ``run(*inputs) -> list``: execute the program with its reference interpreter on user inputs
  shaped like the example inputs; returns the flat list of outputs, in the order of
  ``tree_flatten(fn(*inputs))``. Parameters and buffers of a captured module are bound from the
  module itself (current values, not a snapshot); in-place mutations of inputs and buffers
  happen as in eager;
- ``run_backward(*inputs, grad_outputs=None) -> dict`` (programs captured with
  ``training=True``): gradients keyed ``"input<i>"`` (``i`` indexes the flattened user inputs)
  and by parameter qualified name (``"lin.weight"``). ``grad_outputs`` has one entry per
  ``run`` output (``None`` = no gradient flows from it); the default is ``ones_like`` for every
  floating output.

Subclasses keep their IR in plain attributes (graphs, buffers, kernels) and may add more.

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> p = capture(lambda x: torch.relu(x) * 2, [torch.randn(3)], level="torch")
    >>> p.level, isinstance(p, Program)
    ('torch', True)
    >>> len(p.run(torch.ones(3)))
    1
"""
from __future__ import annotations

from typing import Any, ClassVar, Sequence

import torch

from . import compat

__all__ = ["Program", "flatten_inputs", "flatten_outputs", "default_grad_outputs"]


class Program:
    """Base class of captured programs (see the module docstring for the contract)."""

    #: The IR level: ``"torch"``, ``"aten"`` or ``"loop"``.
    level: ClassVar[str] = "?"
    #: Whether the program was captured for training (``run_backward`` available).
    training: bool = False

    def __str__(self) -> str:  # pragma: no cover - every level overrides it
        raise NotImplementedError(f"{type(self).__name__} must implement __str__")

    def run(self, *inputs: Any) -> list[Any]:
        """Run the program on user inputs; the flat list of outputs."""
        raise NotImplementedError(f"{type(self).__name__} must implement run()")

    def run_backward(self, *inputs: Any, grad_outputs: Sequence[torch.Tensor | None] | None = None) -> dict[str, torch.Tensor]:
        """Gradients w.r.t. inputs that require grad and parameters, keyed ``"input<i>"``/qualified names."""
        raise RuntimeError(f"this {self.level}-level program was captured with training=False; capture it with "
                           f"capture(..., training=True) to get run_backward()")

    def _require_training(self) -> None:
        if not self.training:
            Program.run_backward(self)


def flatten_inputs(inputs: Sequence[Any]) -> list[Any]:
    """The flat leaves of positional inputs (tensors, scalars, nested lists/tuples/dicts)."""
    return compat.tree_flatten(list(inputs))[0]


def flatten_outputs(outputs: Any) -> list[Any]:
    """The flat leaves of a function's result, in ``tree_flatten`` order."""
    return compat.tree_flatten(outputs)[0]


def default_grad_outputs(outputs: Sequence[Any]) -> list[torch.Tensor | None]:
    """``ones_like`` for every floating/complex tensor output, ``None`` for the others."""
    return [torch.ones_like(o) if isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex()) else None
            for o in outputs]
