"""Train a small decoder LM (``transformers`` GPT-2, random weights) on a torchvendor device as a CUDA
user writes it: pinned DataLoader, autocast (bf16; fp16 with GradScaler), AdamW, gradient clipping,
activation checkpointing, model and optimizer step compiled with the device's backend, a profiler
window, a ``torch.distributed.checkpoint`` save half way and a resume in a new process that must
reproduce the same losses (docs/training.md). ``python examples/train_on_device.py [DEVICE [STEPS
[AMP [BACKEND]]]]``, AMP one of bf16, fp16, none.

    $ python examples/train_on_device.py
    acme: 6 steps, loss 5.55 -> 4.85
    resumed at step 3 in a new process: the same losses
"""
import itertools, json, os, subprocess, sys, tempfile  # noqa: E401
import torch, torch.distributed.checkpoint as dcp  # noqa: E401
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from transformers import GPT2Config, GPT2LMHeadModel
import torchvendor.reference_backends.cpu  # noqa: F401 - registers the torchvendor_cpu backend
from torchvendor.sdk import DeviceSavePlanner, register_device

device, steps, amp, backend = (sys.argv[1:] + ["acme", "6", "bf16", "torchvendor_cpu"][len(sys.argv) - 1:])[:4]
steps, resume = int(steps), os.environ.get("TRAIN_RESUME")  # the checkpoint a resumed run starts from
if device not in ("cpu", "cuda"):
    register_device(device, runtime=os.environ.get("TRAIN_RUNTIME"))  # a vendor package does this at import
torch.manual_seed(0)
data = (torch.randint(0, 256, (steps * 8, 1)) + 3 * torch.arange(32)) % 256  # learnable: a step of 3
loader = torch.utils.data.DataLoader(data, batch_size=8, pin_memory=device != "cpu")  # pinned for the accelerator
model = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=64, resid_pdrop=0,
                                   embd_pdrop=0, attn_pdrop=0)).to(device)
getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()  # older name before 5.2x
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
scaler = torch.amp.GradScaler(device, enabled=amp == "fp16")
state = lambda: dict(zip(("model", "optim"), get_state_dict(model, opt)), scaler=scaler.state_dict())  # noqa: E731
if resume:  # a new process: load the model, optimizer and scaler state saved half way
    dcp.load(loaded := state(), checkpoint_id=resume)
    set_state_dict(model, opt, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
    scaler.load_state_dict(loaded["scaler"])
forward = torch.compile(model, backend=backend)
opt_step = torch.compile(lambda: scaler.step(opt), backend=backend)
Activity, trace = torch.profiler.ProfilerActivity, os.environ.get("TRAIN_TRACE")  # a Chrome trace of the window
activities = [Activity.CPU] + ([] if device == "cpu" else [Activity.CUDA if device == "cuda" else Activity.PrivateUse1])
losses, start, ckpt = [], steps // 2 if resume else 0, tempfile.mkdtemp()
with torch.profiler.profile(activities=activities, schedule=torch.profiler.schedule(wait=1, warmup=1, active=1, repeat=1),
                            on_trace_ready=lambda p: trace and p.export_chrome_trace(trace)) as prof:
    for step, batch in enumerate(itertools.islice(loader, start, None), start):
        batch = batch.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.float16 if amp == "fp16" else torch.bfloat16, enabled=amp != "none"):
            loss = forward(input_ids=batch, labels=batch).loss  # the model shifts the labels
        scaler.scale(loss).backward()
        scaler.unscale_(opt), torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt_step(), scaler.update(), opt.zero_grad(set_to_none=True), prof.step()
        losses.append(loss.item())
        if step + 1 == steps // 2 and not resume:
            dcp.save(state(), checkpoint_id=ckpt, planner=DeviceSavePlanner())  # docs/training.md: where CUDA is too
if resume:
    sys.exit(print(json.dumps(losses)))  # to the process that started this one
print(f"{device}: {steps} steps, loss {losses[0]:.2f} -> {losses[-1]:.2f}")
run = subprocess.run([sys.executable, *sys.argv], env={**os.environ, "TRAIN_RESUME": ckpt}, capture_output=True, text=True)
resumed = json.loads(run.stdout.splitlines()[-1]) if run.returncode == 0 else run.stderr[-2000:]
print(f"resumed at step {steps // 2} in a new process: {'the same losses' if resumed == losses[steps // 2:] else resumed}")
if os.environ.get("TRAIN_LOSSES"):  # for tests/test_training_loop.py and docs/training.md
    json.dump({"losses": losses, "resumed": resumed}, open(os.environ["TRAIN_LOSSES"], "w"))
