"""FakeTensors (``torch._subclasses.fake_tensor``, ``torch._guards.detect_fake_mode``).

    >>> import torch
    >>> is_fake(torch.ones(1))
    False
"""
from __future__ import annotations

from typing import Any as _Any, Sequence as _Sequence

import torch

__all__ = ["is_fake", "detect_fake_mode", "fake_propagate"]


def detect_fake_mode(values: _Sequence[_Any]) -> _Any:
    """The FakeTensorMode the FakeTensors in ``values`` belong to, or None."""
    from torch._guards import detect_fake_mode as _detect

    return _detect(list(values))


def is_fake(value: _Any) -> bool:
    """Whether ``value`` is a FakeTensor."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, FakeTensor)


def fake_propagate(gm: torch.fx.GraphModule, inputs: _Sequence[torch.Tensor]) -> None:
    """Set ``meta["val"]`` on every node of ``gm`` by running it on FakeTensors shaped like
    ``inputs`` (static shapes, a fresh FakeTensorMode): what a rebuilt graph needs before it is
    partitioned and compiled like one AOTAutograd handed over."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode()
    with mode:
        fakes = [torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=t.device)
                 for t in inputs]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
