"""``--kernels LIB`` and the manifest's ``kernels`` key: a vendor's eager kernel library is loaded in
every worker, so what it serves runs natively (``pass``) where the CPU fallback served it before."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from device_utils import kernel_template

from torchvendor.sdk.conformance.core import ConformanceError, ManifestError, Target, load_manifest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def template() -> Path:
    return kernel_template()


def _run(tmp_path: Path, name: str, *args: str) -> dict:
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "torchvendor.sdk.cli", "conformance", "--device", "acme",
                           "--profile", "device", "--only", "ops/mul/float32/eager", "--no-progress",
                           "--report", str(out), *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "report.json").read_text())


def test_kernels_flag_and_manifest_key_load_the_library_in_every_worker(template, tmp_path):
    without = _run(tmp_path, "without")
    assert [(c["status"], list(c["fallback"])) for c in without["cases"]] == [("fallback", ["mul.out"])]
    flag = _run(tmp_path, "flag", "--kernels", str(template))
    assert [c["status"] for c in flag["cases"]] == ["pass"], flag["cases"]
    assert flag["target"]["kernels"] == [str(template)]
    manifest = tmp_path / "acme.toml"
    manifest.write_text(f'dtypes = ["float32"]\nkernels = ["{template}"]\n')
    by_key = _run(tmp_path, "manifest", "--manifest", str(manifest))
    assert [c["status"] for c in by_key["cases"]] == ["pass"], by_key["cases"]


def test_bad_kernel_requests_are_clear_errors(tmp_path):
    manifest = tmp_path / "m.toml"
    manifest.write_text('kernels = ["build/libnope.so"]\n')
    with pytest.raises(ManifestError, match=r"line 1, field 'kernels': no such file 'build/libnope.so'"):
        load_manifest(manifest)
    with pytest.raises(ConformanceError, match="kernel libraries serve a torchvendor device, not 'cpu'"):
        Target(device="cpu", kernels=(str(manifest),)).setup()
