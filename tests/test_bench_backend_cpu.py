"""``bench/bench_backend_cpu.py --quick`` on a tiny subset, in a subprocess: the table is written."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_backend_cpu_quick_writes_table(tmp_path):
    out = tmp_path / "bench_backend_cpu.md"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_backend_cpu.py"), "--quick",
                          "--only", "x*2,mlp", "--out", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    text = out.read_text()
    for heading in ("## Kernels", "## Model zoo (inference)", "## Compile time"):
        assert heading in text
    assert "| pointwise ((x*2).sin()+y).relu() 4M |" in text
    assert "| mlp | bench |" in text
    assert "torch " + __import__("torch").__version__ in text and "`nproc`" in text
    # the compile-time row for the pointwise kernel: ours cold, ours warm, Inductor cold, Inductor warm
    row = next(line for line in text.splitlines() if line.startswith("| pointwise") and line.count("|") == 7)
    assert all(float(c) > 0 for c in row.strip("|").split("|")[1:5])
