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
  and by parameter qualified name (``"lin.weight"``) exactly as ``named_parameters()`` names
  it (a tied parameter under its first name; a function's closure module under the variable
  name, ``"<variable>.weight"``). ``grad_outputs`` has one entry per
  ``run`` output (``None`` = no gradient flows from it); the default is ``ones_like`` for every
  floating output.

- ``to_json() -> str`` and the classmethod ``from_json(text, module=None)``: the program as
  JSON (an envelope ``{"format": "torchvendor.program", "version": 1, "level": ...}`` around
  the level's own fields) and back. Parameters and buffers are referenced by name, not stored:
  pass the module to ``from_json`` to run a program that reads them. ``Program.from_json``
  reads any level; ``TorchProgram.from_json`` only its own. A version this reader does not
  know is refused with an error naming both versions.

Subclasses keep their IR in plain attributes (graphs, buffers, kernels) and may add more.

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> p = capture(lambda x: torch.relu(x) * 2, [torch.randn(3)], level="torch")
    >>> p.level, isinstance(p, Program)
    ('torch', True)
    >>> len(p.run(torch.ones(3)))
    1
    >>> Program.from_json(p.to_json()).run(torch.tensor([-1.0, 2.0, 3.0]))
    [tensor([0., 4., 6.])]
"""
from __future__ import annotations

import importlib
import json
from typing import Any, ClassVar, Sequence

import torch

from . import compat

__all__ = ["Program", "FORMAT_VERSION", "flatten_inputs", "flatten_outputs", "default_grad_outputs"]

#: The version of the JSON envelope of every level's ``to_json``; ``from_json`` refuses others.
FORMAT_VERSION = 1
_FORMAT = "torchvendor.program"
_MODULE_OF_LEVEL = {"torch": "torch_ir.program", "aten": "aten_ir.program", "loop": "loop_ir.program"}


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

    # -- serialization --------------------------------------------------------------------------
    _by_level: ClassVar[dict[str, type["Program"]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "level" in cls.__dict__:
            Program._by_level[cls.level] = cls

    def to_json(self, indent: int | None = None) -> str:
        """The program as JSON text (see the module docstring); ``from_json`` reads it back."""
        return json.dumps({"format": _FORMAT, "version": FORMAT_VERSION, "level": self.level, **self._to_dict()},
                          indent=indent)

    @classmethod
    def from_json(cls, text: str, module: torch.nn.Module | None = None) -> "Program":
        """Read a program written by :meth:`to_json`; ``module`` provides the parameters and
        buffers it reads by name (the module it was captured from, or one with the same names)."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"not a torchvendor program: expected a JSON object with \"format\": \"{_FORMAT}\" "
                             f"(written by Program.to_json)")
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"torchvendor program format version {data.get('version')!r} is not supported by this "
                             f"reader (it reads version {FORMAT_VERSION}); write the program with a matching "
                             f"torchvendor, or capture it again")
        level = data.get("level")
        if level in _MODULE_OF_LEVEL:  # defines (and so registers) the level's class
            importlib.import_module(f".{_MODULE_OF_LEVEL[level]}", __package__)
        target = Program._by_level.get(level)
        if target is None:
            raise ValueError(f"unknown IR level {level!r} in a torchvendor program; known: {sorted(Program._by_level)}")
        if cls is not Program and target is not cls:
            raise ValueError(f"this is a {level}-level program ({target.__name__}); {cls.__name__}.from_json reads "
                             f"{cls.level}-level programs: use {target.__name__}.from_json or Program.from_json")
        return target._from_dict(data, module)

    def _to_dict(self) -> dict[str, Any]:  # pragma: no cover - every level overrides it
        raise NotImplementedError(f"{type(self).__name__} must implement _to_dict")

    @classmethod
    def _from_dict(cls, data: dict[str, Any], module: torch.nn.Module | None) -> "Program":  # pragma: no cover
        raise NotImplementedError(f"{cls.__name__} must implement _from_dict")


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
