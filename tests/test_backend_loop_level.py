"""The LOOP level of the backend template (sdk/compile/loop_level.py): the program-level hook,
lowering without Inductor's wrapper, no JSON round trip on a cold compile, and the partitions
issue 24 found falling back (no tensor input, a CPU tensor beside device tensors, ATen's CPU
scalars among the outputs, dynamic shapes), each reproduced here on ``cpu`` or on the simulated
``acme`` device with a small LOOP backend whose kernels run on the reference interpreter."""
from __future__ import annotations

import dataclasses
import itertools
import types

import pytest
import torch

from torchvendor.ir import capture
from torchvendor.ir.loop_ir import Kernel, LoopProgram, capture_loop
from torchvendor.sdk import (AtenBackend, BackendError, CompiledProgram, LoopBackend, ProgramRunner, get_backend,
                             last_report, loop_kernels, reference_kernel, register_backend)

_FRESH = itertools.count()


def _fresh(fn):
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{next(_FRESH)}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


class Interpreted(LoopBackend):
    """Every kernel "compiled" to the reference interpreter; records what the hooks saw."""

    name = "tv_test_loop_interpreted"
    seen: list = []

    def compile(self, kernel):
        type(self).seen.append(("kernel", kernel.name))
        return reference_kernel(kernel)


class Merging(LoopBackend):
    """Fuses across kernels through the program-level hook: every run of neighbouring kernels
    becomes one kernel (their nests in order), with no state kept between calls."""

    name = "tv_test_loop_merging"
    programs: list = []

    def compile_program(self, program):
        ops, merged = [], []
        for op in program.ops:
            if isinstance(op, Kernel) and ops and isinstance(ops[-1], Kernel):
                ops[-1] = dataclasses.replace(op, nests=ops[-1].nests + op.nests)
                merged.append(op.name)
            else:
                ops.append(op)
        rewritten = dataclasses.replace(program, ops=tuple(ops))
        type(self).programs.append((program, rewritten, merged))
        return CompiledProgram(rewritten, {lk.name: reference_kernel(lk) for lk in loop_kernels(rewritten)})


class Narrow(Interpreted):
    """Claims only the ops of a mask built from ``arange`` (the partition has no tensor input)."""

    name = "tv_test_loop_narrow"
    supported_ops = {"prims.iota", "aten.le", "aten.add", "aten.unsqueeze", "aten.mul", "prims.convert_element_type"}


for _cls in (Interpreted, Merging, Narrow):
    register_backend(_cls)


def _statuses() -> list[tuple[str, str]]:
    return [(p.status, p.reason) for g in last_report().graphs for p in g.partitions]


def test_compile_program_default_compiles_kernel_by_kernel(tmp_path):
    Interpreted.seen.clear()
    f = torch.compile(_fresh(lambda x: torch.softmax(x, -1) + x.sum(0)), backend="tv_test_loop_interpreted",
                      options={"strict": True, "cache_dir": str(tmp_path)})
    x = torch.randn(6, 5)
    with torch.no_grad():
        torch.testing.assert_close(f(x), torch.softmax(x, -1) + x.sum(0))
    assert Interpreted.seen and all(kind == "kernel" for kind, _ in Interpreted.seen)
    assert _statuses() == [("compiled", "")]


def test_compile_program_hook_fuses_across_kernels_without_state(tmp_path):
    """A backend that rewrites the program (neighbouring kernels merged) gets it run as rewritten."""
    Merging.programs.clear()
    fn = _fresh(lambda x: (x.sum(1, keepdim=True) + x).sum(0))
    f = torch.compile(fn, backend="tv_test_loop_merging", options={"strict": True, "cache_dir": str(tmp_path)})
    x = torch.randn(7, 9)
    with torch.no_grad():
        torch.testing.assert_close(f(x), fn(x))
    assert _statuses() == [("compiled", "")]
    (original, rewritten, merged), = Merging.programs
    assert merged, "the case needs neighbouring kernels"
    assert len(rewritten.kernels) == len(original.kernels) - len(merged)


def test_compile_program_must_return_a_compiled_program(tmp_path):
    class Wrong(Interpreted):
        name = "tv_test_loop_wrong_hook"

        def compile_program(self, program):
            return {lk.name: reference_kernel(lk) for lk in loop_kernels(program)}

    register_backend(Wrong)
    f = torch.compile(_fresh(lambda x: x.sin() + 1), backend="tv_test_loop_wrong_hook",
                      options={"strict": True, "cache_dir": str(tmp_path)})
    with pytest.raises(Exception, match="return a torchvendor.sdk.CompiledProgram"):
        with torch.no_grad():
            f(torch.randn(3))


def test_lowering_generates_no_interpreter_wrapper(tmp_path, monkeypatch):
    """A backend's lowering emits no wrapper lines (no kernel JSON, no interpreter call); the
    capture, whose compiled function runs, still does."""
    from torchvendor.ir.loop_ir.lowering import inductor_hooks

    calls = []
    real = inductor_hooks.emit_interpreter_call
    monkeypatch.setattr(inductor_hooks, "emit_interpreter_call", lambda *a: calls.append(a) or real(*a))
    f = torch.compile(_fresh(lambda x: torch.tanh(x) * 3), backend="tv_test_loop_interpreted",
                      options={"strict": True, "cache_dir": str(tmp_path)})
    with torch.no_grad():
        torch.testing.assert_close(f(torch.ones(4)), torch.tanh(torch.ones(4)) * 3)
    assert _statuses() == [("compiled", "")] and calls == []
    prog = capture(_fresh(lambda x: torch.tanh(x) * 3), [torch.ones(4)], level="loop")
    torch.testing.assert_close(prog.run(torch.ones(4))[0], torch.tanh(torch.ones(4)) * 3)
    assert len(calls) == 1


def test_cold_compile_uses_the_lowered_program_without_json(tmp_path, monkeypatch):
    decoded = []
    real = LoopProgram.from_json
    monkeypatch.setattr(LoopProgram, "from_json", staticmethod(lambda text: decoded.append(1) or real(text)))
    opts = {"strict": True, "cache_dir": str(tmp_path)}
    x = torch.randn(5, 3)
    with torch.no_grad():
        torch.compile(_fresh(lambda t: (t * 2).softmax(-1)), backend="tv_test_loop_interpreted", options=opts)(x)
        assert decoded == []  # cold: lowered, stored, used as is
        torch.compile(_fresh(lambda t: (t * 2).softmax(-1)), backend="tv_test_loop_interpreted", options=opts)(x)
    assert decoded == [1]  # warm: the stored program, decoded once
    assert list(tmp_path.rglob("*.loop.json"))


def test_partition_without_tensor_inputs_lowers_on_its_device(acme, tmp_path):
    """Issue 24: a partition of iota, le, add, unsqueeze (a mask built from ``arange``) has no
    tensor input; it was lowered for ``cpu`` while its tensors are on the device ("Inductor
    generated 0 programs" on cuda, a KeyError on acme). Its device now comes from its outputs."""
    def f(x):
        i = torch.arange(8, device=x.device) + 1
        return torch.where(i.unsqueeze(0) <= i.unsqueeze(1), x.sin(), 0.0)

    x = torch.randn(8, 8).to("acme")
    g = torch.compile(_fresh(f), backend="tv_test_loop_narrow", options={"strict": True, "cache_dir": str(tmp_path)})
    with torch.no_grad():
        out = g(x)
    assert out.device.type == "acme"
    torch.testing.assert_close(out.cpu(), f(x.cpu()))
    parts = [p for gr in last_report().graphs for p in gr.partitions]
    assert [p.status for p in parts] == ["compiled"] and "prims.iota.default" in parts[0].ops


def test_a_copy_from_the_cpu_to_the_device_is_an_extern_kernel(acme, tmp_path):
    """Issue 24 (vilt, deberta_v2 on cuda): a CPU tensor moved to the device inside the graph is
    Inductor's DeviceCopy, an extern kernel with no op name; it fell back with "extern kernel
    without an op name". It is ``prims.device_put`` in the loop IR."""
    def f(x, t):
        return x * t.to(x.device).float() + 1

    x, t = torch.randn(3, 4).to("acme"), torch.arange(4)
    g = torch.compile(_fresh(f), backend="tv_test_loop_interpreted", options={"strict": True, "cache_dir": str(tmp_path)})
    with torch.no_grad():
        out = g(x, t)
    assert out.device.type == "acme"
    torch.testing.assert_close(out.cpu(), f(x.cpu(), t))
    parts = [p for gr in last_report().graphs for p in gr.partitions]
    assert [p.status for p in parts] == ["compiled"] and "prims.device_put.default" in parts[0].ops


def test_partition_mask_under_dynamic_shapes(tmp_path):
    """Issue 24: the same mask partition under dynamic shapes (its Inductor wrapper once failed to
    import with a SyntaxError; lowering generates no wrapper now), for two sizes, no recompile."""
    def f(x):
        i = torch.arange(x.shape[0]) + 1
        return torch.where(i.unsqueeze(0) <= i.unsqueeze(1), x.sin(), 0.0)

    g = torch.compile(_fresh(f), backend="tv_test_loop_narrow", dynamic=True,
                      options={"strict": True, "cache_dir": str(tmp_path)})
    with torch.no_grad():
        for n in (5, 9):
            x = torch.randn(n, n)
            torch.testing.assert_close(g(x), f(x))
            parts = [p for gr in last_report().graphs for p in gr.partitions]
            assert [p.status for p in parts] == ["compiled"]


def test_runner_allocates_on_the_program_device_when_a_cpu_tensor_comes_first(acme):
    """A CPU tensor among a device program's inputs (a CPU scalar, or efficient attention's
    philox seed and offset in its backward) must not decide where the buffers go: the runner
    allocated everything on the first tensor input's device."""
    def g(x, t):
        return (x * t).exp() + 1

    x, t = torch.randn(8).to("acme"), torch.tensor(3.0)
    with torch.no_grad():
        prog = capture_loop(g, [x, t], device="acme").inference
    assert [prog.buffer(n).device for n in prog.inputs] == ["acme", "cpu"]
    swapped = dataclasses.replace(prog, inputs=prog.inputs[::-1])   # the CPU tensor first
    runner = ProgramRunner(swapped, {lk.name: reference_kernel(lk) for lk in loop_kernels(swapped)}, "acme")
    out = runner(t, x)[0]
    assert out.device.type == "acme"
    torch.testing.assert_close(out.cpu(), g(x.cpu(), t))


def test_output_check_accepts_aten_cpu_scalars(acme, tmp_path):
    """Issue 24 ("output 9 is on cpu, expected cuda"): ATen returns efficient attention's philox
    seed and offset as 0-d CPU tensors while the graph's metadata says the device; the output
    check accepts a 0-d CPU tensor there, and still refuses any other tensor on the wrong device."""
    class HostScalars(AtenBackend):
        name = "tv_test_host_scalars"

        def compile(self, gm, example_inputs):
            def run(*args):
                out = gm(*args)
                return tuple(o.cpu() if o.dim() == 0 or self.options["all"] else o for o in out)
            return run

        default_options = {"all": False}

    register_backend(HostScalars)
    x = torch.randn(4).to("acme")
    fn = _fresh(lambda t: (t * 2, (t * 3).sum()))
    with torch.no_grad():
        a, b = torch.compile(fn, backend="tv_test_host_scalars", options={"strict": True, "cache_dir": str(tmp_path)})(x)
    assert a.device.type == "acme" and b.device.type == "cpu"
    with torch.no_grad(), pytest.raises(Exception, match="output 0 is on cpu, expected acme"):
        torch.compile(_fresh(lambda t: (t * 2, (t * 3).sum())), backend="tv_test_host_scalars",
                      options={"strict": True, "all": True, "cache_dir": str(tmp_path)})(x)


class Externs(LoopBackend):
    """Runs extern kernels through its own hook (a vendor's BLAS), kernels on the interpreter."""

    name = "tv_test_loop_externs"
    calls: list = []

    def compile(self, kernel):
        return reference_kernel(kernel)

    def extern_kernel(self, extern, aten, device):
        def run(*args, **kwargs):
            type(self).calls.append((extern.op, device))
            return aten(*args, **kwargs)
        return run


register_backend(Externs)


@pytest.mark.parametrize("device", ["cpu", "acme"])
def test_extern_kernels_run_through_the_backends_hook(device, request):
    """``LoopBackend.extern_kernel`` gives what runs each extern kernel (the CUDA backend runs cuBLAS
    on a PrivateUse1 GPU device through it); the default is ATen on the device."""
    if device == "acme":
        request.getfixturevalue("acme")
    Externs.calls.clear()
    x, w = torch.randn(8, 16).to(device), torch.randn(16, 4).to(device)
    f = _fresh(lambda x, w: (x @ w).relu() + 1)
    with torch.no_grad():
        out = torch.compile(f, backend="tv_test_loop_externs", options={"strict": True})(x, w)
    torch.testing.assert_close(out.cpu(), f(x.cpu(), w.cpu()))
    assert ("aten.mm.default", device) in Externs.calls
    assert get_backend("tv_test_loop_interpreted").extern_kernel(None, torch.mm, device) is torch.mm


def test_runner_views_an_extern_result_without_copying_it():
    """A matmul's output that later ops read through views (an attention's q/k/v split, a
    reshape returned as the output) is the matmul's own result: its views are made from it once
    it is there, as Inductor's wrapper takes ``reinterpret_tensor(buf, ...)``, not from a buffer
    allocated beforehand that the result is copied into."""
    def g(x, w):
        y = x @ w
        return y.view(4, 2, 8).transpose(0, 1) * 2, y.view(2, 2, 2, 8)

    x, w = torch.randn(4, 8), torch.randn(8, 16)
    with torch.no_grad():
        prog = capture_loop(g, [x, w]).inference
    runner = ProgramRunner(prog, {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)})
    mm = next(op for op in prog.ops if not isinstance(op, Kernel) and "mm" in op.op)
    (result,) = mm.outputs
    outs = runner(x, w)
    source = runner.source(x, w)
    assert f"{result} = _empty" not in source          # nothing allocated for it, nothing copied
    assert f"= _view({result}, " in source              # its views are made from the result
    for got, want in zip(outs, g(x, w)):
        torch.testing.assert_close(got, want)
