"""Every example in ``examples/`` runs, prints what its docstring says it prints, and stays short.

An example's docstring shows its run as ``$ python examples/<name>.py`` followed by the expected
output lines; the test runs the example in a fresh process (PrivateUse1 is renamed once per
process) and compares stdout line by line.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))
MAX_LINES = 60


def expected_output(path: Path) -> list[str]:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    lines = doc.splitlines()
    marker = f"$ python examples/{path.name}"
    starts = [i for i, line in enumerate(lines) if line.strip() == marker]
    assert starts, f"{path.name}: its docstring must show a run: a line '{marker}' followed by the output"
    out = []
    for line in lines[starts[0] + 1:]:
        if not line.strip():
            break
        out.append(line.strip())
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_and_prints_what_it_says(path):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600, env=env,
                         cwd=path.parent.parent)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [line.strip() for line in run.stdout.strip().splitlines()] == expected_output(path)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_is_short(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES or path.name == "native_kernel.py", \
        f"{path.name} has more than {MAX_LINES} lines: an example shows one idea"
