"""The ATen/prim-level program: :class:`AtenProgram`, AOTAutograd's functionalized forward,
backward and inference graphs.

An :class:`AtenProgram` holds, for a capture with ``training=False``, the ``inference`` graph;
with ``training=True``, the ``forward`` and ``backward`` graphs that AOTAutograd's default
partitioner split from the joint graph. All are functionalized graphs of ``torch.ops.aten.*``
(or ``prims.*`` with :func:`~torchvendor.ir.decompositions.prims`) OpOverloads whose
placeholders are, in order, the Dynamo graph's placeholders (parameters, buffers, user inputs,
SymInt sizes; see ``slots``).

Graph calling conventions (what ``run`` and ``run_backward`` implement):

- inference: mutations of inputs stay in the graph as ``aten.copy_`` into the placeholder
  (``keep_inference_input_mutations=True``); the outputs are the Dynamo graph's outputs;
- forward: outputs are ``[new values of mutated inputs] + [user outputs] + [saved values]``;
  the runtime copies the new values into the inputs; ``forward_roles`` names each output;
- backward: placeholders are saved values (matched to forward outputs by name) and one tangent
  per differentiable output; outputs are one gradient per forward placeholder (None where the
  placeholder does not require grad); ``backward_roles`` names each placeholder.

Example::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> p = capture(lambda x: torch.nn.functional.gelu(x).sum(), [torch.randn(4, requires_grad=True)],
    ...             level="aten", training=True)
    >>> "aten.erf" in str(p), sorted(p.run_backward(torch.ones(4)))
    (True, ['input0'])
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx as fx

from .. import compat
from ..decompositions import DecompositionTable
from ..fx_graph import Binder, Slot, graph_from_json, graph_to_json, placeholder_specs, placeholders, run_graph
from ..program import Program, default_grad_outputs, flatten_inputs
from ..torch_ir.program import OutputSlot, TorchProgram, Trace, assemble, describe_inputs

__all__ = ["AtenProgram"]


def _primal_position(desc: tuple, n_own: int, own_names: Sequence[str]) -> int:
    if desc[0] == "input":
        return n_own + desc[1]
    if desc[0] in ("param", "buffer") and desc[1] in own_names:
        return list(own_names).index(desc[1])
    raise NotImplementedError(f"unsupported AOTAutograd input descriptor {desc}")


def _forward_roles(gm: fx.GraphModule, metadata: Any, n_own: int, own_names: Sequence[str]) -> list[tuple]:
    """Per forward/inference output: ("mutation", primal position) | ("output", k) | ("base",)
    | ("saved", node name)."""
    out = gm.graph.output_node()
    names = out.meta.get("tv_output_names") or [getattr(a, "name", None) for a in out.args[0]]
    descs = out.meta.get("desc")
    roles: list[tuple] = []
    if descs is not None and compat.HAS_AOT_DESCRIPTORS:
        for name, d in zip(names, map(compat.aot_descriptor, descs)):
            if d[0] == "mutation":
                roles.append(("mutation", _primal_position(d[1], n_own, own_names)))
            elif d[0] == "output":
                roles.append(("output", d[1]))
            elif d[0] == "base":
                roles.append(("base",))
            elif d[0] == "saved":
                roles.append(("saved", name))
            else:
                raise NotImplementedError(f"unsupported AOTAutograd output descriptor {d} in the forward graph")
        return roles
    if metadata is None:
        raise RuntimeError("AOTAutograd gave neither output descriptors nor ViewAndMutationMeta; "
                           "this torch release is not supported by torchvendor.ir.aten_ir")
    roles += [("mutation", i) for i in metadata.mutated_inp_runtime_indices]
    roles += [("output", k) for k in range(len(metadata.output_info))]
    roles += [("base",)] * metadata.num_intermediate_bases
    roles += [("saved", n) for n in names[len(roles):]]
    return roles


def _backward_roles(gm: fx.GraphModule, metadata: Any) -> list[tuple]:
    """Per backward placeholder: ("saved", forward output name) | ("tangent", k)."""
    roles: list[tuple] = []
    grad_outputs = [k for k, o in enumerate(getattr(metadata, "output_info", [])) if getattr(o, "requires_grad", True)]
    tangent_index = 0
    for node in placeholders(gm):
        desc = compat.aot_descriptor(node.meta.get("desc")) if compat.HAS_AOT_DESCRIPTORS else ("none",)
        if desc[0] == "tangent":
            if desc[1][0] != "output":
                raise NotImplementedError(f"backward tangent for {desc[1]} (a mutated input that requires grad) "
                                          f"is not supported by the reference interpreter yet")
            roles.append(("tangent", desc[1][1]))
        elif desc[0] == "none" and node.name.startswith("tangents_"):
            roles.append(("tangent", grad_outputs[tangent_index]))
            tangent_index += 1
        else:
            roles.append(("saved", node.name))
    return roles


def _role_text(role: tuple, slots: Sequence[Slot]) -> str:
    if role[0] == "mutation":
        return f"new {slots[role[1]]}"
    if role[0] in ("output", "tangent"):
        return f"{role[0]} {role[1]}"
    return " ".join(map(str, role))


class AtenProgram(Program):
    """A captured ATen/prim-IR program (see the module docstring)."""

    level = "aten"

    def __init__(self, tr: Trace, graphs: dict[str, tuple[fx.GraphModule, list[Any]]], table: DecompositionTable) -> None:
        self.decompositions = table
        self.training, self.dynamic = tr.training, tr.dynamic
        self.module = tr.module
        #: The torch-level program this one was lowered from (the same Dynamo graph).
        self.torch_program = TorchProgram(tr)
        self.guards = tr.guards
        self.outputs = tr.outputs
        self.forward: fx.GraphModule | None = graphs.get("forward", (None,))[0]
        self.backward: fx.GraphModule | None = graphs.get("backward", (None,))[0]
        self.inference: fx.GraphModule | None = graphs.get("inference", (None,))[0]
        main_name = "forward" if tr.training else "inference"
        if main_name not in graphs:
            raise RuntimeError(f"AOTAutograd produced no {main_name} graph (got {sorted(graphs)}); "
                               f"training={tr.training} needs inputs or parameters that "
                               f"{'require' if tr.training else 'do not need'} grad")
        if tr.training and self.backward is None:
            raise RuntimeError("AOTAutograd compiled no backward graph; no output requires grad?")
        main, fake_inputs = graphs[main_name]
        own = list(tr.gm.named_parameters(remove_duplicate=False)) + list(tr.gm.named_buffers(remove_duplicate=False))
        self.slots: list[Slot] = [Slot("constant", n, value=t) for n, t in own] + tr.slots
        #: Real example inputs (placeholders' order) and the fake ones AOTAutograd traced with.
        self.example_inputs = [t for _, t in own] + tr.example_inputs
        self.fake_inputs = fake_inputs
        if len(self.slots) != len(placeholders(main)):
            raise RuntimeError(f"the {main_name} graph has {len(placeholders(main))} inputs but the Dynamo graph "
                               f"{len(self.slots)}; AOTAutograd deduplicated or synthesized inputs, which the "
                               f"reference interpreter does not support yet")
        own_names = [n for n, _ in own]
        self.forward_roles = _forward_roles(main, main.meta.get("aot_metadata"), len(own), own_names)
        self.backward_roles = _backward_roles(self.backward, self.forward.meta.get("aot_metadata")) \
            if self.backward is not None else []
        self._binder = Binder(self.slots, fake_inputs, self.module)

    def graphs(self) -> dict[str, fx.GraphModule]:
        """The captured graphs by name: ``inference``, or ``forward`` and ``backward``."""
        return {k: g for k, g in (("inference", self.inference), ("forward", self.forward),
                                   ("backward", self.backward)) if g is not None}

    def __str__(self) -> str:
        main = self.forward if self.training else self.inference
        names = [n.name for n in placeholders(main)]
        lines = [f"# ATen IR ({'training' if self.training else 'inference'}{', dynamic' if self.dynamic else ''}; "
                 f"decompositions: {self.decompositions.name})", "inputs:",
                 *describe_inputs(self.slots, self.fake_inputs, names)]
        for name, gm in self.graphs().items():
            lines += [f"{name} graph:", gm.print_readable(print_output=False).rstrip()]
            if name != "backward":
                lines.append(f"{name} outputs: " + ", ".join(_role_text(r, self.slots) for r in self.forward_roles))
            else:
                lines.append("backward inputs: " + ", ".join(_role_text(r, self.slots) for r in self.backward_roles))
                lines.append("backward outputs: gradients of " + ", ".join(map(str, self.slots)))
        lines.append("user outputs: " + ", ".join(map(str, self.outputs)))
        return "\n".join(lines)

    def _to_dict(self) -> dict[str, Any]:
        """The level's fields of :meth:`to_json`: every graph (``fx_graph.graph_to_json``),
        slots, graph roles, user outputs, guards and the torch-level program it was lowered
        from. Parameters are referenced by name, not stored; of the decomposition table only
        the name is kept (its entries are code)."""
        return {"training": self.training, "dynamic": self.dynamic,
                "decompositions": self.decompositions.name,
                "graphs": {k: graph_to_json(g) for k, g in self.graphs().items()},
                "slots": [s.to_json() for s in self.slots], "forward_roles": [list(r) for r in self.forward_roles],
                "backward_roles": [list(r) for r in self.backward_roles],
                "outputs": [o.to_json() for o in self.outputs], "guards": list(self.guards),
                "torch_program": self.torch_program._to_dict()}

    @classmethod
    def _from_dict(cls, data: dict[str, Any], module: torch.nn.Module | None) -> "AtenProgram":
        self = cls.__new__(cls)
        self._restore(data, module)
        return self

    def _restore(self, data: dict[str, Any], module: torch.nn.Module | None) -> None:
        """Set every attribute from :meth:`_to_dict`'s data (``__init__`` needs a live capture)."""
        self.decompositions = DecompositionTable(data["decompositions"], {})
        self.training, self.dynamic, self.module = data["training"], data["dynamic"], module
        self.torch_program = TorchProgram._from_dict(data["torch_program"], module)
        self.guards = list(data["guards"])
        self.outputs = [OutputSlot.from_json(o) for o in data["outputs"]]
        graphs = {k: graph_from_json(g) for k, g in data["graphs"].items()}
        self.forward, self.backward, self.inference = (graphs.get(k) for k in ("forward", "backward", "inference"))
        self.slots = [Slot.from_json(s) for s in data["slots"]]
        self.example_inputs = []  # the real example tensors are not serialized
        self.fake_inputs = placeholder_specs(graphs["forward" if self.training else "inference"])
        self.forward_roles = [tuple(r) for r in data["forward_roles"]]
        self.backward_roles = [tuple(r) for r in data["backward_roles"]]
        self._binder = Binder(self.slots, self.fake_inputs, module)

    # -- execution ----------------------------------------------------------------------------------
    def _forward(self, flat: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        args = self._binder.bind(flat)
        with torch.no_grad():
            outs = self._execute("forward" if self.training else "inference", args)
            n_user = sum(1 for r in self.forward_roles if r[0] == "output")
            user: list[Any] = [None] * n_user
            saved: dict[str, Any] = {}
            for value, role in zip(outs, self.forward_roles):
                if role[0] == "mutation":
                    args[role[1]].copy_(value)
                elif role[0] == "output":
                    user[role[1]] = value
                elif role[0] == "saved":
                    saved[role[1]] = value
        return user, saved

    def run(self, *inputs: Any) -> list[Any]:
        """Interpret the inference graph (the forward graph for training captures) on ``inputs``."""
        flat = flatten_inputs(inputs)
        user, _ = self._forward(flat)
        return assemble(self.outputs, user, flat, self.module)

    def run_backward(self, *inputs: Any, grad_outputs: Sequence[torch.Tensor | None] | None = None) -> dict[str, torch.Tensor]:
        """Interpret the forward graph, then the backward graph on its saved values and the tangents."""
        self._require_training()
        flat = flatten_inputs(inputs)
        user, saved = self._forward(flat)
        outs = assemble(self.outputs, user, flat, self.module)
        grads = list(grad_outputs) if grad_outputs is not None else default_grad_outputs(outs)
        if len(grads) != len(outs):
            raise ValueError(f"grad_outputs has {len(grads)} entries but the program has {len(outs)} outputs")
        per_graph_output: dict[int, torch.Tensor] = {}
        passthrough: dict[str, torch.Tensor] = {}
        for slot, g in zip(self.outputs, grads):
            if g is None:
                continue
            if slot.kind == "graph":
                per_graph_output[slot.index] = g + per_graph_output[slot.index] if slot.index in per_graph_output else g
            elif slot.kind == "input" and getattr(flat[slot.index], "requires_grad", False):
                key = f"input{slot.index}"
                passthrough[key] = g + passthrough[key] if key in passthrough else g
        bw_args = []
        for role in self.backward_roles:
            if role[0] == "saved":
                bw_args.append(saved[role[1]])
            else:
                g, out = per_graph_output.get(role[1]), user[role[1]]
                bw_args.append(self._tangent(torch.zeros_like(out) if g is None else g, out))
        with torch.no_grad():
            grads_in = self._execute("backward", bw_args)
        result: dict[str, torch.Tensor] = {}
        for slot, g in zip(self.slots, grads_in):
            if g is not None and slot.kind in ("input", "parameter", "constant"):
                result[slot.grad_key] = g
        for key, g in passthrough.items():
            result[key] = result[key] + g if key in result else g
        return result


    def _tangent(self, grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        # Like AOTAutograd's runtime, give each tangent the memory layout of its forward output:
        # some backward kernels (CPU flash attention) assume grad_out matches out.
        return torch.empty_like(out).copy_(grad)

    def _execute(self, part: str, args: list[Any]) -> list[Any]:
        """Run the ``"forward"``, ``"inference"`` or ``"backward"`` part on ``args``."""
        return run_graph(getattr(self, part), args, name=f"ATen {part} graph")
