"""ir/compat/triton_api.py: the Triton level's private Triton and Inductor use, each piece checked
on the running release (the Triton-dependent ones skip, saying so, where Triton is missing)."""
from __future__ import annotations

import struct

import pytest

from torchvendor.ir.compat import triton_api

needs_triton = pytest.mark.skipif(triton_api.triton_version() is None, reason="Triton is not installed")


def test_pack_format_aligns_each_argument_as_c_does():
    fmt, pointers = triton_api.pack_format(["*fp32", "i32", "*i64", "i64", "fp32", "i1", "*i8"])
    assert pointers == (0, 16, 40)
    data = struct.pack(fmt, 1, 2, 3, 4, 0.5, 1, 5)
    assert len(data) == 48 and struct.unpack_from("<q", data, 24) == (4,)


def test_kernel_binary_round_trips():
    kb = triton_api.KernelBinary(b"\x7fELF..", "k", 4, 32, 1024, (0, 1), (), "module {}")
    assert triton_api.KernelBinary.decode(kb.encode()) == kb


def test_unavailable_target_is_explained():
    reason = triton_api.triton_unavailable("no-such-target")
    assert reason is not None and ("not installed" in reason or "no installed Triton backend" in reason)


def test_wrapper_defines_triton_kernels_through_the_runtime():
    """Inductor's wrapper defines a Triton kernel as ``async_compile.triton(name, source, ...)``
    and builds itself with a ``create`` that names its own class: both are what the wrapper
    subclass relies on."""
    import inspect

    from torch._inductor.codegen import triton as tc
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    assert "async_compile.triton({" in inspect.getsource(tc)
    wrapper = triton_api.triton_wrapper_class("k")
    assert wrapper.create.__func__ is not PythonWrapperCodegen.create
    lines: list = []
    obj = wrapper.__new__(wrapper)
    obj.writeline = lines.append
    obj.define_kernel("k0", "async_compile.triton('k0', '''src''', device_str='x')")
    assert lines[0].kernel_body.startswith("_tv_triton.kernel('k0'")


def test_kernel_runtime_needs_registration():
    with pytest.raises(RuntimeError, match="no Triton runtime"):
        triton_api.kernel_runtime("not-registered").hooks()


@needs_triton
def test_target_driver_is_scoped():
    from triton.runtime import driver

    hooks = triton_api.TritonHooks("cuda", 90, 32, "cubin", lambda n, s: s, lambda n, t: None,
                                   lambda *a: None, lambda *a: None)
    before = driver._active
    with triton_api._target_driver(hooks):
        assert driver.active.get_current_target().backend == "cuda"
    assert driver._active is before


def test_autotune_times_each_configuration_on_copies_of_what_it_changes(monkeypatch):
    """A kernel's trial launches write to copies of its in-place and atomically accumulated
    arguments (Inductor's decorator keeps their names on the kernel object, not in its
    metadata); the real launch then gets the real buffers, once, with the fastest config."""
    import types

    import torch

    kernel = triton_api.TritonRuntimeKernel.__new__(triton_api.TritonRuntimeKernel)
    kernel.autotuner = types.SimpleNamespace(
        mutated_arg_names=["in_out_ptr0"], reset_to_zero_arg_names=["out_ptr1"], inductor_meta={},
        fn=types.SimpleNamespace(arg_names=["in_out_ptr0", "in_ptr0", "out_ptr1", "xnumel", "XBLOCK"]))
    calls = []

    def launcher(cost):
        def launch(*args):
            calls.append(args)
        launch.cost = cost
        return launch

    kernel.launchers, kernel._chosen, kernel._builds = [launcher(2.0), launcher(1.0)], None, []  # built already
    monkeypatch.setattr(triton_api, "_time_launch", lambda fn, args, device, reps=10: (fn(*args), fn.cost)[1])
    buf, x, acc = torch.zeros(4), torch.ones(4), torch.zeros(4)
    kernel.run(buf, x, acc, 4, stream=0)
    assert kernel._chosen is kernel.launchers[1]
    *trials, real = calls
    assert len(trials) == 2 and all(t[0] is not buf and t[1] is x and t[2] is not acc for t in trials)
    assert real[0] is buf and real[2] is acc
