"""Functional collectives, DTensor and FSDP2 on the device over the ``tvgloo`` backend, on both
paths, with two real processes.

Functional collectives (``torch.distributed._functional_collectives``, which DTensor and FSDP2
use) reach the process group from C++: some through torch's trampoline to the group's Python
methods, the rest through the c10d dispatcher to the backend registered for the device type
(csrc/device/process_group.cpp hands those back to the group). Before that backend existed,
gloo sat there and ``all_gather_tensor`` segfaulted in ``wait_tensor``. One spawn per path runs
every check and saves what it saw; the tests compare it with references computed here on the CPU.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable

import pytest
import torch

from torchvendor.sdk.conformance.distributed_cases import STEPS, _dtensor_inputs, _model, _reference_params, _train

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this torch build has no gloo", allow_module_level=True)

WORLD = 2


def _x(rank: int) -> torch.Tensor:
    """Each rank's input: 4 rows of 2, different per rank, exact in float32."""
    return (torch.arange(8, dtype=torch.float32) + 1 + 10 * rank).view(4, 2)


def _functional(rank: int, dev: str, out: dict[str, Any]) -> None:
    """Every functional collective the backend runs; results (waited) moved to the CPU."""
    import torch.distributed._functional_collectives as fc

    g, x = dist.group.WORLD, _x(rank).to(dev)
    ops: dict[str, Callable[[], Any]] = {
        "all_reduce.sum": lambda: fc.all_reduce(x, "sum", g),
        "all_reduce.avg": lambda: fc.all_reduce(x, "avg", g),
        "all_reduce.max": lambda: fc.all_reduce(x, "max", g),
        "all_reduce_coalesced": lambda: fc.all_reduce_coalesced([x, x.long()], "sum", g),
        "all_gather": lambda: fc.all_gather_tensor(x, 0, g),
        "all_gather_coalesced": lambda: fc.all_gather_into_tensor_coalesced([x, x + 1], g),
        "reduce_scatter": lambda: fc.reduce_scatter_tensor(x, "sum", 0, g),
        "reduce_scatter_coalesced": lambda: fc.reduce_scatter_tensor_coalesced([x, 2 * x], "avg", [0, 0], g),
        "all_to_all": lambda: fc.all_to_all_single(x, None, None, g),
        # rank 0 keeps 1 row and sends 3, rank 1 sends 1 and keeps 3: staged on both paths
        "all_to_all_uneven": lambda: fc.all_to_all_single(x, [1, 1] if rank == 0 else [3, 3], [1, 3], g),
        "broadcast": lambda: fc.broadcast(x, 1, g),
    }
    for name, op in ops.items():
        r = op()
        out[f"fc.{name}"] = [t.cpu() for t in r] if isinstance(r, list) else r.cpu()
    # the out= form goes through ProcessGroup._allgather_base, which only the device backend reaches
    buf = torch.empty(2 * 4, 2, device=dev)
    torch.ops._c10d_functional.all_gather_into_tensor_out(x, WORLD, g.group_name, out=buf)
    out["fc.all_gather_out"] = torch.ops._c10d_functional.wait_tensor(buf).cpu()
    w = fc.all_reduce(x, "sum", g)  # async: an AsyncCollectiveTensor, waited at its first use
    out["fc.async_then_use"] = (w * 1).cpu()


def _compiled(rank: int, dev: str, out: dict[str, Any]) -> None:
    """torch.distributed calls inside a fullgraph torch.compile: Dynamo rewrites them into
    functional collectives, whose ops reach the group from the compiled graph."""
    @torch.compile(backend="aot_eager", fullgraph=True)
    def step(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        dist.all_reduce(y)
        gathered = torch.empty(2 * 4, 2, device=x.device)
        dist.all_gather_into_tensor(gathered, y)
        scattered = torch.empty(4, 2, device=x.device)
        dist.reduce_scatter_tensor(scattered, gathered)
        return gathered + 1, scattered

    out["compiled"] = [t.cpu() for t in step(_x(rank).to(dev))]


def _rooted(rank: int, dev: str, out: dict[str, Any]) -> None:
    """The collectives with a root (eager): scatter and gather to rank 1, reduce (AVG) to rank 0."""
    x = _x(rank).to(dev)
    o = torch.zeros(4, 2, device=dev)
    dist.scatter(o, [_x(1).to(dev), 2 * _x(1).to(dev)] if rank == 1 else None, src=1)
    out["scatter"] = o.cpu()
    gathered = [torch.zeros(4, 2, device=dev) for _ in range(WORLD)] if rank == 1 else None
    dist.gather(x, gathered, dst=1)
    out["gather"] = torch.stack(gathered).cpu() if gathered else None
    dist.reduce(x, dst=0, op=dist.ReduceOp.AVG)
    out["reduce"] = x.cpu()


def _errors(dev: str, out: dict[str, Any]) -> None:
    import torch.distributed._functional_collectives as fc

    g = dist.group.WORLD
    for what, call in {
        "band": lambda: fc.all_reduce(torch.ones(2, device=dev), "band", g),
        "dtype": lambda: fc.all_gather_tensor(torch.ones(2, dtype=torch.uint16, device=dev), 0, g),
        "alltoall_list": lambda: dist.all_to_all([torch.empty(1, device=dev)] * 2, [torch.ones(1, device=dev)] * 2),
    }.items():
        try:
            call()
            out[f"error.{what}"] = "no error"
        except (TypeError, ValueError, NotImplementedError, RuntimeError) as e:
            out[f"error.{what}"] = f"{type(e).__name__}: {e}"


def _dtensor(dev_type: str, out: dict[str, Any]) -> None:
    """A sharded matmul and the redistributions DTensor runs on functional collectives."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(dev_type, (WORLD,))
    a, b = _dtensor_inputs()
    da = distribute_tensor(a.to(dev_type), mesh, [Shard(0)])  # scatter from rank 0
    c = da @ distribute_tensor(b.to(dev_type), mesh, [Replicate()])
    out["dt.mm"] = c.full_tensor().cpu()  # all_gather
    out["dt.shard1"] = da.redistribute(mesh, [Shard(1)]).to_local().cpu()  # all_to_all
    partial = distribute_tensor(a.to(dev_type), mesh, [Shard(1)]) @ distribute_tensor(b.to(dev_type), mesh, [Shard(0)])
    out["dt.partial"] = str(partial.placements)
    out["dt.partial_to_shard0"] = partial.redistribute(mesh, [Shard(0)]).to_local().cpu()  # reduce_scatter
    out["dt.partial_to_replicate"] = partial.redistribute(mesh, [Replicate()]).to_local().cpu()  # all_reduce


def _fsdp2(rank: int, dev: torch.device, out: dict[str, Any]) -> None:
    """fully_shard per Linear and at the root; the conformance DDP case's model, data and loop."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(dev.type, (WORLD,))
    model = _model().to(dev)
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    _train(model, model, dev, rank, WORLD)
    out["fsdp2.local_shapes"] = [tuple(p.to_local().shape) for p in model.parameters()]
    out["fsdp2"] = [p.full_tensor().cpu() for p in model.parameters()]


def _worker(rank: int, store_path: str, out_dir: str, path: str) -> None:
    from torchvendor.sdk import collective_counts, register_device, register_distributed

    if path == "staged":  # read by the simulator when register_device loads it
        os.environ["TORCHVENDOR_SIM_ABI_MINOR"] = "0"
    acme = register_device("acme")
    register_distributed()
    dev = torch.device("acme", rank % acme.device_count())
    acme.set_device(dev)  # DeviceMesh and DTensor place tensors on the current device
    dist.init_process_group(store=dist.FileStore(store_path, WORLD), rank=rank, world_size=WORLD, device_id=dev)
    out: dict[str, Any] = {}
    # 2.13 renamed some functional collectives (all_gather_tensor -> all_gather_single, ...); the
    # old names, which 2.11 also has, warn there
    warnings.filterwarnings("ignore", category=FutureWarning, module=__name__)
    try:
        _functional(rank, str(dev), out)
        _rooted(rank, str(dev), out)
        out["fc.counts"] = collective_counts()
        acme.reset_collective_counts()
        _compiled(rank, str(dev), out)
        out["compiled.counts"] = collective_counts()
        _errors(str(dev), out)
        acme.reset_collective_counts()
        _dtensor("acme", out)
        out["dt.counts"] = collective_counts()
        acme.reset_collective_counts()
        _fsdp2(rank, dev, out)
        out["fsdp2.counts"] = collective_counts()
    finally:
        dist.destroy_process_group()
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module", params=["native", "staged"])
def results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    import torch.multiprocessing as mp

    tmp = tmp_path_factory.mktemp("fcoll")
    mp.spawn(_worker, args=(str(tmp / "store"), str(tmp), request.param), nprocs=WORLD, join=True)
    return [dict(torch.load(tmp / f"rank{r}.pt"), path=request.param) for r in range(WORLD)]


def test_functional_collectives_match_cpu(results: list[dict[str, Any]]) -> None:
    xs = torch.stack([_x(r) for r in range(WORLD)])
    total = xs.sum(0)
    for rank, r in enumerate(results):
        assert torch.equal(r["fc.all_reduce.sum"], total)
        torch.testing.assert_close(r["fc.all_reduce.avg"], xs.mean(0))
        assert torch.equal(r["fc.all_reduce.max"], xs.amax(0))
        assert torch.equal(r["fc.all_reduce_coalesced"][0], total)
        assert torch.equal(r["fc.all_reduce_coalesced"][1], total.long())
        assert torch.equal(r["fc.all_gather"], torch.cat(list(xs)))
        assert torch.equal(r["fc.all_gather_out"], torch.cat(list(xs)))
        assert torch.equal(r["fc.all_gather_coalesced"][1], torch.cat(list(xs)) + 1)
        assert torch.equal(r["fc.reduce_scatter"], total.chunk(WORLD)[rank])
        torch.testing.assert_close(r["fc.reduce_scatter_coalesced"][1], (2 * xs.mean(0)).chunk(WORLD)[rank])
        assert torch.equal(r["fc.all_to_all"], torch.cat([x.chunk(WORLD)[rank] for x in xs]))
        assert torch.equal(r["fc.broadcast"], xs[1])
        assert torch.equal(r["fc.async_then_use"], total)
    assert torch.equal(results[0]["fc.all_to_all_uneven"], torch.cat([xs[0][:1], xs[1][:1]]))
    assert torch.equal(results[1]["fc.all_to_all_uneven"], torch.cat([xs[0][1:], xs[1][1:]]))


def test_distributed_calls_compile_into_functional_collectives(results: list[dict[str, Any]]) -> None:
    y = 2 * torch.stack([_x(r) for r in range(WORLD)]).sum(0)
    for r in results:
        assert torch.equal(r["compiled"][0], torch.cat([y, y]) + 1)
        assert torch.equal(r["compiled"][1], WORLD * y)  # each rank's half of the summed [y, y]
    path = results[0]["path"]
    assert results[0]["compiled.counts"] == {f"{path}:all_reduce.sum": 1, f"{path}:all_gather_single_coalesced": 1,
                                             f"{path}:reduce_scatter_single_coalesced.sum": 1}


def test_scatter_gather_reduce_match_cpu(results: list[dict[str, Any]]) -> None:
    xs = torch.stack([_x(r) for r in range(WORLD)])
    for rank, r in enumerate(results):
        assert torch.equal(r["scatter"], (rank + 1) * _x(1))
    assert torch.equal(results[1]["gather"], xs)
    torch.testing.assert_close(results[0]["reduce"], xs.mean(0))
    assert torch.equal(results[1]["reduce"], _x(1))  # not the root: left as it was
    path = results[0]["path"]
    for name in ("scatter", "gather", "reduce.avg"):
        assert results[0]["fc.counts"][f"{path}:{name}"] == 1, name


def test_functional_collectives_are_counted_under_the_path_that_ran(results: list[dict[str, Any]]) -> None:
    path, counts = results[0]["path"], results[0]["fc.counts"]
    # uneven all_to_all_single has no native form (the runtime has no all-to-all entry)
    assert counts["staged:all_to_all_single"] == (1 if path == "native" else 2), counts
    ran = {k: v for k, v in counts.items() if k != "staged:all_to_all_single"}
    assert all(k.startswith(f"{path}:") for k in ran), counts
    assert counts[f"{path}:all_reduce.sum"] == 2 and counts[f"{path}:all_reduce.avg"] == 1
    assert counts[f"{path}:all_reduce_coalesced.sum"] == 1
    assert counts[f"{path}:all_gather_single_coalesced"] == 2  # all_gather_tensor is the coalesced form
    assert counts[f"{path}:all_gather_single"] == 1  # the out= form, through the device backend
    assert counts[f"{path}:reduce_scatter_single_coalesced.sum"] == 1
    assert counts[f"{path}:reduce_scatter_single_coalesced.avg"] == 1
    assert counts[f"{path}:broadcast"] == 1


def test_unsupported_is_a_clear_python_error(results: list[dict[str, Any]]) -> None:
    errors = results[0]
    assert errors["error.band"].startswith("ValueError") and "BAND" in errors["error.band"]
    assert errors["error.dtype"].startswith("TypeError") and "uint16" in errors["error.dtype"]
    a2a = errors["error.alltoall_list"]
    assert a2a.startswith("NotImplementedError") and "all_to_all_single" in a2a, a2a


def test_dtensor_matmul_and_redistribute(results: list[dict[str, Any]]) -> None:
    a, b = _dtensor_inputs()
    for rank, r in enumerate(results):
        torch.testing.assert_close(r["dt.mm"], a @ b)
        torch.testing.assert_close(r["dt.shard1"], a.chunk(WORLD, dim=1)[rank])
        assert r["dt.partial"] == "(Partial(sum),)"
        torch.testing.assert_close(r["dt.partial_to_shard0"], (a @ b).chunk(WORLD)[rank])
        torch.testing.assert_close(r["dt.partial_to_replicate"], a @ b)
    path, counts = results[0]["path"], results[0]["dt.counts"]
    assert counts and all(k.startswith(f"{path}:") for k in counts), counts
    for name in ("scatter", "all_gather_single_coalesced", "all_to_all_single",
                 "reduce_scatter_single_coalesced.sum", "all_reduce.sum"):
        assert counts.get(f"{path}:{name}", 0) >= 1, (name, counts)


def test_fsdp2_on_device_matches_single_process_cpu(results: list[dict[str, Any]]) -> None:
    want = _reference_params()  # one process on the whole batch
    for r in results:
        assert r["fsdp2.local_shapes"][0] == (8, 8)  # Linear(8, 16).weight: half the rows per rank
        for got, w in zip(r["fsdp2"], want):
            torch.testing.assert_close(got, w, rtol=1e-4, atol=1e-5)
    path, counts = results[0]["path"], results[0]["fsdp2.counts"]
    # parameters all-gathered before each forward and backward, gradients reduce-scattered (averaged)
    assert counts[f"{path}:all_gather_single"] >= 2 * STEPS, counts
    assert counts[f"{path}:reduce_scatter_single.avg"] >= STEPS, counts
