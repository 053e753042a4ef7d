"""Distributed basics: DDP of a compiled model over two local processes.

Two processes (``torch.multiprocessing`` spawn, gloo over localhost) each train a copy of a small
model compiled with the backend on their half of a batch for a few steps; the result must match
one process training the uncompiled model on the whole batch. The model runs on the CPU over gloo;
for a torchvendor device two more cases run it on the device through its c10d backend
(``torchvendor.sdk.register_distributed``): one on the runtime's own collectives (skipped when the
runtime has none), one with collectives staged through host memory over gloo.

    >>> from torchvendor.sdk.conformance.core import Target
    >>> [c.id for c in cases(Target(device="cpu", backend="eager"), "full")]
    ['distributed/ddp_compiled_two_processes']
"""
from __future__ import annotations

import functools
import os
import socket
import tempfile
from typing import Any

import torch

from .core import Case, Target

__all__ = ["cases"]

STEPS, LR = 3, 0.1


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 8, generator=g), torch.randn(8, 1, generator=g)


def _train(model: torch.nn.Module, forward: Any, dev: str = "cpu", rank: int = 0, world: int = 1) -> list[torch.Tensor]:
    """``STEPS`` SGD steps of ``model`` (called through ``forward``: itself, its DDP wrapper or a
    compiled one) on this rank's shard of ``_data()``; the parameters after, on the CPU. With one
    rank it is the single-process reference the DDP runs must match."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = _data()
    shard = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(forward(x[shard].to(dev)), y[shard].to(dev)).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def _worker(rank: int, world: int, port: int, target: Target, out: str, path: str | None = None) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = "cpu"
    if path:  # on the device: the device and its backend must exist before init_process_group
        from torchvendor.sdk import register_distributed

        target.setup()
        dev = f"{target.device}:{rank % torch.get_device_module(target.device).device_count()}"
        dist.init_process_group(register_distributed(), rank=rank, world_size=world, device_id=torch.device(dev))
        dist.group.WORLD.native = path == "native"
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        target.setup()
        model = DistributedDataParallel(_model().to(dev))
        compiled = torch.compile(model, backend=target.backend_name(), options=dict(target.options) or None)
        params = _train(model, compiled, dev, rank, world)
        if rank == 0:
            torch.save(params, out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp(target: Target, path: str | None = None) -> Any:
    """DDP on the CPU (path None) or on the device, on the runtime's collectives ("native") or
    staged over gloo ("staged")."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        return {"skip": "this torch build has no gloo"}
    if path == "native":
        target.setup()
        from torchvendor import _C

        if not _C.has_collectives():
            return {"skip": "the runtime has no collective entries (runtime.h minor 1)"}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "params.pt")
        mp.spawn(_worker, args=(2, _free_port(), target, out, path), nprocs=2, join=True)
        got = torch.load(out)
    model = _model()
    for a, b in zip(got, _train(model, model)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    return None


def cases(target: Target, profile: str) -> list[Case]:
    """The DDP case (training and full profiles, with a backend); on a torchvendor device also
    DDP on the device, on the runtime's collectives and staged."""
    if not target.backend or profile not in ("training", "full"):
        return []
    out = [Case("distributed/ddp_compiled_two_processes", "distributed", _ddp, timeout=600)]
    if target.device not in ("cpu", "cuda", "meta"):
        for path in ("native", "staged"):
            out.append(Case(f"distributed/ddp_compiled_on_device_{path}", "distributed",
                            functools.partial(_ddp, path=path), timeout=600))
    return out
