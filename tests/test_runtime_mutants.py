"""The runtime area proves the ABI: every mutant of the simulator in tests/runtime_mutants.py (a
fault a driver team really makes) is killed by the case the kill table names, and that case's
reason names the entry the mutant broke. The default tier checks a sample and that the kill table
in docs/conformance.md is the harness's; the slow tier runs the whole table."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import runtime_mutants as rm

from torchvendor.sdk.conformance.core import Target, run_case

ROOT = Path(__file__).resolve().parents[1]
needs_cc = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="needs a C compiler")


def _names_entries(reason: str, entries: tuple[str, ...]) -> bool:
    suspects = reason.rsplit("Suspect:", 1)[-1]
    return all(re.search(rf"\b{e}\b", suspects) for e in entries)


def test_kill_table_in_docs_is_the_harness_list():
    docs = (ROOT / "docs" / "conformance.md").read_text()
    table = re.search(r"<!-- mutants:begin -->\n(.*?)\n<!-- mutants:end -->", docs, re.S)
    assert table, "docs/conformance.md lost its kill table markers"
    assert table.group(1).strip() == rm.kill_table(), "regenerate the table: python -c 'import sys; " \
        "sys.path.insert(0, \"tests\"); import runtime_mutants as m; print(m.kill_table())'"
    assert len(rm.MUTANTS) >= 40
    from torchvendor.sdk.conformance.runtime_cases import CHECKS

    assert {case for _, _, case, _ in rm.MUTANTS.values()} <= set(CHECKS)


#: mutants whose faults leave the shared simulator usable, run in this process
IN_PROCESS = ("memset_value_clamped", "elapsed_in_microseconds", "error_string_generic", "event_flags_unchecked",
              "free_accepts_anything")


@needs_cc
@pytest.mark.parametrize("name", IN_PROCESS)
def test_sample_mutant_is_killed(name, tmp_path):
    from torchvendor.sdk.conformance import runtime_cases

    _, _, case_id, entries = rm.MUTANTS[name]
    target = Target(device="acme", runtime=str(rm.build(name, tmp_path)))
    cases = {c.id: c for c in runtime_cases.cases(target, "minimal")}
    result = run_case(cases[f"runtime/{case_id}"], target)
    assert result.status == "fail" and _names_entries(result.reason, entries), result
    assert run_case(cases["runtime/abi_version"], target).status == "pass"


@needs_cc
def test_the_issues_example_names_stream_synchronize_through_the_cli(tmp_path):
    """A stream_synchronize that returns at once, run as a vendor would: the minimal profile on a
    device brought up from the mutant runtime (its runtime area), through the CLI."""
    lib = rm.build("stream_synchronize_returns_early", tmp_path)
    run = subprocess.run([sys.executable, "-m", "torchvendor.sdk.cli", "conformance", "--device", "acme", "--runtime",
                          str(lib), "--profile", "minimal", "--only", "runtime/stream_synchronize_waits", "--only",
                          "runtime/device_count", "--report", str(tmp_path / "r"), "--no-progress"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    status = {c["id"]: c for c in json.loads((tmp_path / "r" / "report.json").read_text())["cases"]}
    assert status["runtime/device_count"]["status"] == "pass"
    bad = status["runtime/stream_synchronize_waits"]
    assert bad["status"] == "fail" and bad["reason"].endswith("Suspect: stream_synchronize."), bad["reason"]
    assert "it returned while the stream's work was still running" in bad["reason"]
    assert "FAIL runtime/stream_synchronize_waits" in run.stdout  # the terminal summary shows it too


@pytest.mark.slow
@needs_cc
@pytest.mark.parametrize("name", sorted(rm.MUTANTS))
def test_every_mutant_is_killed(name, tmp_path):
    _, _, case_id, entries = rm.MUTANTS[name]
    results = rm.kill(rm.build(name, tmp_path))
    status, reason = results.get(case_id, ("missing", "the case did not run"))
    assert status == "fail", f"{name} survived {case_id}: {results}"
    assert _names_entries(reason, entries), reason
