"""Outlining FX partitions into submodules (the torch side of :mod:`torchvendor.partitioner`).

:func:`outline_fx` turns a :class:`~torchvendor.partitioner.PartitionResult` over an
``fx.GraphModule`` into a new GraphModule in which every partition is one ``call_module`` of its
own GraphModule (``fused_<id>``), returning a tuple unpacked by ``operator.getitem`` nodes when
it has several outputs. Unlike ``torch.fx.passes.utils.fuser_utils.fuse_by_partitions`` it runs
no per-partition cycle check (partitions are convex by construction) and no per-partition
graph surgery: every node is copied once, into the parent or into its partition's graph, in one
topological order of the contracted graph computed once
(:func:`torchvendor.partitioner.outline.emission_order`). Submodules are created lazily
compiled (``_LazyGraphModule``) so their Python code is only generated if they are called.

Parameters and buffers (``get_attr``) are never inside a partition: they are passed to the
submodule as arguments, as ``fuse_by_partitions`` does. ``call_module`` nodes inside a partition
carry their module into the submodule.

Example::

    >>> import torch
    >>> from torchvendor.partitioner import unsupported_ops
    >>> gm = torch.fx.symbolic_trace(lambda x: torch.relu(torch.sin(x + 1) * 2))
    >>> new_gm, result = partition_and_outline(gm, unsupported_ops({"torch.sin"}))
    >>> [n.op for n in new_gm.graph.nodes]
    ['placeholder', 'call_module', 'call_function', 'call_module', 'output']
    >>> x = torch.randn(4); torch.equal(new_gm(x), gm(x))
    True
"""
from __future__ import annotations

import copy
import operator
from typing import Any

import torch
import torch.fx as fx
from torch.fx.node import map_arg

from torchvendor.partitioner.core import Partition, PartitionResult, partition, paused_gc
from torchvendor.partitioner.outline import emission_order

from torchvendor.ir import compat
from torchvendor.ir.fx_view import FxView

__all__ = ["outline_fx", "partition_fx", "partition_and_outline"]

_LazyGM = compat.LazyGraphModule

_META_KEYS = ("val", "tensor_meta", "example_value")


def _fetch(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _copy_node(graph: fx.Graph, node: fx.Node, get: Any) -> fx.Node:
    """``graph.node_copy`` without its ``Node.__setattr__`` round trip for ``meta`` (the
    metadata dict is shallow-copied the same way)."""
    new = graph.create_node(node.op, node.target, map_arg(node.args, get), map_arg(node.kwargs, get),
                            node.name, node.type)
    new.meta.update(node.meta)
    return new


def partition_fx(gm: fx.GraphModule, support: Any, **options: Any) -> PartitionResult:
    """:func:`torchvendor.partitioner.partition` over ``FxView(gm.graph)``.

    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: x.relu().sin())
    >>> [len(p) for p in partition_fx(gm, {"method.relu"}).partitions]
    [1]
    """
    return partition(FxView(gm.graph), support, **options)


def outline_fx(gm: fx.GraphModule, result: PartitionResult, *, prefix: str = "fused_",
               lazy: bool = True) -> fx.GraphModule:
    """A new GraphModule computing what ``gm`` computes, each partition outlined into a
    submodule named ``f"{prefix}{partition.id}"`` (see the module docstring). ``gm`` is left
    unchanged; parameters and submodules are shared, not copied."""
    if not isinstance(result.view, FxView) or result.view.graph is not gm.graph:
        raise ValueError("outline_fx: result was not computed on FxView(gm.graph) of this GraphModule")
    with paused_gc():
        return _outline_fx(gm, result, prefix, _LazyGM if lazy else fx.GraphModule)


def _outline_fx(gm: fx.GraphModule, result: PartitionResult, prefix: str, module_cls: type) -> fx.GraphModule:
    old = gm.graph
    graph = fx.Graph(tracer_cls=getattr(old, "_tracer_cls", None))
    codegen = getattr(old, "_codegen", None)
    if codegen is not None:
        graph.set_codegen(copy.deepcopy(codegen))
    root: dict[str, Any] = {}
    env: dict[fx.Node, fx.Node] = {}
    get = env.__getitem__
    for item in emission_order(result):
        if not isinstance(item, Partition):
            node = item
            env[node] = _copy_node(graph, node, get)
            if node.op in ("call_module", "get_attr"):
                root[node.target] = _fetch(gm, node.target)
            continue
        name = f"{prefix}{item.id}"
        while hasattr(gm, name) or name in root:
            name += "_"
        sub_gm = _build_submodule(gm, item, module_cls, name)
        root[name] = sub_gm
        call = graph.call_module(name, tuple(env[x] for x in item.inputs))
        outs = item.outputs
        if len(outs) == 1:
            env[outs[0]] = call
            call.meta.update({k: outs[0].meta[k] for k in _META_KEYS if k in outs[0].meta})
        else:
            vals = [o.meta.get("val") for o in outs]
            if all(v is not None for v in vals):
                call.meta["val"] = tuple(vals)
            for k, out in enumerate(outs):
                getter = graph.call_function(operator.getitem, (call, k))
                getter.meta.update({key: out.meta[key] for key in _META_KEYS if key in out.meta})
                env[out] = getter
    new_gm = module_cls(root, graph, class_name=type(gm).__name__)
    new_gm.meta.update(getattr(gm, "meta", {}))
    return new_gm


def _build_submodule(gm: fx.GraphModule, part: Partition, module_cls: type, name: str) -> fx.GraphModule:
    sub = fx.Graph()
    senv: dict[fx.Node, fx.Node] = {}
    for x in part.inputs:
        ph = sub.placeholder(x.name)
        ph.meta.update({k: x.meta[k] for k in _META_KEYS if k in x.meta})
        senv[x] = ph
    sub_root: dict[str, Any] = {}
    get = senv.__getitem__
    for node in part.nodes:
        senv[node] = _copy_node(sub, node, get)
        if node.op == "call_module":
            sub_root[node.target] = _fetch(gm, node.target)
    outs = [senv[o] for o in part.outputs]
    sub.output(outs[0] if len(outs) == 1 else tuple(outs))
    return module_cls(sub_root, sub, class_name=name)


def partition_and_outline(gm: fx.GraphModule, support: Any, *, prefix: str = "fused_", lazy: bool = True,
                          **options: Any) -> tuple[fx.GraphModule, PartitionResult]:
    """Partition ``gm`` and outline the partitions; returns ``(new_gm, result)``."""
    result = partition_fx(gm, support, **options)
    return outline_fx(gm, result, prefix=prefix, lazy=lazy), result
