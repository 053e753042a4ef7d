"""The ``training-loop`` area: the parts of an ordinary training loop, written as a CUDA user
writes it, each a case of its own, then the whole loop (issue 34).

- ``compiled_optimizer_{sgd,adam,adamw}``: ``torch.compile(optimizer.step)`` with the backend,
  foreach and single-tensor, capturable and not (where torch allows it; SGD: momentum), three
  steps: parameters as eager's; a partition that fell back makes the case a fallback with the
  partition's reason.
- ``amp_grad_scaler``: fp16 autocast with ``torch.amp.GradScaler`` on the device: a step as the
  CPU's, an infinite gradient skips the step and halves the scale.
- ``profiler_device_time``: torch's profiler times operators on the device
  (:mod:`torchvendor.sdk.device.profiler`; torchvendor devices only).
- ``dcp_save_resume``: a ``torch.distributed.checkpoint`` save of model and AdamW state, loaded
  into fresh objects: the resumed steps equal the uninterrupted ones.
- ``pinned_dataloader``: ``DataLoader(pin_memory=True)`` hands out pinned batches that a
  ``non_blocking`` copy moves to the device intact.
- ``activation_checkpointing``: ``torch.utils.checkpoint`` (non-reentrant) gives the gradients of
  the plain block.
- ``whole_loop``: a small LM, compiled model and optimizer step, bf16 autocast, clipping,
  checkpointing, a DCP save half way and a resume: the resumed losses equal the uninterrupted
  run's, and they are close to the same loop on the CPU.
- ``two_devices_{ddp,fsdp2}``: the same loop in float32 on two devices (two processes, the
  device's c10d backend; DDP, or FSDP2 with ``fully_shard``), a sharded DCP save half way and a
  resume in two new processes: the ranks agree, the resumed losses equal the uninterrupted
  ones, and all are within ``rtol=1e-4`` of one process running the loop.

    >>> from torchvendor.sdk.conformance.core import Target
    >>> [c.id.split("/")[1] for c in cases(Target(device="cpu", backend="eager"), "training")][:3]
    ['compiled_optimizer_sgd', 'compiled_optimizer_adam', 'compiled_optimizer_adamw']
"""
from __future__ import annotations

import functools
import tempfile
from typing import Any, Callable

import torch

from torchvendor.ir import compat

from .core import Case, Target, Unsupported

__all__ = ["cases"]

#: per optimizer: the option sets its compiled step must run (torch's own defaults in between)
OPTIMIZERS: dict[str, list[dict[str, Any]]] = {
    "SGD": [{"momentum": 0.9, "foreach": True}, {"momentum": 0.9, "foreach": False}],
    "Adam": [{"foreach": f, "capturable": c} for f in (True, False) for c in (False, True)],
    "AdamW": [{"foreach": f, "capturable": c} for f in (True, False) for c in (False, True)],
}


def _compile(target: Target, fn: Any) -> Any:
    return torch.compile(fn, backend=target.backend_name(), options=dict(target.options) or None)


def _partition_fallbacks(since: int) -> dict[str, str]:
    """Partitions of the torchvendor compile reports made after the first ``since`` that fell
    back: ``{"graph kind/partition": reason}`` (none for a backend without reports)."""
    from torchvendor.sdk import reports

    return {f"{g.kind}/{p.name}": p.reason for r in reports()[since:] for g in r.graphs for p in g.partitions
            if p.status != "compiled"}


def _n_reports() -> int:
    from torchvendor.sdk import reports

    return len(reports())


def _planner() -> Any:
    """The SDK's DCP save planner: torch's file writer leaves a torchvendor device's tensors on the
    device where CUDA is available too (the GPU machine); elsewhere it is DCP's default planner."""
    from torchvendor.sdk import DeviceSavePlanner

    return DeviceSavePlanner()


def _fallback_result(fell: dict[str, str], what: str) -> dict[str, Any] | None:
    if not fell:
        return None
    first = next(iter(fell.items()))
    return {"fallback": {k: 1 for k in fell}, "reason": f"{what}: partition {first[0]} fell back to eager "
            f"({first[1]}); the backend must run it on the device (a kernel reading a 0-d host tensor gets a "
            f"device copy from the SDK's runner)"}


def _optimizer_steps(device: str, name: str, options: dict, step: Callable[[Any], Any] | None) -> list:
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3, generator=g).to(device)),
              torch.nn.Parameter(torch.randn(5, generator=g).to(device))]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device)
    opt = getattr(torch.optim, name)(params, lr=0.1, **options)
    run = opt.step if step is None else step(opt.step)
    for _ in range(3):
        run()
    return [p.detach().cpu() for p in params]


def _compiled_optimizer(t: Target, name: str) -> dict[str, Any] | None:
    since = _n_reports()
    for options in OPTIMIZERS[name]:
        compat.dynamo_reset()
        try:
            eager = _optimizer_steps(t.device, name, options, None)
        except (AssertionError, RuntimeError) as e:
            if options.get("capturable") and "capturable" in str(e):  # torch refuses it here (the CPU): no variant
                continue
            raise
        compiled = _optimizer_steps(t.device, name, options, functools.partial(_compile, t))
        for c, e in zip(compiled, eager):  # eager's bias correction is Python (double) math, a kernel's float32
            torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5,
                                       msg=lambda m, o=options: f"{name}({o}) compiled != eager after 3 steps: {m}")
    return _fallback_result(_partition_fallbacks(since), f"{name}'s compiled step")


def _mlp(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(device)


def _amp_grad_scaler(t: Target) -> None:
    x, y = torch.randn(8, 16), torch.randn(8, 4)

    def step(device: str, poison: bool) -> tuple[list[torch.Tensor], float]:
        model = _mlp(device)
        opt, scaler = torch.optim.SGD(model.parameters(), lr=0.1), torch.amp.GradScaler(device, init_scale=2.0 ** 8)
        with torch.autocast(device, dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x.to(device)).float(), y.to(device))
        scaler.scale(loss).backward()
        if poison:
            next(model.parameters()).grad.view(-1)[0] = float("inf")
        scaler.step(opt)
        scaler.update()
        return [p.detach().cpu() for p in model.parameters()], scaler.get_scale()
    got, scale = step(t.device, False)
    want, _ = step("cpu", False)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=2e-3, atol=2e-3,
                                   msg=lambda m: f"an fp16 GradScaler step off the CPU's: {m}")
    skipped, halved = step(t.device, True)
    untouched = all(torch.equal(s, p.detach().cpu()) for s, p in zip(skipped, _mlp("cpu").parameters()))
    if halved != scale / 2 or not untouched:
        raise AssertionError(f"an infinite gradient must skip the step and halve the scale ({scale} -> {halved}): "
                             "check _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_ on the device")


def _profiler_device_time(t: Target) -> None:
    from torchvendor.sdk.device.profiler import device_times, profile, times_device

    if not times_device():
        raise Unsupported("the runtime has no event_elapsed_time: torch's profiler shows CPU time only")
    x = torch.randn(64, 64, device=t.device)
    with profile() as prof:
        (x @ x).sum().item()
    times = device_times(prof)
    if not times.get("aten::mm", 0) > 0:
        raise AssertionError(f"aten::mm has no device time in torch's profiler ({times}): event_record on the "
                             "current stream and event_elapsed_time must time the work between two events")


def _dcp_save_resume(t: Target) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    x, y = torch.randn(8, 16).to(t.device), torch.randn(8, 4).to(t.device)

    def train(model: torch.nn.Module, opt: torch.optim.Optimizer, n: int) -> list[float]:
        losses = []
        for _ in range(n):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses
    model = _mlp(t.device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    train(model, opt, 2)
    with tempfile.TemporaryDirectory() as ckpt:
        model_state, optim_state = get_state_dict(model, opt)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=ckpt, planner=_planner())
        want = train(model, opt, 2)
        fresh = _mlp(t.device)
        fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.01)
        model_state, optim_state = get_state_dict(fresh, fresh_opt)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=ckpt)
        set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    got = train(fresh, fresh_opt, 2)
    if got != want:
        raise AssertionError(f"steps after a DCP load {got} != the uninterrupted run's {want}: the checkpoint "
                             "lost state (device tensors saved and loaded through the device's copies and storages)")


def _pinned_dataloader(t: Target) -> None:
    data = torch.arange(64, dtype=torch.float32).reshape(16, 4)
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=t.device != "cpu")
    for k, batch in enumerate(loader):
        if t.device != "cpu" and not batch.is_pinned():
            raise AssertionError("DataLoader(pin_memory=True) handed out an unpinned batch: the device's host "
                                 "allocator (runtime host_malloc) and torch.accelerator must serve pin_memory()")
        moved = batch.to(t.device, non_blocking=True)
        torch.testing.assert_close(moved.cpu(), data[4 * k:4 * k + 4], msg=lambda m: f"a non_blocking copy: {m}")


def _activation_checkpointing(t: Target) -> None:
    from torch.utils.checkpoint import checkpoint

    def grads(use_checkpoint: bool) -> list[torch.Tensor]:
        model = _mlp(t.device)
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1)).to(t.device)
        out = checkpoint(model, x, use_reentrant=False) if use_checkpoint else model(x)
        out.square().sum().backward()
        return [p.grad.cpu() for p in model.parameters()]
    for g, w in zip(grads(True), grads(False)):
        torch.testing.assert_close(g, w, msg=lambda m: f"gradients through torch.utils.checkpoint: {m}")


class _LM(torch.nn.Module):
    """A tiny decoder-style LM: embedding, one checkpointed residual MLP block, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.head = torch.nn.Embedding(64, 32), torch.nn.Linear(32, 64)
        self.block = torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.Linear(32, 64), torch.nn.GELU(),
                                         torch.nn.Linear(64, 32))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        h = self.emb(ids)
        h = h + checkpoint(self.block, h, use_reentrant=False)
        return self.head(h).flatten(0, 1)


def _loop(t: Target | None, device: str, steps: range, ckpt: str, resume: bool, amp: bool = True) -> list[float]:
    """Steps of the whole loop (``t`` None: eager, no compile; ``amp``: bf16 autocast); saves after
    the first half, or starts from that save."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    torch.manual_seed(0)
    data = (torch.randint(0, 64, (8 * steps.stop, 1)) + 3 * torch.arange(9)) % 64
    loader = torch.utils.data.DataLoader(data, batch_size=8, pin_memory=device != "cpu")
    model = _LM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    if resume:
        model_state, optim_state = get_state_dict(model, opt)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=ckpt)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    forward = model if t is None else _compile(t, model)
    step = opt.step if t is None else _compile(t, opt.step)
    losses = []
    for k, batch in enumerate(loader):
        if k not in steps:
            continue
        batch = batch.to(device, non_blocking=True)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(forward(batch[:, :-1]).float(), batch[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if not resume and k + 1 == len(steps) // 2:
            model_state, optim_state = get_state_dict(model, opt)
            dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=ckpt, planner=_planner())
    return losses


def _whole_loop(t: Target) -> dict[str, Any] | None:
    since, n = _n_reports(), 6
    with tempfile.TemporaryDirectory() as ckpt:
        compat.dynamo_reset()
        losses = _loop(t, t.device, range(n), ckpt, False)
        resumed = _loop(t, t.device, range(n // 2, n), ckpt, True)
    if resumed != losses[n // 2:]:
        raise AssertionError(f"the run resumed from its DCP checkpoint gave {resumed}, the uninterrupted run "
                             f"{losses[n // 2:]}: some state (model, AdamW, data order) did not survive the save")
    with tempfile.TemporaryDirectory() as ckpt:
        cpu = _loop(None, "cpu", range(n), ckpt, False)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu), rtol=1e-2, atol=1e-3,
                               msg=lambda m: f"losses {losses} off the eager CPU loop's {cpu} (bf16 autocast): {m}")
    if not losses[-1] < losses[0]:
        raise AssertionError(f"the loop did not learn: losses {losses}")
    return _fallback_result(_partition_fallbacks(since), "the whole loop")


#: the two-device loop: steps, and what its losses must match the single process's to (float32, as the
#: distributed area's two-process cases)
TWO_DEVICE_STEPS, TWO_DEVICE_RTOL, TWO_DEVICE_ATOL = 4, 1e-4, 1e-5


def _two_device_body(t: Target, rank: int, dev: str, mode: str = "ddp", ckpt: str = "",
                     resume: bool = False) -> list[float]:
    """One rank of the whole loop's float32 steps under DDP or FSDP2 (``fully_shard`` on the block and
    the root), compiled model and step, on this rank's half of each batch (a DistributedSampler's
    rows); a sharded DCP save half way, or a start from it. The batch's mean loss, as one process's."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    n, world = TWO_DEVICE_STEPS, dist.get_world_size()
    torch.manual_seed(0)
    data = (torch.randint(0, 64, (8 * n, 1)) + 3 * torch.arange(9)) % 64  # _loop's data and model
    model = _LM().to(dev)
    if mode == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(torch.device(dev).type, (world,))  # not torch.accelerator's: CUDA's if present
        fully_shard(model.block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    state = lambda: dict(zip(("model", "optim"), get_state_dict(model, opt)))  # noqa: E731
    if resume:
        dcp.load(loaded := state(), checkpoint_id=ckpt)
        set_state_dict(model, opt, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
    forward, step, losses = _compile(t, model), _compile(t, opt.step), []
    for k in range(n // 2 if resume else 0, n):
        batch = data[8 * k:8 * k + 8][rank::world].to(dev)
        loss = torch.nn.functional.cross_entropy(forward(batch[:, :-1]).float(), batch[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        step()
        opt.zero_grad(set_to_none=True)
        dist.all_reduce(loss := loss.detach(), op=dist.ReduceOp.AVG)
        losses.append(loss.item())
        if not resume and k + 1 == n // 2:
            dcp.save(state(), checkpoint_id=ckpt, planner=_planner())
    return losses


def _two_devices(t: Target, mode: str) -> dict[str, Any] | None:
    """The whole loop on two devices (two processes, one device each, the device's c10d backend on
    its own collectives where it has them), then resumed from its sharded checkpoint in two new
    processes: the resumed losses equal, and all close to one process running the same loop."""
    from . import distributed_cases as dc

    path = {"cpu": None, "meta": None, "cuda": "nccl"}.get(t.device, "native")
    if path == "native" and dc._skip(t, path):
        path = "staged"  # a runtime without collective entries: host memory over gloo
    if why := dc._skip(t, path):
        return {"skip": why}
    n, what = TWO_DEVICE_STEPS, "DDP" if mode == "ddp" else "FSDP2 (fully_shard)"
    with tempfile.TemporaryDirectory() as ckpt, tempfile.TemporaryDirectory() as own:
        compat.dynamo_reset()
        want = _loop(t, t.device, range(n), own, False, amp=False)  # one process, one device
        ranks = dc._two_processes(t, path, functools.partial(_two_device_body, mode=mode, ckpt=ckpt))
        resumed = dc._two_processes(t, path, functools.partial(_two_device_body, mode=mode, ckpt=ckpt, resume=True))
    losses = ranks[0]
    if any(r != losses for r in ranks[1:]) or any(r != resumed[0] for r in resumed[1:]):
        raise AssertionError(f"{what}: the ranks disagree on the all-reduced loss ({ranks}, resumed {resumed}): "
                             f"all_reduce(AVG) on the {t.device} process group must give every rank the same value")
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(want), rtol=TWO_DEVICE_RTOL, atol=TWO_DEVICE_ATOL,
                               msg=lambda m: f"{what} on two {t.device} devices gave losses {losses}, one process "
                               f"{want}: {m}. The gradients two ranks average must equal the whole batch's: check "
                               f"{'reduce_scatter_tensor and all_gather_into_tensor' if mode == 'fsdp2' else 'all_reduce'}"
                               f" on the device's process group (the distributed area's cases)")
    if resumed[0] != losses[n // 2:]:
        raise AssertionError(f"{what}: resumed from its sharded DCP checkpoint in a new process group, the losses were "
                             f"{resumed[0]}, uninterrupted {losses[n // 2:]}: some state did not survive the save "
                             "(each rank's shards of model and AdamW state, saved through DeviceSavePlanner)")
    return None


def cases(target: Target, profile: str) -> list[Case]:
    """The area's cases (training and full profiles; ``ci``: the compiled AdamW step); the compile
    cases need a backend, the profiler case a torchvendor device."""
    area, out = "training-loop", []
    if profile == "ci":  # one case on every commit: the compiled AdamW step, the one users hit first
        return [Case(f"{area}/compiled_optimizer_adamw", area, functools.partial(_compiled_optimizer, name="AdamW"),
                     timeout=600, cost=5.0)] if target.backend else []
    if profile not in ("training", "full"):
        return []
    if target.backend:
        out += [Case(f"{area}/compiled_optimizer_{n.lower()}", area, functools.partial(_compiled_optimizer, name=n),
                     timeout=600, cost=5.0) for n in OPTIMIZERS]
    out += [Case(f"{area}/amp_grad_scaler", area, _amp_grad_scaler)]
    if target.device not in ("cpu", "cuda", "meta"):
        out += [Case(f"{area}/profiler_device_time", area, _profiler_device_time)]
    out += [Case(f"{area}/{fn.__name__[1:]}", area, fn) for fn in (_dcp_save_resume, _pinned_dataloader,
                                                                   _activation_checkpointing)]
    if target.backend:
        out += [Case(f"{area}/whole_loop", area, _whole_loop, timeout=600, cost=5.0)]
        out += [Case(f"{area}/two_devices_{mode}", area, functools.partial(_two_devices, mode=mode), timeout=900,
                     cost=10.0) for mode in ("ddp", "fsdp2")]
    return out
