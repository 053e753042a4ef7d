"""Issue 24's LOOP-level failures on ``cuda`` with torchvendor_cuda (marked gpu): a partition of
iota, le, add, unsqueeze without tensor inputs (its Inductor wrapper failed to import with a
SyntaxError, static and dynamic), and efficient attention's CPU philox seed and offset among a
training partition's outputs ("output 4 is on cpu, expected cuda"). Both fell back before; the
CPU reproductions are in test_backend_loop_level.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():  # pragma: no cover - CI has no GPU
    pytest.skip("needs cuda", allow_module_level=True)

from torchvendor.reference_backends.cuda.backend import CudaBackend  # noqa: E402
from torchvendor.sdk import last_report, register_backend  # noqa: E402


class Narrow(CudaBackend):
    name = "tv_test_cuda_narrow"
    supported_ops = {"prims.iota", "aten.le", "aten.add", "aten.unsqueeze", "prims.convert_element_type"}


register_backend(Narrow)


def _statuses() -> list[str]:
    return [p.status for g in last_report().graphs for p in g.partitions]


@pytest.mark.parametrize("dynamic", [False, True])
def test_mask_partition_without_tensor_inputs(dynamic):
    def f(x):
        i = torch.arange(x.shape[0], device=x.device) + 1
        return torch.where(i.unsqueeze(0) <= i.unsqueeze(1), x.sin(), 0.0)

    g = torch.compile(f, backend="tv_test_cuda_narrow", dynamic=dynamic, options={"strict": True})
    with torch.no_grad():
        for n in (8, 13):
            x = torch.randn(n, n, device="cuda")
            torch.testing.assert_close(g(x), f(x))
            assert _statuses() and all(s == "compiled" for s in _statuses())


_CHILD = "TORCHVENDOR_TEST_CHILD"


def test_efficient_attention_training_partitions_compile():
    """Runs in a child process without acme. With a PrivateUse1 device registered in the process
    (tests/conftest.py registers acme in every test process), torch takes PrivateUse1 as *the* accelerator
    (``at::getAccelerator`` prefers a registered PrivateUse1 backend), so autograd nodes on
    ``cuda`` report no stream, and the backward that AOTAutograd traces for the joint graph trips
    the engine's internal assert "opt_ready_stream && opt_parent_stream" (engine.cpp; torch 2.11,
    H100, with only ``register_device("acme")`` added before this test). Torch's, not the device
    layer's: no stream of ours is involved."""
    if os.environ.get(_CHILD) == "1":
        return _efficient_attention_training()
    # --noconftest: tests/conftest.py registers acme for every test process
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                           "--noconftest", "-m", "gpu", f"{__file__}::test_efficient_attention_training_partitions_compile"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, _CHILD: "1"},
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def _efficient_attention_training() -> None:
    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(64, 192), torch.nn.Linear(64, 64)

        def forward(self, x):
            q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 4, 16).permute(2, 0, 3, 1, 4)
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION):
                a = F.scaled_dot_product_attention(q, k, v)
            return self.out(a.transpose(1, 2).reshape(x.shape)).relu().sum()

    m, ref = Attn().cuda(), Attn().cuda()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 10, 64, device="cuda")
    torch.compile(m, backend="torchvendor_cuda", options={"strict": True})(x).backward()
    ref(x).backward()
    ops = {op for g in last_report().graphs for p in g.partitions for op in p.ops}
    assert "aten._scaled_dot_product_efficient_attention.default" in ops
    assert _statuses() == ["compiled", "compiled"]
    for a, b in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4)
