"""``compat.autograd``: backward straight through the C++ autograd engine."""
from __future__ import annotations

import torch

from torchvendor.ir import compat


def test_backward_without_context() -> None:
    x = torch.ones(3, requires_grad=True)
    y = (x * x).sum()
    compat.backward_without_context([y], [torch.tensor(2.0)])
    torch.testing.assert_close(x.grad, torch.full((3,), 4.0))
