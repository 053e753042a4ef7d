"""Every bad input of the device layer gets a clear error. Registration errors need a fresh
process (PrivateUse1 is renamed once per process), so they run in a subprocess."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A runtime that wraps the simulator and damages its table as environment variables say.
WRAPPER_C = r"""
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include "torchvendor/runtime.h"
static tv_runtime copy;
TV_EXPORT tv_status torchvendor_get_runtime(uint32_t major, const tv_runtime** out) {
  void* h = dlopen(getenv("TVW_INNER"), RTLD_NOW | RTLD_LOCAL);
  if (!h) return TV_ERROR_UNKNOWN;
  tv_get_runtime_fn get = (tv_get_runtime_fn)dlsym(h, "torchvendor_get_runtime");
  const tv_runtime* inner;
  tv_status s = get(major, &inner);
  if (s) return s;
  copy = *inner;
  if (getenv("TVW_MAJOR")) copy.abi_major = (uint32_t)atoi(getenv("TVW_MAJOR"));
  if (getenv("TVW_NO_MALLOC")) { copy.malloc = NULL; copy.free = NULL; }
  if (getenv("TVW_OLD_MINOR")) copy.struct_size = offsetof(tv_runtime, module_load_file);
  if (getenv("TVW_REFUSE")) return TV_ERROR_NOT_SUPPORTED;
  if (getenv("TVW_NEWER_MINOR")) { copy.abi_minor = 9; copy.struct_size = sizeof(tv_runtime) + 64; }
  *out = &copy;
  return TV_SUCCESS;
}
"""


def run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env=full_env)


def expect_error(code: str, *fragments: str, env: dict[str, str] | None = None) -> str:
    """Runs ``code`` in a fresh process; it must fail with every fragment in stderr."""
    proc = run(code, env)
    assert proc.returncode != 0, f"expected a failure:\n{proc.stdout}"
    for fragment in fragments:
        assert fragment in proc.stderr, f"{fragment!r} not in:\n{proc.stderr}"
    return proc.stderr


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the damaged runtime")
    d = tmp_path_factory.mktemp("wrap")
    src = d / "wrap.c"
    src.write_text(WRAPPER_C)
    lib = d / "libwrap.so"
    subprocess.run([cc, "-shared", "-fPIC", "-I", os.path.join(REPO, "csrc", "include"),
                    str(src), "-o", str(lib), "-ldl"], check=True)
    from torchvendor.sdk import default_runtime_path
    return str(lib), {"TVW_INNER": default_runtime_path()}


def test_runtime_load_errors(wrapper):
    # Load failures happen before PrivateUse1 is touched, so one fresh process checks them all.
    lib, env = wrapper
    from torchvendor.sdk import default_runtime_path
    kernels = os.path.join(os.path.dirname(default_runtime_path()),
                           "libtorchvendor_sim_kernels.so")
    proc = run(f"""
        import os
        from torchvendor.sdk import register_device, RuntimeLoadError
        def message(runtime, **env):
            os.environ.update(env)
            try:
                register_device('acme', runtime=runtime)
            except RuntimeLoadError as e:
                return str(e)
            finally:
                for k in env:
                    del os.environ[k]
            raise SystemExit('no error for ' + repr(runtime) + repr(env))
        print('1|' + message('/nonexistent/libnope.so'))
        print('2|' + message({kernels!r}))
        print('3|' + message({lib!r}, TVW_NO_MALLOC='1'))
        print('4|' + message({lib!r}, TVW_MAJOR='7'))
        print('5|' + message({lib!r}, TVW_REFUSE='1'))
        import torch
        assert torch._C._get_privateuse1_backend_name() == 'privateuseone'  # untouched
        print('6|' + str(register_device('acme', runtime={lib!r}).device_count()))
        """, env)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split("|", 1) for line in proc.stdout.splitlines() if "|" in line)
    assert "/nonexistent/libnope.so" in lines["1"] and "does not exist" in lines["1"]
    assert "does not export `torchvendor_get_runtime`" in lines["2"]
    assert "lacks required table entries: malloc, free" in lines["3"]
    assert "implements runtime ABI major 7" in lines["4"] and "speaks major 1" in lines["4"]
    assert "TV_ERROR_NOT_SUPPORTED" in lines["5"]
    assert lines["6"] == "2"  # a good load still works after the failures


def test_older_minor_is_accepted(wrapper):
    lib, env = wrapper
    proc = run(f"""
        import torch
        from torchvendor.sdk import register_device
        acme = register_device('acme', runtime={lib!r})
        assert torch.ones(2, device='acme').sum().item() == 2
        report = acme.diagnose()
        assert 'module_load_file' in report and 'launch' in report, report
        from torchvendor.sdk import load_module
        try:
            load_module('/x.so')
        except NotImplementedError as e:
            assert 'module_load_file' in str(e); print('ok')
        """, dict(env, TVW_OLD_MINOR="1"))
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout


def test_newer_minor_is_accepted(wrapper):
    lib, env = wrapper
    proc = run(f"""
        import torch
        from torchvendor.sdk import register_device
        acme = register_device('acme', runtime={lib!r})
        assert torch.ones(2, device='acme').sum().item() == 2
        assert 'runtime ABI 1.9' in acme.diagnose()
        print('ok')
        """, dict(env, TVW_NEWER_MINOR="1"))
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout


def test_second_registration_under_another_name():
    expect_error("""
        from torchvendor.sdk import register_device
        a = register_device('acme')
        assert register_device('acme') is a          # idempotent
        register_device('other')
        """, "DeviceRegistrationError", "already registered the device 'acme'")


def test_privateuse1_owned_by_another_package():
    expect_error("""
        import torch
        torch.utils.rename_privateuse1_backend('npu')
        from torchvendor.sdk import register_device
        register_device('acme')
        """, "DeviceRegistrationError", "under the name 'npu'")


def test_bad_device_names():
    from torchvendor.sdk import register_device
    for bad in ("Acme", "cuda", "cpu_fast", "1dev", ""):
        with pytest.raises(ValueError):
            register_device(bad)


def test_device_index_out_of_range(acme):
    with pytest.raises(ValueError, match="device index 5 is out of range: this runtime has 2"):
        acme.set_device(5)
    with pytest.raises(ValueError, match="out of range"):
        torch.empty(1, device="acme:5")
    with pytest.raises(ValueError, match="out of range"):
        acme.memory_stats(7)


def test_out_of_memory(acme):
    total = acme.get_device_properties(0).total_memory
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(total * 2, dtype=torch.uint8, device="acme")
    msg = str(info.value)
    assert "out of memory on device 0" in msg and "device total" in msg
    assert "Runtime says:" in msg
    assert acme.memory_stats()["num_ooms"] >= 1


def test_pin_memory_factory_arg(acme):
    with pytest.raises(ValueError, match="pin_memory=True applies to CPU tensors"):
        torch.empty(2, device="acme", pin_memory=True)


def test_launch_argument_errors(acme):
    from torchvendor.sdk import launch
    with pytest.raises(ValueError, match="function handle is 0"):
        launch(0, (1,), (1,), b"")
    with pytest.raises(ValueError, match="grid must have 1 to 3 entries"):
        launch(1, (), (1,), b"")
    with pytest.raises(ValueError, match="outside the 8-byte argument buffer"):
        launch(1, (1,), (1,), b"\0" * 8, pointer_offsets=(4,))


def test_registration_after_first_backward_still_trains():
    # torch's autograd engine sizes its device queues at the first backward. A device registered
    # later has no queue, so after register_device each thread's first allocation on the device
    # turns autograd multithreading off there (backward then runs on the calling thread); it says
    # so, and backward on the device works from any thread.
    proc = run("""
        import threading, warnings, torch
        x = torch.ones(2, requires_grad=True); (x * 2).sum().backward()
        from torchvendor.sdk import register_device
        registered, grads = threading.Event(), []
        def plain_thread():
            registered.wait()
            v = torch.ones(2, device='acme', requires_grad=True)
            (v * 7).sum().backward()
            grads.append(v.grad.cpu().tolist())
        running = threading.Thread(target=plain_thread); running.start()  # before the registration
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            acme = register_device('acme')
        counts = acme.fallback_counts()
        registered.set(); running.join()
        print([str(w.message) for w in caught if w.category is RuntimeWarning])
        print(counts)
        # The engine made a queue per device of the accelerators it knew (CUDA's, if any).
        print(torch.cuda.device_count() < acme.device_count())
        w = torch.ones(3, device='acme', requires_grad=True)
        (w * torch.arange(3., device='acme')).sum().backward()
        print(w.grad.cpu().tolist())
        def other_thread():
            with torch.autograd.set_multithreading_enabled(False):
                v = torch.ones(2, device='acme', requires_grad=True)
                (v * 5).sum().backward()
                grads.append(v.grad.cpu().tolist())
        t = threading.Thread(target=other_thread); t.start(); t.join()
        # Threads started before or after the registration need no context manager.
        t = threading.Thread(target=plain_thread); t.start(); t.join()
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(2) as pool:
            pool.submit(plain_thread).result()
        print(grads)
        """)
    assert proc.returncode == 0, proc.stderr
    warned, counts, engine_too_small, grad, thread_grad = proc.stdout.strip().splitlines()[-5:]
    if engine_too_small == "True":
        assert "autograd engine started before the 'acme' device was registered" in warned
        assert "set_multithreading_enabled(False)" in warned
        assert "off in every thread that allocates on 'acme'" in warned
    else:
        assert warned == "[]"
    assert grad == "[0.0, 1.0, 2.0]"
    assert thread_grad == "[[7.0, 7.0], [5.0, 5.0], [7.0, 7.0], [7.0, 7.0]]"
    assert counts == "{}"  # the probe itself leaves no trace in the fallback counts
