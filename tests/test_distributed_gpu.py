"""The c10d backend on two real GPUs: the PrivateUse1 device on the CUDA reference runtime, whose
collective entries run on NCCL (reference_backends/cuda/runtime), in two processes, one GPU each.

One spawn per path (``native``: the runtime's NCCL collectives, the communicator joined from rank
0's NCCL unique id handed over the c10d store; ``staged``: the same group with ``native = False``,
host memory over gloo) runs every collective of tests/test_distributed.py, a collective on a
side stream, and DDP of the eager and of the compiled model; the tests compare with references
computed on the CPU here and check that every collective was counted under the path that ran it.
FSDP2, DTensor and functional collectives on the same device run in the conformance suite's
``distributed`` area (``--device gpu --runtime <build_runtime()>``). The training example on two GPUs
(``examples/train_two_devices.py`` under torchrun, DDP and FSDP2, sharded DCP and a resume) is held
to the same example on one GPU. Marked ``gpu``.
"""
from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from test_distributed import WORLD, _async_on_side_stream, _collectives, _ddp, _rank_input, _reference_train

pytestmark = pytest.mark.gpu
dist = pytest.importorskip("torch.distributed")
for _var, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                     ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_var, _value)  # NVLink multicast off (the lent machines require it)


def _worker(rank: int, store_path: str, out_dir: str, path: str, runtime: str) -> None:
    from torchvendor.sdk import collective_counts, register_device, register_distributed

    gpu = register_device("gpu", runtime=runtime)
    backend = register_distributed()
    dev = torch.device("gpu", rank)
    gpu.set_device(dev)
    dist.init_process_group(backend, store=dist.FileStore(store_path, WORLD), rank=rank, world_size=WORLD, device_id=dev)
    dist.group.WORLD.native = path == "native"
    out: dict[str, Any] = {"backend": dist.get_backend()}
    try:
        _collectives(rank, str(dev), out)
        _async_on_side_stream(rank, str(dev), out)
        out["counts"] = collective_counts()
        gpu.reset_collective_counts()
        out["ddp"] = _ddp(rank, str(dev), compiled=False)
        out["ddp_compiled"] = _ddp(rank, str(dev), compiled=True)
        out["ddp_counts"] = collective_counts()
        big = torch.full((1 << 22,), float(rank + 1), device=dev)  # 16 MiB: NCCL's pipelined protocol
        dist.all_reduce(big)
        out["big"] = big.cpu()
    finally:
        dist.destroy_process_group()
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))


@pytest.fixture(scope="module", params=["native", "staged"])
def results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    import torch.multiprocessing as mp

    from torchvendor.reference_backends.cuda.runtime import build_runtime, cuda_include_dir

    if not torch.cuda.is_available() or torch.cuda.device_count() < WORLD or cuda_include_dir() is None:
        pytest.skip(f"needs {WORLD} CUDA GPUs and cuda.h")
    runtime = build_runtime()  # also points $TORCHVENDOR_NCCL at the NCCL torch ships
    tmp = tmp_path_factory.mktemp("dist_gpu")
    mp.spawn(_worker, args=(str(tmp / "store"), str(tmp), request.param, runtime), nprocs=WORLD, join=True)
    return [dict(torch.load(tmp / f"rank{r}.pt"), path=request.param) for r in range(WORLD)]


def test_collectives_on_two_gpus_match_cpu(results: list[dict[str, Any]]) -> None:
    inputs = torch.stack([_rank_input(r) for r in range(WORLD)])
    for rank, r in enumerate(results):
        assert r["backend"] == "tvgloo"
        for op, want in {"SUM": inputs.sum(0), "AVG": inputs.mean(0), "MAX": inputs.amax(0),
                         "MIN": inputs.amin(0), "PRODUCT": inputs.prod(0)}.items():
            torch.testing.assert_close(r[f"all_reduce.{op}"], want)
        assert torch.equal(r["all_reduce.int64"], inputs.sum(0).long())
        assert torch.equal(r["broadcast"], _rank_input(1))
        assert torch.equal(r["all_gather"], inputs)
        assert torch.equal(r["all_gather_single"], inputs.flatten())
        assert torch.equal(r["reduce_scatter"], inputs.sum(0).chunk(WORLD)[rank])
        torch.testing.assert_close(r["reduce_scatter_single.AVG"], inputs.mean(0).chunk(WORLD)[rank])
        torch.testing.assert_close(r["async_side_stream"], 2 * inputs.sum(0))
        assert torch.equal(r["big"], torch.full((1 << 22,), 3.0))
    assert torch.equal(results[1]["send_recv"], _rank_input(0))


def test_every_collective_is_counted_under_its_path(results: list[dict[str, Any]]) -> None:
    path = results[0]["path"]
    for counts in (results[0]["counts"], results[0]["ddp_counts"]):
        assert counts and all(k.startswith(f"{path}:") for k in counts), counts
    assert results[0]["counts"][f"{path}:all_reduce.sum"] == 3  # SUM, int64, the async one
    assert results[1]["counts"][f"{path}:recv"] == 1
    assert results[0]["ddp_counts"][f"{path}:all_reduce.sum"] >= 2 * 3  # a bucket per step, two models


def test_ddp_eager_and_compiled_on_two_gpus_match_one_process(results: list[dict[str, Any]]) -> None:
    want = _reference_train()
    for r in results:
        for key in ("ddp", "ddp_compiled"):
            for got, w in zip(r[key], want):
                torch.testing.assert_close(got, w, rtol=1e-4, atol=1e-5)


def test_the_training_example_on_two_gpus_matches_one(tmp_path) -> None:  # noqa: ANN001
    """examples/train_two_devices.py under torchrun on the PrivateUse1 GPU (the CUDA reference runtime,
    its NCCL collectives, torchvendor_cuda): DDP and FSDP2, each resumed from its sharded DCP
    checkpoint (DeviceSavePlanner: CUDA is available here) in a new process group, float32 losses
    as one process's on one GPU."""
    from test_training_loop import _train, _train_on_two, assert_two_devices_match_one

    from torchvendor.reference_backends.cuda.runtime import build_runtime, cuda_include_dir

    if not torch.cuda.is_available() or torch.cuda.device_count() < WORLD or cuda_include_dir() is None:
        pytest.skip(f"needs {WORLD} CUDA GPUs and cuda.h")
    runtime = build_runtime()  # also points $TORCHVENDOR_NCCL at the NCCL torch ships
    env = {**os.environ, "TRAIN_RUNTIME": runtime}
    one = _train("gpu", 4, "none", tmp_path, backend="torchvendor_cuda", env=env)
    assert one["resumed"] == one["losses"][2:], one
    assert_two_devices_match_one(_train_on_two("gpu", 4, "none", tmp_path, backend="torchvendor_cuda", env=env), one, 4)
