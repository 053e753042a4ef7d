"""runtime.h is the one source of each runtime entry's contract; docs/runtime.md repeats it.

The comment directly above each function pointer in ``tv_runtime`` is the contract; the table
"Every entry's contract" in docs/runtime.md must carry the same text for the same entries, in
the same order. A vendor hit the two disagreeing (event_elapsed_time's status for an event
without timing, memcpy's ordering); this test makes that impossible.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "csrc" / "include" / "torchvendor" / "runtime.h"
DOC = ROOT / "docs" / "runtime.md"


def _norm(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def header_contracts(text: str) -> dict[str, str]:
    """Entry name -> the comment directly above it, for every function pointer in tv_runtime."""
    body = text[text.index("typedef struct tv_runtime {"):text.index("} tv_runtime;")]
    out: dict[str, str] = {}
    for m in re.finditer(r"/\*((?:(?!\*/).)*)\*/\s*\n\s*[\w ]+\*?\s*\(\*(\w+)\)", body, re.S):
        comment = " ".join(line.strip().lstrip("*") for line in m.group(1).splitlines())
        out[m.group(2)] = _norm(comment)
    return out


def doc_contracts(text: str) -> dict[str, str]:
    """Entry name -> contract cell of the table under "## Every entry's contract"."""
    section = text[text.index("## Every entry's contract"):]
    section = section[:section.index("\n## ", 3)] if "\n## " in section[3:] else section
    out: dict[str, str] = {}
    for m in re.finditer(r"^\| `(\w+)` \| (.*) \|$", section, re.M):
        out[m.group(1)] = _norm(m.group(2))
    return out


def test_every_entry_has_a_contract_in_the_header() -> None:
    text = HEADER.read_text()
    contracts = header_contracts(text)
    body = text[text.index("typedef struct tv_runtime {"):text.index("} tv_runtime;")]
    pointers = re.findall(r"\(\*(\w+)\)\(", body)
    assert list(contracts) == [p for p in pointers if p in contracts]
    assert set(pointers) - set(contracts) == set(), "entries without a contract comment"
    assert len(contracts) == 42


def test_doc_table_repeats_the_header_word_for_word() -> None:
    header = header_contracts(HEADER.read_text())
    doc = doc_contracts(DOC.read_text())
    assert list(doc) == list(header), "docs/runtime.md lists other entries, or another order"
    wrong = [name for name in header if header[name] != doc[name]]
    fix = "\n".join(f"| `{n}` | {header[n]} |" for n in wrong)
    assert not wrong, f"docs/runtime.md disagrees with runtime.h; the header is right:\n{fix}"


def test_the_disagreements_a_vendor_found_are_settled() -> None:
    header = header_contracts(HEADER.read_text())
    assert "TV_ERROR_INVALID_VALUE if either was created without TV_EVENT_ENABLE_TIMING" in \
        header["event_elapsed_time"]
    assert "every stream of the devices involved" in header["memcpy"]
    sim = (ROOT / "csrc" / "reference_runtime" / "sim_runtime.c").read_text()
    checks = (ROOT / "csrc" / "include" / "torchvendor" / "runtime_checks.h").read_text()
    assert re.search(r"TV_EVENT_ENABLE_TIMING\)\)\s*\n\s*return tv_fail\(TV_ERROR_INVALID_VALUE", checks)
    assert "tv_check_elapsed(__func__" in sim  # the simulator makes the shared check


def test_parsers_see_a_mismatch() -> None:
    # The checks above can fail: a changed word in either file is found.
    header = header_contracts(HEADER.read_text())
    doc_text = DOC.read_text().replace("never waits on streams", "may wait on streams")
    assert doc_contracts(doc_text)["malloc"] != header["malloc"]
