"""Compile features and models, for a ``torch.compile`` backend.

Features: graph breaks, guards and recompiles, dynamic shapes, input mutation, aliasing outputs,
``no_grad`` and ``inference_mode``, autocast, backward, one backend object per option set, and
the backend's artifact cache. Models: the model suite (``torchvendor.sdk.conformance.models``),
inference, a second shape and a training step against float64 truth, with speedup, compile time
and vendor coverage as metrics.

    >>> from torchvendor.sdk.conformance.core import Target
    >>> [c.id for c in feature_cases(Target(), "minimal")]
    []
"""
from __future__ import annotations

import itertools
import types
from typing import Any, Callable

import torch

from torchvendor.ir import compat

from .core import Case, Target

__all__ = ["feature_cases", "model_cases"]

_FRESH = itertools.count()


def _fresh(fn: Callable[..., Any]) -> Callable[..., Any]:
    code = fn.__code__.replace(co_name=f"conformance_feature_{next(_FRESH)}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def _compile(target: Target, fn: Any, **kw: Any) -> Any:
    options = dict(target.options)
    return torch.compile(fn, backend=target.backend_name(), options=options or None, **kw)


def _close(a: Any, b: Any) -> None:
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)


def _graph_break(t: Target) -> None:
    def f(x):
        y = torch.sin(x) * 2
        print("", end="")  # a graph break
        return y.cos() + 1
    x = torch.randn(8, device=t.device)
    _close(_compile(t, _fresh(f))(x), f(x))


def _recompile(t: Target) -> None:
    counters = compat.dynamo_counters()
    f = _compile(t, _fresh(lambda x: torch.relu(x) * 2 + 1))
    before = counters["stats"]["unique_graphs"]
    for dtype in (torch.float32, torch.float64, torch.float32):
        x = torch.randn(16, device=t.device, dtype=dtype)
        _close(f(x), torch.relu(x) * 2 + 1)
    graphs = counters["stats"]["unique_graphs"] - before
    assert graphs == 2, f"{graphs} graphs compiled for float32, float64, float32 (expected 2: a dtype guard)"


def _dynamic(t: Target) -> None:
    f = _compile(t, _fresh(lambda x: torch.softmax(x * 2, -1).sum(0)), dynamic=True)
    for n in (3, 5, 9):
        x = torch.randn(n, 7, device=t.device)
        _close(f(x), torch.softmax(x * 2, -1).sum(0))


def _mutation(t: Target) -> None:
    def f(x, y):
        x.add_(y)
        return x * 2
    x, y = torch.randn(10, device=t.device), torch.randn(10, device=t.device)
    x2 = x.clone()
    out = _compile(t, _fresh(f))(x, y)
    ref = f(x2, y)
    _close(out, ref)
    _close(x, x2)


def _noncontiguous_input(t: Target) -> None:
    x = torch.randn(5, 7, device=t.device).t()  # strides (1, 7): the graph must honour them
    f = _fresh(lambda x: torch.exp(x) * 2 + x[:, :1])
    _close(_compile(t, f)(x), torch.exp(x) * 2 + x[:, :1])


def _aliasing(t: Target) -> None:
    def f(x):
        return x.t(), x[1:] * 2
    x = torch.randn(4, 3, device=t.device)
    view, scaled = _compile(t, _fresh(f))(x)
    _close(view, x.t())
    _close(scaled, x[1:] * 2)
    view.mul_(0)  # the output aliases the input, as in eager
    assert bool((x == 0).all()), "the compiled output x.t() does not alias x (eager returns a view)"


def _no_grad_modes(t: Target) -> None:
    f = _compile(t, _fresh(lambda x, w: torch.relu(x @ w)))
    x, w = torch.randn(4, 5, device=t.device), torch.randn(5, 3, device=t.device, requires_grad=True)
    with torch.no_grad():
        y = f(x, w)
    assert not y.requires_grad
    with torch.inference_mode():
        z = f(x, w)
    _close(y, (x @ w).relu().detach())
    _close(z, y)


def _autocast(t: Target) -> Any:
    if t.device != "cpu":
        module = getattr(torch, t.device)
        if torch.bfloat16 not in getattr(module, "get_amp_supported_dtype", lambda: [])():
            return {"skip": f"{t.device} declares no bfloat16 autocast"}
    a, b = torch.randn(8, 16, device=t.device), torch.randn(16, 4, device=t.device)
    f = _compile(t, _fresh(lambda a, b: (a @ b).relu()))
    with torch.autocast(t.device, dtype=torch.bfloat16):
        y, ref = f(a, b), (a @ b).relu()
    assert y.dtype == ref.dtype == torch.bfloat16, f"autocast gave {y.dtype}, eager {ref.dtype}"
    torch.testing.assert_close(y.float(), ref.float(), rtol=1.6e-2, atol=1e-2)
    return None


def _backward(t: Target) -> None:
    def f(x, w, b):
        return torch.nn.functional.gelu(x @ w + b).pow(2).mean()
    args = [torch.randn(6, 5, device=t.device), torch.randn(5, 4, device=t.device), torch.randn(4, device=t.device)]
    mine = [a.clone().requires_grad_() for a in args]
    ref = [a.clone().requires_grad_() for a in args]
    _compile(t, _fresh(f))(*mine).backward()
    f(*ref).backward()
    for a, b in zip(mine, ref):
        _close(a.grad, b.grad)


def _fused_epilogue(t: Target) -> None:
    """Matmul + bias + activation chains, what vendors fuse into one kernel with an epilogue; the
    biases are negative and positive, so an epilogue applied in the wrong order shows."""
    def f(x, w1, b1, w2, b2, w3, b3):
        h = torch.relu(torch.nn.functional.linear(x, w1, b1))
        h = torch.nn.functional.gelu(torch.addmm(b2, h, w2))
        return torch.nn.functional.silu(h @ w3 + b3) + h.sum(-1, keepdim=True)
    g = torch.Generator().manual_seed(0)
    shapes = [(6, 8), (12, 8), (12,), (12, 10), (10,), (10, 5), (5,)]
    args = [(torch.randn(s, generator=g) * 2).to(t.device) for s in shapes]
    with torch.no_grad():
        _close(_compile(t, _fresh(f))(*args), f(*args))


def _one_object_per_options(t: Target) -> None:
    counters = compat.dynamo_counters()
    before = counters["stats"]["unique_graphs"]
    for _ in range(2):
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()).to(t.device)
        _compile(t, m)(torch.randn(2, 4, device=t.device))
    graphs = counters["stats"]["unique_graphs"] - before
    assert graphs == 1, f"two instances of one model compiled {graphs} graphs (expected 1: no backend recompiles)"


def _cache(t: Target) -> Any:
    from torchvendor.sdk import get_backend, registered_backends

    name = t.backend_name()
    if name not in registered_backends():
        return {"skip": f"{name} is not a torchvendor backend (no artifact cache to check)"}
    backend = get_backend(name, **dict(t.options))
    f = _fresh(lambda x: (x.sin() * 3).sum(-1))
    x = torch.randn(4, 9, device=t.device)
    _compile(t, f)(x)
    compat.dynamo_reset()
    hits = backend.cache.stats["hit"]
    _close(_compile(t, f)(x), (x.sin() * 3).sum(-1))
    if backend.cache.stats["built"] + hits == 0:
        return {"skip": f"{name} caches no artifacts"}
    assert backend.cache.stats["hit"] > hits, "a second compile of the same graph did not hit the artifact cache"
    return None


_FEATURES: dict[str, Callable[[Target], Any]] = {
    "graph_break": _graph_break, "guards_recompile": _recompile, "dynamic_shapes": _dynamic, "mutation": _mutation,
    "noncontiguous_input": _noncontiguous_input, "aliasing": _aliasing, "no_grad_inference_mode": _no_grad_modes,
    "autocast": _autocast, "backward": _backward, "fused_epilogue": _fused_epilogue,
    "one_object_per_options": _one_object_per_options, "artifact_cache": _cache,
}


def feature_cases(target: Target, profile: str) -> list[Case]:
    """Compile-feature cases (none without a backend)."""
    if not target.backend or profile == "device":
        return []
    return [Case(f"compile/{name}", "compile", fn, cost=3.0) for name, fn in _FEATURES.items()]


def model_cases(target: Target, profile: str) -> list[Case]:
    """The model suite (``torchvendor.sdk.conformance.models``): inference of every model in
    ``inference``, the fast tier's second shape and training step in ``training``, all of it in ``full``."""
    from .models.cases import model_cases as suite_cases

    return suite_cases(target, profile)
