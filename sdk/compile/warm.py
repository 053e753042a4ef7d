"""Warm compile without AOTAutograd: the post-AOT inference graph, cached on disk.

A warm compile (Dynamo reset, the on-disk artifact cache kept) used to spend most of its time
in AOTAutograd tracing the Dynamo graph again (functionalization and decomposition: ~190 of
233 ms for a GPT block), although every lowered program and kernel came from the cache. For the
safe case this module lets the SDK skip that trace:

- eligible (:func:`bypass_key`): an inference graph (grad disabled, or no input requires grad),
  autocast off, every input a plain dense tensor with static sizes at storage offset 0, the graph
  only placeholders, torch/operator calls and methods (no ``get_attr``, no submodules, no
  parameters of its own);
- stored (:func:`store`) at a cold compile, inside the inference compiler, only when
  AOTAutograd's metadata says its runtime wrappers do nothing (``compat.aot_plain_inference``):
  the ATen graph in the ATen level's JSON form (``ir/fx_graph.py``);
- loaded (:func:`load`) at a warm compile: the graph is rebuilt, FakeTensors are propagated
  through it, and the SDK partitions and compiles it as if AOTAutograd had handed it over;
  :func:`inference_function` gives it AOTAutograd's calling convention for Dynamo.

Anything else (a miss, an entry that does not decode, an unexpected node) falls back to the
normal path; a corrupt entry is removed and written again by that path.

>>> import torch
>>> gm = torch.fx.symbolic_trace(lambda x: (torch.relu(x) * 2,))  # Dynamo graphs return a tuple
>>> key, why = bypass_key(gm, [torch.ones(3)])
>>> key is not None, why
(True, None)
>>> bypass_key(gm, [torch.ones(3, requires_grad=True)])[1]
'an input requires grad (a training graph)'
"""
from __future__ import annotations

import json
import math
import operator
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from torchvendor.ir import compat
from torchvendor.ir.fx_graph import graph_from_json, graph_to_json

from .cache import ArtifactCache, graph_key

__all__ = ["bypass_key", "plain", "store", "load", "inference_function", "SUFFIX"]

#: bump when what is stored (or how it is rebuilt) changes
_FORMAT = "torchvendor.warm/1"
#: the cache entry's file suffix
SUFFIX = ".aten-inference.json"
_CALL_MODULES = ("torch", "operator", "_operator", "math", "builtins")


def bypass_key(gm: fx.GraphModule, example_inputs: Sequence[Any], *extra: str) -> tuple[str | None, str | None]:
    """``(key, None)`` when the Dynamo graph ``gm`` may skip AOTAutograd, else ``(None, reason)``.

    The key is the graph's code, the inputs' dtype/shape/stride/device/requires_grad,
    grad mode, deterministic mode and ``extra``; the backend's cache namespace adds its name,
    version, options and the torch version.
    """
    why = _not_eligible(gm, example_inputs)
    if why is not None:
        return None, why
    flags = [f"{t.device}/{t.requires_grad}" for t in example_inputs]
    state = f"grad={torch.is_grad_enabled()} deterministic={torch.are_deterministic_algorithms_enabled()}"
    return graph_key(gm, example_inputs, _FORMAT, state, *extra, *flags), None


def _not_eligible(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    for i, t in enumerate(example_inputs):
        if not isinstance(t, torch.Tensor):
            return f"input {i} is a {type(t).__name__}, not a tensor"
        if not (type(t) in (torch.Tensor, torch.nn.Parameter) or compat.is_fake(t)) or t.layout != torch.strided:
            return f"input {i} is a {type(t).__name__} with layout {t.layout} (a subclass or not dense)"
        if not all(isinstance(s, int) for s in (*t.shape, *t.stride(), t.storage_offset())):
            return f"input {i} has symbolic sizes"
        if t.storage_offset() != 0:  # the rebuilt graph's FakeTensors start at offset 0
            return f"input {i} starts at storage offset {t.storage_offset()}"
    if torch.is_grad_enabled() and any(t.requires_grad for t in example_inputs):
        return "an input requires grad (a training graph)"
    if compat.any_autocast_enabled():
        return "autocast is enabled"
    if next(iter(gm.parameters()), None) is not None or next(iter(gm.buffers()), None) is not None:
        return "the graph has parameters or buffers of its own"
    for n in gm.graph.nodes:
        if n.op in ("get_attr", "call_module"):
            return f"node %{n.name} is a {n.op}"
        if n.op == "call_function" and not _plain_target(n.target):
            return f"node %{n.name} calls {n.target!r}, not a torch/operator function"
    outs = gm.graph.output_node().args[0]
    if not isinstance(outs, (tuple, list)) or not all(isinstance(o, fx.Node) for o in outs):
        return "the graph does not return a tuple of tensors"
    return None


def _plain_target(target: Any) -> bool:
    # the code names a call target; only torch's own functions are sure to be what the name says
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in _CALL_MODULES or target in vars(operator).values() or target in vars(math).values()


def plain(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    """Inside AOTAutograd's inference compiler: why its runtime wrappers around the ATen graph
    ``gm`` do something, or None when they do nothing and the graph takes the Dynamo graph's
    inputs: then the compiled graph, through :func:`inference_function`, is the whole compiled
    function Dynamo needs (the cold compile returns that, not AOTAutograd's wrappers)."""
    outs = gm.graph.output_node().args[0]
    why = compat.aot_plain_inference(compat.aot_forward_metadata(), len(outs) if isinstance(outs, (tuple, list)) else -1)
    if why is None and len([n for n in gm.graph.nodes if n.op == "placeholder"]) != len(example_inputs):
        why = "the ATen graph takes other inputs than the Dynamo graph"
    return why


def store(cache: ArtifactCache, key: str, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    """At a cold compile, inside AOTAutograd's inference compiler: cache ``gm`` (the ATen graph)
    under ``key`` when AOTAutograd's wrappers around it do nothing; the reason when not stored."""
    why = plain(gm, example_inputs)
    if why is None and any(n.op in ("get_attr", "call_module") for n in gm.graph.nodes):
        why = "the ATen graph reads attributes"
    if why is not None:
        return why
    try:
        data = json.dumps({"format": _FORMAT, "graph": graph_to_json(gm)}).encode()
    except (ValueError, TypeError) as e:  # an argument the JSON form cannot hold: no bypass
        return f"not serializable: {e}"
    cache.get_or_build_bytes(key, lambda: data, SUFFIX)
    return None


def load(cache: ArtifactCache, key: str, example_inputs: Sequence[torch.Tensor]) -> fx.GraphModule | None:
    """At a warm compile: the cached ATen graph for ``key`` with ``meta["val"]`` on every node,
    or None (a miss; an entry that does not rebuild is removed)."""
    path = cache.lookup(key, SUFFIX)
    if path is None:
        return None
    try:
        data = json.loads(path.read_bytes())
        if data.get("format") != _FORMAT:
            raise ValueError(f"format {data.get('format')!r}")
        gm = graph_from_json(data["graph"])
        compat.fake_propagate(gm, example_inputs)
    except Exception:  # noqa: BLE001 - any bad entry: remove it, the normal path writes it again
        for p in (path, path.with_name(path.name + ".sha256")):
            p.unlink(missing_ok=True)
        cache.stats["rebuilt"] += 1
        return None
    cache.stats["hit"] += 1
    return gm


def inference_function(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` (the SDK's module for the ATen graph, or its boxed form: ``_boxed_call``)
    with the calling convention of AOTAutograd's compiled inference function for Dynamo:
    ``fn(*args) -> list of outputs``, run under no_grad. Dynamo wraps what a backend returns so
    that it is not traced; this adds no second wrapper, and enters no_grad only where grad is on
    (an inference call under ``torch.no_grad()`` pays for neither).

    >>> fn = inference_function(torch.fx.symbolic_trace(lambda x: (x * 2,)))
    >>> fn(torch.ones(2))
    [tensor([2., 2.])]
    """
    call = getattr(compiled, "forward", compiled)  # a GraphModule: without nn.Module's hook dispatch
    boxed = getattr(compiled, "_boxed_call", False)

    def run(*args: Any) -> list[Any]:
        if torch.is_grad_enabled():
            with torch.no_grad():
                out = call(list(args)) if boxed else call(*args)
        else:
            out = call(list(args)) if boxed else call(*args)
        return out if type(out) is list else list(out) if isinstance(out, tuple) else [out]

    return run
