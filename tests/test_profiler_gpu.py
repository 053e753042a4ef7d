"""The profiler on the PrivateUse1 GPU device (the CUDA runtime table, reference_backends/cuda/runtime):
compiled kernels (torchvendor_cuda, launched through the table) and copies on the device's timeline
of torch.profiler's trace, per-operator device time > 0. ``PROFILER_TRACE_DIR=dir`` keeps the trace
(``gpu_trace.json``) for docs/profiler.md's picture (``python -m torchvendor.sdk.device.trace_view``).
A process of its own: PrivateUse1 is renamed once per process, and the test session's is ``acme``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = pytest.mark.gpu

SCRIPT = textwrap.dedent("""
    import json, sys, torch
    from torch.profiler import ProfilerActivity, profile
    import torchvendor.reference_backends.cuda  # noqa: F401 - the torchvendor_cuda backend
    from torchvendor.reference_backends.cuda.runtime import build_runtime
    from torchvendor.sdk import register_device
    from torchvendor.sdk.device.profiler import device_activities, device_times

    register_device("gpu", runtime=build_runtime())
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
                                torch.nn.Linear(512, 256)).to("gpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = torch.compile(lambda x: model(x).square().mean(), backend="torchvendor_cuda")
    data = torch.randn(4, 64, 256).pin_memory()
    for i in range(2):  # compile outside the window
        step(data[i].to("gpu", non_blocking=True)).backward(), opt.step(), opt.zero_grad()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for i in range(2, 4):
            loss = step(data[i].to("gpu", non_blocking=True))
            loss.backward(), opt.step(), opt.zero_grad()
            loss.item()
    prof.export_chrome_trace(sys.argv[1])
    acts = device_activities(sys.argv[1])
    ours = [a for a in acts if "runtime" in a.get("args", {})]  # timed by the runtime table
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=15))
    print(json.dumps({"kernels": sorted({a["name"] for a in ours if a["cat"] == "kernel"}),
                      "copies": sorted({a["name"] for a in ours if a["cat"] == "gpu_memcpy"}),
                      "durations_positive": all(a["dur"] > 0 for a in ours),
                      "other_profilers": len(acts) - len(ours),
                      "device_time": {k: v for k, v in device_times(prof).items() if v > 0}}))
""")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_kernels_and_copies_of_a_training_step_on_the_gpu_timeline(tmp_path) -> None:  # noqa: ANN001
    out = os.environ.get("PROFILER_TRACE_DIR") or str(tmp_path)
    trace = os.path.join(out, "gpu_trace.json")
    run = subprocess.run([sys.executable, "-c", SCRIPT, trace], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    print(run.stdout)
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["kernels"], got  # the compiled kernels, by their function names
    assert "Memcpy HtoD (Host -> gpu)" in got["copies"] and "Memcpy DtoH (gpu -> Host)" in got["copies"], got
    assert got["durations_positive"]
    assert any(k.startswith("aten::") for k in got["device_time"]), got["device_time"]
