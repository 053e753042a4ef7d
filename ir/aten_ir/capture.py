"""Capture at ATen/prim level: :func:`aten_ir_hook`, the Dynamo backend a capture uses (an SDK
backend uses it the same way: ``torchvendor.sdk.AtenBackend`` does), and
:func:`capture_aten`, which runs the torch level's capture driver
(:func:`~torchvendor.ir.torch_ir.capture.compile_and_record`) with that hook and records each graph.

Example::

    >>> import torch
    >>> p = capture_aten(lambda x: torch.sigmoid(x) * 2, [torch.randn(3)])
    >>> [n.target for n in p.inference.graph.nodes if n.op == "call_function"]
    [<OpOverload(op='aten.sigmoid', overload='default')>, <OpOverload(op='aten.mul', overload='Tensor')>]
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx as fx

from .. import compat
from ..decompositions import DecompositionTable, resolve, to_prims
from ..torch_ir.capture import compile_and_record
from .program import AtenProgram

__all__ = ["aten_ir_hook", "capture_aten"]

#: An ATen-level compiler callback: sees one AOTAutograd graph and its fake example inputs,
#: returns the callable to run in its place (plain ``fn(*args)``), or None to run the graph.
AtenCallback = Callable[[fx.GraphModule, list[Any]], "Callable[..., Any] | None"]


def aten_ir_hook(fw: AtenCallback | None = None, bw: AtenCallback | None = None,
                 inference: AtenCallback | None = None, *,
                 decompositions: DecompositionTable | Mapping[Any, Any] | None = None,
                 partition: str = "default", keep_inference_input_mutations: bool = True) -> Callable[..., Any]:
    """A Dynamo backend running AOTAutograd and handing each ATen graph to a callback.

    Args:
        fw, bw, inference: callbacks ``(gm, fake_example_inputs) -> callable | None`` for the
            forward, backward and inference graphs (None: run the graph as is). Explicit
            callbacks for all three are always passed to AOTAutograd.
        decompositions: a :class:`~torchvendor.ir.decompositions.DecompositionTable`, a dict,
            or None for core ATen. A table with ``to_prims`` retraces each graph to prims
            before the callback sees it.
        partition: ``"default"`` (pinned, saves what the forward computed) or ``"min_cut"``.
        keep_inference_input_mutations: keep input mutations in inference graphs as ``copy_``.

    Each graph's ``gm.meta["aot_metadata"]`` holds AOTAutograd's ViewAndMutationMeta.

    >>> import torch
    >>> graphs = []
    >>> be = aten_ir_hook(inference=lambda gm, ex: graphs.append(gm))
    >>> with torch.no_grad():
    ...     _ = torch.compile(lambda x: torch.sigmoid(x) * 2, backend=be)(torch.randn(3))
    >>> [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    [<OpOverload(op='aten.sigmoid', overload='default')>, <OpOverload(op='aten.mul', overload='Tensor')>]
    """
    table = resolve(decompositions)  # a resolved table (what the SDK's backends pass) is used as it is

    def wrap(callback: AtenCallback | None) -> Callable[..., Any]:
        def compiler(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
            metadata = compat.aot_forward_metadata()
            out = gm.graph.output_node()
            out.meta["tv_output_names"] = [a.name if isinstance(a, fx.Node) else None for a in out.args[0]]
            if table.to_prims:
                new = to_prims(gm, example_inputs, table)
                new_out = new.graph.output_node()
                for key in ("desc", "tv_output_names"):
                    if key in out.meta:
                        new_out.meta[key] = out.meta[key]
                gm = new
            gm.meta["aot_metadata"] = metadata
            compiled = callback(gm, list(example_inputs)) if callback is not None else None
            return compat.make_boxed_func(compiled if compiled is not None else gm.forward)
        return compiler

    # the table's read-only entries, not a copy per graph: AOTAutograd merges them into a dict of its own
    return compat.aot_autograd_backend(fw_compiler=wrap(fw), bw_compiler=wrap(bw), inference_compiler=wrap(inference),
                                       decompositions=table.entries, partition_fn=compat.partitioner(partition),
                                       keep_inference_input_mutations=keep_inference_input_mutations)


def capture_aten(fn: Callable[..., Any] | torch.nn.Module, example_inputs: Sequence[Any], *, training: bool = False,
                 dynamic: bool = False, decompositions: DecompositionTable | Mapping[Any, Any] | None = None) -> AtenProgram:
    """Capture ``fn`` at ATen level (``capture(..., level="aten")``)."""
    table = resolve(decompositions)
    graphs: dict[str, tuple[fx.GraphModule, list[Any]]] = {}

    def recorder(name: str) -> AtenCallback:
        def callback(gm: fx.GraphModule, example_inputs: list[Any]) -> None:
            graphs[name] = (gm, example_inputs)
        return callback

    backend = aten_ir_hook(recorder("forward"), recorder("backward"), recorder("inference"), decompositions=table)
    tr = compile_and_record(fn, example_inputs, backend, dynamic=dynamic, training=training)
    return AtenProgram(tr, graphs, table)
