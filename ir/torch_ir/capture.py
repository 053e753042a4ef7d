"""Capture at torch level: :func:`torch_ir_hook`, the Dynamo backend a capture uses (an SDK
backend uses it the same way), :func:`capture_torch`, and the capture driver the ATen and loop
levels build on.

:func:`compile_and_record` runs a function or module once under ``torch.compile(fullgraph=True)`` with a
backend that records Dynamo's graph, and finds what feeds each placeholder (a user input, a
parameter or buffer of the module, or, for a function, of the modules it reads from its closure
or globals: :func:`closure_modules`) and where each user output comes from. Each level passes
its own inner compiler: the graph as is (torch), AOTAutograd (ATen), Inductor (loop).

Example::

    >>> import torch
    >>> p = capture_torch(lambda x: torch.relu(x) + 1, [torch.randn(3)])
    >>> type(p).__name__, p.run(torch.tensor([-1.0, 0.0, 2.0]))
    ('TorchProgram', [tensor([1., 1., 3.])])
"""
from __future__ import annotations

import inspect
import keyword
import linecache
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from .. import compat
from ..fx_graph import Slot, placeholders
from ..program import flatten_inputs, flatten_outputs
from .program import OutputSlot, TorchProgram, Trace, grad_leaves

__all__ = ["torch_ir_hook", "capture_torch", "closure_modules", "compile_and_record"]

#: A torch-level backend callback: sees Dynamo's graph and example inputs, returns the callable
#: to run in its place, or None to run the graph as is.
TorchCallback = Callable[[fx.GraphModule, list[Any]], "Callable[..., Any] | None"]


def torch_ir_hook(callback: TorchCallback) -> Callable[..., Any]:
    """A Dynamo backend (pass it to ``torch.compile(backend=...)``) that hands each torch-IR
    graph to ``callback(gm, example_inputs)`` and runs what it returns (``gm.forward`` if None).

    Accepts and ignores the ``mode=``/``options=`` keywords ``torch.compile`` may pass.

    >>> import torch
    >>> seen = []
    >>> f = torch.compile(lambda x: x.sin() + 1, backend=torch_ir_hook(lambda gm, ex: seen.append(gm)))
    >>> _ = f(torch.randn(3)); len(seen)
    1
    """
    def backend(gm: fx.GraphModule, example_inputs: list[Any], **_: Any) -> Callable[..., Any]:
        compiled = callback(gm, list(example_inputs))
        return compiled if compiled is not None else gm.forward

    backend.__name__ = f"torch_ir_hook({getattr(callback, '__name__', 'callback')})"
    return backend


# ---- the capture driver, shared with the ATen and loop levels ------------------------------------

@dataclass
class _Record:
    gm: fx.GraphModule | None = None
    example_inputs: list[Any] = field(default_factory=list)
    tracing_guards: list[str] = field(default_factory=list)
    graph_outputs: Any = None
    calls: int = 0


def _clone_leaf(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        y = x.detach().clone()
        return y.requires_grad_(x.requires_grad) if x.is_leaf or x.requires_grad else y
    return x


def _arg_names(target: Any, n: int) -> list[str]:
    fn = target.forward if isinstance(target, torch.nn.Module) else target
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:n]
    reserved = {"self", "__tv_target__"}
    if len(names) == n and len(set(names)) == n and not any(keyword.iskeyword(a) or a in reserved for a in names):
        return names
    return [f"input{i}" for i in range(n)]


_counter = [0]


def _entry_function(target: Any, n_args: int) -> Callable[..., Any]:
    """A fresh function ``capture_<name>([self,] a, b, ...)`` calling ``target``. A new code
    object per capture gives Dynamo a fresh cache, so captures never hit the recompile limit
    and never need a global ``torch._dynamo.reset()``."""
    names = _arg_names(target, n_args)
    label = type(target).__name__ if isinstance(target, torch.nn.Module) else getattr(target, "__name__", "fn")
    label = "".join(c if c.isalnum() else "_" for c in label)
    _counter[0] += 1
    args = ", ".join(names)
    if isinstance(target, torch.nn.Module):
        src = f"def capture_{label}(self, {args}):\n    return self({args})\n"
    else:
        src = f"def capture_{label}({args}):\n    return __tv_target__({args})\n"
    filename = f"<torchvendor capture #{_counter[0]}>"
    # Give the function a source that ``inspect.getsourcefile`` finds. torch 2.11's
    # torch.compile runs a function without one inside a shared wrapper frame
    # (``external_utils.wrap_inline``), whose single code object then collects the cache
    # entries of every capture and hits the recompile limit after 8; 2.13 and later wrap only
    # callables that are not functions. With the source registered, every release compiles
    # this function's own code object (tests/test_compat_dynamo.py checks it).
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace: dict[str, Any] = {"__tv_target__": target}
    exec(compile(src, filename, "exec"), namespace)
    return namespace[f"capture_{label}"]


def _names_by_id(module: torch.nn.Module | None) -> tuple[dict[int, str], dict[int, str]]:
    """id -> qualified name of every parameter and buffer of ``module``. A tied tensor (T5's
    ``shared.weight`` is ``encoder.embed_tokens.weight``) gets the name ``named_parameters()``
    gives it: the first, so gradients are keyed as the user's optimizer sees them."""
    if module is None:
        return {}, {}
    return ({id(p): n for n, p in module.named_parameters()}, {id(b): n for n, b in module.named_buffers()})


def closure_modules(fn: Callable[..., Any]) -> torch.nn.Module | None:
    """The modules and parameters a function reads from its closure or globals, gathered under
    one root module by variable name (``lin`` -> ``lin.weight``), or None if there are none.

    ``torch.compile(f)`` trains the parameters of a module that ``f`` closes over, as eager
    does; the capture finds them the same way and keys their gradients by these names. A bound
    method of a module (``model.forward``) has that module as root.

    >>> lin = torch.nn.Linear(2, 1)
    >>> sorted(n for n, _ in closure_modules(lambda x: lin(x)).named_parameters())
    ['lin.bias', 'lin.weight']
    """
    if inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module):
        return fn.__self__
    try:
        found = inspect.getclosurevars(fn)
    except TypeError:  # not a Python function (a builtin, a C extension, a partial)
        return None
    root = torch.nn.Module()
    for name, value in {**found.globals, **found.nonlocals}.items():
        if isinstance(value, torch.nn.Parameter):
            root.register_parameter(name, value)
        elif isinstance(value, torch.nn.Module):
            root.add_module(name, value)
    return root if any(True for _ in root.named_children()) or any(True for _ in root.parameters()) else None


def _slots(gm: fx.GraphModule, example_inputs: Sequence[Any], user: Sequence[Any],
           module: torch.nn.Module | None) -> list[Slot]:
    params, buffers = _names_by_id(module)
    by_id = {}
    for i, leaf in enumerate(user):
        if isinstance(leaf, torch.Tensor):
            by_id.setdefault(id(leaf), i)
    slots = []
    for node, ex in zip(placeholders(gm), example_inputs):
        fake = node.meta.get("example_value")
        if isinstance(ex, torch.Tensor):
            if id(ex) in by_id:
                slots.append(Slot("input", node.name, by_id[id(ex)]))
            elif id(ex) in params:
                slots.append(Slot("parameter", params[id(ex)]))
            elif id(ex) in buffers:
                slots.append(Slot("buffer", buffers[id(ex)]))
            else:
                slots.append(Slot("constant", node.name, value=ex))
        else:
            expr = fake.node.expr if isinstance(fake, torch.SymInt) else ex
            ints = [i for i, leaf in enumerate(user) if type(leaf) is int and leaf == int(ex)]
            shape_symbols = {s.node.expr for n2 in placeholders(gm)
                             for s in getattr(n2.meta.get("example_value"), "shape", ()) if isinstance(s, torch.SymInt)}
            if ints and expr not in shape_symbols:
                slots.append(Slot("input", node.name, ints[0]))
            else:
                slots.append(Slot("symint", node.name, value=expr))
    return slots


def _output_slots(result_leaves: Sequence[Any], graph_outputs: Sequence[Any], user: Sequence[Any],
                  module: torch.nn.Module | None) -> list[OutputSlot]:
    params, buffers = _names_by_id(module)
    named = {**{i: ("buffer", n) for i, n in buffers.items()}, **{i: ("parameter", n) for i, n in params.items()}}
    out = []
    for leaf in result_leaves:
        if isinstance(leaf, torch.Tensor):
            k = next((k for k, g in enumerate(graph_outputs) if g is leaf), None)
            i = next((i for i, u in enumerate(user) if u is leaf), None)
            if k is not None:
                out.append(OutputSlot("graph", k))
            elif i is not None:
                out.append(OutputSlot("input", i))
            elif id(leaf) in named:
                out.append(OutputSlot(named[id(leaf)][0], name=named[id(leaf)][1]))
            else:
                raise RuntimeError("capture: an output tensor is neither a graph output, an input nor a parameter; "
                                   "this Dynamo behaviour is not supported yet (please report it with the function)")
        else:
            k = next((k for k, g in enumerate(graph_outputs) if not isinstance(g, torch.Tensor) and g == leaf), None)
            out.append(OutputSlot("graph", k) if k is not None else OutputSlot("constant", value=leaf))
    return out


def compile_and_record(target: Callable[..., Any] | torch.nn.Module, example_inputs: Sequence[Any],
          inner: Callable[[fx.GraphModule, list[Any]], Callable[..., Any]], *, dynamic: bool = False,
          training: bool = False) -> Trace:
    """Run ``target`` once under ``torch.compile(fullgraph=True)`` with a backend that records
    the Dynamo graph and hands it to ``inner(gm, example_inputs)`` (which returns the compiled
    callable); for ``training`` also run a backward so AOTAutograd compiles its backward graph."""
    if not isinstance(example_inputs, (list, tuple)):
        raise TypeError(f"example_inputs must be a list or tuple of positional arguments, got {type(example_inputs).__name__}")
    module = target if isinstance(target, torch.nn.Module) else None
    if module is None and not callable(target):
        raise TypeError(f"capture needs a function or an nn.Module, got {type(target).__name__}")
    # whose parameters and buffers feed the graph by name: the module, or what a function closes over
    owner = module if module is not None else closure_modules(target)
    inputs = compat.tree_unflatten([_clone_leaf(x) for x in flatten_inputs(example_inputs)],
                                   compat.tree_flatten(list(example_inputs))[1])
    user = flatten_inputs(inputs)
    rec = _Record()

    def backend(gm: fx.GraphModule, ex: list[Any], **_: Any) -> Callable[..., Any]:
        rec.gm, rec.example_inputs, rec.calls = gm, list(ex), rec.calls + 1
        rec.tracing_guards = compat.tracing_guard_lines()
        compiled = inner(gm, list(ex))

        def recording(*args: Any) -> Any:
            out = compiled(*args)
            rec.graph_outputs = out
            return out
        return recording

    entry = _entry_function(target, len(inputs))
    compiled = torch.compile(entry, backend=backend, fullgraph=True, dynamic=dynamic)
    call_args = ([module] if module is not None else []) + list(inputs)
    with torch.enable_grad() if training else torch.no_grad():
        result = compiled(*call_args)
    if rec.gm is None:
        raise RuntimeError("capture: torch.compile produced no graph (the function has no tensor operations?)")
    leaves = flatten_outputs(result)
    graph_outputs = list(rec.graph_outputs) if isinstance(rec.graph_outputs, (list, tuple)) else [rec.graph_outputs]
    if training:
        _backward_once(leaves, user, owner)
    try:
        guards = compat.guard_lines(entry.__code__)
    except Exception as e:  # a summary must never fail the capture
        guards = None
        rec.tracing_guards.insert(0, f"# reading cache-entry guards failed: {type(e).__name__}: {e}")
    if guards is None:
        guards = [f"# cache-entry guards are not exposed by torch {torch.__version__}; "
                  f"guards from the tracing context:"] + rec.tracing_guards
    return Trace(owner, user, result, rec.gm, rec.example_inputs, _slots(rec.gm, rec.example_inputs, user, owner),
                 _output_slots(leaves, graph_outputs, user, owner), guards, dynamic, training)


def _backward_once(leaves: Sequence[Any], user: Sequence[Any], module: torch.nn.Module | None) -> None:
    diff = [o for o in leaves if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [t for _, t in grad_leaves(user, module)]
    if not diff or not wrt:
        raise ValueError("capture(training=True): no output requires grad. Give the example inputs "
                         "requires_grad=True (or capture a module with trainable parameters, or a function that "
                         "reads one from its closure or globals), or use training=False")
    torch.autograd.grad(diff, wrt, [torch.ones_like(o) for o in diff], allow_unused=True)


def capture_torch(fn: Callable[..., Any] | torch.nn.Module, example_inputs: Sequence[Any], *,
                  training: bool = False, dynamic: bool = False) -> TorchProgram:
    """Capture ``fn`` at torch level (``capture(..., level="torch")``)."""
    return TorchProgram(compile_and_record(fn, example_inputs, lambda gm, ex: gm.forward, dynamic=dynamic, training=training))
