"""The SDK's C-style renderer and the two reference code generators that subclass it: every loop-IR
op is rendered or declared unsupported, each rendered op compiles, indirect indices wrap and are
bounds-checked as eager indexing is, and a vendor's dialect (docs/loop_ir.md's example: a prefix
on every symbol, a pragma on every innermost loop) renders whole kernels that compile and match
eager."""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from torchvendor.ir import capture
from torchvendor.ir.loop_ir import COMPUTE_OPS, Buffer, Kernel, LoopNest, Stmt, parse_expr, validate
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


def test_the_cuda_reference_renders_statements_with_the_renderers_code():
    """The CUDA generator supplies its launch model and tables: no statement of its own."""
    own = {k for k in vars(cuda.CudaRenderer) if k.startswith("stmt_") or k in ("statement", "render_body", "define")}
    assert not own, own
    assert {"load_source", "store", "reduction_value"} <= set(vars(cuda.CudaRenderer))   # its hooks
    gpu_style = ("begin", "render_body", "needed", "bind_index", "open_lanes", "close_lanes", "load_source", "store",
                 "reduction_value")
    assert all(callable(getattr(CStyleRenderer, h)) for h in gpu_style)


def test_the_cpu_reference_changes_only_tables_and_the_named_hooks():
    """What a vendor gets is what the reference uses: the CPU generator overrides no part of the walk."""
    hooks = {"prelude", "symbol", "annotate_loop", "kernel_entry"}
    overridden = {k for k in vars(cpu.CppRenderer) if not k.startswith("__")}
    assert overridden <= hooks | {"atomic_add_code"}, overridden - hooks
    assert all(callable(getattr(CStyleRenderer, h)) for h in hooks)


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
    assert r.index("FloorDiv(i0, 2) + 3") == "(3L + floordiv_i64(i0, 2L))"
    assert r.value_type("float16") == "half"
    st = Stmt("t1", "truediv", ("t0",), (("arg1", 4), ("nargs", 2)), "float32")
    assert r.operands(st) == ["t0", "4L"]  # a constant operand (the IndexError of issue 24)
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


# ---- a vendor's dialect: the example of docs/loop_ir.md ------------------------------------------

DOC = Path(__file__).parent.parent / "docs" / "loop_ir.md"


def _vendor_renderer() -> type:
    """``NimbusRenderer`` as docs/loop_ir.md defines it (the block is run as it is written)."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S) if "class NimbusRenderer" in b)
    cls = block[block.index("class NimbusRenderer"):].split("\n\n\n")[0]
    assert len(cls.strip().splitlines()) < 20, cls   # the trial's customization, under 20 lines
    namespace: dict = {}
    exec(compile(block, str(DOC), "exec"), namespace)
    return namespace["NimbusRenderer"]


VENDOR_CASES = {  # a multi-nest row kernel, an indirect index with its check, an outer reduction
    "softmax": (lambda x: torch.softmax(x, -1), lambda: [torch.randn(37, 50)]),
    "gather_sum": (lambda x, i: x[i].sum(0) * 2, lambda: [torch.randn(40, 33), torch.tensor([1, -2, 3, 39])]),
    "column_sum_row_max": (lambda x: (x.sum(0), x.amax(1)), lambda: [torch.randn(300, 129)]),
    "dynamic_layer_norm": (lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]), lambda: [torch.randn(13, 70)]),
}
DYNAMIC = {"dynamic_layer_norm"}


def _innermost_loops(lines: list[str]) -> list[int]:
    """Line numbers of the ``for`` loops whose block holds no other loop."""
    out = []
    for k, line in enumerate(lines):
        if not line.lstrip().startswith("for ("):
            continue
        depth, end = 0, k
        for end in range(k, len(lines)):
            depth += lines[end].count("{") - lines[end].count("}")
            if depth == 0:
                break
        if not any(x.lstrip().startswith("for (") for x in lines[k + 1:end]):
            out.append(k)
    return out


@pytest.mark.parametrize("case", list(VENDOR_CASES))
def test_a_vendor_prefixes_every_symbol_and_annotates_every_innermost_loop(case):
    fn, inputs = VENDOR_CASES[case]
    renderer = _vendor_renderer()()
    for lk in loop_kernels(capture(fn, inputs(), level="loop", dynamic=case in DYNAMIC).inference):
        source = renderer.render(lk)
        exported = re.findall(r'extern "C" [^(]*?(\w+)\(', source)
        assert exported and all(name.startswith("nimbus_") for name in exported), exported
        lines = source.splitlines()
        inner = _innermost_loops(lines)
        assert inner and all(lines[k - 1].strip() == "#pragma nimbus pipeline" for k in inner)
        assert source.count("#pragma nimbus pipeline") == len(inner)
        assert ("tv_fail(" in source) == (f"nimbus_{lk.name}_error" in exported)   # the checks' messages


def _compiled(source: str, path: Path) -> ctypes.CDLL:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no system C++ compiler")
    path.with_suffix(".cpp").write_text(source)
    done = subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-o", str(path), str(path.with_suffix(".cpp"))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return ctypes.CDLL(str(path))


def _run(lib: ctypes.CDLL, lk: LoopKernel, values: dict, prefix: str = "nimbus_") -> int:
    """Call the kernel's function (the renderer's default launch model: pointers, then sizes)."""
    sizes = {s: values[b.name].shape[d] for b in lk.program.buffers if b.name in values
             for d, s in enumerate(b.size) if s.isidentifier()}   # a bare symbol is that input's size

    def ints(exprs):
        return [int(x.subs({v: sizes[v.name] for v in x.free_symbols})) for x in map(parse_expr, exprs)]
    for b in lk.buffers:
        if b.name not in values:
            values[b.name] = torch.empty_strided(ints(b.size), ints(b.stride), dtype=getattr(torch, b.dtype))
    fn = getattr(lib, f"{prefix}{lk.name}")
    fn.restype = ctypes.c_int32
    return fn(*[ctypes.c_void_p(values[b.name].data_ptr()) for b in lk.buffers],
              *[ctypes.c_int64(sizes[s]) for s in lk.size_vars])


@pytest.mark.parametrize("case", list(VENDOR_CASES))
def test_the_vendor_dialect_compiles_with_the_system_compiler_and_matches_eager(case, tmp_path):
    fn, inputs = VENDOR_CASES[case]
    torch.manual_seed(0)
    args = inputs()
    prog = capture(fn, args, level="loop", dynamic=case in DYNAMIC).inference
    tensors = [name for name in prog.inputs if name not in dict(prog.scalar_inputs)]   # sizes come apart
    values = dict(zip(tensors, args))
    renderer = _vendor_renderer()()
    for lk in loop_kernels(prog):
        assert _run(_compiled(renderer.render(lk), tmp_path / f"{lk.name}.so"), lk, values) == 0
    expected = fn(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for out, ref in zip(prog.outputs, expected):
        torch.testing.assert_close(values[out.name], ref, rtol=1e-5, atol=1e-4)   # sums in another order
    if case == "gather_sum":   # an index out of range: status 3, and the error function says which
        (lk,) = loop_kernels(prog)
        lib = _compiled(renderer.render(lk), tmp_path / "again.so")
        assert _run(lib, lk, {**dict(zip(tensors, args)), "arg1_1": torch.tensor([1, 2, 40, 0])}) == 3
        error = getattr(lib, f"nimbus_{lk.name}_error")
        error.restype, value = ctypes.c_char_p, ctypes.c_int64()
        assert re.fullmatch(r"buffer arg0_1 at index ind\d+ = t\d+: outside \[0, 40\)", error(ctypes.byref(value)).decode())
        assert value.value == 40


# ---- a GPU-style launch model (docs/loop_ir.md shows this class) ------------------------------

class GridRenderer(CStyleRenderer):
    """A GPU-style launch model, run on the host: a "thread" function computes LANES elements of
    a pointwise nest (in vector registers where a buffer is read and written at the flat index),
    and the kernel runs it over the grid."""

    language = "Grid C++"
    LANES = 4
    helpers = CStyleRenderer.helpers + "template <class T, int N> struct tv_vec { T v[N]; };\n"
    declaration = "const {t} {name} = {expr};"      # values are per thread and never reassigned
    fail_code = "tv_fail({check}, {value});"       # the kernel returns 3 after the grid

    def render(self, lk) -> str:
        self.begin(lk)
        (nest,) = lk.kernel.nests
        if nest.reduction_ranges:
            raise CodegenError("the grid renders pointwise nests only")
        accesses = [s for s in nest.stmts() if s.op in ("load", "store")]
        loaded, stored = ({s.attr("buffer") for s in accesses if s.op == op} for op in ("load", "store"))
        flat = (loaded | stored) - {s.attr("buffer") for s in accesses if s.attr("index") != "i0"}
        whole = len(nest.ranges) == 1 and nest.ranges[0].isdigit() and int(nest.ranges[0]) % self.LANES == 0
        lanes = sorted(flat) if whole and all(s.op != "masked" for s in nest.stmts()) else []
        n = self.LANES if lanes else 1
        params = ", ".join([f"{self.storage_type(b.dtype)}* __restrict__ {b.name}" for b in lk.buffers] +
                           [f"const int64_t {s}" for s in lk.size_vars])
        self.lines.append(f"static inline void thread_{lk.name}(const int64_t base, {params}) {{")
        self.open_lanes(lanes, n, "base", loaded, stored)
        self.open(f"for (int k = 0; k < {n}; ++k)")
        self.emit("const int64_t x = base + k;")
        names = {v: self.bind_index(v, digit) for v, digit in zip(nest.iter_vars, self.digits(nest.ranges, "x"))}
        self.render_body(self.Scope(names=names, lanes=(set(lanes), "k") if lanes else None), nest.body)
        self.close()
        self.close_lanes(lanes, n, "base", stored)
        self.lines.append("}")
        self.lines.append(f'extern "C" int32_t {self.symbol(lk.name)}({params}) {{')
        numel, args = self.index("*".join(f"({r})" for r in nest.ranges)), [b.name for b in lk.buffers]
        self.emit(f"for (int64_t base = 0; base < {numel}; base += {n}) "
                  f"thread_{lk.name}(base, {', '.join(args + list(lk.size_vars))});")
        self.emit("return tv_error[0] < 0 ? 0 : 3;" if self.checks else "return 0;")
        self.lines.append("}")
        return self.prelude() + (self.error_function() if self.checks else "") + "\n".join(self.lines) + "\n"

    @staticmethod
    def digits(ranges, flat: str) -> list[str]:
        """Each loop variable as a digit of the flat index (row-major)."""
        inner = ["*".join(f"({r})" for r in ranges[k + 1:]) or "1" for k in range(len(ranges))]
        return [f"FloorDiv({flat}, {inner[0]})" if k == 0 else f"ModularIndexing({flat}, {inner[k]}, {r})"
                for k, r in enumerate(ranges)]


GRID_CASES = {  # vector lanes; a masked load and two loop variables; an indirect index; a transposed read
    "relu_mul": (lambda x: x.relu() * 2, lambda: [torch.randn(64)]),
    "pad": (lambda x: torch.nn.functional.pad(x, (1, 2)), lambda: [torch.randn(6, 8)]),
    "gather": (lambda x, i: x[i] * 2, lambda: [torch.randn(40), torch.tensor([1, -2, 3, 39])]),
    "transpose_add": (lambda x, y: x.t() + y, lambda: [torch.randn(8, 12), torch.randn(12, 8)]),
}


def test_a_gpu_style_launch_model_uses_only_public_hooks_and_is_the_documented_one():
    import inspect
    mine = {k for k in vars(GridRenderer) if not k.startswith("__")} - {"LANES", "digits"}
    assert mine <= set(dir(CStyleRenderer)), mine - set(dir(CStyleRenderer))
    assert inspect.getsource(GridRenderer) in DOC.read_text()


@pytest.mark.parametrize("case", list(GRID_CASES))
def test_a_gpu_style_launch_model_renders_threads_that_match_eager(case, tmp_path):
    fn, inputs = GRID_CASES[case]
    torch.manual_seed(0)
    args = inputs()
    prog = capture(fn, args, level="loop").inference
    values = dict(zip(prog.inputs, args))
    for lk in loop_kernels(prog):
        source = GridRenderer().render(lk)
        assert "for (int64_t i" not in source   # loop variables are digits of the thread's index
        assert ("vl_" in source) == (case in ("relu_mul", "gather"))                 # vector lanes
        assert bool(re.search(r"if \(t\d+\) \{", source)) == (case == "pad")     # a masked load
        assert _run(_compiled(source, tmp_path / f"{lk.name}.so"), lk, values, prefix="") == 0
    expected = fn(*args)
    torch.testing.assert_close(values[prog.outputs[0].name], expected)
    if case == "gather":   # an index out of range: status 3, and the error function says which
        (lk,) = loop_kernels(prog)
        lib = _compiled(GridRenderer().render(lk), tmp_path / "again.so")
        assert _run(lib, lk, {**dict(zip(prog.inputs, args)), "arg1_1": torch.tensor([1, 2, 40, 0])}, prefix="") == 3
        error = getattr(lib, f"{lk.name}_error")
        error.restype, value = ctypes.c_char_p, ctypes.c_int64()
        assert error(ctypes.byref(value)).decode() == "buffer arg0_1 at index ind0 = t0: outside [0, 40)"
