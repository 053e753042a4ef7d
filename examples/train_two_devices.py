"""examples/train_on_device.py's GPT-2 on two devices, written for ``torchrun --nproc-per-node 2`` as for CUDA:
DDP or FSDP2 (``fully_shard`` per block and at the root), a DistributedSampler (each rank half of every batch),
compiled model and optimizer step, a sharded DCP save half way; ``TRAIN_RESUME=<it>`` resumes in a new process group.
Run plainly, it runs torchrun, then the resume, per mode (docs/training.md). ``[DEVICE [STEPS [MODES [AMP [BACKEND]]]]]``

    $ python examples/train_two_devices.py
    acme ddp: 4 steps on 2 devices, loss 5.54 -> 5.08; resumed at step 2 in a new process group: the same losses
    acme fsdp2: 4 steps on 2 devices, loss 5.54 -> 5.08; resumed at step 2 in a new process group: the same losses
"""
import json, os, subprocess, sys, tempfile  # noqa: E401
import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp  # noqa: E401
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard
from transformers import GPT2Config, GPT2LMHeadModel
import torchvendor.reference_backends.cpu  # noqa: F401 - registers the torchvendor_cpu backend
from torchvendor.sdk import DeviceSavePlanner, register_device, register_distributed

device, steps, modes, amp, backend = (sys.argv[1:] + ["acme", "4", "ddp,fsdp2", "bf16", "torchvendor_cpu"][len(sys.argv) - 1:])[:5]
steps, out = int(steps), os.environ.get("TRAIN_LOSSES", os.path.join(tempfile.gettempdir(), "train_two_devices"))
os.makedirs(out, exist_ok=True)  # the losses as <mode>.json and <mode>-resumed.json, for docs/training.md and tests
for mode in modes.split(",") if "RANK" not in os.environ else []:  # a plain run: torchrun, then torchrun resuming
    for env in ({"TRAIN_CKPT": (ckpt := tempfile.mkdtemp())}, {"TRAIN_RESUME": ckpt}):
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", sys.argv[0],
                        device, str(steps), mode, amp, backend], env={**os.environ, **env, "TRAIN_LOSSES": out}, check=True)
    (losses, resumed), same = (json.load(open(f"{out}/{mode}{r}.json")) for r in ("", "-resumed")), "the same losses"
    print(f"{device} {mode}: {steps} steps on 2 devices, loss {losses[0]:.2f} -> {losses[-1]:.2f}; resumed at step "
          f"{steps // 2} in a new process group: {same if resumed == losses[steps // 2:] else resumed}")
rank, resume = int(os.environ.get("RANK") or sys.exit()), os.environ.get("TRAIN_RESUME")  # from here: one rank's run
register_device(device, runtime=os.environ.get("TRAIN_RUNTIME")) if device not in ("cpu", "cuda") else None  # autoload
dev = torch.device(device, rank) if device != "cpu" else torch.device("cpu")
torch.get_device_module(device).set_device(dev) if device != "cpu" else None  # one device per rank
dist.init_process_group({"cpu": "gloo", "cuda": "nccl"}.get(device) or register_distributed(),  # the device's c10d
                        device_id=None if device == "cpu" else dev)
torch.manual_seed(0)
data = (torch.randint(0, 256, (steps * 8, 1)) + 3 * torch.arange(32)) % 256  # train_on_device.py's batches of 8
loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=torch.utils.data.DistributedSampler(data, shuffle=False),
                                     pin_memory=device != "cpu")  # rank r: rows r, r + 2, ... of each batch
model = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=64, resid_pdrop=0,
                                   embd_pdrop=0, attn_pdrop=0)).to(dev)
getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
for block in [*model.transformer.h, model] if modes == "fsdp2" else []:  # each rank keeps half of every parameter
    fully_shard(block, mesh=torch.distributed.device_mesh.init_device_mesh(device, (2,)))  # not torch.accelerator
model = model if modes == "fsdp2" else torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
state = lambda: dict(zip(("model", "optim"), get_state_dict(model, opt)))  # noqa: E731 - FSDP2: this rank's shards
if resume:
    dcp.load(loaded := state(), checkpoint_id=resume)
    set_state_dict(model, opt, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
forward, opt_step, losses = torch.compile(model, backend=backend), torch.compile(opt.step, backend=backend), []
for step, batch in list(enumerate(loader))[steps // 2 if resume else 0:]:
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp == "bf16"):
        loss = forward(input_ids=(batch := batch.to(dev, non_blocking=True)), labels=batch).loss  # this rank's mean
    loss.backward(), torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0), opt_step(), opt.zero_grad(set_to_none=True)
    dist.all_reduce(loss := loss.detach(), op=dist.ReduceOp.AVG)  # the whole batch's mean, as one process's
    losses.append(loss.item())
    if step + 1 == steps // 2 and not resume:  # DeviceSavePlanner: where CUDA is also available (docs/training.md)
        dcp.save(state(), checkpoint_id=os.environ.get("TRAIN_CKPT", f"{out}/ckpt"), planner=DeviceSavePlanner())
if rank == 0:
    json.dump(losses, open(f"{out}/{modes}{'-resumed' if resume else ''}.json", "w"))
dist.destroy_process_group()
