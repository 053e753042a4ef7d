"""Every ```python block of docs/*.md and README.md runs: blocks of one file run in order, in one
namespace, in a fresh process (PrivateUse1 is renamed once per process). A block preceded by
``<!-- no-run: reason -->`` is not run (it shows a vendor's own paths); the reason is required.
Docs cite only what ships: no link to a notes file outside the repository.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(r"(<!-- no-run: (?P<why>[^>]*?) -->\s*)?```python\n(?P<code>.*?)```", re.S)


def blocks(path: Path) -> list[str]:
    out = []
    for m in BLOCK.finditer(path.read_text()):
        if m.group("why") is not None:
            assert m.group("why").strip(), f"{path.name}: a no-run block must say why"
            continue
        out.append(m.group("code"))
    return out


@pytest.mark.parametrize("path", [p for p in DOCS if blocks(p)], ids=lambda p: p.name)
def test_doc_code_blocks_run(path, tmp_path):
    script = "\n".join(f"# ---- block {i}\n{code}" for i, code in enumerate(blocks(path)))
    (tmp_path / "doc.py").write_text(script)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TORCHVENDOR_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, str(tmp_path / "doc.py")], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path, env=env)
    assert run.returncode == 0, f"{path.name}:\n{run.stderr[-3000:]}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_docs_cite_only_what_ships(path):
    text = path.read_text()
    assert "../shared" not in text and "notes/" not in text and "§" not in text, \
        f"{path.name} cites the project's private notes; cite the code, the docs or public sources"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_docs_quote_no_line_counts_of_our_files(path):
    """Line counts of our own files drift with every edit (847 vs 837 vs "~700" once): the docs
    leave them out (``wc -l`` gives today's). A limit a test holds ("under 60 lines") and another
    project's size (PyTorch's OpenReg) may stay."""
    text = path.read_text()
    counts = [m.group(0) for m in re.finditer(r"(?<!under )\b\d[\d,.]*k? lines\b|\b\d[\d,]* lines? of (C|Python)", text)
              if "OpenReg" not in text[max(0, m.start() - 80):m.start()]]
    assert not counts, f"{path.name} quotes line counts: {counts}"
