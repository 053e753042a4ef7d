"""The Inductor fallback (option ``fallback="inductor"``): the ops a backend does not claim run
compiled by Inductor instead of eagerly, in the maximal convex groups between the vendor's
partitions; the vendor's partitions stay as they are. Only graphs that came through AOTAutograd
(ATen, LOOP and ONNX levels: :mod:`.aot_flow`) take it: Inductor wants AOT's tracing context.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from torchvendor.ir import compat
from torchvendor.partitioner.support import predicate

from .fx_outline import partition_and_outline
from .partition_call import PartitionCall

__all__ = ["inductor_fallback"]


def inductor_fallback(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` (an outlined graph) with the groups of ops between its :class:`PartitionCall`
    modules outlined and each compiled by Inductor."""
    def not_vendor(view: Any, node: fx.Node) -> bool | str:
        return not isinstance(getattr(gm, str(node.target), None), PartitionCall) or "a vendor partition"

    outlined, result = partition_and_outline(gm, predicate(not_vendor), prefix="inductor_")
    for part in result.partitions:
        name = f"inductor_{part.id}"
        sub = getattr(outlined, name)
        setattr(outlined, name, _InductorPartition(sub))
    return outlined


class _InductorPartition(torch.nn.Module):
    """A fallback group compiled by Inductor (its ``compile_fx_inner`` takes a graph returning a tuple)."""

    def __init__(self, sub: fx.GraphModule) -> None:
        super().__init__()
        out = sub.graph.output_node()
        self.single = not isinstance(out.args[0], (tuple, list))
        if self.single:
            out.args = ((out.args[0],),)
            sub.recompile()
        examples = [n.meta.get("val") for n in sub.graph.nodes if n.op == "placeholder"]
        with compat.outside_tracing_context():
            self.compiled = compat.inductor().compile_fx_inner(sub, examples)

    def forward(self, *args: Any) -> Any:
        out = self.compiled(list(args))
        return out[0] if self.single else tuple(out)
