"""What a vendor hit trying the device layer, each fixed and checked here: runtime errors that
name the entry and its arguments, the fallback warning as a Python warning inside compiled code,
mse_loss's spurious resize warning, and the demo's fallback summary and one-device wording.
(Registration after the autograd engine started: tests/test_device_errors.py.)"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import warnings

import torch

from torchvendor.sdk import get_function, load_module


def run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=180, env=dict(os.environ, **(env or {})))


def test_failed_runtime_call_names_entry_arguments_and_fix(acme) -> None:
    from torchvendor.sdk import default_runtime_path

    kernels = os.path.join(os.path.dirname(default_runtime_path()), "libtorchvendor_sim_kernels.so")
    module = load_module(kernels, device=0)
    try:
        get_function(module, "tv_no_such_kernel")
    except RuntimeError as e:
        message = str(e)
    else:
        raise AssertionError("an unknown kernel name was accepted")
    assert re.search(r'module_get_function\(module=0x[0-9a-f]+, name="tv_no_such_kernel"\) '
                     r"failed with TV_ERROR_NOT_FOUND \(5\)", message), message
    assert "exports no function of that name" in message  # what to do
    assert "rt()" not in message and "&fn" not in message  # not the C++ expression
    try:
        load_module("/nonexistent/kernels.so", device=0)
    except RuntimeError as e:
        assert 'module_load_file(device=0, path="/nonexistent/kernels.so")' in str(e)
        assert "Check that the file exists" in str(e)
    else:
        raise AssertionError("a missing module file was accepted")


def test_fallback_warning_is_a_python_warning_inside_compiled_code() -> None:
    # The first fallback happens inside a compiled graph, where no torch binding turns c10's
    # warning into a Python one (it used to be printed as "[W ... fallback.cpp] Warning: ...").
    proc = run("""
        import warnings, torch
        from torchvendor.sdk import register_device
        register_device('acme')
        f = torch.compile(lambda x: torch.sin(x) * 2, backend="aot_eager")
        x = torch.randn(4).to('acme')                   # a native copy: no fallback yet
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f(x)
        print([w.category.__name__ for w in caught if "ran on the CPU" in str(w.message)])
        """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "['UserWarning']"
    assert "fallback.cpp" not in proc.stderr


def test_mse_loss_warns_no_more_than_on_cpu(acme) -> None:
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    seen = {}
    for dev in ("cpu", "acme"):
        x, y = a.to(dev, copy=True).requires_grad_(), b.to(dev)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loss = torch.nn.functional.mse_loss(x, y)
            loss.backward()
        seen[dev] = [str(w.message) for w in caught if "ran on the CPU" not in str(w.message)]
        seen[dev + "_values"] = (loss.detach().cpu(), x.grad.cpu())
    assert seen["acme"] == seen["cpu"] == []
    assert torch.allclose(seen["acme_values"][0], seen["cpu_values"][0])
    assert torch.allclose(seen["acme_values"][1], seen["cpu_values"][1])


def _demo(devices: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "torchvendor.sdk.device.tour"], capture_output=True,
                          text=True, timeout=180,
                          env=dict(os.environ, TORCHVENDOR_SIM_DEVICES=devices))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_demo_fallback_summary_and_one_device_wording() -> None:
    out = _demo("1")
    assert "cross-device" not in out
    assert "device-to-device copy on acme:0 (the only device): True" in out
    listed = out.split("fallback counts (implement these next):\n")[1].split("torchvendor device")[0]
    n_listed = len([line for line in listed.splitlines() if line.strip()])
    (n_said,) = re.findall(r"CPU fallback: (\d+) operator\(s\) fell back", out)
    assert int(n_said) == n_listed > 0
    shown = re.search(r"fell back: (.*)", out).group(1)
    if n_listed > 8:
        assert f"the 8 most used; {n_listed - 8} more in torch.acme.fallback_counts()" in shown
    else:
        assert shown.count(" x") == n_listed


def test_demo_on_two_devices_copies_across() -> None:
    assert "cross-device copy to acme:1: True" in _demo("2")
