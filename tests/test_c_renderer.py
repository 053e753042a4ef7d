"""The SDK's C-style renderer and the two reference code generators that subclass it: every loop-IR
op is rendered or declared unsupported, each rendered op compiles, and indirect indices wrap and
are bounds-checked as eager indexing is."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch

from torchvendor.ir import capture
from torchvendor.ir.loop_ir import COMPUTE_OPS, Buffer, Kernel, LoopNest, Stmt, validate
from torchvendor.reference_backends.cpu import codegen as cpu
from torchvendor.reference_backends.cpu.toolchain import HostKernel, _host_call, build, host_kernel
from torchvendor.reference_backends.cuda import codegen as cuda
from torchvendor.sdk import CodegenError, CStyleRenderer, LoopKernel, loop_kernels

RENDERERS = (cpu.CppRenderer, cuda.CudaRenderer)
BINARY = {"add", "sub", "mul", "truediv", "div", "int_truediv", "floordiv", "truncdiv", "mod", "remainder", "fmod",
          "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
          "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "lshift", "rshift",
          "and_", "or_", "xor", "atan2", "hypot", "copysign", "nextafter", "rand", "randn"}
ARITY = {**dict.fromkeys(BINARY, 2), "where": 3, "fma": 3, "randint64": 4}
INTEGER = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift",
           "lshift", "rshift", "and_", "or_", "xor", "randint64", "rand", "randn"}


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda r: r.language)
def test_every_loop_ir_op_is_rendered_or_declared_unsupported(renderer):
    assert renderer.coverage() == []
    assert not renderer.rendered_ops() & set(renderer.unsupported_ops)
    assert issubclass(renderer, CStyleRenderer)


def _op_kernel(op: str, device: str) -> LoopKernel:
    """x (float32 or int64) -> op(x, x, ...) -> y: one pointwise kernel using ``op``."""
    dtype = "int64" if op in INTEGER else "float32"
    out = "float32" if op in ("rand", "randn") else dtype
    x = Buffer("x", dtype, ("64",), ("1",), device, "input")
    y = Buffer("y", out, ("64",), ("1",), device, "output")
    body = (Stmt("t0", "load", (), (("buffer", "x"), ("index", "i0")), dtype),
            Stmt("t1", op, ("t0",) * ARITY.get(op, 1), (), out),
            Stmt(None, "store", ("t1",), (("buffer", "y"), ("index", "i0"), ("mode", None))))
    kernel = Kernel(f"k_{op}", (LoopNest("op0", ("64",), (), body),))
    return LoopKernel(kernel, (x, y), (), None, device)  # type: ignore[arg-type]


def test_every_op_the_cpp_renderer_renders_compiles(tmp_path):
    """One translation unit of every rendered compute op, compiled by the CPU backend's toolchain."""
    ops = [op for op in COMPUTE_OPS if op in cpu.CppRenderer.rendered_ops()]
    sources = [cpu.generate(_op_kernel(op, "cpu")) for op in ops]
    start = 'extern "C" int32_t'
    body = [s[s.index(start):] for s in sources]
    build(sources[0][:sources[0].index(start)] + "\n".join(body), str(tmp_path / "ops.so"))
    for op in COMPUTE_OPS:
        if op not in cpu.CppRenderer.rendered_ops():
            with pytest.raises(CodegenError, match=f"ops.{op} is not supported by the C\\+\\+ code generator"):
                cpu.generate(_op_kernel(op, "cpu"))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) not installed")
def test_every_op_the_cuda_renderer_renders_compiles(tmp_path):
    ops = [op for op in COMPUTE_OPS if op in cuda.CudaRenderer.rendered_ops()]
    sources = []
    for op in ops:
        lk = _op_kernel(op, "cuda")
        sources.append(cuda.generate(lk.kernel, lk.buffers, ()).source)
    body = [s[s.index('extern "C"'):] for s in sources]
    path = tmp_path / "ops.cu"
    path.write_text(sources[0][:sources[0].index('extern "C"')] + "\n".join(body))
    done = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "ops.cubin"), str(path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    for op in COMPUTE_OPS:
        if op not in ops:
            lk = _op_kernel(op, "cuda")
            with pytest.raises(CodegenError, match=f"ops.{op} is not supported by the CUDA code generator"):
                cuda.generate(lk.kernel, lk.buffers, ())


def test_a_vendor_dialect_overrides_tables():
    class OpenCLish(CStyleRenderer):
        language = "OpenCL"
        value_types = {**CStyleRenderer.value_types, "float16": "half"}
        code_for_op = {**CStyleRenderer.code_for_op, "exp": "native_exp({0})"}
        index_code = {**CStyleRenderer.index_code, "FloorDiv": "floordiv_i64({0}, {1})"}

    r = OpenCLish()
    assert r.compute("exp", ["a"], "float32") == "native_exp(a)"
    assert r.index("FloorDiv(i0, 2) + 3") == "(3 + floordiv_i64(i0, 2))"
    assert r.value_type("float16") == "half"
    st = Stmt("t1", "truediv", ("t0",), (("arg1", 4), ("nargs", 2)), "float32")
    assert r.operands(st) == ["t0", "4"]  # a constant operand (the IndexError of issue 24)
    with pytest.raises(CodegenError, match="dtype complex64 is not supported by the OpenCL code generator"):
        r.value_type("complex64")


def _gather_kernel() -> LoopKernel:
    prog = capture(lambda x, i: x[i] * 2, [torch.randn(8), torch.tensor([1, 2, 3])], level="loop").inference
    validate(prog)
    (lk,) = loop_kernels(prog)
    return lk


_CALLERS = {"extension": host_kernel, "ctypes": lambda name, n: HostKernel(None, name, n)}


@pytest.mark.parametrize("caller", list(_CALLERS))
def test_negative_indices_wrap_and_out_of_range_ones_raise_naming_kernel_buffer_and_index(tmp_path, caller):
    if caller == "extension" and _host_call is None:
        pytest.skip("the _host_call extension is not built in this tree")
    lk = _gather_kernel()
    build(cpu.generate(lk), str(tmp_path / "k.so"))
    kernel = _CALLERS[caller](lk.name, len(lk.buffers))
    kernel.load(str(tmp_path / "k.so"))
    x, out = torch.randn(8), torch.empty(3)

    def call(index: list[int]) -> None:
        values = {"arg0_1": x, "arg1_1": torch.tensor(index)}
        kernel(*[values.get(b.name, out) for b in lk.buffers])
    call([1, -2, 3])
    torch.testing.assert_close(out, x[torch.tensor([1, -2, 3])] * 2)
    with pytest.raises(IndexError, match=r"kernel loop_kernel0: index out of bounds: buffer arg0_1 at index ind0 .*"
                                         r"outside \[0, 8\), got 9"):
        call([1, 9, 3])
    call([0, 1, 2])  # the record was cleared: the next call runs


def test_host_call_passes_data_pointers_and_sizes_and_refuses_bad_calls(tmp_path):
    """The extension's call: a view's pointer includes its offset, a Parameter is a tensor, sizes
    are ints after the buffers; the wrong count, a non-tensor or an unloaded kernel raise."""
    if _host_call is None:
        pytest.skip("the _host_call extension is not built in this tree")
    prog = capture(lambda x: x * 3, [torch.randn(6)], level="loop", dynamic=True).inference
    (lk,) = loop_kernels(prog)
    kernel = host_kernel(lk.name, len(lk.buffers))
    with pytest.raises(RuntimeError, match="kernel loop_kernel0: its library is not loaded yet"):
        kernel(torch.ones(6), torch.ones(6), 6)
    build(cpu.generate(lk), str(tmp_path / "k.so"))
    kernel.load(str(tmp_path / "k.so"))
    x, out = torch.nn.Parameter(torch.arange(10.0), requires_grad=False), torch.zeros(10)
    kernel(x[4:], out[2:], *[4] * len(lk.size_vars))
    torch.testing.assert_close(out[2:6], torch.arange(4.0, 8.0) * 3)
    assert out[:2].eq(0).all() and out[6:].eq(0).all()
    with pytest.raises(TypeError, match="kernel loop_kernel0 takes its 2 buffers, then its sizes"):
        kernel(x)
    with pytest.raises(AttributeError):
        kernel(x, "not a tensor", *[4] * len(lk.size_vars))


def test_cuda_kernels_check_indirect_indices():
    lk = _gather_kernel()
    code = cuda.generate(lk.kernel, lk.buffers, lk.size_vars)
    assert code.checks == ("buffer arg0_1 at index ind0 = t0: outside [0, 8)",)
    assert re.search(r"if \(ind0 < 0 \|\| ind0 >= 8\) \{ tv_fail\(0, ind0\); ind0 = 0; \}", code.source)
