"""A whole training loop on a torchvendor device (issue 34): the profiler's device time, the
device's autocast lists against CUDA's, and ``examples/train_on_device.py`` (pinned DataLoader,
autocast, GradScaler, AdamW, clipping, activation checkpointing, compiled model and optimizer
step, profiler window, DCP save and a resume in a new process) on ``acme``, against the same
script on ``cpu``; slow: ``examples/train_two_devices.py`` under torchrun (DDP and FSDP2, sharded
DCP, resume in a new process group) against one process, and the area's two-device cases."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchvendor.sdk.device.profiler import device_times, profile, times_device

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_on_device.py"


def test_profiler_times_each_operator_on_the_device(acme) -> None:  # noqa: ANN001
    assert times_device()
    x = torch.randn(128, 128, device="acme")
    with profile() as prof:
        y = (x @ x).relu().sum()
        y.item()
    times = device_times(prof)
    assert times["aten::mm"] > 0 and times["aten::sum"] > 0, prof.key_averages().table(row_limit=10)


KINETO_REGISTRY = Path(torch.__file__).parent / "include/torch/csrc/profiler/standalone/privateuse1_profiler.h"


@pytest.mark.skipif(not KINETO_REGISTRY.exists(), reason="this torch has no PrivateUse1 Kineto profiler registry")
def test_torch_profiler_puts_the_device_on_its_timeline(acme, tmp_path) -> None:  # noqa: ANN001
    from torch.profiler import ProfilerActivity

    x = torch.randn(128, 128, device="acme")
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        (x @ x).relu().sum().item()
    times = device_times(prof)
    assert times["aten::mm"] > 0 and times["aten::sum"] > 0, prof.key_averages().table(row_limit=10)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]  # the fallback's copies
    assert any(e["name"].startswith("Memcpy DtoH") and e["dur"] > 0 for e in device), device[:5]


def test_a_runtime_without_timing_events_profiles_the_cpu_with_one_message(tmp_path) -> None:  # noqa: ANN001
    from runtime_mutants import TEMPLATE, sim_path  # the mutation harness's shim over the simulator

    src, lib = tmp_path / "no_timing.c", tmp_path / "libno_timing.so"
    src.write_text(TEMPLATE % {"body": "static void install(tv_runtime* t) { t->event_elapsed_time = NULL; }",
                               "sim": sim_path()})
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{ROOT / 'csrc' / 'include'}", str(src), "-o", str(lib), "-ldl",
                    "-lpthread"], check=True)
    script = ("import sys, warnings, torch\nfrom torchvendor.sdk import register_device\n"
              "from torchvendor.sdk.device.profiler import profile, device_times\n"
              "register_device('acme', runtime=sys.argv[1])\nx = torch.randn(8, 8, device='acme')\n"
              "with warnings.catch_warnings(record=True) as w:\n    warnings.simplefilter('always')\n"
              "    with profile() as prof:\n        (x @ x).sum().item()\n"
              "    with torch.autograd.profiler.profile(use_device='acme', use_kineto=False):\n"
              "        (x @ x).sum().item()\n"
              "    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.PrivateUse1]):\n"
              "        (x @ x).sum().item()\n"
              "print(sum('no event_elapsed_time' in str(m.message) for m in w), 'aten::mm' in device_times(prof))\n")
    run = subprocess.run([sys.executable, "-c", script, str(lib)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    warned, profiled = run.stdout.split()
    assert int(warned) >= 1 and profiled == "True", run.stdout  # CPU time still there, the reason said


def test_module_to_the_device_keeps_parameters_and_tied_weights(acme) -> None:  # noqa: ANN001
    # torch's shallow-copy rule did not name PrivateUse1: .to() made new Parameters, and GPT-2's
    # tied lm_head and embedding then trained apart on the device
    model = torch.nn.Sequential(torch.nn.Embedding(16, 4), torch.nn.Linear(4, 16, bias=False))
    model[1].weight = model[0].weight
    first = model[0].weight
    model.to("acme")
    assert model[0].weight is first and model[1].weight is first and first.device.type == "acme"
    model.to("cpu")
    assert model[0].weight is first and first.device.type == "cpu"


def test_the_device_autocasts_every_op_cuda_autocasts(acme) -> None:  # noqa: ANN001
    from torchvendor.ir import compat

    names = compat.operator_names()
    cuda = {n for n in names if compat.has_kernel(n, "AutocastCUDA")}
    device = {n for n in names if compat.has_kernel(n, "AutocastPrivateUse1")}
    # CUDA's lists come from torch's header (ATen/autocast_mode.h), the device's too; cuDNN's own
    # convolutions are CUDA's alone
    assert cuda - device == {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}, sorted(cuda - device)
    assert "aten::scaled_dot_product_attention" in device and not device - cuda


def test_attention_runs_in_bf16_under_autocast_with_mixed_inputs(acme) -> None:  # noqa: ANN001
    # Llama's rotary embedding leaves query and key in float32 beside a bf16 value: CUDA's autocast
    # casts all three to bf16; without sdpa in the device's list the call failed on the dtypes
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 8, 16, generator=g), torch.randn(2, 4, 8, 16, generator=g)
    v = torch.randn(2, 4, 8, 16, generator=g).bfloat16()
    with torch.autocast("acme", dtype=torch.bfloat16):
        out = torch.nn.functional.scaled_dot_product_attention(q.to("acme"), k.to("acme"), v.to("acme"), is_causal=True)
        probs = torch.softmax(q.to("acme").bfloat16(), dim=-1)  # fp32_set_opt_dtype, as on CUDA
    assert out.dtype == torch.bfloat16 and probs.dtype == torch.float32
    want = torch.nn.functional.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v, is_causal=True)
    torch.testing.assert_close(out.cpu(), want, rtol=1.6e-2, atol=1e-2)
    with torch.autocast("acme", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="unsafe to autocast"):
        torch.nn.functional.binary_cross_entropy(torch.rand(4, device="acme"), torch.rand(4, device="acme"))


def _train(device: str, steps: int, amp: str, tmp_path: Path, backend: str = "torchvendor_cpu",
           env: dict[str, str] | None = None) -> dict:
    out = tmp_path / f"{device}-{amp}.json"
    env = {**(env or os.environ), "PYTHONWARNINGS": "ignore", "TRAIN_LOSSES": str(out)}
    run = subprocess.run([sys.executable, str(EXAMPLE), device, str(steps), amp, backend], capture_output=True,
                         text=True, env=env, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text())


TWO_DEVICES = ROOT / "examples" / "train_two_devices.py"


def _train_on_two(device: str, steps: int, amp: str, tmp_path: Path, backend: str = "torchvendor_cpu",
                  env: dict[str, str] | None = None) -> dict[str, dict]:
    """examples/train_two_devices.py under torchrun (DDP, then FSDP2; each run, then its resume in
    a new process group): per mode, rank 0's losses of the run and of the resumed half."""
    out = tmp_path / f"two-{device}-{amp}"
    env = {**(env or os.environ), "PYTHONWARNINGS": "ignore", "TRAIN_LOSSES": str(out)}
    run = subprocess.run([sys.executable, str(TWO_DEVICES), device, str(steps), "ddp,fsdp2", amp, backend],
                         capture_output=True, text=True, env=env, timeout=1800, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return {mode: {"losses": json.loads((out / f"{mode}.json").read_text()),
                   "resumed": json.loads((out / f"{mode}-resumed.json").read_text())} for mode in ("ddp", "fsdp2")}


def assert_two_devices_match_one(two: dict[str, dict], one: dict, steps: int) -> None:
    """Each mode's resumed half equals its run's; its losses are the single process's within the
    distributed area's float32 tolerance."""
    from torchvendor.sdk.conformance.training_loop_cases import TWO_DEVICE_ATOL, TWO_DEVICE_RTOL

    for mode, r in two.items():
        assert r["resumed"] == r["losses"][steps // 2:], (mode, r)
        torch.testing.assert_close(torch.tensor(r["losses"]), torch.tensor(one["losses"]), rtol=TWO_DEVICE_RTOL,
                                   atol=TWO_DEVICE_ATOL, msg=lambda m, mode=mode: f"{mode} on two devices: {m}")


@pytest.mark.slow
def test_the_example_on_two_devices_matches_one_process(tmp_path: Path) -> None:
    # float32: two ranks' averaged gradients are the whole batch's; the all-reduced loss the batch's mean
    assert_two_devices_match_one(_train_on_two("acme", 4, "none", tmp_path), _train("acme", 4, "none", tmp_path), 4)


@pytest.mark.parametrize("amp", ["none"])
def test_the_example_resumes_and_matches_the_cpu(amp: str, tmp_path: Path) -> None:
    acme, cpu = _train("acme", 4, amp, tmp_path), _train("cpu", 4, amp, tmp_path)
    assert acme["resumed"] == acme["losses"][2:], acme  # a new process from the checkpoint: the same losses
    assert cpu["resumed"] == cpu["losses"][2:], cpu
    assert acme["losses"][-1] < acme["losses"][0]
    # float32: the device runs the same kernels as the CPU (compiled C++, the CPU fallback)
    torch.testing.assert_close(torch.tensor(acme["losses"]), torch.tensor(cpu["losses"]), rtol=1e-4, atol=1e-5)


def test_the_training_loop_area_passes_on_acme(acme) -> None:  # noqa: ANN001
    from torchvendor.sdk.conformance.core import Target, cases_for, run_case

    target = Target(device="acme", backend="torchvendor_cpu")
    ci = [c.id for c in cases_for(target, "ci", areas=["training-loop"])]
    assert ci == ["training-loop/compiled_optimizer_adamw"]
    cases = [c for c in cases_for(target, "training", areas=["training-loop"])
             if "compiled_optimizer" not in c.id and "two_devices" not in c.id]
    results = [run_case(c, target) for c in cases]  # the compiled optimizer: tests/test_compiled_optimizer.py
    assert [r.id.split("/")[1] for r in results] == ["amp_grad_scaler", "profiler_device_time", "dcp_save_resume",
                                                     "pinned_dataloader", "activation_checkpointing", "whole_loop"]
    assert all(r.status == "pass" for r in results), [(r.id, r.status, r.reason) for r in results if r.status != "pass"]


@pytest.mark.slow
def test_the_two_device_cases_pass_on_acme(acme) -> None:  # noqa: ANN001
    from torchvendor.sdk.conformance.core import Target, cases_for, run_case

    target = Target(device="acme", backend="torchvendor_cpu")
    cases = [c for c in cases_for(target, "training", areas=["training-loop"]) if "two_devices" in c.id]
    results = [run_case(c, target) for c in cases]
    assert [r.id.split("/")[1] for r in results] == ["two_devices_ddp", "two_devices_fsdp2"]
    assert all(r.status == "pass" for r in results), [(r.id, r.status, r.reason) for r in results if r.status != "pass"]
