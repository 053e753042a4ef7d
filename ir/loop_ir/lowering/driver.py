"""The one place the loop level drives Inductor: :func:`lower` runs ``compile_fx_inner`` on one
ATen graph with our Scheduling registered for the device (:func:`registered`) under Inductor's
settings for our compiles (:func:`inductor_settings`, the one patch of Inductor's config).

Our compiles bypass the FX-graph cache (a hit would skip lowering, so there would be nothing to
record); the previous registration of the device is put back after each compile.

    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: (x * 2,))(torch.ones(3))
    >>> _, program = lower(gm, [torch.ones(3)], "cpu", "inference", run=False, is_inference=True)
    >>> [k.kind for k in program.kernels]
    ['pointwise']
"""
from __future__ import annotations

import contextlib
import types
from typing import Any, ContextManager, Iterator, Mapping, Sequence

import torch
import torch.fx as fx

from ... import compat
from ..schema import LoopProgram
from .assembly import passthrough_program
from .inductor_hooks import cache_key_pass, scheduling_for, wrapper_for
from .state import Lowering

__all__ = ["INDUCTOR_SETTINGS", "inductor_settings", "registered", "lower"]

#: Inductor settings for our compiles: no caches (the lowering must run to be recorded), one
#: wrapper per graph, no templates, Python wrapper.
INDUCTOR_SETTINGS: Mapping[str, Any] = types.MappingProxyType(dict(
    fx_graph_cache=False, fx_graph_remote_cache=False, graph_partition=False, cpp_wrapper=False,
    max_autotune=False, max_autotune_gemm=False, combo_kernels=False, freezing=False, benchmark_kernel=False))


def inductor_settings(**extra: Any) -> ContextManager[Any]:
    """The one patch of Inductor's config for our compiles: :data:`INDUCTOR_SETTINGS`, then
    ``extra`` (a backend's own options). Settings already in force are left alone, so a graph
    lowered inside the :func:`~torchvendor.ir.loop_ir.loop_ir_hook` backend (which sets them
    around ``compile_fx``) patches nothing again, and a backward compiled lazily, after that
    backend returned, gets them once."""
    return compat.inductor_config_patch(**{**INDUCTOR_SETTINGS, **extra})


@contextlib.contextmanager
def registered(lowering: Lowering, **config: Any) -> Iterator[None]:
    """Inductor compiles inside this block use ``lowering``'s Scheduling and wrapper for its
    device, with :func:`inductor_settings` (and ``config``)."""
    if lowering.device != "cpu":
        compat.ensure_device_hooks(lowering.device)
    with compat.scoped_inductor_backend(lowering.device, scheduling_for(lowering), wrapper_for(lowering),
                                        cache_key_pass()), inductor_settings(**config):
        yield


def lower(gm: fx.GraphModule, example_inputs: Sequence[Any], device: str, kind: str, *, run: bool,
          config: Mapping[str, Any] | None = None, **inner_kwargs: Any) -> tuple[Any, LoopProgram]:
    """``compile_fx_inner`` on one ATen graph under the loop IR Scheduling for ``device``;
    returns (Inductor's compiled function, the program). ``run=False``: only the program is
    wanted (no wrapper is generated; the function must not be called). ``config``: more
    Inductor settings for this graph."""
    got: list[LoopProgram] = []
    with registered(Lowering(device, got.append, run), **(config or {})):
        compiled = compat.inductor().compile_fx_inner(gm, list(example_inputs), **inner_kwargs)
    if not got and not any(n.op == "call_function" for n in gm.graph.nodes):
        got.append(passthrough_program(gm, example_inputs, kind, device))
    if len(got) != 1:
        devices = sorted({str(v.device) for v in example_inputs if isinstance(v, torch.Tensor)})
        raise RuntimeError(f"loop IR: Inductor generated {len(got)} programs for one {kind} graph lowered for "
                           f"device {device!r} (its tensor inputs are on {devices or 'no device'}): the graph's "
                           f"tensors must be on {device!r}, whose Scheduling is the loop IR's")
    return compiled, got[0]
