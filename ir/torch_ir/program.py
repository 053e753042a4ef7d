"""The torch-level program: :class:`TorchProgram`, the FX graph Dynamo hands a backend.

What a torch-level program holds (torch 2.13):

- ``graph_module``: Dynamo's ``fx.GraphModule`` of ``torch.*``, ``operator.*`` and
  ``call_method`` nodes; parameters and buffers are lifted to placeholders;
- ``example_inputs``: the real tensors (and ints) Dynamo passed for each placeholder, and
  ``fake_inputs``: the FakeTensors / SymInts in ``node.meta["example_value"]`` (symbolic shapes
  when captured with ``dynamic=True``);
- ``slots``: what feeds each placeholder (``input<i>``, ``parameter lin.weight``, ``buffer
  bn.running_mean``, ``constant``, ``symint s0``);
- ``outputs``: where each flattened user output comes from (:class:`OutputSlot`);
- ``guards``: Dynamo's guards on the capture, one line each.

There is no backward graph at this level: Dynamo leaves autograd to eager PyTorch, so
``run_backward`` runs eager autograd over the interpreted forward. The graph runs with
:func:`~torchvendor.ir.fx_graph.run_graph`.

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> p = capture(torch.nn.Linear(4, 2), [torch.randn(3, 4)], level="torch")
    >>> sorted(str(s) for s in p.slots)
    ['input0', 'parameter bias', 'parameter weight']
    >>> torch.testing.assert_close(p.run(torch.ones(3, 4))[0], p.module(torch.ones(3, 4)))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import sympy
import torch
import torch.fx as fx

from ..fx_graph import (Binder, Slot, TensorSpec, decode_fx_value, encode_fx_value, graph_from_json, graph_to_json,
                        placeholder_specs, placeholders, run_graph)
from ..program import Program, default_grad_outputs, flatten_inputs

__all__ = ["TorchProgram", "OutputSlot", "Trace", "assemble", "describe_inputs", "grad_leaves"]


@dataclass(frozen=True)
class OutputSlot:
    """Where one flattened user output comes from: ``"graph"`` (``index`` of the graph output),
    ``"input"`` (a user input returned as is), ``"parameter"``/``"buffer"`` (``name``) or
    ``"constant"`` (``value``, a non-tensor Dynamo folded into the bytecode)."""

    kind: str
    index: int | None = None
    name: str = ""
    value: Any = None

    def __str__(self) -> str:
        return {"graph": f"graph output {self.index}", "input": f"input{self.index}",
                "constant": f"constant {self.value!r}"}.get(self.kind, f"{self.kind} {self.name}")

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible data."""
        return {"kind": self.kind, "index": self.index, "name": self.name, "value": encode_fx_value(self.value, "output")}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "OutputSlot":
        """The inverse of :meth:`to_json`."""
        return cls(data["kind"], data["index"], data["name"], decode_fx_value(data["value"], {}))


@dataclass
class Trace:
    """The result of one capture through ``torch.compile`` (:func:`~.capture.compile_and_record`;
    internal to the IR levels): what each level's program is built from."""

    #: whose parameters and buffers feed the graph by qualified name: the captured module, or
    #: for a function the root of :func:`~.capture.closure_modules` (None if it reads none)
    module: torch.nn.Module | None
    user_inputs: list[Any]          # the (cloned) flat user inputs the capture ran on
    result: Any                     # what the compiled function returned
    gm: fx.GraphModule
    example_inputs: list[Any]
    slots: list[Slot]
    outputs: list[OutputSlot]
    guards: list[str]
    dynamic: bool
    training: bool



def grad_leaves(user: Sequence[Any], module: torch.nn.Module | None) -> list[tuple[str, torch.Tensor]]:
    """(key, tensor) for every user input that requires grad and every trainable parameter."""
    out = [(f"input{i}", x) for i, x in enumerate(user) if isinstance(x, torch.Tensor) and x.requires_grad]
    if module is not None:
        out += [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    return out


def assemble(outputs: Sequence[OutputSlot], graph_outputs: Sequence[Any], user: Sequence[Any],
             module: torch.nn.Module | None) -> list[Any]:
    """The flat user outputs from a run's graph outputs (see :class:`OutputSlot`)."""
    named: dict[str, Any] = {}
    if module is not None and any(o.kind in ("parameter", "buffer") for o in outputs):
        named = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    res = []
    for o in outputs:
        if o.kind == "graph":
            res.append(graph_outputs[o.index])
        elif o.kind == "input":
            res.append(user[o.index])
        elif o.kind == "constant":
            res.append(o.value)
        else:
            res.append(named[o.name])
    return res


def describe_inputs(slots: Sequence[Slot], fakes: Sequence[Any], names: Sequence[str]) -> list[str]:
    """One line per placeholder: name, what feeds it, dtype and (symbolic) shape."""
    lines = []
    for name, slot, fake in zip(names, slots, fakes):
        if isinstance(fake, (torch.Tensor, TensorSpec)):
            typ = f"{str(fake.dtype).removeprefix('torch.')}{list(fake.shape)}"
        elif isinstance(fake, sympy.Basic):  # a symbolic int read back from JSON
            typ = f"SymInt {fake}"
        else:
            typ = type(fake).__name__ + (f" {fake}" if fake is not None else "")
        lines.append(f"  %{name}: {slot}  {typ}".replace("'", ""))
    return lines


def _guard_summary(guards: Sequence[str]) -> list[str]:
    """Guard lines for printing; the per-tensor dynamic-marking checks are counted, not listed."""
    marking = [g for g in guards if g.startswith("DIMENSION_DYNAMIC_MARKING_GUARD")]
    shown = [g for g in guards if not g.startswith("DIMENSION_DYNAMIC_MARKING_GUARD")]
    tail = [f"  (+{len(marking)} DIMENSION_DYNAMIC_MARKING_GUARD lines, see .guards)"] if marking else []
    return [f"guards ({len(guards)}):", *("  " + g for g in shown), *tail]


class TorchProgram(Program):
    """A captured torch-IR program (see the module docstring)."""

    level = "torch"

    def __init__(self, tr: Trace) -> None:
        self.graph_module: fx.GraphModule = tr.gm
        self.example_inputs: list[Any] = tr.example_inputs
        self.fake_inputs: list[Any] = [n.meta.get("example_value") for n in placeholders(tr.gm)]
        self.slots: list[Slot] = tr.slots
        self.outputs: list[OutputSlot] = tr.outputs
        self.guards: list[str] = tr.guards
        self.module: torch.nn.Module | None = tr.module
        self.training, self.dynamic = tr.training, tr.dynamic
        self._binder = Binder(self.slots, self.fake_inputs, self.module)

    @property
    def graph(self) -> fx.Graph:
        """The FX graph."""
        return self.graph_module.graph

    def parameters(self) -> dict[str, str]:
        """Placeholder name -> qualified name, for placeholders that are parameters or buffers."""
        return {n.name: s.name for n, s in zip(placeholders(self.graph_module), self.slots)
                if s.kind in ("parameter", "buffer")}

    def __str__(self) -> str:
        names = [n.name for n in placeholders(self.graph_module)]
        code = self.graph_module.print_readable(print_output=False).rstrip()
        return "\n".join([f"# torch IR ({'training' if self.training else 'inference'}"
                          f"{', dynamic' if self.dynamic else ''})", "inputs:",
                          *describe_inputs(self.slots, self.fake_inputs, names), "graph:", code,
                          "outputs: " + ", ".join(map(str, self.outputs)),
                          *_guard_summary(self.guards)])

    def _to_dict(self) -> dict[str, Any]:
        """The level's fields of :meth:`to_json`: the graph (``fx_graph.graph_to_json``),
        slots, outputs and guards. Parameters are referenced by name, not stored."""
        return {"training": self.training, "dynamic": self.dynamic,
                "graph": graph_to_json(self.graph_module), "slots": [s.to_json() for s in self.slots],
                "outputs": [o.to_json() for o in self.outputs], "guards": list(self.guards)}

    @classmethod
    def _from_dict(cls, data: dict[str, Any], module: torch.nn.Module | None) -> "TorchProgram":
        self = cls.__new__(cls)
        self.graph_module = graph_from_json(data["graph"])
        self.example_inputs = []  # the real example tensors are not serialized
        self.fake_inputs = placeholder_specs(self.graph_module)
        self.slots = [Slot.from_json(s) for s in data["slots"]]
        self.outputs = [OutputSlot.from_json(o) for o in data["outputs"]]
        self.guards = list(data["guards"])
        self.module, self.training, self.dynamic = module, data["training"], data["dynamic"]
        self._binder = Binder(self.slots, self.fake_inputs, self.module)
        return self

    def run(self, *inputs: Any) -> list[Any]:
        """Interpret the Dynamo graph on ``inputs``; the flat outputs."""
        flat = flatten_inputs(inputs)
        graph_outputs = run_graph(self.graph_module, self._binder.bind(flat), name="torch IR graph")
        return assemble(self.outputs, graph_outputs, flat, self.module)

    def run_backward(self, *inputs: Any, grad_outputs: Sequence[torch.Tensor | None] | None = None) -> dict[str, torch.Tensor]:
        """Gradients by eager autograd over the interpreted forward (torch IR has no backward graph)."""
        self._require_training()
        with torch.enable_grad():
            outs = self.run(*inputs)
        grads = list(grad_outputs) if grad_outputs is not None else default_grad_outputs(outs)
        if len(grads) != len(outs):
            raise ValueError(f"grad_outputs has {len(grads)} entries but the program has {len(outs)} outputs")
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
        leaves = grad_leaves(flatten_inputs(inputs), self.module)
        leaves += [(s.name, s.value) for s in self.slots if s.kind == "constant" and s.value.requires_grad]
        if not pairs or not leaves:
            return {}
        res = torch.autograd.grad([o for o, _ in pairs], [t for _, t in leaves], [g for _, g in pairs], allow_unused=True)
        return {k: g for (k, _), g in zip(leaves, res) if g is not None}
