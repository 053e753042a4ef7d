"""The reference CUDA backend: code generation (CI, no GPU: the generated source compiles with
nvcc) and numerics against eager on the IR corpus (marked gpu)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import types

import pytest
import torch

from ir_corpus import CORPUS
from torchvendor.ir import capture
from torchvendor.ir.loop_ir import Kernel
from torchvendor.reference_backends.cuda.codegen import CodegenError, generate

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) not installed")
gpu = pytest.mark.gpu
FEW = ("softmax", "layer_norm", "pointwise_chain", "argmax", "var_mean", "dynamic_softmax")


def loop_kernels(program):  # noqa: ANN001 - the SDK's LoopKernel when it exists, else the same fields
    try:
        from torchvendor.sdk import loop_kernels as lk

        return lk(program)
    except (ImportError, AttributeError, ModuleNotFoundError):
        out = []
        for op in program.ops:
            if isinstance(op, Kernel):
                names = sorted(set(op.reads()) | set(op.writes()))
                out.append(types.SimpleNamespace(kernel=op, buffers=tuple(program.buffer(n) for n in names),
                                                 size_vars=tuple(program.size_vars), program=program,
                                                 device=program.device))
        return out


def _sources(cases) -> list[tuple[str, str]]:  # noqa: ANN001
    out = []
    for case in cases:
        try:
            prog = capture(case.make(), case.inputs(), level="loop", dynamic=case.dynamic).inference
        except Exception:  # noqa: BLE001 - capture of a case is the IR tests' business
            continue
        for k in loop_kernels(prog):
            try:
                code = generate(k.kernel, k.buffers, k.size_vars)
            except CodegenError:
                continue
            out.append((f"{case.name}_{k.kernel.name}", code.source))
    return out


def _compile_all(sources: list[tuple[str, str]], tmp_path) -> subprocess.CompletedProcess:  # noqa: ANN001
    """One nvcc run over every source: each renamed apart, the shared prelude once."""
    prelude_end = sources[0][1].index("extern \"C\"")
    head = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + re.sub(r"#include <[^>]+>\n", "", sources[0][1][:prelude_end])
    parts = [head]
    for name, src in sources:
        body = src[src.index("extern \"C\""):]
        parts.append(re.sub(r"\b(loop_kernel\d+_)", name + r"__\1", body))
    path = tmp_path / "corpus.cu"
    path.write_text("\n".join(parts))
    return subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "corpus.cubin"), str(path)],
                          capture_output=True, text=True, timeout=600)


@needs_nvcc
def test_generated_source_compiles_with_nvcc(tmp_path):
    sources = _sources([c for c in CORPUS if c.name in FEW] or CORPUS[:3])
    assert sources
    done = _compile_all(sources, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.mark.slow
@needs_nvcc
def test_corpus_compiles_with_nvcc(tmp_path):
    sources = _sources(CORPUS)
    assert len(sources) > 20
    done = _compile_all(sources, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]


def test_tiling_follows_the_shapes():
    """Warp per row for many short rows, a block per row for long rows, split for few very long rows."""
    def launch(rows: int, cols: int):  # noqa: ANN202
        prog = capture(lambda x: x.sum(-1), [torch.randn(rows, cols)], level="loop").inference
        k = loop_kernels(prog)[0]
        return generate(k.kernel, k.buffers, k.size_vars).launches[0]
    assert (launch(4096, 256).threads, launch(4096, 256).rows_per_block) == (32, 4)
    assert launch(64, 8192).threads == 1024 and launch(64, 8192).kind == "rows"
    assert launch(2, 1 << 20).kind == "split"


# ---- on the GPU ------------------------------------------------------------------------------------
def _to(v, device):  # noqa: ANN001, ANN202
    if isinstance(v, torch.Tensor):
        return v.detach().to(device)
    if isinstance(v, torch.nn.Module):
        return v.to(device)
    return v


def run_on_gpu(program, inputs):  # noqa: ANN001, ANN201
    """Run a loop program with every kernel compiled by the CUDA backend (externs through ATen)."""
    from torchvendor.ir.loop_ir import interpreter
    from torchvendor.reference_backends.cuda import CudaBackend

    backend = CudaBackend()
    compiled = {k.kernel.name: (k, backend.compile(k)) for k in loop_kernels(program)}

    def run_kernel(kernel, buffers, sizes=None):  # noqa: ANN001, ANN202
        lk, fn = compiled[kernel.name]
        fn(*[buffers[b.name] for b in lk.buffers], *[int(sizes[s]) for s in lk.size_vars])

    saved, interpreter.run_kernel = interpreter.run_kernel, run_kernel
    try:
        return interpreter.run_program(program, inputs)
    finally:
        interpreter.run_kernel = saved


def check_case(case) -> str:  # noqa: ANN001
    """Capture ``case`` at loop level on cuda, run it with the CUDA backend, compare with eager."""
    fn = _to(case.make(), "cuda")
    inputs = [_to(x, "cuda") for x in case.inputs()]
    with torch.no_grad():
        prog = capture(fn, inputs, level="loop", dynamic=case.dynamic).inference
        expected = fn(*inputs)
        got = run_on_gpu(prog, inputs)
    expected = list(expected.values()) if isinstance(expected, dict) else expected
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    for e, g in zip(expected, got):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g, e, **case.tolerances)
    return "ok"


NUMERIC_CASES = [c for c in CORPUS if not c.rng and not c.mutates]


@gpu
def test_corpus_numerics_on_gpu():
    """Every corpus program (random and mutating ones aside) matches eager on the GPU. Runs in a
    subprocess: this session's PrivateUse1 device (acme) stays out of the way."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=1200,
                          cwd=os.path.dirname(__file__))
    results = dict(json.loads(line) .popitem() for line in done.stdout.splitlines() if line.startswith("{"))
    bad = {k: v for k, v in results.items() if v != "ok"}
    assert len(results) == len(NUMERIC_CASES) and not bad, (bad, done.stderr[-3000:])


if __name__ == "__main__":
    import logging

    logging.disable(logging.CRITICAL)
    for case in NUMERIC_CASES:
        try:
            result = check_case(case)
        except Exception as e:  # noqa: BLE001 - reported per case
            result = f"{type(e).__name__}: {str(e)[-600:]}"
        print(json.dumps({case.name: result}), flush=True)
