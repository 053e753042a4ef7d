"""AOTAutograd (``torch._functorch``): the Dynamo backend that runs it, the boxed calling
convention, joint-graph partitioners, the metadata and descriptors of the graph being compiled,
and its cache switch. Imported inside the functions (heavy).

    >>> fn = make_boxed_func(lambda x: x + 1); fn([1])
    2
    >>> make_boxed_func(fn) is fn          # already boxed: as it is
    True
"""
from __future__ import annotations

import contextlib as _contextlib
import importlib as _importlib
from typing import Any as _Any, Callable as _Callable

__all__ = ["HAS_AOT_DESCRIPTORS", "aot_autograd_backend", "make_boxed_func", "boxed_graph_module", "partitioner", "aot_forward_metadata",
           "aot_plain_inference", "aot_descriptor", "autograd_cache_patch"]


def _has_module(name: str) -> bool:
    try:
        _importlib.import_module(name)
        return True
    except ImportError:
        return False



#: AOTAutograd tags graph inputs/outputs with descriptors (``node.meta["desc"]``, e.g.
#: ``PlainAOTInput(idx=0)``, ``TangentAOTInput(output=PlainAOTOutput(idx=1))``). Present in
#: 2.13; without it the ATen capture falls back to the positional layout of ViewAndMutationMeta.
HAS_AOT_DESCRIPTORS: bool = _has_module("torch._functorch._aot_autograd.descriptors")


def aot_autograd_backend(**kwargs: _Any) -> _Callable[..., _Any]:
    """``torch._dynamo.backends.common.aot_autograd(**kwargs)``: a Dynamo backend running AOTAutograd."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(**kwargs)


def make_boxed_func(fn: _Callable[..., _Any]) -> _Callable[..., _Any]:
    """Wrap ``fn(*args)`` in AOTAutograd's boxed calling convention (``fn(args_list)``); a
    callable that already takes it (``fn._boxed_call``: it may clear the list to free inputs
    early) is returned as it is."""
    if getattr(fn, "_boxed_call", False):
        return fn
    from torch._functorch.aot_autograd import make_boxed_func as _boxed

    return _boxed(fn)


def boxed_graph_module(gm: _Any) -> _Callable[..., _Any]:
    """``gm`` (an ``fx.GraphModule``) recompiled with FX's boxed code generator
    (``torch.fx.graph._BoxedCodeGen``, what ``boxed_nop`` uses): its ``forward(args_list)``
    takes the inputs from the list and clears it, and FX's code drops each value after its last
    use, so an input the caller handed over is freed there. Returns a callable marked
    ``_boxed_call`` (``gm`` itself where torch's GraphModule says so)."""
    try:
        from torch.fx.graph import _BoxedCodeGen as codegen
    except ImportError:  # pragma: no cover - release dependent
        codegen = _boxed_codegen()
    gm.graph.set_codegen(codegen())
    gm.recompile()
    if getattr(gm, "_boxed_call", False):
        return gm
    forward = gm.forward

    def run(args: list) -> _Any:
        return forward(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _boxed_codegen() -> type:  # pragma: no cover - releases without torch's own
    from torch.fx.graph import CodeGen

    class BoxedCodeGen(CodeGen):
        def gen_fn_def(self, free_vars: list, maybe_return_annotation: str, **kwargs: _Any) -> str:
            names = [v.split(":")[0].split("=")[0].strip() for v in free_vars if v != "self"]
            lines = [f"def {self._func_name}(self, args_list){maybe_return_annotation}:"]
            if names:
                lines += ["    args_iter = iter(args_list)", *(f"    {v} = next(args_iter)" for v in names),
                          "    args_list.clear()"]
            return "\n".join(lines)

    return BoxedCodeGen


def partitioner(name: str) -> _Callable[..., _Any]:
    """AOTAutograd's joint-graph partitioners: ``"default"`` (save what the forward computed)
    or ``"min_cut"`` (``min_cut_rematerialization_partition``: recompute cheap ops)."""
    from torch._functorch import partitioners

    table = {"default": partitioners.default_partition, "min_cut": partitioners.min_cut_rematerialization_partition}
    if name not in table:
        raise ValueError(f"unknown partitioner {name!r}; choose one of {sorted(table)}")
    return table[name]


def aot_forward_metadata() -> _Any:
    """AOTAutograd's ViewAndMutationMeta for the graph being compiled (inside a fw/bw/inference
    compiler), or None outside one. Fields used: ``input_info``, ``output_info``,
    ``num_intermediate_bases``, ``mutated_inp_runtime_indices``."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    return getattr(ctx, "fw_metadata", None) if ctx is not None else None


def aot_plain_inference(metadata: _Any, n_outputs: int) -> str | None:
    """Why AOTAutograd's runtime wrappers around an inference graph do something, or None when
    they do nothing (the compiled graph alone, run under no_grad, is the whole compiled function):
    no mutated inputs, every output a fresh tensor (no alias of an input or intermediate), no
    effect tokens, no functionalized RNG, no tensor subclasses, no grad-mode change, and the
    graph returns exactly ``n_outputs`` values (the Dynamo graph's outputs)."""
    if metadata is None:
        return "no AOTAutograd metadata"
    from torch._functorch._aot_autograd.schemas import OutputType

    for i, info in enumerate(getattr(metadata, "input_info", None) or ()):
        if info.mutates_data or info.mutates_metadata or getattr(info, "mutates_storage_metadata", False):
            return f"input {i} is mutated"
    outputs = list(getattr(metadata, "output_info", None) or ())
    if len(outputs) != n_outputs:
        return f"{len(outputs)} AOTAutograd outputs for {n_outputs} graph outputs"
    for i, info in enumerate(outputs):
        if info.output_type != OutputType.non_alias:
            return f"output {i} is {info.output_type.name}"
    checks = {"intermediate bases": getattr(metadata, "num_intermediate_bases", 1),
              "effect tokens": len(getattr(metadata, "tokens", None) or {}),
              "functionalized RNG": getattr(metadata, "is_rng_op_functionalized", True),
              "graph-safe RNG states": getattr(metadata, "num_graphsafe_rng_states", 1),
              "a grad-mode change": getattr(metadata, "grad_enabled_mutation", None) is not None}
    for what, value in checks.items():
        if value:
            return f"it has {what}"
    metas = [*(getattr(metadata, "subclass_inp_meta", None) or ()), *(getattr(metadata, "subclass_fw_graph_out_meta", None) or ())]
    if any(type(m).__name__ == "SubclassCreationMeta" for m in metas):
        return "it has tensor subclasses"
    return None


def aot_descriptor(desc: _Any) -> tuple:
    """Normalize an AOTAutograd descriptor to a tuple of plain values, e.g.
    ``("input", 0)``, ``("param", "lin.weight")``, ``("output", 1)``, ``("mutation", ("input", 0))``,
    ``("saved", 2)``, ``("tangent", ("output", 0))``, ``("grad", ("input", 3))``, ``("other", repr)``.
    ``None`` (no descriptor) gives ``("none",)``."""
    if desc is None:
        return ("none",)
    kind = type(desc).__name__
    simple = {"PlainAOTInput": ("input", "idx"), "ParamAOTInput": ("param", "target"),
              "BufferAOTInput": ("buffer", "target"), "PlainAOTOutput": ("output", "idx"),
              "SavedForBackwardsAOTOutput": ("saved", "idx"), "IntermediateBaseAOTOutput": ("base", "idx")}
    if kind in simple:
        tag, attr = simple[kind]
        return (tag, getattr(desc, attr, None))
    nested = {"InputMutationAOTOutput": ("mutation", "mutated_input"), "TangentAOTInput": ("tangent", "output"),
              "GradAOTOutput": ("grad", "grad_of")}
    if kind in nested:
        tag, attr = nested[kind]
        return (tag, aot_descriptor(getattr(desc, attr, None)))
    return ("other", repr(desc))


def autograd_cache_patch(enabled: bool) -> _Any:
    """Scope ``torch._functorch.config.enable_autograd_cache`` (a context manager)."""
    import torch._functorch.config as fconfig

    if not hasattr(fconfig, "enable_autograd_cache"):  # pragma: no cover - release dependent
        return _contextlib.nullcontext()
    return fconfig.patch(enable_autograd_cache=enabled)
