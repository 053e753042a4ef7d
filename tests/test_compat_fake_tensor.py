"""``compat.fake_tensor``: FakeTensors, their mode, and fake propagation, on the installed release."""
from __future__ import annotations

import torch

from torchvendor.ir import compat


def test_fake_detection_and_propagation() -> None:
    gm = torch.fx.symbolic_trace(lambda x: (x * 2).sum(0))
    compat.fake_propagate(gm, [torch.ones(3, 4)])
    vals = {n.name: n.meta["val"] for n in gm.graph.nodes if "val" in n.meta}
    assert vals and all(compat.is_fake(v) for v in vals.values())
    assert [tuple(v.shape) for v in vals.values()][-1] == (4,)
    mode = compat.detect_fake_mode(list(vals.values()))
    assert mode is not None and compat.detect_fake_mode([torch.ones(1)]) is None
    assert not compat.is_fake(torch.ones(1))
