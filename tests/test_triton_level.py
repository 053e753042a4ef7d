"""Level.TRITON (issue 37): the level's declarations and refusals (here, no Triton needed); with
Triton's NVIDIA backend installed, the compile path on the simulated device up to the runtime's
module load, which cannot take a cubin (the partition falls back, saying so); marked gpu, the
whole path on a PrivateUse1 GPU over the reference CUDA runtime, in a process of its own."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
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
    print("OK", len(rep.partitions))
"""


@pytest.mark.gpu
def test_inference_and_training_on_a_private_use1_gpu():
    if not torch.cuda.is_available() or triton_unavailable("cuda") is not None:
        pytest.skip("needs an NVIDIA GPU and Triton's NVIDIA backend")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(GPU_SCRIPT)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout[-3000:] + done.stderr[-5000:]
