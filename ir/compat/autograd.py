"""The autograd engine (``torch.autograd.Variable._execution_engine``)."""
from __future__ import annotations

from typing import Sequence as _Sequence

import torch

__all__ = ["backward_without_context"]


def backward_without_context(outputs: _Sequence[torch.Tensor], grads: _Sequence[torch.Tensor]) -> None:
    """``outputs.backward(grads)`` straight through the C++ autograd engine.

    ``Tensor.backward`` stashes the caller's ``contextvars`` context in the graph task's
    thread-local state (2.13 and later). A device's autograd worker drops the graph task after the
    caller has returned, and dropping that Python object needs the GIL: if the interpreter is
    finalizing by then, Python ends the worker with ``pthread_exit`` and the forced unwind through
    a C++ destructor aborts the process ("terminate called without an active exception"). A graph
    task started here holds no Python object, so its worker never needs the GIL to drop it.

    >>> x = torch.ones(2, requires_grad=True)
    >>> backward_without_context([x * 3], [torch.ones(2)])
    >>> x.grad
    tensor([3., 3.])
    """
    torch.autograd.Variable._execution_engine.run_backward(  # type: ignore[attr-defined]
        tuple(outputs), tuple(grads), False, False, (), True, True)
