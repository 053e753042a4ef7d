"""Distributed basics over two local processes: DDP of a compiled model, FSDP2, DTensor and
functional collectives.

Each case spawns two processes (``torch.multiprocessing``, a c10d store on localhost) that run one
small function per rank and save what it returns; the parent compares it with the same work done
in one process on the CPU. The work runs on the CPU over gloo; for a torchvendor device each case
runs twice more on the device through its c10d backend (``torchvendor.sdk.register_distributed``):
on the runtime's own collectives (``_native``; skipped when the runtime has none) and staged
through host memory over gloo (``_staged``), and every collective on device tensors must have been
counted under that path. For ``cuda`` each case runs once more on two GPUs over torch's own NCCL
process group (``_on_cuda_nccl``), the reference a GPU vendor's native path is held to. Paths
whose collectives span devices (``nccl``, and ``native`` on a runtime that joins communicators
from a token, as NCCL does) need one device per rank and are skipped on a machine with fewer.

- ``ddp_compiled``: a small model compiled with the backend, wrapped in DDP, trained on each rank's
  half of a batch for a few SGD steps, must end where one process training the uncompiled model on
  the whole batch ends.
- ``fsdp2``: the same model and loop with ``fully_shard`` on each Linear and the root.
- ``dtensor``: ``distribute_tensor`` with ``Shard``/``Replicate``, a sharded matmul, its
  ``Partial`` result redistributed to ``Shard(0)`` and to ``Replicate()``, a redistribute from
  ``Shard(0)`` to ``Shard(1)``, ``full_tensor()``.
- ``functional_collectives``: ``all_reduce`` (sum, avg, max), ``all_gather_tensor``,
  ``all_gather_into_tensor`` (its ``out=`` op), ``reduce_scatter_tensor`` and
  ``all_to_all_single`` from ``torch.distributed._functional_collectives``.

    >>> from torchvendor.sdk.conformance.core import Target
    >>> [c.id for c in cases(Target(device="cpu", backend="eager"), "full")]  # doctest: +NORMALIZE_WHITESPACE
    ['distributed/ddp_compiled_two_processes', 'distributed/fsdp2_two_processes',
     'distributed/dtensor_two_processes', 'distributed/functional_collectives_two_processes']
"""
from __future__ import annotations

import functools
import os
import socket
import tempfile
import warnings
from typing import Any, Callable

import torch

from .core import Case, Target

__all__ = ["cases"]

STEPS, LR, WORLD = 3, 0.1, 2
# what the two-process runs must match the one-process CPU reference to (float32, 3 SGD steps)
RTOL, ATOL = 1e-4, 1e-5


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 8, generator=g), torch.randn(8, 1, generator=g)


def _train(model: torch.nn.Module, forward: Any, dev: str = "cpu", rank: int = 0, world: int = 1) -> list[torch.Tensor]:
    """``STEPS`` SGD steps of ``model`` (called through ``forward``: itself, its DDP wrapper or a
    compiled one) on this rank's shard of ``_data()``; the parameters after, on the CPU. With one
    rank it is the single-process reference the two-process runs must match."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = _data()
    shard = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(forward(x[shard].to(dev)), y[shard].to(dev)).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def _reference_params() -> list[torch.Tensor]:
    model = _model()
    return _train(model, model)


def _assert_params(got: list[torch.Tensor], want: list[torch.Tensor], what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} parameters, expected {len(want)}"
    for i, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}, parameter {i}: {m}")


# ---- the per-rank work: (target, rank, device) -> what the parent checks ------------------------

def _ddp_body(target: Target, rank: int, dev: str) -> list[torch.Tensor]:
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(_model().to(dev))
    compiled = torch.compile(model, backend=target.backend_name(), options=dict(target.options) or None)
    return _train(model, compiled, dev, rank, WORLD)


def _fsdp2_body(target: Target, rank: int, dev: str) -> list[torch.Tensor]:
    """fully_shard on each Linear and at the root; each parameter's full value after training."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = _model().to(dev)
    mesh = init_device_mesh(torch.device(dev).type, (WORLD,))
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    _train(model, model, dev, rank, WORLD)
    sharded = model[0].weight.to_local().shape[0]
    assert sharded == 16 // WORLD, f"fully_shard left {sharded} of Linear(8, 16)'s 16 weight rows on rank {rank}"
    return [p.full_tensor().cpu() for p in model.parameters()]


def _dtensor_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return torch.randn(8, 6, generator=g), torch.randn(6, 4, generator=g)


def _dtensor_body(target: Target, rank: int, dev: str) -> dict[str, Any]:
    """A sharded matmul and the redistributions DTensor runs on functional collectives."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(torch.device(dev).type, (WORLD,))
    a, b = (t.to(dev) for t in _dtensor_inputs())
    da = distribute_tensor(a, mesh, [Shard(0)])
    partial = distribute_tensor(a, mesh, [Shard(1)]) @ distribute_tensor(b, mesh, [Shard(0)])
    return {
        "shard0_local": da.to_local().cpu(),
        "mm_full": (da @ distribute_tensor(b, mesh, [Replicate()])).full_tensor().cpu(),  # all_gather
        "shard1_local": da.redistribute(mesh, [Shard(1)]).to_local().cpu(),  # all_to_all
        "partial": str(partial.placements),
        "partial_to_shard0": partial.redistribute(mesh, [Shard(0)]).to_local().cpu(),  # reduce_scatter
        "partial_to_replicate": partial.redistribute(mesh, [Replicate()]).to_local().cpu(),  # all_reduce
    }


def _fc_input(rank: int) -> torch.Tensor:
    """Each rank's input: 4 rows of 2, different per rank, exact in float32."""
    return (torch.arange(8, dtype=torch.float32) + 1 + 10 * rank).view(4, 2)


def _functional_body(target: Target, rank: int, dev: str) -> dict[str, torch.Tensor]:
    import torch.distributed as dist

    from torchvendor.ir import compat

    fc = compat.functional_collectives()
    # 2.13 renamed some functional collectives (all_gather_tensor -> all_gather_single, ...)
    warnings.filterwarnings("ignore", category=FutureWarning)
    def done(t: torch.Tensor) -> torch.Tensor:  # an AsyncCollectiveTensor's .cpu() on the CPU is itself, unwaited
        return fc.wait_tensor(t).cpu()

    g, x = dist.group.WORLD, _fc_input(rank).to(dev)
    out = {f"all_reduce.{op}": done(fc.all_reduce(x, op, g)) for op in ("sum", "avg", "max")}
    out["all_gather_tensor"] = done(fc.all_gather_tensor(x, 0, g))
    buf = torch.empty(WORLD * 4, 2, device=dev)  # the out= form: ProcessGroup._allgather_base
    compat.all_gather_into_tensor_out(x, WORLD, g.group_name, buf)
    out["all_gather_into_tensor"] = done(buf)
    out["reduce_scatter_tensor"] = done(fc.reduce_scatter_tensor(x, "sum", 0, g))
    out["all_to_all_single"] = done(fc.all_to_all_single(x, None, None, g))
    return out


# ---- two processes -------------------------------------------------------------------------------

def _init(target: Target, rank: int, port: int, path: str | None) -> str:
    """Join the two-process group; the device this rank works on."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if not path:
        dist.init_process_group("gloo", rank=rank, world_size=WORLD)
        return "cpu"
    if path == "nccl":  # torch's own GPU process group, on cuda tensors
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=WORLD, device_id=torch.device("cuda", rank))
        return f"cuda:{rank}"
    from torchvendor.sdk import register_distributed, reset_collective_counts

    target.setup()  # the device and its backend must exist before init_process_group
    module = torch.get_device_module(target.device)
    dev = torch.device(target.device, rank % module.device_count())
    module.set_device(dev)  # DeviceMesh and DTensor place tensors on the current device
    dist.init_process_group(register_distributed(), rank=rank, world_size=WORLD, device_id=dev)
    dist.group.WORLD.native = path == "native"
    reset_collective_counts()
    return str(dev)


def _worker(rank: int, port: int, target: Target, out: str, path: str | None,
            body: Callable[[Target, int, str], Any]) -> None:
    import torch.distributed as dist

    dev = _init(target, rank, port, path)
    try:
        target.setup()
        result = {"body": body(target, rank, dev)}
        if path in ("native", "staged"):
            from torchvendor.sdk import collective_counts

            result["counts"] = collective_counts()
        torch.save(result, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _skip(target: Target, path: str | None) -> str | None:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        return "this torch build has no gloo"
    if path == "nccl":
        if not dist.is_nccl_available():
            return "this torch build has no NCCL"
        if torch.cuda.device_count() < WORLD:
            return f"NCCL needs one GPU per rank: {WORLD} ranks, {torch.cuda.device_count()} GPU(s)"
    if path == "native":
        target.setup()
        from torchvendor import _C

        if not _C.has_collectives():
            return "the runtime has no collective entries (runtime.h minor 1)"
        count = torch.get_device_module(target.device).device_count()
        if _C.has_token_bootstrap() and count < WORLD:
            return (f"the runtime's communicators (joined from a token, runtime.h minor 2) need one device "
                    f"per rank: {WORLD} ranks, {count} device(s)")
    return None


def _two_processes(target: Target, path: str | None, body: Callable[[Target, int, str], Any]) -> list[Any]:
    """``body`` on two ranks, on the CPU over gloo (path None), on two GPUs over torch's NCCL
    ("nccl") or on the device, on the runtime's collectives ("native") or staged over gloo
    ("staged"); what each rank returned. On the device every collective on device tensors must
    have run on ``path``, and at least one must have."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result")
        mp.spawn(_worker, args=(_free_port(), target, out, path, body), nprocs=WORLD, join=True)
        results = [torch.load(f"{out}.{rank}") for rank in range(WORLD)]
    if path in ("native", "staged"):
        counts = results[0]["counts"]
        other = {k: n for k, n in counts.items() if not k.startswith(f"{path}:")}
        assert counts and not other, (f"collectives on {target.device} tensors: expected all on the {path} "
                                      f"path, counted {counts}")
    return [r["body"] for r in results]


# ---- the cases: each runs its body on two ranks and compares with the CPU -------------------------

def _ddp(target: Target, path: str | None = None) -> Any:
    """DDP of the compiled model matches one process training the uncompiled model."""
    if why := _skip(target, path):
        return {"skip": why}
    want = _reference_params()
    for rank, got in enumerate(_two_processes(target, path, _ddp_body)):
        _assert_params(got, want, f"DDP rank {rank}")
    return None


def _fsdp2(target: Target, path: str | None = None) -> Any:
    """FSDP2 (fully_shard) training matches one process training the unsharded model."""
    if why := _skip(target, path):
        return {"skip": why}
    want = _reference_params()
    for rank, got in enumerate(_two_processes(target, path, _fsdp2_body)):
        _assert_params(got, want, f"FSDP2 rank {rank}")
    return None


def _dtensor(target: Target, path: str | None = None) -> Any:
    """DTensor's shards, matmul and redistributions match the same slices of the CPU product."""
    if why := _skip(target, path):
        return {"skip": why}
    a, b = _dtensor_inputs()
    for rank, got in enumerate(_two_processes(target, path, _dtensor_body)):
        assert got["partial"] == "(Partial(sum),)", f"Shard(1) @ Shard(0) gave {got['partial']}, expected Partial(sum)"
        want = {"shard0_local": a.chunk(WORLD)[rank], "mm_full": a @ b, "shard1_local": a.chunk(WORLD, dim=1)[rank],
                "partial_to_shard0": (a @ b).chunk(WORLD)[rank], "partial_to_replicate": a @ b}
        for key, value in want.items():
            torch.testing.assert_close(got[key], value, msg=lambda m, key=key: f"DTensor {key}, rank {rank}: {m}")
    return None


def _functional(target: Target, path: str | None = None) -> Any:
    """Functional collectives give exactly what the CPU computes from both ranks' inputs."""
    if why := _skip(target, path):
        return {"skip": why}
    xs = torch.stack([_fc_input(r) for r in range(WORLD)])
    for rank, got in enumerate(_two_processes(target, path, _functional_body)):
        want = {"all_reduce.sum": xs.sum(0), "all_reduce.avg": xs.mean(0), "all_reduce.max": xs.amax(0),
                "all_gather_tensor": torch.cat(list(xs)), "all_gather_into_tensor": torch.cat(list(xs)),
                "reduce_scatter_tensor": xs.sum(0).chunk(WORLD)[rank],
                "all_to_all_single": torch.cat([x.chunk(WORLD)[rank] for x in xs])}
        for key, value in want.items():
            torch.testing.assert_close(got[key], value, msg=lambda m, key=key: f"{key}, rank {rank}: {m}")
    return None


_CASES: dict[str, Callable[..., Any]] = {"ddp_compiled": _ddp, "fsdp2": _fsdp2, "dtensor": _dtensor,
                                         "functional_collectives": _functional}


def cases(target: Target, profile: str) -> list[Case]:
    """The four cases on the CPU over gloo (training and full profiles, with a backend); on a
    torchvendor device each also on the device, on the runtime's collectives and staged; on
    ``cuda`` each also over torch's NCCL process group."""
    if target.backend and profile == "ci":  # one case: compiled DDP, on the device's own collectives
        where = {"cpu": None, "meta": None, "cuda": "nccl"}.get(target.device, "native")
        name = "ddp_compiled_two_processes" if where is None else \
            f"ddp_compiled_{'on_cuda' if where == 'nccl' else 'on_device'}_{where}"
        return [Case(f"distributed/{name}", "distributed", functools.partial(_ddp, path=where), timeout=600)]
    if not target.backend or profile not in ("training", "full"):
        return []
    out = [Case(f"distributed/{name}_two_processes", "distributed", fn, timeout=600) for name, fn in _CASES.items()]
    paths = {"cpu": (), "meta": (), "cuda": ("nccl",)}.get(target.device, ("native", "staged"))
    for path in paths:
        where = "on_cuda" if path == "nccl" else "on_device"
        out += [Case(f"distributed/{name}_{where}_{path}", "distributed", functools.partial(fn, path=path),
                     timeout=600) for name, fn in _CASES.items()]
    return out
