"""``capture_loop``: a function's Inductor loop IR, forward and backward, as :class:`LoopProgram` s.

The function runs once under ``torch.compile(fullgraph=True)`` through Inductor (its
decompositions, lowering and fusion, with the loop IR Scheduling of :mod:`.extract`); each
graph Inductor generates is recorded as a :class:`LoopProgram`. With ``training=True``
AOTAutograd splits forward and backward and Inductor compiles both (the backward after one
backward pass, which the capture runs).

The capture is a :class:`~torchvendor.ir.loop_ir.program.LoopCapture` (``program.py``).
:func:`loop_ir_hook` is the Dynamo backend the capture uses; :func:`lower_graph` lowers one
ATen graph for a backend that runs its own code (``torchvendor.sdk.Backend`` at ``LOOP`` level).

Example::

    >>> import torch
    >>> p = capture_loop(lambda x: (x.sin() * 2).sum(), [torch.randn(4, 8, requires_grad=True)], training=True)
    >>> [k.kind for k in p.forward.kernels]
    ['reduction']
    >>> g = p.run_backward(torch.zeros(4, 8))["input0"]
    >>> torch.allclose(g, torch.full((4, 8), 2.0))
    True
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from .. import compat
from ..torch_ir.capture import compile_and_record
from .extract import _CONFIG, _capture_scope, passthrough_program
from .program import LoopCapture
from .schema import LoopProgram

__all__ = ["capture_loop", "loop_ir_hook", "loop_backend", "lower_graph", "inductor_decompositions"]

#: Receives each Inductor graph: (kind, fx graph as Inductor got it, fake example inputs, program).
LoopCallback = Callable[[str, fx.GraphModule, list[Any], LoopProgram], None]


def _kind(kwargs: dict[str, Any]) -> str:
    return "backward" if kwargs.get("is_backward") else "inference" if kwargs.get("is_inference") else "forward"


def _lower(gm: fx.GraphModule, example_inputs: Sequence[Any], device: str, kind: str, *, run: bool,
           **inner_kwargs: Any) -> tuple[Any, LoopProgram]:
    """The one place the loop level drives Inductor: ``compile_fx_inner`` on one ATen graph under
    the loop IR Scheduling for ``device``; returns (Inductor's compiled function, the program).
    ``run=False``: only the program is wanted (no wrapper is generated; the function must not
    be called)."""
    got: list[LoopProgram] = []
    with _capture_scope(device, got.append, run=run):
        compiled = compat.inductor().compile_fx_inner(gm, list(example_inputs), **inner_kwargs)
    if not got and not any(n.op == "call_function" for n in gm.graph.nodes):
        got.append(passthrough_program(gm, example_inputs, kind, device))
    if len(got) != 1:
        devices = sorted({str(v.device) for v in example_inputs if isinstance(v, torch.Tensor)})
        raise RuntimeError(f"loop IR: Inductor generated {len(got)} programs for one {kind} graph lowered for "
                           f"device {device!r} (its tensor inputs are on {devices or 'no device'}): the graph's "
                           f"tensors must be on {device!r}, whose Scheduling is the loop IR's")
    return compiled, got[0]


def loop_ir_hook(callback: LoopCallback, *, device: str = "cpu") -> Callable[..., Any]:
    """A Dynamo backend: Inductor with the loop IR Scheduling for ``device``; ``callback`` sees
    every graph's :class:`LoopProgram` with the AOTAutograd graph it was lowered from. The
    compiled function runs its kernels with the reference interpreter.

    >>> import torch
    >>> seen = []
    >>> f = torch.compile(torch.cos, backend=loop_ir_hook(lambda kind, gm, ex, p: seen.append(kind)))
    >>> _ = f(torch.ones(2)); seen
    ['inference']
    """
    ns = compat.inductor()

    def inner_compile(gm: fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        kind = _kind(kwargs)
        out = gm.graph.output_node()
        out.meta["tv_output_names"] = [a.name if isinstance(a, fx.Node) else None for a in out.args[0]]
        gm.meta["aot_metadata"] = compat.aot_forward_metadata()
        compiled, program = _lower(gm, example_inputs, device, kind, run=True, **kwargs)
        callback(kind, gm, list(example_inputs), program)
        return compiled

    def backend(gm: fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Any:
        with compat.inductor_config_patch(**_CONFIG), compat.autograd_cache_patch(False):
            return ns.compile_fx(gm, example_inputs, inner_compile=inner_compile)

    backend.__name__ = f"torchvendor_loop_ir_{device}"
    return backend


def loop_backend(*, device: str = "cpu", on_program: Callable[[LoopProgram], None] | None = None) -> Callable[..., Any]:
    """:func:`loop_ir_hook` for callers that want only the programs: a ``torch.compile``
    backend running Inductor with the loop IR Scheduling for ``device``, each kernel executed
    by the reference interpreter; ``on_program`` receives each graph's :class:`LoopProgram`
    (inference, or forward then backward). Plain Inductor elsewhere in the process is unaffected.

    >>> import torch
    >>> seen = []
    >>> g = torch.compile(torch.sin, backend=loop_backend(on_program=seen.append))
    >>> torch.allclose(g(torch.ones(3)), torch.ones(3).sin()), seen[0].name
    (True, 'inference')
    """
    sink = on_program or (lambda program: None)
    return loop_ir_hook(lambda kind, gm, ex, program: sink(program), device=device)


def capture_loop(fn: Callable[..., Any] | torch.nn.Module, example_inputs: Sequence[Any], *, training: bool = False,
                 dynamic: bool = False, device: str = "cpu") -> LoopCapture:
    """Capture ``fn`` at loop level (``capture(..., level="loop")``).

    Args:
        fn: a function or ``nn.Module`` compiling to one graph.
        example_inputs: positional arguments, on ``device``.
        training: also capture the backward program (``run_backward``).
        dynamic: symbolic sizes (``s0, s1, ...`` in the programs).
        device: the device whose Inductor backend is overridden during the capture: ``"cpu"``
            or a renamed PrivateUse1 device such as ``"acme"``.

    Raises :class:`~torchvendor.ir.loop_ir.extract.LoopIRUnsupported` (inside torch's
    ``InductorError``) when Inductor produces something the loop IR cannot express.
    """
    device = torch.device(device).type
    graphs: dict[str, tuple[fx.GraphModule, list[Any]]] = {}
    programs: dict[str, LoopProgram] = {}

    def record(kind: str, gm: fx.GraphModule, ex: list[Any], program: LoopProgram) -> None:
        graphs[kind] = (gm, ex)
        programs[kind] = program

    tr = compile_and_record(fn, example_inputs, loop_ir_hook(record, device=device), dynamic=dynamic, training=training)
    return LoopCapture(tr, graphs, programs, device)


def inductor_decompositions() -> dict[Any, Any]:
    """Inductor's decomposition table, for ``aten_ir_hook(decompositions=...)`` before :func:`lower_graph`,
    with one numerics fix: ``var_mean`` over an empty dimension gives NaN for both results, as
    eager does (Inductor folds the empty Welford reduction to a mean of 0), and one device fix:
    ``masked_scatter`` asks the device's Inductor backend for a feature, but a torchvendor
    device's Scheduling is registered only while its graph is lowered, after decomposition, so
    the question asserted; there it gets the answer of the LOOP schedulings (which lack the
    feature): no decomposition, Inductor's own ``masked_scatter`` lowering.

    >>> import torch
    >>> table = inductor_decompositions()
    >>> table[torch.ops.aten.var_mean.correction](torch.ones(3, 0), [1])
    (tensor([nan, nan, nan]), tensor([nan, nan, nan]))
    """
    table = compat.inductor_decompositions()
    table[torch.ops.aten.var_mean.correction] = _var_mean_of_empty
    masked_scatter = table.get(torch.ops.aten.masked_scatter.default)
    if masked_scatter is not None:
        table[torch.ops.aten.masked_scatter.default] = functools.partial(_masked_scatter, masked_scatter)
    return table


def _masked_scatter(inductor_decomposition: Any, self: torch.Tensor, mask: torch.Tensor,
                    source: torch.Tensor) -> Any:
    """Inductor's decomposition where Inductor knows the device's backend; NotImplemented (keep
    the operator) for a device whose LOOP Scheduling is not registered yet."""
    if compat.has_device_scheduling(self.device.type):
        return inductor_decomposition(self, mask, source)
    return NotImplemented


def _var_mean_of_empty(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    """NaN results for a reduction over no elements (statically known); NotImplemented, i.e.
    Inductor's own lowering, otherwise."""
    dims = range(x.dim()) if dim is None or (isinstance(dim, (list, tuple)) and not dim) else \
        [d % max(x.dim(), 1) for d in ([dim] if isinstance(dim, int) else dim)]
    reduced = [x.shape[d] for d in dims] if x.dim() else [1]
    if not any(isinstance(n, int) and n == 0 for n in reduced):  # a symbolic size is never 0 (0 is specialized)
        return NotImplemented
    shape = [1 if d in dims else n for d, n in enumerate(x.shape)] if keepdim else \
        [n for d, n in enumerate(x.shape) if d not in dims]
    nan = torch.full(shape, float("nan"), dtype=x.dtype, device=x.device)
    return nan, nan.clone()


def lower_graph(gm: fx.GraphModule, example_inputs: Sequence[Any], *, device: str = "cpu",
                kind: str = "inference") -> LoopProgram:
    """Lower one AOTAutograd (ATen) graph with Inductor and return its :class:`LoopProgram`,
    for backends that run their own code instead of Inductor's: call it from an ATen-level
    compiler (``torchvendor.ir.aten_ir_hook``) and return your own callable. The graph must be
    decomposed with Inductor's table (``decompositions=inductor_decompositions()``). ``kind`` is
    ``"inference"``, ``"forward"`` or ``"backward"``. Inductor's post-grad passes rewrite ``gm``
    in place (preserving what it computes).

    >>> import torch
    >>> from torchvendor.ir import aten_ir_hook
    >>> seen = []
    >>> be = aten_ir_hook(inference=lambda gm, ex: seen.append(lower_graph(gm, ex)),
    ...                   decompositions=inductor_decompositions())
    >>> with torch.no_grad():
    ...     _ = torch.compile(lambda x: torch.relu(x) * 2, backend=be)(torch.randn(3))
    >>> seen[0].kernels[0].kind
    'pointwise'
    """
    with compat.inductor_config_patch(**_CONFIG):
        return _lower(gm, example_inputs, device, kind, run=False, is_backward=kind == "backward",
                      is_inference=kind == "inference")[1]
