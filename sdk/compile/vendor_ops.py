"""Vendor fused ops: a ``torch.library`` custom op that a pattern rewrites to and a kernel implements.

A fused op is declared once, by its *reference*: a Python function written with ordinary torch
ops that says what the fused op computes (the unfused graph). :func:`fused_op` turns it into a
``torch.library`` custom op (schema inferred from the type hints, as
``torch.library.custom_op`` does) and gives it

- a **fake implementation** (shapes and dtypes for tracing, ``torch.compile`` and dynamic shapes):
  by default the reference itself, run on fake tensors; pass ``fake=`` when the reference is
  expensive to trace or data-dependent;
- a **default kernel**: the reference, so the op runs everywhere (eager fallback, tests, CPU);
  the vendor's kernel for its device comes with :meth:`FusedOp.register_kernel`;
- **autograd**: the vendor's ``backward`` (with ``setup_context``, exactly as
  ``torch.library.register_autograd`` takes them), or else the *unfused graph's* gradient: the
  backward reruns the reference on the saved inputs under autograd and differentiates it, so a
  fused op is trainable from day one and a hand-written backward is an optimisation.

Its operator key (:attr:`FusedOp.key`, ``"acme.linear_gelu.default"`` for ``"acme::linear_gelu"``)
is what a rule's ``Fused(...)`` or ``patterns.rules(name, op)`` names: the FX adapter resolves it
to ``torch.ops.acme.linear_gelu.default``. Non-tensor arguments are best keyword-only (after
``*``), so that a rule's attributes fill them by name. Outputs must be new tensors (a custom op
may not return a view of an input).

Example::

    >>> import torch
    >>> @fused_op("doc_acme::scale_relu")
    ... def scale_relu(x: torch.Tensor, *, alpha: float = 2.0) -> torch.Tensor:
    ...     return torch.relu(x) * alpha
    >>> scale_relu.key
    'doc_acme.scale_relu.default'
    >>> x = torch.tensor([-1.0, 3.0], requires_grad=True)
    >>> scale_relu(x, alpha=3.0).sum().backward()          # the unfused graph's gradient
    >>> x.grad
    tensor([0., 3.])
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import torch

__all__ = ["FusedOp", "fused_op"]


class FusedOp:
    """A declared fused op: call it like a function; see the module docstring."""

    def __init__(self, qualname: str, reference: Callable[..., Any], *, fake: Callable[..., Any] | None = None,
                 backward: Callable[..., Any] | None = None, setup_context: Callable[..., Any] | None = None,
                 device_types: str | Sequence[str] | None = None) -> None:
        namespace, sep, name = qualname.partition("::")
        if not sep or not namespace.isidentifier() or not name.isidentifier():
            raise ValueError(f"fused op name {qualname!r} must be 'namespace::name', e.g. 'acme::linear_gelu'")
        if backward is None and setup_context is not None:
            raise ValueError(f"fused op {qualname!r}: setup_context= without backward=; give both, or neither "
                             f"to differentiate the reference")
        self.qualname, self.reference = qualname, reference
        self.custom = torch.library.custom_op(qualname, reference, mutates_args=(), device_types=device_types)
        self.custom.register_fake(fake if fake is not None else _fake_from(reference))
        if backward is not None:
            self.custom.register_autograd(backward, setup_context=setup_context)
            self.autograd = "vendor"
        else:
            self.custom.register_autograd(_unfused_backward(reference), setup_context=_save_inputs)
            self.autograd = "unfused"
        self.__doc__ = reference.__doc__
        self.__signature__ = inspect.signature(reference)

    @property
    def op(self) -> Any:
        """The ``torch.ops`` overload (``torch.ops.acme.linear_gelu.default``)."""
        namespace, name = self.qualname.split("::")
        return getattr(getattr(torch.ops, namespace), name).default

    @property
    def key(self) -> str:
        """The operator key patterns and backends use: ``"acme.linear_gelu.default"``."""
        return self.qualname.replace("::", ".") + ".default"

    def register_kernel(self, device_types: str | Sequence[str]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: the vendor's kernel for ``device_types`` (e.g. ``"acme"``, ``"cuda"``).

        Same signature as the reference; inputs arrive on that device.
        """
        return self.custom.register_kernel(device_types)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.custom(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FusedOp({self.key!r}, autograd={self.autograd!r})"


def fused_op(qualname: str, *, fake: Callable[..., Any] | None = None, backward: Callable[..., Any] | None = None,
             setup_context: Callable[..., Any] | None = None,
             device_types: str | Sequence[str] | None = None) -> Callable[[Callable[..., Any]], FusedOp]:
    """Decorator declaring a fused op from its reference implementation; see the module docstring.

    ``backward(ctx, *grads)`` and ``setup_context(ctx, inputs, output)`` follow
    ``torch.library.register_autograd``; without them the reference is differentiated.
    """
    def wrap(reference: Callable[..., Any]) -> FusedOp:
        return FusedOp(qualname, reference, fake=fake, backward=backward, setup_context=setup_context,
                       device_types=device_types)
    return wrap


def _fake_from(reference: Callable[..., Any]) -> Callable[..., Any]:
    """The reference as fake implementation: torch ops on fake tensors give fake results.

    A fresh output is guaranteed (a custom op's outputs may not alias its inputs).
    """
    def fake(*args: Any, **kwargs: Any) -> Any:
        out = reference(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(o.clone() if _aliases(o, args) else o for o in out)
        return out.clone() if _aliases(out, args) else out
    return fake


def _aliases(out: Any, args: Sequence[Any]) -> bool:
    return isinstance(out, torch.Tensor) and any(isinstance(a, torch.Tensor) and a is out for a in args)


def _save_inputs(ctx: Any, inputs: tuple[Any, ...], output: Any, keyword_only_inputs: dict | None = None) -> None:
    """Keep every input for the unfused backward (tensors through ``save_for_backward``)."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    ctx.save_for_backward(*tensors)
    ctx.layout = [isinstance(x, torch.Tensor) for x in inputs]
    ctx.others = [None if isinstance(x, torch.Tensor) else x for x in inputs]
    ctx.kwargs = dict(keyword_only_inputs or {})


def _unfused_backward(reference: Callable[..., Any]) -> Callable[..., Any]:
    """A backward that reruns ``reference`` under autograd and differentiates it (the unfused graph)."""
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        saved = iter(ctx.saved_tensors)
        args = [next(saved).detach().requires_grad_(ctx.needs_input_grad[i]) if is_tensor else ctx.others[i]
                for i, is_tensor in enumerate(ctx.layout)]
        wanted = [a for i, a in enumerate(args) if ctx.layout[i] and ctx.needs_input_grad[i]]
        if not wanted:
            return tuple(None for _ in args)
        with torch.enable_grad():
            out = reference(*args, **ctx.kwargs)
        outs = list(out) if isinstance(out, tuple) else [out]
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        if not pairs:
            return tuple(None for _ in args)
        found = torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)
        it = iter(found)
        return tuple(next(it) if ctx.layout[i] and ctx.needs_input_grad[i] else None for i in range(len(args)))
    return backward
