"""torchvendor_cpu specifics (its numerics are in test_backend_corpus.py and test_backend_zoo.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import torchvendor.reference_backends.cpu  # noqa: F401
from torchvendor.ir import compat
from torchvendor.reference_backends.cpu.codegen import CodegenError, generate
from torchvendor.sdk import BackendFallbackWarning, get_backend, last_report, loop_kernels


def test_found_through_the_entry_point_without_an_import():
    script = ("import sys, torch\n"
              "f = torch.compile(lambda x: x.sin() * 2, backend='torchvendor_cpu')\n"
              "print(f(torch.zeros(2)).tolist(), 'torchvendor.reference_backends.cpu' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[0.0, 0.0] True"


def test_kernels_are_cached_by_content(tmp_path):
    f = lambda x: (x.exp() + 1).sum(-1)  # noqa: E731
    x = torch.randn(4, 64)
    backend = get_backend("torchvendor_cpu", cache_dir=str(tmp_path))
    torch.compile(f, backend="torchvendor_cpu", options={"cache_dir": str(tmp_path)})(x)
    built = backend.cache.stats["built"]
    assert built >= 2  # the lowered program and the shared library
    compat.dynamo_reset()
    torch.compile(lambda x: (x.exp() + 1).sum(-1), backend="torchvendor_cpu", options={"cache_dir": str(tmp_path)})(x)
    assert backend.cache.stats["built"] == built and backend.cache.stats["hit"] >= 2


def test_an_untranslatable_kernel_falls_back_naming_it():
    f = torch.compile(lambda x: torch.digamma(x) + 1, backend="torchvendor_cpu")
    x = torch.rand(8) + 0.5
    with pytest.warns(BackendFallbackWarning, match=r"kernel loop_kernel0 .*CodegenError: ops.digamma is not supported"):
        torch.testing.assert_close(f(x), torch.digamma(x) + 1)
    assert last_report().partitions[0].status == "fallback"


def test_codegen_reports_what_it_cannot_translate():
    from torchvendor.ir import capture

    (lk,) = loop_kernels(capture(lambda x: torch.digamma(x), [torch.rand(4)], level="loop").inference)
    with pytest.raises(CodegenError, match="ops.digamma"):
        generate(lk)
