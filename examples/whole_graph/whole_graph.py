"""PyTorch/XLA-style whole-graph lowering: a graph compiles whole into one executable, or not at all.

The backend claims every op, so each Dynamo graph reaches ``compile`` whole; ``compile`` lowers it
through a table and raises, naming each op without a lowering and its count, when one is missing:
the SDK runs that graph eagerly with the reason in the report, or raises with ``strict=True``.
:func:`metrics` counts from the reports, as ``torch_xla``'s metrics report does.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any

from torchvendor.ir import compat
from torchvendor.sdk import AtenBackend, op_key, register_backend, reports

#: the op packets the compiler lowers (an XLA lowering table stands here)
LOWERINGS = frozenset(f"aten.{op}" for op in (
    "add sub mul div neg exp log tanh sigmoid relu gelu sqrt rsqrt pow abs mm bmm addmm permute view "
    "_unsafe_view reshape expand clone t transpose unsqueeze squeeze sum mean amax _softmax cat slice "
    "select where native_layer_norm threshold_backward gelu_backward _softmax_backward_data alias "
    "detach full zeros ones scalar_tensor empty sin cos").split()) | {"operator.getitem"}


class WholeGraphError(RuntimeError):
    """The graph does not compile whole: ``unsupported`` counts its ops without a lowering."""

    def __init__(self, unsupported: Counter) -> None:
        self.unsupported = unsupported
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(unsupported.items()))
        super().__init__(f"not compiled whole: {sum(unsupported.values())} op(s) without a lowering: {ops}")


class WholeGraph(AtenBackend):
    name = "example_whole_graph"
    supported_ops = None  # every op: the partitioner hands over the whole graph

    def compile(self, gm: Any, example_inputs: list[Any]) -> Any:
        ops = Counter(op_key(n.target) for n in gm.graph.nodes if n.op == "call_function")
        missing = Counter({op: n for op, n in ops.items() if op.rsplit(".", 1)[0] not in LOWERINGS
                           and op not in LOWERINGS})
        if missing:
            raise WholeGraphError(missing)
        return gm  # the lowered graph: XLA builds one executable from it here


dynamo_backend = register_backend(WholeGraph)


def metrics() -> dict[str, Any]:
    """Graphs compiled whole, Dynamo's graph breaks, ops without a lowering (from the reports)."""
    graphs = [g for r in reports() if r.backend == WholeGraph.name for g in r.graphs]
    missing: Counter = Counter()
    for g in graphs:
        for p in g.fell_back:
            missing.update({op: int(n) for op, n in re.findall(r"(aten\.[\w.]+) x(\d+)", p.reason)})
    return {"graphs": len(graphs), "compiled_whole": sum(not g.fell_back for g in graphs),
            "graph_breaks": sum(compat.dynamo_counters()["graph_break"].values()), "unsupported_ops": dict(missing)}
