"""``Level.ONNX``: :class:`OnnxBackend`, each partition handed to the vendor as an ``onnx.ModelProto``.

The ATen level's graphs (inference, and AOTAutograd's forward and backward for training) are
partitioned as usual, except that a node is claimed only when the vendor supports it *and* it
has an ONNX form (:func:`torchvendor.ir.onnx_ir.unsupported_reason`): what ONNX cannot express
stays in eager PyTorch between the partitions. Each partition is then exported by
:func:`torchvendor.ir.onnx_ir.to_onnx` (the SDK's own FX -> ONNX converter, chosen over
``torch.onnx.export`` by measurement: ``docs/bench_onnx_export.md``), rewritten by the backend's
:attr:`OnnxBackend.onnx_patterns`, checked, and passed to the vendor as

    ``compile(model: onnx.ModelProto, example_inputs: list) -> callable``

- ``model.graph.input[i]`` is the partition's ``i``-th input, ``example_inputs[i]`` its fake
  tensor (or SymInt); a SymInt input is a 0-d int64 ONNX input and the callable receives it as a
  Python int;
- ``model.graph.output`` are the partition's outputs, in order; the callable returns them as
  torch tensors (a tuple when there are several, or a list);
- names map back to the FX graph: inputs, outputs and each node's value carry the FX node's name,
  each NodeProto's ``doc_string`` the ATen op it came from;
- symbolic sizes are ``dim_param`` strings (``"s77"``), Python constants are initializers, the
  default opset is :data:`torchvendor.ir.onnx_ir.OPSET` (a backend's ``onnx_opset`` raises it).

Example::

    >>> from torchvendor.sdk import OnnxBackend
    >>> class Engines(OnnxBackend):
    ...     name = "doc_onnx_level"
    ...     def compile(self, model, example_inputs):
    ...         ...  # build an engine from model.graph
    >>> Engines.level.value, Engines.onnx_opset is None
    ('onnx', True)
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar, Sequence

import torch.fx as fx

from torchvendor.ir import decompositions as _decomp
from torchvendor.partitioner.support import SupportRule, predicate

from .aot_flow import AotFlow
from .levels import Level
from .report import GraphReport

__all__ = ["OnnxBackend", "support_rule", "export_partition", "compile_partition"]


def _exportable(view: Any, node: fx.Node) -> bool | str:
    from torchvendor.ir.onnx_ir import unsupported_reason

    if node.op != "call_function":
        return "only calls are exported to ONNX"
    reason = unsupported_reason(node)
    return True if reason is None else reason


def support_rule(vendor: SupportRule | None) -> SupportRule:
    """The vendor's rule (None: every op) restricted to nodes with an ONNX form."""
    onnx_rule = predicate(_exportable)
    return onnx_rule if vendor is None else vendor & onnx_rule


def export_partition(gm: fx.GraphModule, patterns: Sequence[Any] = (), opset: int | None = None,
                     name: str = "partition") -> tuple[Any, dict[str, int]]:
    """The partition's ONNX model after the backend's ONNX patterns, and how often each rule fired."""
    import onnx

    from torchvendor.ir.onnx_ir import OPSET, to_onnx

    model = to_onnx(gm, opset=opset or OPSET, name=name)
    fired: dict[str, int] = {}
    if patterns:
        from torchvendor.ir.onnx_view import OnnxView
        from torchvendor.pattern_matcher import PatternMatcher

        result = PatternMatcher(list(patterns)).rewrite(OnnxView(model.graph))
        fired = dict(getattr(result, "by_rule", {}) or ({"onnx_patterns": result.replaced} if result.replaced else {}))
        known = {o.domain for o in model.opset_import}
        for domain in sorted({n.domain for n in model.graph.node} - known - {"ai.onnx"}):
            model.opset_import.append(onnx.helper.make_opsetid(domain, 1))  # a vendor domain, version 1
    onnx.checker.check_model(model)
    return model, fired


def compile_partition(backend: Any, sub: fx.GraphModule, examples: list[Any], name: str,
                      graph: Any) -> Callable[..., Any]:
    """Export one partition, count the ONNX fusions in the graph's report (``graph.fusions``) and
    hand the model to the vendor's ``compile(model, example_inputs)``."""
    model, fired = export_partition(sub, backend.onnx_patterns, backend.onnx_opset, name)
    for rule, count in fired.items() if graph is not None else ():
        graph.fusions[rule] = graph.fusions.get(rule, 0) + count
    return _with_strides(backend.compile(model, examples), sub)


def _dim_order(value: Any) -> list[int] | None:
    """The order of a dense tensor's dimensions in memory, outermost first, when it is not the
    row-major one (None: row-major, not dense, or strides unknown)."""
    import torch

    if not isinstance(value, torch.Tensor) or value.dim() < 2:
        return None
    try:
        strides, sizes = [int(s) for s in value.stride()], [int(s) for s in value.shape]
    except (TypeError, ValueError, RuntimeError):  # symbolic strides: left as ONNX returns them
        return None
    order = sorted(range(value.dim()), key=lambda d: (-strides[d], d))
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return None  # gaps or overlaps: no dense layout reproduces it
        expected *= sizes[d]
    return None if order == list(range(value.dim())) else order


def _with_strides(engine: Callable[..., Any], sub: fx.GraphModule) -> Callable[..., Any]:
    """ONNX values have no strides: an output the graph expects in a permuted dense layout (a
    transpose's result) is laid out so, since a later ``as_strided`` or ``view`` in eager PyTorch
    reads its memory (Longformer's chunked attention does)."""
    out = next(n for n in sub.graph.nodes if n.op == "output").args[0]
    outs = out if isinstance(out, (tuple, list)) else [out]
    orders = [_dim_order(o.meta.get("val")) if isinstance(o, fx.Node) else None for o in outs]
    if not any(orders):
        return engine

    def run(*args: Any) -> list[Any]:
        results = list(engine(*args))
        for i, order in enumerate(orders):
            if order is not None:
                inverse = [order.index(d) for d in range(len(order))]
                results[i] = results[i].permute(order).contiguous().permute(inverse)
        return results
    return run


class OnnxBackend(AotFlow):
    """Subclass for ``Level.ONNX``: ``compile(model: onnx.ModelProto, example_inputs)`` per partition.
    The ATen level's graphs and decompositions; a node is claimed only if it has an ONNX form."""

    level: ClassVar[Level] = Level.ONNX
    #: a table from ``torchvendor.ir.decompositions`` (None: ``core_aten()``), as at the ATen level
    decompositions: ClassVar[Any] = None
    #: pattern_matcher rules over each partition's ONNX graph (``OnnxView``), applied before compile
    onnx_patterns: ClassVar[Sequence[Any]] = ()
    #: the opset of the exported models (None: ``torchvendor.ir.onnx_ir.OPSET``)
    onnx_opset: ClassVar[int | None] = None

    def _decompositions(self) -> Any:
        return _decomp.resolve(self.decompositions)

    def _level_rule(self, rule: SupportRule) -> SupportRule:
        return support_rule(rule)

    def _compile_partition(self, sub: fx.GraphModule, examples: Sequence[Any], kind: str, device: str,
                           name: str, graph: GraphReport) -> Callable[..., Any]:
        return compile_partition(self, sub, list(examples), name or "partition", graph)
