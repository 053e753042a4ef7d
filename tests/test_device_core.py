"""Smoke layer of the device: create, copy both ways, fallback and counts, native kernel
example, save/load. The broad suite lives in tests/test_device_*.py."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_create_and_copy_both_ways(acme):
    x = torch.empty(3, 4, device="acme")
    assert x.device == torch.device("acme", 0) and x.is_acme
    cpu = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    dev = cpu.to("acme")
    assert torch.equal(dev.cpu(), cpu)
    assert torch.equal(dev.t().cpu(), cpu.t())          # strided source
    assert torch.equal(dev[:, 1].cpu(), cpu[:, 1])      # view with gaps
    assert torch.equal(dev.to(torch.float64).cpu(), cpu.double())  # dtype conversion
    other = dev.to("acme:1")
    assert other.device.index == 1 and torch.equal(other.cpu(), cpu)
    strided = torch.zeros(4, 4, device="acme")
    strided[:, 2] = torch.ones(4)                        # host -> strided device view
    strided[1].fill_(3)
    expect = torch.zeros(4, 4)
    expect[:, 2] = 1
    expect[1] = 3
    assert torch.equal(strided.cpu(), expect)
    assert dev[1, 2].item() == 6.0


def test_views_alias_storage(acme):
    x = torch.arange(8.0).to("acme")
    v = x.view(2, 4)
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    v[0, 0] = 100.0
    assert x[0].item() == 100.0


def test_fallback_is_counted_and_correct(acme):
    acme.reset_fallback_counts()
    a = torch.randn(5, 3)
    b = torch.randn(5, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = (a.to("acme") * b.to("acme")).sum(dim=0)
        t = torch.zeros(3, device="acme")
        t.add_(2)                                        # in-place through the fallback
        out = torch.empty(0, device="acme")
        torch.abs(-t, out=out)                           # out= with resize
        nan = torch.tensor([float("nan"), 1.0, -2.0], device="acme")
        flags = torch.isnan(nan).cpu(), torch.isfinite(nan).cpu(), torch.abs(nan).cpu()
        ts = [torch.ones(2, device="acme"), torch.ones(3, device="acme")]
        torch._foreach_add_(ts, 1.0)                     # TensorList in-place (pytorch#105209)
        picked = torch.where(torch.tensor(False), t, t * 2)  # first tensor arg on the CPU
    assert torch.allclose(got.cpu(), (a * b).sum(dim=0))
    assert torch.equal(t.cpu(), torch.full((3,), 2.0))
    assert torch.equal(out.cpu(), torch.full((3,), 2.0))
    assert flags[0].tolist() == [True, False, False]     # pytorch#165549: not empty
    assert flags[1].tolist() == [False, True, True]
    assert flags[2][1:].tolist() == [1.0, 2.0]
    assert all(torch.equal(x.cpu(), torch.full_like(x.cpu(), 2.0)) for x in ts)
    assert picked.device.type == "acme" and torch.equal(picked.cpu(), torch.full((3,), 4.0))
    counts = acme.fallback_counts()
    assert counts["mul.out"] >= 1 and counts["add.out"] >= 1
    acme.reset_fallback_counts()
    assert acme.fallback_counts() == {}


def test_rng_per_device(acme):
    acme.manual_seed(123)
    first = torch.randn(4, device="acme").cpu()
    acme.manual_seed(123)
    assert torch.equal(first, torch.randn(4, device="acme").cpu())
    state = acme.get_rng_state()
    x = torch.rand(3, device="acme").cpu()
    acme.set_rng_state(state)
    assert torch.equal(x, torch.rand(3, device="acme").cpu())


def test_autograd_and_memory(acme):
    w = torch.randn(3, 3, device="acme", requires_grad=True)
    (w * w).sum().backward()
    assert torch.allclose(w.grad.cpu(), 2 * w.detach().cpu())
    before = acme.memory_allocated()
    keep = torch.empty(1024, device="acme")
    assert acme.memory_allocated() >= before + 4096
    assert acme.max_memory_allocated() >= acme.memory_allocated()
    assert acme.memory_reserved() >= acme.memory_allocated()
    del keep


def test_save_load_round_trip(acme):
    t = torch.arange(5.0).to("acme:1")
    buf = io.BytesIO()
    torch.save({"t": t}, buf)
    buf.seek(0)
    assert torch.load(buf)["t"].device == torch.device("acme", 1)
    buf.seek(0)
    assert torch.load(buf, map_location="cpu")["t"].device.type == "cpu"
    buf.seek(0)
    loaded = torch.load(buf, map_location="acme:0")["t"]
    assert loaded.device == torch.device("acme", 0) and torch.equal(loaded.cpu(), t.cpu())


def test_pinned_non_blocking(acme):
    host = torch.arange(16.0).pin_memory()
    assert host.is_pinned()
    dev = host.to("acme", non_blocking=True)
    back = torch.empty(16).pin_memory()
    back.copy_(dev, non_blocking=True)
    acme.synchronize()
    assert torch.equal(back, host)


def test_accelerator_and_autocast(acme):
    assert str(torch.accelerator.current_accelerator()) == "acme"
    assert torch.accelerator.device_count() == acme.device_count()
    m = torch.randn(4, 4, device="acme")
    with torch.autocast("acme", dtype=torch.bfloat16):
        assert (m @ m).dtype == torch.bfloat16


def test_native_kernel_example():
    # A subprocess: the example registers a kernel for aten::add.Tensor process-wide.
    proc = subprocess.run([sys.executable, os.path.join(REPO, "examples", "native_kernel.py")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "native add: ok; fallback counts after: {}" in proc.stdout


def test_device_module_is_built_from_the_marked_functions(acme):
    """torch.acme holds every @device_api object of sdk/device/module.py (no name list kept by
    hand), the torch.cuda-like calls torch and users rely on are among them, and nothing else of
    that file leaks in."""
    import inspect

    from torchvendor.sdk.device import module as device_module

    marked = {name for name, obj in vars(device_module).items()
              if name in device_module._API and device_module._API[name] is obj}
    assert marked == set(device_module._API)
    public = {n for n in dir(acme) if not n.startswith("__")}
    # register_distributed (run by an earlier test in this process, if any) adds its counters
    from torchvendor.sdk.device import distributed
    added = {n for n in ("collective_counts", "reset_collective_counts")
             if getattr(acme, n, None) is getattr(distributed, n)}
    assert public == marked | {"default_generators"} | added
    for name in ("is_available", "device_count", "current_device", "set_device", "device", "synchronize",
                 "Stream", "Event", "current_stream", "set_stream", "stream", "memory_allocated",
                 "manual_seed", "get_rng_state", "get_device_properties", "_lazy_init", "_is_in_bad_fork",
                 "fallback_counts", "diagnose", "load_module", "launch"):
        assert name in public, name
    helpers = {n for n, obj in vars(device_module).items()
               if inspect.isfunction(obj) and obj.__module__ == device_module.__name__} - marked
    assert helpers and not helpers & public  # _index, _stat, build_device_module... stay private
    assert "torch.acme device module: yes" in acme.diagnose()
