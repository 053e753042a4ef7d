"""``torch.distributed.checkpoint`` of device tensors where CUDA is available too (issue 34).

torch's default DCP file writer copies to the host only the tensors of the one device type it
prefers (CUDA first, ``torch._utils._get_available_device_type``); on the GPU machine a
torchvendor device's tensors reached the file writer on the device ("Tensor must be on CPU", seen
on torch 2.11 there, and the code is the same in 2.13 and 2.15). ``DeviceSavePlanner`` (DCP's
planner extension point) hands the writer CPU tensors. The probe in ``ir/compat/distributed.py``
binds torch's loader to another device type, as CUDA's presence does, so the failure shows on a
CPU-only machine too, and says when torch no longer needs the planner.
"""
from __future__ import annotations

import tempfile

import torch

from torchvendor.ir import compat


def test_torchs_writer_still_leaves_other_devices_tensors_on_the_device(acme) -> None:  # noqa: ANN001
    x = torch.arange(4.0, device="acme")
    assert compat.dcp_writer_moves_to_cpu(x, "acme")  # bound to our device (no CUDA here): moved
    assert not compat.dcp_writer_moves_to_cpu(x, "cuda"), (
        "torch's DCP writer now moves every device's tensors to the CPU: DeviceSavePlanner is no longer "
        "needed on this torch (keep it for older releases; say from which release in its docstring)")


def test_the_planner_hands_the_writer_cpu_tensors(acme) -> None:  # noqa: ANN001
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.planner import WriteItemType

    from torchvendor.sdk import DeviceSavePlanner

    state = {"w": torch.arange(6.0, device="acme").view(2, 3), "step": torch.tensor(3.0), "n": 2}
    planner = DeviceSavePlanner()
    planner.set_up_planner(state, is_coordinator=True)
    items = [i for i in planner.create_local_plan().items if i.type != WriteItemType.BYTE_IO]
    resolved = {i.index.fqn: planner.resolve_data(i) for i in items}
    assert {k: v.device.type for k, v in resolved.items()} == {"w": "cpu", "step": "cpu"}
    assert all(compat.dcp_writer_moves_to_cpu(v, "cuda") for v in resolved.values())  # as where CUDA is
    with tempfile.TemporaryDirectory() as path:
        dcp.save(state, checkpoint_id=path, planner=DeviceSavePlanner())
        loaded = {"w": torch.zeros(2, 3, device="acme"), "step": torch.tensor(0.0), "n": 0}
        dcp.load(loaded, checkpoint_id=path)
    assert loaded["w"].device.type == "acme" and torch.equal(loaded["w"].cpu(), state["w"].cpu())
    assert loaded["step"].item() == 3.0 and loaded["n"] == 2
