"""The c10d backend (sdk/device/distributed.py) over two real processes on this machine, on both paths.

One spawn of two processes (a FileStore rendezvous, the simulated device in each) runs every check
and saves what it saw; the tests below compare that with references computed on the CPU here.
Spawning is the slow part (a few seconds per process), so it happens once per path: ``native``
(the simulator's collective entries, over shared memory) and ``staged`` (the simulator serving its
minor-0 table, TORCHVENDOR_SIM_ABI_MINOR=0, which has no collectives: host memory over gloo).
"""
from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from torchvendor.sdk.conformance.distributed_cases import STEPS, _model, _train  # the conformance case's model, data, loop

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this torch build has no gloo", allow_module_level=True)

WORLD = 2
_OPS = ("SUM", "AVG", "MAX", "MIN", "PRODUCT")


def _rank_input(rank: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Each rank's input: different per rank, exact in float32 for every reduction."""
    return (torch.arange(6, dtype=torch.float32) + 1 + 3 * rank).to(dtype)


def _collectives(rank: int, dev: str, out: dict[str, Any]) -> None:
    """Every supported collective on device tensors; results moved to the CPU into ``out``."""
    for op in _OPS:
        x = _rank_input(rank).to(dev)
        dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
        out[f"all_reduce.{op}"] = x.cpu()
    c = _rank_input(rank)  # a CPU tensor in the same group: gloo directly, AVG still works, not counted
    dist.all_reduce(c, op=dist.ReduceOp.AVG)
    out["cpu_all_reduce.AVG"] = c
    x = _rank_input(rank, torch.int64).to(dev)
    dist.all_reduce(x)
    out["all_reduce.int64"] = x.cpu()
    x = _rank_input(rank).to(dev) if rank == 1 else torch.zeros(6, device=dev)
    dist.broadcast(x, src=1)
    out["broadcast"] = x.cpu()
    outs = [torch.empty(6, device=dev) for _ in range(WORLD)]
    dist.all_gather(outs, _rank_input(rank).to(dev))
    out["all_gather"] = torch.stack([o.cpu() for o in outs])
    flat = torch.empty(WORLD * 6, device=dev)
    dist.all_gather_into_tensor(flat, _rank_input(rank).to(dev))  # all_gather_single is 2.13+
    out["all_gather_single"] = flat.cpu()
    o = torch.empty(3, device=dev)
    dist.reduce_scatter(o, list(_rank_input(rank).to(dev).chunk(WORLD)))
    out["reduce_scatter"] = o.cpu()
    o = torch.empty(3, device=dev)
    dist.reduce_scatter_tensor(o, _rank_input(rank).to(dev), op=dist.ReduceOp.AVG)  # _single is 2.13+
    out["reduce_scatter_single.AVG"] = o.cpu()
    if rank == 0:
        dist.send(_rank_input(0).to(dev), dst=1)
    else:
        r = torch.zeros(6, device=dev)
        dist.recv(r, src=0)
        out["send_recv"] = r.cpu()
    dist.barrier()


def _async_on_side_stream(rank: int, dev: str, out: dict[str, Any]) -> None:
    """A collective launched on a side stream and waited for on the default stream: wait() must
    order the reader after the copy back."""
    mod = torch.get_device_module(dev.split(":")[0])
    side = mod.Stream()
    base = _rank_input(rank).to(dev)
    with mod.stream(side):
        y = base * 2  # produced on the side stream, so the D2H copy must follow this kernel
        work = dist.all_reduce(y, async_op=True)
    work.wait()
    out["async_side_stream"] = (y + 0).cpu()  # read on the default stream


def _errors(dev: str, out: dict[str, Any]) -> None:
    for what, call in {
        "dtype": lambda: dist.all_reduce(torch.ones(2, dtype=torch.uint16, device=dev)),
        "op": lambda: dist.all_reduce(torch.ones(2, device=dev), op=dist.ReduceOp.BAND),
        "all_to_all": lambda: dist.all_to_all([torch.empty(1, device=dev)] * 2, [torch.ones(1, device=dev)] * 2),
        "device": lambda: dist.all_reduce(torch.ones(2, device="meta")),
        "avg_int": lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32, device=dev), op=dist.ReduceOp.AVG),
    }.items():
        try:
            call()
            out[f"error.{what}"] = "no error"
        except (TypeError, ValueError, NotImplementedError, RuntimeError) as e:
            out[f"error.{what}"] = f"{type(e).__name__}: {e}"


def _runtime_refusal(rank: int, dev: str, out: dict[str, Any]) -> None:
    """What the device layer says when the runtime refuses a collective (AVG of int32, on a
    one-rank communicator of this process): the entry, its arguments and the runtime's reason."""
    from torchvendor import _C

    comm = _C.comm_create(f"test-refusal-{os.getpid()}", 1, 0, int(dev.split(":")[1]))
    t = torch.ones(2, dtype=torch.int32, device=dev)
    try:
        _C.collective("all_reduce", comm, t, t, 2, 4, 0)
    except NotImplementedError as e:
        out["error.runtime"] = str(e)
    finally:
        _C.comm_destroy(comm)


def _ddp(rank: int, dev: str, compiled: bool) -> list[torch.Tensor]:
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(_model().to(dev), device_ids=None)
    return _train(model, torch.compile(model, backend="aot_eager") if compiled else model, dev, rank, WORLD)


def _worker(rank: int, store_path: str, out_dir: str, compiled: bool, path: str) -> None:
    from torchvendor import _C
    from torchvendor.sdk import collective_counts, register_device, register_distributed

    if path == "staged":  # read by the simulator when register_device loads it
        os.environ["TORCHVENDOR_SIM_ABI_MINOR"] = "0"
    acme = register_device("acme")
    register_distributed()
    dev = f"acme:{rank % acme.device_count()}"
    store = dist.FileStore(store_path, WORLD)
    dist.init_process_group(store=store, rank=rank, world_size=WORLD, device_id=torch.device(dev))
    out: dict[str, Any] = {"backend": dist.get_backend(), "diagnose": acme.diagnose()}
    try:
        _collectives(rank, dev, out)
        _async_on_side_stream(rank, dev, out)
        out["counts"] = collective_counts()
        out["device_module_counts"] = acme.collective_counts()
        out["cpp_counts"] = _C.native_collective_counts()  # the part the C++ fast path ran
        _errors(dev, out)
        if path == "native":
            _runtime_refusal(rank, dev, out)
        acme.reset_collective_counts()
        out["ddp"] = _ddp(rank, dev, compiled=False)
        out["ddp_counts"] = collective_counts()
        if compiled:
            out["ddp_compiled"] = _ddp(rank, dev, compiled=True)
    finally:
        dist.destroy_process_group()
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))


def _spawn(tmp_path_factory: pytest.TempPathFactory, compiled: bool, path: str) -> list[dict[str, Any]]:
    import torch.multiprocessing as mp

    tmp = tmp_path_factory.mktemp("dist")
    mp.spawn(_worker, args=(str(tmp / "store"), str(tmp), compiled, path), nprocs=WORLD, join=True)
    return [dict(torch.load(tmp / f"rank{r}.pt"), path=path) for r in range(WORLD)]


@pytest.fixture(scope="module", params=["native", "staged"])
def results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _spawn(tmp_path_factory, compiled=False, path=request.param)


def _reference_train() -> list[torch.Tensor]:
    model = _model()
    return _train(model, model)


def test_device_id_picks_the_backend(results: list[dict[str, Any]]) -> None:
    assert [r["backend"] for r in results] == ["tvgloo"] * WORLD
    # the staged path's runtime is a minor-0 table: diagnose() names the missing collectives
    missing = "comm_create: native collectives" in results[0]["diagnose"]
    assert missing == (results[0]["path"] == "staged"), results[0]["diagnose"]


@pytest.mark.parametrize("op", _OPS)
def test_all_reduce_matches_cpu(results: list[dict[str, Any]], op: str) -> None:
    inputs = torch.stack([_rank_input(r) for r in range(WORLD)])
    expected = {"SUM": inputs.sum(0), "AVG": inputs.mean(0), "MAX": inputs.amax(0),
                "MIN": inputs.amin(0), "PRODUCT": inputs.prod(0)}[op]
    for r in results:
        torch.testing.assert_close(r[f"all_reduce.{op}"], expected)
        if op == "AVG":
            torch.testing.assert_close(r["cpu_all_reduce.AVG"], expected)


def test_other_collectives_match_cpu(results: list[dict[str, Any]]) -> None:
    inputs = torch.stack([_rank_input(r) for r in range(WORLD)])
    for rank, r in enumerate(results):
        assert torch.equal(r["all_reduce.int64"], inputs.sum(0).long())
        assert torch.equal(r["broadcast"], _rank_input(1))
        assert torch.equal(r["all_gather"], inputs)
        assert torch.equal(r["all_gather_single"], inputs.flatten())
        assert torch.equal(r["reduce_scatter"], inputs.sum(0).chunk(WORLD)[rank])
        torch.testing.assert_close(r["reduce_scatter_single.AVG"], inputs.mean(0).chunk(WORLD)[rank])
        torch.testing.assert_close(r["async_side_stream"], 2 * inputs.sum(0))
    assert torch.equal(results[1]["send_recv"], _rank_input(0))


def test_collectives_are_counted_under_the_path_that_ran(results: list[dict[str, Any]]) -> None:
    path = results[0]["path"]
    counts = results[0]["counts"]
    assert counts == results[0]["device_module_counts"]
    assert all(k.startswith(f"{path}:") for k in counts), counts  # one path ran everything
    assert counts[f"{path}:all_reduce.sum"] == 3  # SUM, int64, the async one
    for name in ("all_reduce.avg", "all_reduce.max", "all_reduce.min", "all_reduce.product", "broadcast",
                 "all_gather", "all_gather_single", "reduce_scatter.sum", "reduce_scatter_single.avg", "send"):
        assert counts[f"{path}:{name}"] == 1, name
    assert results[1]["counts"][f"{path}:recv"] == 1
    # DDP: parameter broadcast at construction and one bucketed all-reduce per step
    assert results[0]["ddp_counts"].get(f"{path}:all_reduce.sum", 0) >= STEPS


def test_native_collectives_run_without_python_after_the_first(results: list[dict[str, Any]]) -> None:
    """The first collective joins the communicator in Python; later ones on contiguous tensors of a
    runtime dtype run in C++ (csrc/device/process_group.cpp), and the list forms stay in Python."""
    cpp = results[0]["cpp_counts"]
    if results[0]["path"] == "staged":
        assert cpp == {}, cpp
        return
    assert cpp["native:all_reduce.sum"] == 2, cpp  # int64 and the async one; the first SUM joined
    for name in ("all_reduce.avg", "all_reduce.max", "all_reduce.min", "all_reduce.product", "broadcast",
                 "all_gather_single", "reduce_scatter_single.avg"):
        assert cpp[f"native:{name}"] == 1, name
    for python_only in ("all_gather", "reduce_scatter.sum", "send"):  # list forms and point-to-point
        assert f"native:{python_only}" not in cpp, cpp
    assert results[0]["counts"] == results[0]["device_module_counts"]  # merged with the Python counts


def test_unsupported_input_is_a_clear_error(results: list[dict[str, Any]]) -> None:
    errors = {k: v for k, v in results[0].items() if k.startswith("error.")}
    assert errors["error.dtype"].startswith("TypeError") and "uint16" in errors["error.dtype"]
    assert errors["error.op"].startswith("ValueError") and "BAND" in errors["error.op"]
    a2a = errors["error.all_to_all"]  # the list form; all_to_all_single runs (test_distributed_functional.py)
    assert a2a.startswith("NotImplementedError") and "supported:" in a2a, a2a
    assert errors["error.device"].startswith("ValueError") and "meta" in errors["error.device"]
    assert errors["error.avg_int"].startswith("TypeError") and "int32" in errors["error.avg_int"]
    if results[0]["path"] == "native":
        msg = errors["error.runtime"]
        assert "all_reduce(sendbuf=" in msg and "op=4" in msg and "TV_ERROR_NOT_SUPPORTED" in msg, msg
        assert "tv_reduce_op 4 is not supported for tv_dtype 6" in msg, msg


def test_ddp_on_device_matches_single_process_cpu(results: list[dict[str, Any]]) -> None:
    expected = _reference_train()
    for r in results:
        for got, want in zip(r["ddp"], expected):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_ddp_of_compiled_model_on_device(tmp_path_factory: pytest.TempPathFactory) -> None:
    expected = _reference_train()
    for r in _spawn(tmp_path_factory, compiled=True, path="native"):
        for got, want in zip(r["ddp_compiled"], expected):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_register_needs_a_device_and_is_idempotent() -> None:
    from torchvendor.sdk import register_device, register_distributed

    register_device("acme")
    assert register_distributed() == register_distributed() == "tvgloo"
    assert dist.Backend.default_device_backend_map["acme"] == "tvgloo"


def test_native_works_on_two_devices_in_one_process(acme) -> None:  # noqa: ANN001
    """Two one-rank groups, one per device, their C++ works interleaved: each work's event comes
    from its own device's pool (a pooled event of the other device would fail to record there),
    wait() orders the waiting stream of the work's device, futures complete with the outputs, and
    the counts merge the joins (Python) with the rest (C++)."""
    from torchvendor import _C
    from torchvendor.sdk import collective_counts, register_distributed

    dist.init_process_group(register_distributed(), store=dist.HashStore(), rank=0, world_size=1,
                            device_id=torch.device("acme:0"))
    try:
        groups = [dist.group.WORLD, dist.new_group([0])]
        acme.reset_collective_counts()
        xs = [torch.arange(4.0, device=f"acme:{d}") for d in range(2)]
        for d in range(2):
            dist.all_reduce(xs[d], group=groups[d])  # joins group d's communicator on acme:d (Python)
        for _ in range(3):  # each round's works die at its end: their events go back to the pools
            works = []
            for d in range(2):
                side = acme.Stream(device=d)
                with acme.stream(side):
                    y = xs[d] * 2  # on the side stream, before the collective on it
                    works.append((d, y, dist.all_reduce(y, op=dist.ReduceOp.AVG, group=groups[d], async_op=True)))
            for d, y, work in works:
                assert work.get_future().wait()[0] is y
                work.wait()  # the current stream of acme:d waits for the side stream's collective
                torch.testing.assert_close((y + 0).cpu(), torch.arange(4.0) * 2)
        assert _C.native_collective_counts() == {"native:all_reduce.avg": 6}
        assert collective_counts() == {"native:all_reduce.avg": 6, "native:all_reduce.sum": 2}
    finally:
        dist.destroy_process_group()
        acme.reset_collective_counts()
