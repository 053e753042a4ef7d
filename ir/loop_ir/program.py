"""The loop-level program: :class:`LoopCapture`, a capture's forward and backward (or inference)
:class:`~torchvendor.ir.loop_ir.schema.LoopProgram` s behind the common program contract.

It honours the contract of :mod:`torchvendor.ir.program`: ``run`` interprets the forward (or
inference) program with the reference interpreter (``interpreter.py``), ``run_backward`` the
forward then the backward program; inputs are bound to the programs' inputs exactly as at the
ATen level (the loop programs' inputs are the AOTAutograd graphs' placeholders), so the class
extends :class:`~torchvendor.ir.aten_ir.program.AtenProgram`. ``to_json`` adds each program in
the loop schema's own version.

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> p = capture(lambda x: x.exp().sum(1), [torch.randn(2, 3)], level="loop")
    >>> q = LoopCapture.from_json(p.to_json())
    >>> q.level, torch.allclose(q.run(torch.zeros(2, 3))[0], torch.full((2,), 3.0))
    ('loop', True)
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from ..aten_ir.program import AtenProgram
from ..decompositions import resolve
from ..torch_ir.program import describe_inputs
from .interpreter import run_program
from .schema import SCHEMA_VERSION, LoopProgram, format_program

__all__ = ["LoopCapture"]


class LoopCapture(AtenProgram):
    """A captured loop-IR program: ``forward``/``backward`` (training) or ``inference``
    :class:`LoopProgram` s, plus the contract's ``run``/``run_backward``/``str``/``to_json``.

    ``aten_graphs`` holds the AOTAutograd graphs Inductor lowered (their placeholders are the
    programs' inputs); input binding and output roles are those of the ATen level.
    """

    level = "loop"

    def __init__(self, tr: Any, graphs: dict[str, tuple[fx.GraphModule, list[Any]]],
                 programs: dict[str, LoopProgram], device: str) -> None:
        super().__init__(tr, graphs, resolve(None))
        self.device = device
        #: The AOTAutograd graphs Inductor was given, by kind.
        self.aten_graphs: dict[str, fx.GraphModule] = {k: g for k, (g, _) in graphs.items()}
        self.forward: LoopProgram | None = programs.get("forward")  # type: ignore[assignment]
        self.backward: LoopProgram | None = programs.get("backward")  # type: ignore[assignment]
        self.inference: LoopProgram | None = programs.get("inference")  # type: ignore[assignment]

    def programs(self) -> dict[str, LoopProgram]:
        """The captured programs by kind: ``inference``, or ``forward`` and ``backward``."""
        return {k: p for k, p in (("inference", self.inference), ("forward", self.forward),
                                   ("backward", self.backward)) if p is not None}

    def graphs(self) -> dict[str, fx.GraphModule]:  # type: ignore[override]
        return dict(self.aten_graphs)

    def _to_dict(self) -> dict[str, Any]:
        """The ATen level's fields (its ``graphs`` are the AOTAutograd graphs Inductor lowered),
        the device, and ``programs``: each kind's :meth:`LoopProgram.to_dict`, in the loop
        schema's own version ``schema_version``."""
        return {**super()._to_dict(), "device": self.device, "schema_version": SCHEMA_VERSION,
                "programs": {k: p.to_dict() for k, p in self.programs().items()}}

    def _restore(self, data: dict[str, Any], module: torch.nn.Module | None) -> None:
        super()._restore(data, module)
        self.device = data["device"]
        self.aten_graphs = {k: g for k, g in (("inference", self.inference), ("forward", self.forward),
                                               ("backward", self.backward)) if g is not None}
        programs = {k: LoopProgram.from_dict(p) for k, p in data["programs"].items()}
        self.forward, self.backward, self.inference = (programs.get(k) for k in ("forward", "backward", "inference"))

    def __str__(self) -> str:
        main = self.aten_graphs["forward" if self.training else "inference"]
        names = [n.name for n in main.graph.find_nodes(op="placeholder")]
        lines = [f"# loop IR ({'training' if self.training else 'inference'}{', dynamic' if self.dynamic else ''}; "
                 f"device {self.device})", "inputs:", *describe_inputs(self.slots, self.fake_inputs, names)]
        for kind, p in self.programs().items():
            lines.append(format_program(p))
        lines.append("user outputs: " + ", ".join(map(str, self.outputs)))
        return "\n".join(lines)

    # -- execution (the ATen level's conventions, with the loop interpreter) ----------------------
    def _execute(self, part: str, args: list[Any]) -> list[Any]:
        program = getattr(self, part)
        assert program is not None
        return run_program(program, args)

    def _tangent(self, grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()  # the backward program's tangent buffers are contiguous
