"""``compat.distributed``: a ProcessGroup's per-device backend, gloo's base collectives and the
functional collectives, on the installed release (one process, world size 1)."""
from __future__ import annotations

import datetime

import pytest
import torch

dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover - a build without distributed
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from torch.distributed.distributed_c10d import AllgatherOptions, ReduceScatterOptions  # noqa: E402

from torchvendor.ir import compat  # noqa: E402


def _gloo() -> object:
    return dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=30))


def test_gloo_base_collectives() -> None:
    gloo = _gloo()
    out = torch.zeros(3)
    compat.gloo_all_gather_into(gloo, out, torch.arange(3.0), AllgatherOptions()).wait()
    torch.testing.assert_close(out, torch.arange(3.0))
    out = torch.zeros(2)
    compat.gloo_reduce_scatter_into(gloo, out, torch.tensor([5.0, 6.0]), ReduceScatterOptions()).wait()
    torch.testing.assert_close(out, torch.tensor([5.0, 6.0]))


def test_group_backend_and_functional_collectives() -> None:
    store = dist.HashStore()
    group = dist.ProcessGroup(store, 0, 1)
    gloo = _gloo()
    compat.process_group_set_backend(group, "cpu", dist.ProcessGroup.BackendType.GLOO, gloo)
    assert group._get_backend(torch.device("cpu")) is gloo
    fc = compat.functional_collectives()
    for name in ("all_reduce", "all_gather_tensor", "reduce_scatter_tensor", "wait_tensor"):
        assert hasattr(fc, name), f"torch.distributed._functional_collectives.{name} moved"
    assert hasattr(torch.ops._c10d_functional, "all_gather_into_tensor_out")


def test_all_gather_into_tensor_out_on_a_default_group() -> None:
    if dist.is_initialized():
        pytest.skip("a default process group exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        out = torch.zeros(2)
        res = compat.all_gather_into_tensor_out(torch.tensor([1.0, 2.0]), 1, dist.group.WORLD.group_name, out)
        compat.functional_collectives().wait_tensor(res)
        torch.testing.assert_close(out, torch.tensor([1.0, 2.0]))
    finally:
        dist.destroy_process_group()


def test_device_process_group_has_a_default_backend() -> None:
    """c10d's C++ side asks a group for its default backend (2.15's init_process_group attaches its
    flight recorder that way); the device's Python group sets the device backend as its default on
    every release, so the question reaches that backend instead of failing with "Could not find
    the default backend type 0"."""
    import torch.distributed as dist

    from torchvendor.sdk import register_device, register_distributed

    register_device("acme")
    dist.init_process_group(register_distributed(), store=dist.HashStore(), rank=0, world_size=1,
                            device_id=torch.device("acme:0"))
    try:
        with pytest.raises(RuntimeError) as e:  # the device backend has no sequence numbers
            dist.group.WORLD._get_sequence_number_for_group()
        assert "tvgloo" in str(e.value) and "default backend type" not in str(e.value), str(e.value)
    finally:
        dist.destroy_process_group()
