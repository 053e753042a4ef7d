"""The vendor path in our own CI (issue 32): ``torchvendor new`` writes a vendor package whose
names share nothing with ours, it builds out of tree and passes the conformance suite as
generated, with no edit, through its own ``.ci/run``; its pytest configuration runs cases through
the plugin. The slow tier's comparison of a LOOP and an ATEN vendor with the reference backend is
tests/test_vendor_vs_reference.py.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from torchvendor.sdk.scaffold import LEVELS, ScaffoldError, ci_profile, new
from torchvendor.sdk.scaffold.native import rename

ROOT = Path(__file__).resolve().parents[1]
#: the default tier's vendor: a LOOP backend (renderer, compiler, launches) on its own device
VENDOR = "zephyr"


def _env() -> dict[str, str]:
    bin_dir = os.path.dirname(sys.executable)
    return dict(os.environ, PYTHON=sys.executable, PATH=bin_dir + os.pathsep + os.environ["PATH"], JOBS="2",
                PYTHONWARNINGS="ignore")


def _generated_text(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text() for p in out.rglob("*") if p.is_file()}


# ---- generation (no build) ------------------------------------------------------------------------

@pytest.mark.parametrize("level", sorted(LEVELS))
def test_every_level_generates_a_package_with_its_name_everywhere(tmp_path, level):
    out = new("zephyr", level, tmp_path / "zephyr")
    files = _generated_text(out)
    for path in ("runtime/zephyr_runtime.c", "runtime/zephyr_collectives.h", "kernels/kernels.cpp",
                 "zephyr_torch/backend.py", "zephyr_torch/__init__.py", "manifest.toml", "pyproject.toml",
                 "tests/test_conformance.py", ".ci/run", "README.md", "CMakeLists.txt"):
        assert path in files, (path, sorted(files))
    leftovers = [f"{p}: {line.strip()}" for p, text in files.items() for line in text.splitlines()
                 if re.search(r"acme|torchvendor-sim|TORCHVENDOR_SIM|\bsim_(?!kernel\.h)|\{\{\w+\}\}", line, re.I)]
    assert not leftovers, "template names left in the package:\n" + "\n".join(leftovers[:20])
    for p, text in files.items():
        if p.endswith(".py"):
            ast.parse(text, p)
    backend = files["zephyr_torch/backend.py"]
    assert f"class Zephyr({LEVELS[level]})" in backend and "reference_backends" not in backend
    project = tomllib.loads(files["pyproject.toml"])
    assert project["project"]["entry-points"]["torch_dynamo_backends"] == {"zephyr": "zephyr_torch.backend:dynamo_backend"}
    assert f"--tv-profile {ci_profile()}" in project["tool"]["pytest"]["ini_options"]["addopts"]
    assert os.access(out / ".ci" / "run", os.X_OK) and f'"${{PROFILE:-{ci_profile()}}}"' in files[".ci/run"]


def test_bad_requests_say_why(tmp_path):
    from torchvendor.sdk.scaffold.cli import main

    for name, words in (("Zephyr", "lowercase"), ("cuda", "built-in"), ("class", "keyword")):
        with pytest.raises(ScaffoldError, match=words):
            new(name, "aten", tmp_path / "x")
    with pytest.raises(ScaffoldError, match="choose one of"):
        new("zephyr", "triton", tmp_path / "x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("")
    assert main(["zephyr", "--level", "aten", "--dir", str(tmp_path / "full")]) == 2
    assert (tmp_path / "full").exists() and not (tmp_path / "full" / "zephyr_torch").exists()


def test_rename_keeps_the_sdk_names():
    text = ('#include "torchvendor/sim_kernel.h"\nstatic int sim_malloc(void);  /* tv_sim_launch, TV_SIM_KERNEL_WAITS */\n'
            'getenv("TORCHVENDOR_SIM_DEVICES"); add_library(acme_tv SHARED sim_runtime.c)')
    assert rename(text, "zephyr") == (
        '#include "torchvendor/sim_kernel.h"\nstatic int zephyr_malloc(void);  /* tv_sim_launch, TV_SIM_KERNEL_WAITS */\n'
        'getenv("ZEPHYR_DEVICES"); add_library(zephyr_runtime SHARED zephyr_runtime.c)')


def test_the_loop_template_computes_exp_as_the_cpu_reference_does():
    """The LOOP template carries its own copy of the CPU reference's vector ``expf`` (a generated
    package never imports the references): the same statements, so the reference's accuracy test
    (tests/test_cpu_vector_math.py) holds for it too."""
    def body(text: str) -> list[str]:
        lines = [line.rstrip(" \\").strip() for line in text.splitlines()]
        start = next(i for i, line in enumerate(lines) if line.startswith("V c = "))
        return lines[start:lines.index("return x != x ? x : y;", start) + 1]
    reference = (ROOT / "reference_backends" / "cpu" / "prelude.h").read_text()
    template = (ROOT / "sdk" / "scaffold" / "templates" / "backend_loop.py.tmpl").read_text()
    assert body(template) == body(reference)
    for variant in ("_ZGVbN4v_expf", "_ZGVcN8v_expf", "_ZGVdN8v_expf", "_ZGVeN16v_expf"):
        assert variant in template and variant in reference


def test_the_cli_writes_it(tmp_path):
    run = subprocess.run([sys.executable, "-m", "torchvendor.sdk.cli", "new", "zephyr", "--level", "torch"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "zephyr" / "zephyr_torch" / "backend.py").is_file() and ".ci/run" in run.stdout


# ---- the generated CI, end to end ----------------------------------------------------------------

@pytest.fixture(scope="module")
def vendor(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A LOOP vendor generated outside the checkout and run through its own ``.ci/run`` (build,
    smoke test, the CI profile), once for the module."""
    if shutil.which("cmake") is None:
        pytest.skip("no cmake")
    out = new(VENDOR, "loop", tmp_path_factory.mktemp("vendor") / VENDOR)
    assert ROOT not in out.parents
    # the minimal profile here, to keep the default tier quick; the script's own default is the ci profile
    run = subprocess.run([str(out / ".ci" / "run")], cwd="/", env={**_env(), "PROFILE": "minimal"},
                         capture_output=True, text=True, timeout=1200)
    return out, run


def test_generated_vendor_builds_and_passes_its_ci(vendor):
    out, run = vendor
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert f"{VENDOR}: eager and compiled match the CPU" in run.stdout
    doc = json.loads((out / "conformance-report" / "report.json").read_text())
    assert doc["profile"] == "minimal" and doc["summary"]["fail"] == 0, doc["failures"]
    assert doc["target"]["device"] == VENDOR and doc["target"]["backend"] == f"{VENDOR}_torch.backend:Zephyr"
    compiled = [c for c in doc["cases"] if c["area"] == "compile"]
    assert compiled and all(c["status"] in ("pass", "fallback", "skip") for c in compiled)
    assert (out / "build" / "runtime" / f"lib{VENDOR}_runtime.so").is_file()


def test_generated_pytest_configuration_runs_cases_through_the_plugin(vendor):
    out, run = vendor
    assert run.returncode == 0
    tests = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-k",
                            "runtime/device_count or compile/graph_break or models"],
                           cwd=out, env=_env(), capture_output=True, text=True, timeout=600)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert re.search(r"\b[3-9] passed|\b\d{2,} passed", tests.stdout), tests.stdout[-2000:]


def test_console_script_imports_a_backend_from_the_working_directory(tmp_path):
    """``torchvendor conformance --backend module:Class`` from a vendor's folder: the console
    script (whose sys.path has its bin folder, not the working directory) and its workers import
    the module without an install or a PYTHONPATH."""
    script = Path(sys.executable).parent / "torchvendor"
    if not script.exists():
        pytest.skip("no torchvendor console script beside this interpreter")
    env = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    run = subprocess.run([str(script), "conformance", "--device", "cpu", "--backend", "whole_graph:WholeGraph",
                          "--only", "compile/mutation", "--jobs", "1", "--report", str(tmp_path), "--no-progress"],
                         cwd=ROOT / "examples" / "whole_graph", env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert [(c["id"], c["status"]) for c in doc["cases"]] == [("compile/mutation", "pass")]
