"""The CUDA runtime library (reference_backends/cuda/runtime): builds without a GPU, fails cleanly
without a driver, and (marked gpu) drives the real GPU as a PrivateUse1 device."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

from torchvendor.reference_backends.cuda.runtime import build_runtime, cuda_include_dir

needs_cuda_h = pytest.mark.skipif(cuda_include_dir() is None, reason="cuda.h (CUDA toolkit headers) not installed")
TV_ERROR_NOT_SUPPORTED = 8


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


@needs_cuda_h
def test_builds_and_is_cached(tmp_path):
    from torchvendor.sdk import ArtifactCache

    cache = ArtifactCache(tmp_path, namespace="t")
    path = build_runtime(cache)
    assert build_runtime(cache) == path and cache.stats["built"] == 1
    assert ctypes.CDLL(path).torchvendor_get_runtime  # the one exported entry point


@needs_cuda_h
def test_wrong_abi_major_is_refused():
    lib = ctypes.CDLL(build_runtime())
    table = ctypes.c_void_p()
    assert lib.torchvendor_get_runtime(ctypes.c_uint32(99), ctypes.byref(table)) == TV_ERROR_NOT_SUPPORTED
    assert not table.value


@needs_cuda_h
def test_no_driver_fails_with_a_clear_message():
    """No libcuda: the entry point returns an error and says why on stderr; nothing crashes."""
    done = _run(f"""
        import ctypes
        lib = ctypes.CDLL({build_runtime()!r})
        table = ctypes.c_void_p()
        print("status", lib.torchvendor_get_runtime(1, ctypes.byref(table)), bool(table.value))
        """, TORCHVENDOR_CUDA_DRIVER="/nonexistent/libcuda.so.1")
    assert done.returncode == 0, done.stderr
    assert f"status {TV_ERROR_NOT_SUPPORTED} False" in done.stdout
    assert "no NVIDIA driver" in done.stderr and "/nonexistent/libcuda.so.1" in done.stderr


@needs_cuda_h
def test_register_device_without_driver_raises():
    done = _run(f"""
        from torchvendor.sdk import register_device, RuntimeLoadError
        try:
            register_device("gpu", runtime={build_runtime()!r})
        except RuntimeLoadError as e:
            print("refused:", e)
        """, TORCHVENDOR_CUDA_DRIVER="/nonexistent/libcuda.so.1")
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "no NVIDIA driver" in done.stderr


@pytest.mark.gpu
def test_gpu_private_use1_device():
    """The real GPU as a PrivateUse1 device: memory, copies, eager ops through the CPU fallback,
    streams and events, and a native kernel loaded from PTX and launched through the runtime."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    done = _run(f"""
        import struct, torch
        from torchvendor.sdk import register_device, load_module, get_function, launch
        gpu = register_device("gpu", runtime={build_runtime()!r})
        props = gpu.get_device_properties(0)
        x = torch.arange(1 << 20, dtype=torch.float32, device="gpu")
        assert torch.equal((x * 2).cpu(), torch.arange(1 << 20, dtype=torch.float32) * 2)
        ptx = r'''
        .version 8.0
        .target sm_80
        .address_size 64
        .visible .entry scale(.param .u64 p, .param .f32 a, .param .u32 n) {{
          .reg .u64 %rd<4>; .reg .f32 %f<3>; .reg .u32 %r<6>; .reg .pred %p;
          ld.param.u64 %rd1, [p]; ld.param.f32 %f1, [a]; ld.param.u32 %r1, [n];
          mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;
          mad.lo.u32 %r5, %r2, %r3, %r4; setp.ge.u32 %p, %r5, %r1; @%p ret;
          mul.wide.u32 %rd2, %r5, 4; add.u64 %rd3, %rd1, %rd2;
          ld.global.f32 %f2, [%rd3]; mul.f32 %f2, %f2, %f1; st.global.f32 [%rd3], %f2; ret;
        }}'''
        mod = load_module(ptx.encode(), device=0)
        fn = get_function(mod, "scale")
        launch(fn, ((1 << 20) // 256,), (256,), struct.pack("<QfI", x.data_ptr(), 3.0, 1 << 20), pointer_offsets=(0,))
        gpu.synchronize()
        assert torch.equal(x.cpu(), torch.arange(1 << 20, dtype=torch.float32) * 3)
        s = gpu.Stream() if hasattr(gpu, "Stream") else None
        print("ok", props.name)
        """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout


@pytest.mark.gpu
def test_extern_kernels_on_the_gpu_device_run_on_cuda():
    """torchvendor_cuda on the PrivateUse1 GPU device: matmul, convolution and their backward
    (extern kernels) run cuBLAS/cuDNN on aliases of the device's memory, not the CPU fallback;
    the results match eager on the CPU, forward and gradients (not eager on ``cuda``: with a
    PrivateUse1 device registered, torch's autograd engine asserts in a backward on ``cuda``)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    done = _run(f"""
        import torch
        from torchvendor.sdk import register_device, reports
        import torchvendor.reference_backends.cuda
        gpu = register_device("gpu", runtime={build_runtime()!r})
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        torch.manual_seed(0)
        ref = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                  torch.nn.Linear(8 * 6 * 6, 10))
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 10)).to("gpu")
        m.load_state_dict(ref.state_dict())
        x = torch.randn(4, 3, 8, 8)
        g = torch.compile(m, backend="torchvendor_cuda", options={{"strict": True}})
        y = g(x.to("gpu"))
        y.sum().backward()
        ref(x).sum().backward()
        torch.testing.assert_close(y.cpu(), ref(x).detach(), rtol=1e-4, atol=1e-4)
        for a, b in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-4)
        parts = [p for r in reports() for gr in r.graphs for p in gr.partitions]
        fallback = {{k: v for p in parts for k, v in (p.device_fallback or {{}}).items()}}
        print("fallback", fallback, [p.status for p in parts])
        """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fallback {}" in done.stdout, done.stdout


@pytest.mark.gpu
def test_a_kernel_of_host_buffers_runs_on_the_gpu_device():
    """Issue 24: beit, vilt and deberta_v2 killed the process on the GPU device (an illegal
    address): a kernel whose buffers all live on the host was launched on host pointers."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    done = _run(f"""
        import torch
        from torchvendor.sdk import register_device
        import torchvendor.reference_backends.cuda
        register_device("gpu", runtime={build_runtime()!r})
        def fn(x, pos):
            idx = (pos * 2 + 1) % 8
            return x[idx.to(x.device)] * 3 + idx.to(x.device)
        x, pos = torch.randn(8), torch.arange(6)
        g = torch.compile(fn, backend="torchvendor_cuda", options={{"strict": True}})
        for _ in range(2):
            torch.testing.assert_close(g(x.to("gpu"), pos).cpu(), fn(x, pos))
        print("ok")
        """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout


def test_native_launches_are_the_calls_launches():
    """``CompiledKernel.native`` (the SDK runner's C++ replay) gives the launches ``__call__``
    makes on a PrivateUse1 GPU: a split reduction's two launches sharing one workspace, and a
    vectorised pointwise launch whose scalar twin runs where a pointer is not aligned; on
    ``cuda`` the same launches with the driver's ``CUfunction`` handles (the replay calls
    ``cuLaunchKernel``), none where the kernel records out-of-bounds accesses (read back per call)."""
    import ctypes

    import torch

    from torchvendor.ir import capture
    from torchvendor.reference_backends.cuda.backend import _generate
    from torchvendor.reference_backends.cuda.launch import _BOUNDS, CompiledKernel
    from torchvendor.sdk import loop_kernels

    prog = capture(lambda x: (x.sum(), x * 2), [torch.randn(1 << 20)], level="loop").inference
    forms = {}
    for lk in loop_kernels(prog):
        kernel = CompiledKernel(_generate(lk, 132), b"", home="cuda")
        handles = {name: 1000 + k for k, name in enumerate(sorted(
            {n for l in kernel.kernel.launches for n in (l.name, l.name + "_s", l.name + "_final")}))}
        kernel._functions = lambda device, handles=handles: handles
        forms[lk.name] = (kernel.kernel.launches, kernel.native(torch.device("privateuseone", 0), ()), handles)
        driver = {name: ctypes.c_void_p(h) for name, h in handles.items()}   # what _Driver.function returns
        kernel._functions = lambda device, driver=driver: {**driver, _BOUNDS: None}
        assert kernel.native(torch.device("cuda", 0), ()) == forms[lk.name][1]
        kernel._functions = lambda device, driver=driver: {**driver, _BOUNDS: object()}
        assert kernel.native(torch.device("cuda", 0), ()) is None
    kinds = {launches[0].kind: (launches[0], form, handles) for launches, form, handles in forms.values()}
    l, form, handles = kinds["split"]
    assert [x.function for x in form.launches] == [handles[l.name], handles[l.name + "_final"]]
    assert all(x.scratch == (0,) for x in form.launches) and len(form.scratch) == len(l.workspace) == 1
    l, form, handles = kinds["pointwise"]
    (vec,) = form.launches
    assert vec.function == handles[l.name] and vec.alignment == l.align and vec.aligned == l.aligned
    assert vec.otherwise.function == handles[l.name + "_s"] and vec.otherwise.grid[0] == vec.grid[0] * l.vector


@pytest.mark.gpu
def test_partitions_replay_on_the_gpu_device():
    """torchvendor_cuda on the PrivateUse1 GPU device: after its first call a partition runs
    from the runner's C++ replay (launches through the runtime table), results equal eager's."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    done = _run(f"""
        import torch
        from torchvendor.sdk import register_device
        from torchvendor.sdk.compile import partition_call
        import torchvendor.reference_backends.cuda
        register_device("gpu", runtime={build_runtime()!r})
        made = []
        init = partition_call.PartitionCall.__init__
        def spy(self, *a, **k):
            init(self, *a, **k); made.append(self)
        partition_call.PartitionCall.__init__ = spy
        m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU()).to("gpu")
        g = torch.compile(m, backend="torchvendor_cuda", options={{"strict": True}})
        x = torch.randn(8, 64, device="gpu")
        with torch.no_grad():
            for _ in range(3):
                torch.testing.assert_close(g(x).cpu(), m(x).cpu(), rtol=1e-4, atol=1e-4)
        print("replayed", [p._replay is not None for p in made])
        """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "replayed [True" in done.stdout, done.stdout


def test_graphed_program_hands_off_to_the_runners_replay_off_cuda():
    """On a PrivateUse1 GPU device (no CUDA graphs) a partition wrapped in ``GraphedProgram``
    still gets the SDK runner's C++ replay; on ``cuda`` it keeps its graphs."""
    import torch

    from torchvendor.ir import capture
    from torchvendor.reference_backends.cuda.graphs import GraphedProgram
    from torchvendor.sdk import ProgramRunner, loop_kernels, reference_kernel

    x = torch.randn(8)
    prog = capture(lambda t: t.sin() * 2, [x], level="loop").inference
    runner = ProgramRunner(prog, {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)})
    graphed = GraphedProgram(runner, prog)
    fast = graphed.replay(x, form=2)
    direct = runner.replay(x, form=2)
    assert (fast is None) == (direct is None)
    if fast is not None:
        torch.testing.assert_close(fast(x), x.sin() * 2)
