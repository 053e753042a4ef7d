"""The code blocks of docs/pattern_matcher.md run, in order, in one namespace."""
from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "pattern_matcher.md"


def test_doc_examples_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 6
    namespace: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"{DOC.name}[block {i}]", "exec"), namespace)
    out = capsys.readouterr().out
    for expected in ["mul(relu(add(a, b)), c)", "Counter({'acme.fused_mlp': 1})", "Mul(Relu(Add(a, b)), c)",
                     "operator.mul(torch.relu(operator.add(a, b)), c)"]:
        assert expected in out
