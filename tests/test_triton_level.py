"""Level.TRITON (issue 37): the level's declarations and refusals (here, no Triton needed); with
Triton's NVIDIA backend installed, the compile path on the simulated device up to the runtime's
module load, which cannot take a cubin (the partition falls back, saying so); marked gpu, the
whole path on a PrivateUse1 GPU over the reference CUDA runtime, in a process of its own, with the
C++ launcher and externs and with the Python ones. The C++ launcher and the externs' aliasing are
checked on the simulator too (its sample kernels, acme memory aliased as acme)."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import types
import warnings

import pytest
import torch

from torchvendor.ir.compat import triton_unavailable
from torchvendor.sdk import BackendDefinitionError, Level, TritonBackend, last_report, register_backend

needs_nvidia_triton = pytest.mark.skipif(triton_unavailable("cuda") is not None,
                                         reason=f"{triton_unavailable('cuda')} (the GPU machine runs these)")


def _f(x, y):
    return torch.softmax(x * y, -1).sum(-1) + torch.relu(x).mean(-1)


def test_level_and_class_are_public():
    import torchvendor.sdk as sdk

    assert Level.TRITON.value == "triton" and TritonBackend.level is Level.TRITON
    assert "TritonBackend" in sdk.__all__


def test_target_and_binary_format_are_required():
    class NoTarget(TritonBackend):
        name = "t_no_target"
        binary_format = "cubin"

    with pytest.raises(BackendDefinitionError, match="triton_target"):
        register_backend(NoTarget)


def test_a_target_no_triton_backend_compiles_runs_eagerly_with_the_reason(acme):
    class Nowhere(TritonBackend):
        name = "t_nowhere"
        triton_target, binary_format = "no_such_target", "bin"

    register_backend(Nowhere)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    with torch.no_grad():
        got = torch.compile(_f, backend="t_nowhere")(x.to("acme"), y.to("acme"))
    torch.testing.assert_close(got.cpu(), _f(x, y))
    graph = last_report().graphs[0]
    assert not graph.partitions and graph.unsupported
    assert any("Triton" in r for reasons in graph.reasons.values() for r in reasons)


def test_host_tensors_are_refused():
    class Host(TritonBackend):
        name = "t_host"
        triton_target, binary_format = "cuda", "cubin"

    register_backend(Host)
    with torch.no_grad():
        got = torch.compile(_f, backend="t_host")(torch.ones(2, 4), torch.ones(2, 4))
    torch.testing.assert_close(got, _f(torch.ones(2, 4), torch.ones(2, 4)))
    reasons = [r for rs in last_report().graphs[0].reasons.values() for r in rs]
    assert reasons and all("PrivateUse1" in r for r in reasons)


@needs_nvidia_triton
def test_every_kernel_goes_through_the_hooks_and_the_binary_cache(acme, tmp_path):
    """Inductor's kernels for acme built as cubins (target cuda, sm_90): each source and TTIR seen
    by the hooks, each binary cached; the simulator's module loader refuses a cubin, so the
    partition falls back at its first run with the loader's reason, and the result is eager's."""
    seen: dict[str, list] = {"source": [], "ir": []}

    class Annotated(TritonBackend):
        name = "t_annotated"
        triton_target, binary_format = "cuda", "cubin"

        def triton_arch(self, properties):
            return 90

        def kernel_source(self, name, source):
            seen["source"].append(name)
            return "# annotated\n" + source

        def kernel_ir(self, name, ttir):
            seen["ir"].append((name, "tt.func" in ttir))

    register_backend(Annotated)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    # fallback="inductor" keeps a second compile off the warm path: the same kernels again
    options = {"cache_dir": str(tmp_path), "fallback": "inductor"}
    for _ in range(2):
        torch._dynamo.reset()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = torch.compile(_f, backend="t_annotated", options=options)(x.to("acme"), y.to("acme"))
        torch.testing.assert_close(got.cpu(), _f(x, y))
        (part,) = last_report().partitions
        assert part.status == "fallback" and "module_load" in part.reason
    names = set(seen["source"])
    assert names and len(seen["source"]) == 2 * len(names)
    assert all(ok for _, ok in seen["ir"]) and sorted(n for n, _ in seen["ir"]) == sorted(names), \
        "each binary is built once, then read from the cache"
    assert len(list(tmp_path.rglob("*.triton"))) == len(names)


@needs_nvidia_triton
def test_a_build_worker_that_fails_is_replaced_by_a_build_here(acme, tmp_path, monkeypatch):
    """Build workers are an optimization: a job that fails there (or cannot be sent) is built in
    the compiling process, with a warning, and the kernels are the same."""
    import concurrent.futures as cf

    from torchvendor.ir.compat import triton_api as ta

    class BrokenPool:
        def submit(self, *args, **kwargs):
            failed = cf.Future()
            failed.set_exception(RuntimeError("worker died"))
            return failed

    class Rebuilt(TritonBackend):
        name = "t_rebuilt"
        triton_target, binary_format = "cuda", "cubin"

        def triton_arch(self, properties):
            return 90

    monkeypatch.setenv("TORCHVENDOR_TRITON_BUILD_WORKERS", "2")
    monkeypatch.setattr(ta, "_POOL", [BrokenPool()])
    register_backend(Rebuilt)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="build worker failed"):
        got = torch.compile(_f, backend="t_rebuilt", options={"cache_dir": str(tmp_path)})(x.to("acme"), y.to("acme"))
    torch.testing.assert_close(got.cpu(), _f(x, y))
    (part,) = last_report().partitions
    assert "module_load" in part.reason, part.reason   # built, then refused by the simulator's loader
    assert list(tmp_path.rglob("*.triton"))


POOL_SCRIPT = """
    import torch
    from torchvendor.sdk import TritonBackend, last_report, register_backend, register_device
    register_device("acme")

    class Pool(TritonBackend):
        name = "t_pool"
        triton_target, binary_format = "cuda", "cubin"
        def triton_arch(self, properties):
            return 90

    register_backend(Pool)
    x = torch.randn(1, 2, 8, 8)
    with torch.no_grad():
        got = torch.compile(lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1) * 2, backend="t_pool")(x.to("acme"))
    torch.testing.assert_close(got.cpu(), torch.nn.functional.max_pool2d(x, 3, 2, 1) * 2)
    (part,) = last_report().partitions
    assert "module_load" in part.reason, part.reason
    print("OK")
"""


@needs_nvidia_triton
def test_max_pool_in_a_fresh_process(tmp_path):
    """Inductor's max_pool2d decomposition calls its lowering module, which a fresh process has
    not imported when the level traces (resnet's first graph failed that way)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TORCHVENDOR_CACHE_DIR": str(tmp_path),
           "TORCHVENDOR_TRITON_BUILD_WORKERS": "1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(POOL_SCRIPT)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout[-3000:] + done.stderr[-5000:]


# ---- the per-call path in C++ (torchvendor._C.TritonLaunch, ExternCall), on the simulator ----

def _sim_kernel(acme, name):
    import importlib.resources

    path = os.fspath(importlib.resources.files("torchvendor") / "lib" / "libtorchvendor_sim_kernels.so")
    return acme.get_function(acme.load_module(path, device=0), name)


def _native():
    from torchvendor import _C

    if not hasattr(_C, "TritonLaunch"):
        pytest.skip("this build of the device layer has no TritonLaunch")
    return _C


def test_launch_codes_lay_out_the_buffer_as_pack_format():
    from torchvendor.ir.compat.triton_api import launch_codes, pack_format

    types = ["i1", "*fp32", "fp16", "i32", "bf16", "fp64", "u8", "*i64", "i16", "fp32", "u64"]
    fmt, pointers = pack_format([*types, "*i8", "*i8"])
    launch = _native().TritonLaunch(1, launch_codes(types, True, True), [128], 0, 0)
    assert launch.size == struct.calcsize(fmt) and tuple(launch.pointer_offsets) == pointers


def test_the_cpp_launcher_packs_pointers_ints_and_floats(acme):
    """Inductor's kernel arguments as passed (tensors, Python ints and floats) packed in C++ and
    launched through the runtime table: the simulator translates each pointer, so a wrong offset
    or a host address fails."""
    ext = _native()
    add = ext.TritonLaunch(_sim_kernel(acme, "tv_add_f32"), "qppp", [1], 0, 0)
    fill = ext.TritonLaunch(_sim_kernel(acme, "tv_fill_f32"), "qpfi", [1], 0, 0)  # i: the struct's tail
    a, b = torch.arange(6.0).to("acme"), torch.full((6,), 0.5).to("acme")
    out = torch.zeros(6, device="acme")
    add(1, 1, 1, 6, a, b, out)
    torch.testing.assert_close(out.cpu(), torch.arange(6.0) + 0.5)
    fill(1, 1, 1, 4, out, 2.25, 0)
    fill(0, 1, 1, 6, out, 9.0, 0)  # an empty grid launches nothing, as Triton's launcher
    torch.testing.assert_close(out.cpu(), torch.tensor([2.25] * 4 + [4.5, 5.5]))
    with pytest.raises(ValueError, match="values"):
        add(1, 1, 1, 6, a, b)
    with pytest.raises(TypeError, match="pointer"):
        add(1, 1, 1, 6, a, "b", out)


def test_a_launch_on_the_default_stream_can_go_to_the_null_stream(acme):
    """``null_default_stream``: while the device's current stream is its default one, the launch
    takes the runtime's NULL stream (the reference CUDA runtime's legacy default stream, where the
    externs run); on another current stream, that stream. The backend class turns it on."""
    from torchvendor.sdk.compile.triton_level import _native_launcher

    ext = _native()
    add = ext.TritonLaunch(_sim_kernel(acme, "tv_add_f32"), "qppp", [1], 0, 0, null_default_stream=True)
    assert add.null_default_stream and not ext.TritonLaunch(1, "q", [1], 0, 0).null_default_stream
    a, out = torch.arange(4.0).to("acme"), torch.zeros(4, device="acme")
    add(1, 1, 1, 4, a, a, out)
    acme.synchronize()
    torch.testing.assert_close(out.cpu(), 2 * torch.arange(4.0))
    with torch.acme.stream(torch.acme.Stream()):
        add(1, 1, 1, 4, out, a, out)
        torch.acme.current_stream().synchronize()
    torch.testing.assert_close(out.cpu(), 3 * torch.arange(4.0))
    assert _native_launcher(True)(1, "q", [1], 0, 0).null_default_stream
    from torchvendor.reference_backends.triton import TritonCudaBackend

    assert TritonCudaBackend.null_default_stream and not TritonBackend.null_default_stream


def test_the_reference_convolutions_run_without_tf32(monkeypatch):
    """The GPU device's eager convolution and matmul are full float32 (its CPU fallback), so the
    reference runs cuDNN's convolutions with TF32 off, and matmuls at precision "highest" where
    it was lowered when they were compiled; at torch's defaults a matmul extern is unwrapped."""
    from torchvendor.reference_backends.triton import TritonCudaBackend
    from torchvendor.reference_backends.triton.externs import ieee_float32

    def flags():
        return torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()

    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(TritonCudaBackend, "alias_extern", staticmethod(lambda fn, device, library: fn))
    backend = TritonCudaBackend()
    saved = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert ieee_float32(flags, matmul=True)() == (False, "highest")
        assert backend.extern_kernel("convolution", flags, "gpu")() == (False, "highest")
        assert backend.extern_kernel("addmm", flags, "gpu")()[1] == "highest"
        assert flags() == (True, "high"), "put back after the call"
        torch.set_float32_matmul_precision("highest")
        assert backend.extern_kernel("mm", flags, "gpu") is flags
    finally:
        torch.set_float32_matmul_precision(saved)


def test_scratch_is_device_memory_allocated_per_launch(acme):
    """``s``: the global scratch, ``scratch_bytes`` per program, a device pointer the runtime
    accepts; ``z``: a NULL pointer. Both follow the values and take none."""
    launch = _native().TritonLaunch(_sim_kernel(acme, "tv_add_f32"), "qpppsz", [1], 0, 64)
    a, out = torch.ones(3).to("acme"), torch.zeros(3, device="acme")
    launch(2, 1, 1, 3, a, a, out)
    torch.testing.assert_close(out.cpu(), torch.full((3,), 2.0))


def test_the_python_launcher_is_the_fallback(acme, monkeypatch):
    """A launcher's first ``go`` loads the function and binds what launches it from then on:
    the C++ launcher, or with ``TORCHVENDOR_TRITON_NATIVE=0`` (or no native hook) the struct packer."""
    from torchvendor.ir.compat import triton_api as ta

    function = _sim_kernel(acme, "tv_add_f32")
    kb = ta.KernelBinary(b"", "tv_add_f32", 1, 1, 0, (), ())
    a, out = torch.ones(2).to("acme"), torch.zeros(2, device="acme")
    for native in ("1", "0"):
        monkeypatch.setenv("TORCHVENDOR_TRITON_NATIVE", native)
        hooks = types.SimpleNamespace(load=lambda image, device, name: function, launch=acme.launch,
                                      native=getattr(_native(), "TritonLaunch"))
        scope = {}
        scope["go"] = ta._Go(types.SimpleNamespace(hooks=hooks), kb, ["i64", "*fp32", "*fp32", "*fp32"], "qppp", {},
                             scope)
        scope["go"](1, 1, 1, 2, a, out, out)
        scope["go"](1, 1, 1, 2, a, out, out)
        assert isinstance(scope["go"], ta._PyLaunch) == (native == "0")
        torch.testing.assert_close(out.cpu(), torch.full((2,), 2.0))
        out.zero_()


def test_an_extern_runs_on_aliases_and_maps_results_back(acme):
    """``alias_extern``: operands become tensors of the library's device over the same memory
    (here acme over acme: the simulator's memory is no host memory); an ``out=`` result comes back
    as the operand itself, a view as a view of the operand's storage, a new result as it is."""
    if TritonBackend.alias_extern(torch.add, "acme", "acme") is None:
        pytest.skip("this build of the device layer has no ExternCall")
    seen = []

    def spy(*args, **kwargs):
        seen.append([id(a) for a in (*args, *kwargs.values())])
        return torch.mm(*args, **kwargs)

    mm = TritonBackend.alias_extern(spy, "acme", "acme")
    x, y = torch.randn(3, 4), torch.randn(4, 2)
    a, b, out = x.to("acme"), y.to("acme"), torch.empty(3, 2, device="acme")
    assert mm(a, b, out=out) is out and mm(a, b, out=out) is out
    torch.testing.assert_close(out.cpu(), x @ y)
    assert seen[0] == seen[1] and id(a) not in seen[0], "operands are aliases, made once"
    new = mm(a, b)
    assert new.device == a.device
    torch.testing.assert_close(new.cpu(), x @ y)
    t = TritonBackend.alias_extern(torch.Tensor.t, "acme", "acme")(a)
    assert t.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() and t.stride() == (1, 4)
    parts = TritonBackend.alias_extern(torch.split, "acme", "acme")(a, [1, 2])
    assert isinstance(parts, tuple) and [p.shape[0] for p in parts] == [1, 2]
    torch.testing.assert_close(parts[1].cpu(), x[1:])
    assert TritonBackend.alias_extern(lambda n, s: (n, s), "acme", "acme")(3, "k") == (3, "k")


def test_the_wrappers_allocation_call_for_the_device_and_others(acme):
    """``EmptyStrided``: Inductor's ``empty_strided(size, stride, device=..., dtype=...)`` served by
    the device allocator for the device by name, by ``torch.empty_strided`` for anything else."""
    alloc = _native().EmptyStrided(torch.empty_strided, "acme")
    t = alloc((2, 3, 4), (12, 1, 3), device="acme", dtype=torch.float16)
    assert (t.device.type, t.shape, t.stride(), t.dtype) == ("acme", (2, 3, 4), (12, 1, 3), torch.float16)
    t.fill_(1.5)
    assert t.cpu().sum().item() == 36.0
    c = alloc((4,), (1,), device="cpu", dtype=torch.int64)
    assert c.device.type == "cpu" and c.dtype == torch.int64
    assert alloc((2,), (1,), device="acme:0", dtype=torch.float32).device.type == "acme"


def test_the_wrappers_call_the_cpp_entries_as_builtins(acme):
    """``function``: ExternCall and EmptyStrided as builtin functions (what the generated wrapper
    holds), called without pybind11's argument matching; errors and other call forms pass through."""
    ext = _native()
    if not hasattr(ext.ExternCall, "function"):
        pytest.skip("this build of the device layer has no builtin entries")

    def boom(*args, **kwargs):
        raise ZeroDivisionError("from the library")

    mm = TritonBackend.alias_extern(torch.mm, "acme", "acme")
    assert type(mm).__name__ == "builtin_function_or_method"
    x = torch.randn(2, 3)
    out = torch.empty(2, 2, device="acme")
    assert mm(x.to("acme"), x.t().to("acme"), out=out) is out
    torch.testing.assert_close(out.cpu(), x @ x.t())
    with pytest.raises(ZeroDivisionError, match="library"):
        ext.ExternCall(boom, "acme", "acme").function(out, k=1)
    alloc = ext.EmptyStrided(torch.empty_strided, "acme").function
    t = alloc((2, 3), (3, 1), device="acme", dtype=torch.float16)
    assert (t.device.type, t.stride(), t.dtype) == ("acme", (3, 1), torch.float16)
    assert alloc((2,), (1,)).device.type == "cpu", "any other form: torch.empty_strided"
    with pytest.raises(TypeError):
        alloc((2,), (1,), device="acme", dtype="float32")


def test_build_workers_and_the_first_failed_build_raises(monkeypatch):
    from torchvendor.ir.compat import triton_api as ta
    from torchvendor.sdk.compile.triton_level import build_workers

    monkeypatch.setenv("TORCHVENDOR_TRITON_BUILD_WORKERS", "3")
    assert build_workers() == 3
    assert ta._build_pool(1) is None

    ready = []

    class Fake:
        def __init__(self, fail):
            self.fail = fail

        def _ready(self):
            ready.append(self)
            if self.fail:
                raise RuntimeError("ptxas failed")

    ta._PENDING[:] = [Fake(False), Fake(True), Fake(False)]
    with pytest.raises(RuntimeError, match="ptxas"):
        ta.finish_builds()
    assert len(ready) == 3 and not ta._PENDING, "every build is waited for, then the first failure raised"
    ta._PENDING[:] = [Fake(True)]
    ta.finish_builds(strict=False)
    assert not ta._PENDING


GPU_SCRIPT = """
    import torch
    from torchvendor.reference_backends.cuda.runtime import build_runtime
    from torchvendor.sdk import last_report, register_device
    import torchvendor.reference_backends.triton  # registers torchvendor_triton
    gpu = register_device("gpu", runtime=build_runtime())
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LayerNorm(128), torch.nn.GELU(),
                                torch.nn.Linear(128, 10))
    x = torch.randn(32, 64)

    def attend(model, x):  # softmax in place over scores: a kernel with configurations to time
        h = model(x)
        return torch.softmax(h @ h.T / 4, -1) @ h

    ref = attend(model, x)
    ref.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    dev = model.to("gpu")
    out = torch.compile(attend, backend="torchvendor_triton")(dev, x.to("gpu"))
    out.square().sum().backward()
    torch.testing.assert_close(out.cpu(), ref, atol=1e-4, rtol=1e-4)
    for p, g in zip(dev.parameters(), grads):
        torch.testing.assert_close(p.grad.cpu(), g, atol=1e-3, rtol=1e-3)
    rep = last_report()
    assert rep.partitions and all(p.status == "compiled" and p.calls for p in rep.partitions), rep.summary()
    fell = {k: v for k, v in gpu.fallback_counts().items() if "mm" in k}
    assert not fell, fell   # matmuls ran by cuBLAS (extern_kernel), not the CPU fallback

    # a convolution: cuDNN's result is no operand, and comes back as a device tensor over it
    conv, img = torch.nn.Conv2d(3, 8, 3), torch.randn(2, 3, 12, 12)
    want = torch.relu(conv(img)) * 2
    with torch.no_grad():
        got = torch.compile(lambda m, t: torch.relu(m(t)) * 2, backend="torchvendor_triton")(conv.to("gpu"),
                                                                                              img.to("gpu"))
        again = got.clone()
    torch.testing.assert_close(got.cpu(), want.detach(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(again.cpu(), want.detach(), atol=1e-4, rtol=1e-4)
    print("OK", len(rep.partitions))
"""


@pytest.mark.gpu
@pytest.mark.parametrize("native", ["1", "0"], ids=["cpp_launch", "python_launch"])
def test_inference_and_training_on_a_private_use1_gpu(native):
    if not torch.cuda.is_available() or triton_unavailable("cuda") is not None:
        pytest.skip("needs an NVIDIA GPU and Triton's NVIDIA backend")
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TORCHVENDOR_TRITON_NATIVE": native}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(GPU_SCRIPT)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout[-3000:] + done.stderr[-5000:]
