"""The device's RNG functions under ``torch.compile``: Dynamo calls them, as it calls
``torch.cuda``'s, instead of tracing into them (a trace would drop the state change, and
``set_rng_state`` inside a ``no_dispatch()`` block, as OpInfo's ``freeze_rng_state`` does, failed
every compiled random op with "you set no_dispatch() before calling into this function")."""
from __future__ import annotations

import torch
from torch.testing._utils import freeze_rng_state

from torchvendor.ir import compat


def _seeded_bernoulli(x: torch.Tensor) -> torch.Tensor:
    # OpInfo's wrapper_set_seed: the accelerator's RNG state is saved and restored around the op
    with freeze_rng_state():
        torch.manual_seed(42)
        return torch.bernoulli(x)


def test_compiled_random_op_inside_freeze_rng_state(acme):
    x = torch.rand(64, device="acme")
    want = _seeded_bernoulli(x).cpu()
    state = acme.get_rng_state()
    compat.dynamo_reset()
    got = torch.compile(_seeded_bernoulli, backend="aot_eager")(x).cpu()
    torch.testing.assert_close(got, want)
    assert torch.equal(acme.get_rng_state(), state)  # restored, as eager restores it


def test_rng_state_round_trip_in_a_compiled_function(acme):
    def draw_twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        state = acme.get_rng_state()
        a = torch.rand_like(x)
        acme.set_rng_state(state)
        return a, torch.rand_like(x)

    compat.dynamo_reset()
    a, b = torch.compile(draw_twice, backend="aot_eager")(torch.empty(16, device="acme"))
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)  # the restore really happened
