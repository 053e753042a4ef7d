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


def _contradicts_itself(reason: str) -> bool:
    """ "read 16, not 16", or torch's count of 0 mismatched elements beside a difference."""
    return bool(re.search(r"\b(\w+), not \1\b", reason)) or "Mismatched elements: 0 /" in reason


@pytest.mark.slow
@needs_cc
@pytest.mark.parametrize("name", list(rm.MUTANTS))
def test_every_mutant_is_killed_and_named_first(name, tmp_path):
    """The killing case fails, naming the entry or blocked by a failure that does; the report's
    first line (the first failure nothing earlier explains, in the suite's order) names the very
    entry the mutant broke; no reason contradicts itself."""
    _, _, case_id, entries = rm.MUTANTS[name]
    results = rm.kill(rm.build(name, tmp_path))
    status, reason = results.get(case_id, ("missing", "the case did not run"))
    assert status == "fail", f"{name} survived {case_id}: {results}"
    assert _names_entries(reason, entries) or reason.startswith("blocked by"), reason
    entry, first = rm.first_suspect(results)
    assert entry in entries, f"{name}: the first line names {entry} (runtime/{first}), not {entries[0]}: {results}"
    bad = {c: r for c, (s, r) in results.items() if _contradicts_itself(r)}
    assert not bad, bad


@needs_cc
@pytest.mark.parametrize("name", ["memcpy_drops_a_byte", "memset_async_short_above_16mib"])
def test_the_first_line_names_the_broken_entry(name, tmp_path):
    """Default tier: the issue's broken memcpy (before: allocations_disjoint was listed first and 7
    of 12 failures named another entry) and a fault past a size only the large cases reach."""
    _, _, _, entries = rm.MUTANTS[name]
    results = rm.kill(rm.build(name, tmp_path))
    entry, case = rm.first_suspect(results)
    assert entry == entries[0], (entry, case, results)
    fails = {c: r for c, (st, r) in results.items() if st == "fail"}
    assert all(r.startswith(f"blocked by {entry} (see runtime/{case})") for c, r in fails.items() if c != case), fails


def test_the_suspect_table_in_docs_lists_every_mutant_and_all_hit():
    docs = (ROOT / "docs" / "conformance.md").read_text()
    table = re.search(r"<!-- suspects:begin -->\n(.*?)\n<!-- suspects:end -->", docs, re.S)
    assert table, "docs/conformance.md lost its first-suspect table markers"
    rows = [r for r in table.group(1).splitlines() if r.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(rm.MUTANTS), "regenerate the table (tests/runtime_mutants.py)"
    assert all(r.rstrip(" |").endswith("yes") for r in rows), [r for r in rows if "**no**" in r]
    assert f"**{len(rm.MUTANTS)} / {len(rm.MUTANTS)}**" in table.group(1) and "**100 %**" in table.group(1)
