"""torch.distributed internals (the device's process group, ``sdk/device/distributed.py``):
per-device backends of a ProcessGroup, gloo's base collectives, functional collectives.

    >>> hasattr(functional_collectives(), "all_reduce")
    True
"""
from __future__ import annotations

from typing import Any as _Any

import torch

__all__ = ["process_group_set_default_backend", "process_group_set_backend", "gloo_all_gather_into",
           "gloo_reduce_scatter_into", "functional_collectives", "dcp_writer_moves_to_cpu",
           "all_gather_into_tensor_out"]


def process_group_set_backend(group: _Any, device: str, backend_type: _Any, backend: _Any) -> None:
    """``ProcessGroup._register_backend``: the C++ backend a group uses for one device type (what
    c10d's dispatched collectives and ``barrier`` reach)."""
    group._register_backend(torch.device(device), backend_type, backend)


def gloo_all_gather_into(gloo: _Any, output: torch.Tensor, input: torch.Tensor, opts: _Any) -> _Any:
    """gloo's all_gather_into_tensor on a bare gloo group object (``_allgather_base``)."""
    return gloo._allgather_base(output, input, opts)


def gloo_reduce_scatter_into(gloo: _Any, output: torch.Tensor, input: torch.Tensor, opts: _Any) -> _Any:
    """gloo's reduce_scatter_tensor on a bare gloo group object (``_reduce_scatter_base``)."""
    return gloo._reduce_scatter_base(output, input, opts)


def functional_collectives() -> _Any:
    """``torch.distributed._functional_collectives``: the collectives DTensor and FSDP2 call (what
    the conformance suite checks a device's process group against)."""
    import torch.distributed._functional_collectives as fc

    return fc


def all_gather_into_tensor_out(input: torch.Tensor, world: int, group_name: str, out: torch.Tensor) -> torch.Tensor:
    """``_c10d_functional.all_gather_into_tensor_out``: the ``out=`` functional all-gather (it
    reaches ``ProcessGroup._allgather_base``)."""
    return torch.ops._c10d_functional.all_gather_into_tensor_out(input, world, group_name, out=out)


def process_group_set_default_backend(group: Any, backend_type: Any) -> None:
    """``ProcessGroup._set_default_backend``: the backend c10d's C++ side treats as the group's own
    (``getDefaultBackend``). A Python process group returned by a backend's creator replaces the
    group c10d built and so has none until it sets one; torch 2.15's ``init_process_group``
    attaches its flight recorder through it ("Could not find the default backend type 0")."""
    group._set_default_backend(backend_type)


def dcp_writer_moves_to_cpu(tensor: torch.Tensor, loader_device_type: str) -> bool:
    """Whether torch's DCP file writer moves ``tensor`` to the CPU when its overlapping loader is
    bound to ``loader_device_type``. The writer (``FileSystemWriter``, one thread: the default)
    binds that loader to ``torch._utils._get_available_device_type()``, CUDA first, and copies
    only tensors of that type; any other device's tensors reach the file writer on the device
    ("Tensor must be on CPU"). That is so from torch 2.11 to 2.15 alike: a PrivateUse1 device on
    a machine where CUDA is available (the GPU machine) cannot be saved by the default writer.
    ``torchvendor.sdk.DeviceSavePlanner`` (DCP's planner extension point) hands the writer CPU
    tensors; this probe, run by tests/test_distributed.py, says when torch no longer needs it."""
    from torch.distributed.checkpoint.filesystem import _OverlappingCpuLoader

    loader = _OverlappingCpuLoader(lambda _: tensor)  # bound to the device type torch prefers here
    loader.device_type = loader_device_type  # what it is bound to where that type is available
    loader.add(tensor.nbytes, None)
    loader.start_loading()
    return all(t.is_cpu for t, _ in loader.values())
