"""``capture_loop``: a function's Inductor loop IR, forward and backward, as :class:`LoopProgram` s.

The function runs once under ``torch.compile(fullgraph=True)`` through Inductor (its
decompositions, lowering and fusion, with the loop IR Scheduling of :mod:`.lowering`); each
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

from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx as fx

from .. import compat
from ..torch_ir.capture import compile_and_record
from .lowering.driver import inductor_settings, lower
from .program import LoopCapture
from .schema import LoopProgram

__all__ = ["capture_loop", "loop_ir_hook", "loop_backend", "lower_graph"]

#: Receives each Inductor graph: (kind, fx graph as Inductor got it, fake example inputs, program).
LoopCallback = Callable[[str, fx.GraphModule, list[Any], LoopProgram], None]


def _kind(kwargs: dict[str, Any]) -> str:
    return "backward" if kwargs.get("is_backward") else "inference" if kwargs.get("is_inference") else "forward"


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
        compiled, program = lower(gm, example_inputs, device, kind, run=True, **kwargs)
        callback(kind, gm, list(example_inputs), program)
        return compiled

    def backend(gm: fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Any:
        # compile_fx reads some settings before it lowers (cpp_wrapper, freezing), AOTAutograd its
        # cache flag (a cache hit would skip the lowering, so there would be nothing to record)
        with inductor_settings(), compat.autograd_cache_patch(False):
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

    Raises :class:`~torchvendor.ir.loop_ir.LoopIRUnsupported` (inside torch's
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


def lower_graph(gm: fx.GraphModule, example_inputs: Sequence[Any], *, device: str = "cpu",
                kind: str = "inference", inductor_config: Mapping[str, Any] | None = None) -> LoopProgram:
    """Lower one AOTAutograd (ATen) graph with Inductor and return its :class:`LoopProgram`,
    for backends that run their own code instead of Inductor's: call it from an ATen-level
    compiler (``torchvendor.ir.aten_ir_hook``) and return your own callable. The graph must be
    decomposed with Inductor's table (``decompositions=inductor_decompositions()``). ``kind`` is
    ``"inference"``, ``"forward"`` or ``"backward"``; ``inductor_config`` more Inductor settings
    for this lowering (set in the same, single patch as the loop level's own). Inductor's
    post-grad passes rewrite ``gm`` in place (preserving what it computes).

    >>> import torch
    >>> from torchvendor.ir import aten_ir_hook
    >>> from torchvendor.ir.loop_ir import inductor_decompositions
    >>> seen = []
    >>> be = aten_ir_hook(inference=lambda gm, ex: seen.append(lower_graph(gm, ex)),
    ...                   decompositions=inductor_decompositions())
    >>> with torch.no_grad():
    ...     _ = torch.compile(lambda x: torch.relu(x) * 2, backend=be)(torch.randn(3))
    >>> seen[0].kernels[0].kind
    'pointwise'
    """
    return lower(gm, example_inputs, device, kind, run=False, config=inductor_config,
                 is_backward=kind == "backward", is_inference=kind == "inference")[1]
