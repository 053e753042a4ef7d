"""The device in torch's profiler (issue 34): kernels, copies and memsets on the device's timeline
of the exported Chrome trace, timed by the runtime table's events and linked to their operators;
per-operator device time in key_averages(); a runtime without timing events profiles the CPU
with one message; the trace viewer draws it all (sdk/device/profiler.py, csrc/device/profiler.cpp,
sdk/device/trace_view.py)."""
from __future__ import annotations

import importlib.resources
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, record_function

from torchvendor.sdk.device.profiler import device_activities, device_times
from torchvendor.sdk.device.trace_view import trace_html, screenshot

ROOT = Path(__file__).resolve().parents[1]
SIM_KERNELS = os.fspath(importlib.resources.files("torchvendor") / "lib" / "libtorchvendor_sim_kernels.so")
DEVICE = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _trace(prof, tmp_path) -> dict:  # noqa: ANN001
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    return json.loads((tmp_path / "trace.json").read_text())


@pytest.fixture(scope="module")
def timeline(acme, tmp_path_factory):  # noqa: ANN001
    """One profiled window with two kernels (one on a second stream), copies both ways and a memset."""
    mod = acme.load_module(SIM_KERNELS, device=0)
    add, sleep = acme.get_function(mod, "tv_add_f32"), acme.get_function(mod, "tv_sleep_ms")
    a = torch.ones(1024, device="acme")
    out = torch.empty(1024, device="acme")
    side = acme.Stream()
    with torch.profiler.profile(activities=DEVICE) as prof:
        with record_function("launches"):
            acme.launch(sleep, (1,), (1,), struct.pack("<q", 2))
            acme.launch(add, (1,), (1,), struct.pack("<qQQQ", 1024, a.data_ptr(), a.data_ptr(), out.data_ptr()),
                        pointer_offsets=(8, 16, 24), stream=side)
        host = torch.arange(4096, dtype=torch.float32).to("acme")  # 16 KiB to the device
        torch.zeros(256, device="acme")  # zero_: a memset
        out.cpu()  # 4 KiB back
        acme.synchronize()
    return _trace(prof, tmp_path_factory.mktemp("timeline")), prof, host


def test_kernels_are_named_timed_and_on_their_streams(timeline) -> None:  # noqa: ANN001
    trace, _, _ = timeline
    kernels = {e["name"]: e for e in device_activities(trace) if e["cat"] == "kernel"}
    assert {"tv_sleep_ms", "tv_add_f32"} <= set(kernels), sorted(kernels)
    assert kernels["tv_sleep_ms"]["dur"] >= 1500  # a 2 ms kernel, timed on the device by its events
    assert kernels["tv_add_f32"]["dur"] > 0
    assert kernels["tv_sleep_ms"]["tid"] != kernels["tv_add_f32"]["tid"]  # default stream, then the side stream


def test_copies_and_memsets_are_named_with_their_bytes(timeline) -> None:  # noqa: ANN001
    trace, _, _ = timeline
    acts = device_activities(trace)
    to_device = [e for e in acts if e["name"] == "Memcpy HtoD (Host -> acme)"]
    to_host = [e for e in acts if e["name"] == "Memcpy DtoH (acme -> Host)"]
    assert any(int(e["args"]["bytes"]) == 16384 and e["dur"] > 0 and e["cat"] == "gpu_memcpy" for e in to_device)
    assert any(int(e["args"]["bytes"]) == 4096 and e["dur"] > 0 for e in to_host)
    assert any(e["cat"] == "gpu_memset" and int(e["args"]["bytes"]) == 1024 for e in acts), acts


def test_device_work_is_linked_to_its_operator_and_on_the_profiler_clock(timeline) -> None:  # noqa: ANN001
    trace, _, _ = timeline
    ops = {e["args"]["External id"]: e for e in trace["traceEvents"]
           if e.get("cat") in ("cpu_op", "user_annotation") and "External id" in e.get("args", {})}
    copy = next(e for e in device_activities(trace) if e["name"].startswith("Memcpy HtoD"))
    op = ops[copy["args"]["External id"]]  # the operator that copied (the device row links back)
    assert op["name"].startswith("aten::") and op["ts"] - 100 <= copy["ts"] <= op["ts"] + op["dur"] + 100
    # launched inside the region on an idle stream, so it starts there (100 us for the clocks' join)
    sleep = next(e for e in device_activities(trace) if e["name"] == "tv_sleep_ms")
    region = next(e for e in trace["traceEvents"] if e.get("name") == "launches")
    assert region["ts"] - 100 <= sleep["ts"] <= region["ts"] + region["dur"] + 100, (sleep, region)


def test_eager_native_kernels_are_on_the_timeline_under_their_operators(tmp_path) -> None:  # noqa: ANN001
    sys.path.insert(0, str(ROOT / "tests"))
    from device_utils import kernel_template  # the stable-ABI kernel template, built with cmake

    script = ("import json, sys, torch\nfrom torchvendor.sdk import register_device, load_kernel_library\n"
              "from torchvendor.sdk.device.profiler import device_activities, device_times\n"
              "register_device('acme')\nload_kernel_library(sys.argv[1])\n"
              "a, b = torch.randn(64, 64, device='acme'), torch.randn(64, 64, device='acme')\n"
              "acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]\n"
              "with torch.profiler.profile(activities=acts) as prof:\n    (a + b).mm(b).sum().item()\n"
              "prof.export_chrome_trace(sys.argv[2])\nt = device_times(prof)\n"
              "print(json.dumps([sorted({e['name'] for e in device_activities(sys.argv[2]) if e['cat'] == 'kernel'}),"
              " t['aten::add'], t['aten::mm']]))\n")
    run = subprocess.run([sys.executable, "-c", script, str(kernel_template()), str(tmp_path / "t.json")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    kernels, add, mm = json.loads(run.stdout.splitlines()[-1])
    assert {"tv_tpl_elementwise", "tv_tpl_mm"} <= set(kernels), kernels  # launched by the library through the table
    assert add > 0 and mm > 0


def test_compiled_kernels_of_the_loop_runner_are_on_the_timeline(acme, tmp_path) -> None:  # noqa: ANN001
    import torchvendor.reference_backends.cpu  # noqa: F401 - the torchvendor_cpu backend

    f = torch.compile(lambda x: (x * 2 + 1).relu().sum(dim=1), backend="torchvendor_cpu")
    x = torch.randn(64, 128, device="acme")
    want = f(x).cpu()  # compiled outside the window
    with torch.profiler.profile(activities=DEVICE) as prof:
        got = f(x).cpu()
    kernels = [e for e in device_activities(_trace(prof, tmp_path)) if e["cat"] == "kernel"]
    assert kernels and all(e["name"] != "kernel" and e["dur"] > 0 for e in kernels), kernels  # named by their module
    torch.testing.assert_close(got, want)


def test_collectives_are_on_the_timeline(acme, tmp_path) -> None:  # noqa: ANN001
    from torchvendor import _C

    comm = _C.comm_create(f"test-profiler-{os.getpid()}", 1, 0, 0)  # a one-rank communicator
    t = torch.ones(1024, device="acme")
    try:
        with torch.profiler.profile(activities=DEVICE) as prof:
            _C.collective("all_reduce", comm, t, t, 1024)
            acme.synchronize()
    finally:
        _C.comm_destroy(comm)
    assert any(e["name"] == "all_reduce" and e["dur"] > 0 for e in device_activities(_trace(prof, tmp_path)))


def test_device_time_per_operator_in_key_averages(acme) -> None:  # noqa: ANN001
    x = torch.randn(128, 128, device="acme")
    with torch.profiler.profile(activities=DEVICE) as prof:
        (x @ x).relu().sum().item()
    times = device_times(prof)
    # operators without a native kernel run through the CPU fallback: their device time is its copies
    assert times["aten::mm"] > 0 and times["aten::sum"] > 0, prof.key_averages().table(row_limit=12)
    assert times["Memcpy DtoH (acme -> Host)"] > 0


def test_a_cpu_only_trace_has_no_device_rows(acme, tmp_path) -> None:  # noqa: ANN001
    x = torch.randn(32, 32, device="acme")
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        (x @ x).sum().item()
    assert device_activities(_trace(prof, tmp_path)) == []
    assert (x @ x).sum().item() == pytest.approx((x.cpu() @ x.cpu()).sum().item(), rel=1e-4)


def test_a_runtime_without_timing_events_profiles_the_cpu_with_one_message(tmp_path) -> None:  # noqa: ANN001
    sys.path.insert(0, str(ROOT / "tests"))
    from runtime_mutants import TEMPLATE, sim_path  # the mutation harness's shim over the simulator

    src, lib = tmp_path / "no_timing.c", tmp_path / "libno_timing.so"
    src.write_text(TEMPLATE % {"body": "static void install(tv_runtime* t) { t->event_elapsed_time = NULL; }",
                               "sim": sim_path()})
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{ROOT / 'csrc' / 'include'}", str(src), "-o", str(lib), "-ldl",
                    "-lpthread"], check=True)
    script = ("import json, sys, warnings, torch\nfrom torchvendor.sdk import register_device\n"
              "from torchvendor.sdk.device.profiler import device_activities\n"
              "register_device('acme', runtime=sys.argv[1])\nx = torch.randn(8, 8, device='acme')\n"
              "acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]\n"
              "with warnings.catch_warnings(record=True) as w:\n    warnings.simplefilter('always')\n"
              "    for _ in range(2):\n"
              "        with torch.profiler.profile(activities=acts) as prof:\n            (x @ x).sum().item()\n"
              "prof.export_chrome_trace(sys.argv[2])\n"
              "said = [str(m.message) for m in w if 'event_elapsed_time' in str(m.message)]\n"
              "print(json.dumps([said, 'aten::mm' in {e.key for e in prof.key_averages()},"
              " len(device_activities(sys.argv[2]))]))\n")
    run = subprocess.run([sys.executable, "-c", script, str(lib), str(tmp_path / "t.json")], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    said, cpu_ops, device_rows = json.loads(run.stdout.splitlines()[-1])
    assert len(said) == 1 and "CPU time only" in said[0], said  # one message, saying why
    assert cpu_ops and device_rows == 0


def test_trace_view_draws_cpu_and_device_rows(timeline, tmp_path) -> None:  # noqa: ANN001
    trace, _, _ = timeline
    page = trace_html(trace, device="acme", title="sim kernels")
    assert "acme 0 · stream 0" in page and "acme 0 · stream 1" in page and "CPU thread" in page
    assert "tv_sleep_ms" in page and "Memcpy HtoD (Host -&gt; acme)" in page
    with pytest.raises(ValueError, match="nothing|no CPU"):
        trace_html({"traceEvents": []})


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium for the screenshot")
def test_trace_view_screenshot_is_a_png(timeline, tmp_path) -> None:  # noqa: ANN001
    trace, _, _ = timeline
    (tmp_path / "page.html").write_text(trace_html(trace, device="acme"))
    png = screenshot(tmp_path / "page.html", tmp_path / "page.png", width=900, height=400)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
