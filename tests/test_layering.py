"""DESIGN.md's layering, held by a test. The rules, in DESIGN's words:

1. "every use of a private torch API (torch._dynamo, torch._inductor, torch._functorch) goes
   through one compatibility module" — ``torch._*`` (and ``torch.utils._*``, ``torch.testing._*``,
   ``torch.fx._*``) appears only in the package ``ir/compat/`` (one module per torch subsystem).
2. "pattern_matcher/ and partitioner/ never import torch. They see graphs only through the
   GraphView protocol" — they import no torch and nothing of ours but ``ir/graph_view.py`` (and
   ``ir/gc_pause.py``, the torch-free ``paused_gc`` both share).
3. "ir/ never imports pattern_matcher/ or partitioner/" (nor sdk/, which sits above it).
4. "reference_backends/ import only the public torchvendor.sdk API" (and ``torchvendor.ir``'s
   public names): never ``torchvendor._C``, never a private module.
5. sdk/ is three products along its seams: ``sdk/device/`` and ``sdk/compile/`` never import each
   other; ``sdk/conformance/`` sits above both.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PACKAGES = ("sdk", "ir", "pattern_matcher", "partitioner", "reference_backends")
PRIVATE_TORCH = re.compile(r"^torch(\.[A-Za-z0-9]+)*\._(?!_)")


def _files(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path`` (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(ROOT).with_suffix("")
    package = ["torchvendor", *rel.parts[:-1]] if rel.name != "__init__" else ["torchvendor", *rel.parts[:-1]]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((node.lineno, module))
            out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return out


def _attribute_chains(path: Path) -> list[tuple[int, str]]:
    """``torch._x`` written as an attribute chain (``torch._C._foo()``), outside imports."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            parts, cur = [], node
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id == "torch":
                chain = ".".join(["torch", *reversed(parts)])
                if PRIVATE_TORCH.match(chain):
                    out.append((node.lineno, chain))
    return out


def test_private_torch_only_in_compat():
    found = []
    for package in PACKAGES:
        for path in _files(package):
            if (ROOT / "ir" / "compat") in path.parents:
                continue
            uses = [(n, m) for n, m in _imports(path) if PRIVATE_TORCH.match(m)] + _attribute_chains(path)
            found += [f"{path.relative_to(ROOT)}:{n}: {m}" for n, m in uses]
    assert not found, "private torch APIs outside ir/compat/ (add a function to its subsystem's module there):\n" + "\n".join(sorted(set(found)))


@pytest.mark.parametrize("package", ["pattern_matcher", "partitioner"])
def test_algorithms_see_graphs_only_through_graph_view(package):
    shared = ("torchvendor.ir.graph_view", "torchvendor.ir.gc_pause")
    bad = []
    for path in _files(package):
        for n, module in _imports(path):
            top = module.split(".")[0]
            if top == "torch" or (module.startswith("torchvendor.") and not (
                    module.startswith(f"torchvendor.{package}") or module.split(".")[:3] in
                    [m.split(".") for m in shared])):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {module}")
    assert not bad, f"{package}/ must import no torch and nothing of ours but ir/graph_view.py, ir/gc_pause.py:\n" + \
        "\n".join(bad)


def test_ir_does_not_import_the_layers_above():
    bad = [f"{p.relative_to(ROOT)}:{n}: {m}" for p in _files("ir") for n, m in _imports(p)
           if m.split(".")[:2] in (["torchvendor", "pattern_matcher"], ["torchvendor", "partitioner"],
                                   ["torchvendor", "sdk"], ["torchvendor", "reference_backends"])]
    assert not bad, "ir/ imports a layer above it:\n" + "\n".join(bad)


def test_sdk_products_do_not_import_each_other():
    bad = []
    for product, other in (("device", "compile"), ("compile", "device")):
        for path in sorted((ROOT / "sdk" / product).rglob("*.py")):
            bad += [f"{path.relative_to(ROOT)}:{n}: {m}" for n, m in _imports(path)
                    if m.startswith(f"torchvendor.sdk.{other}") or m.startswith("torchvendor.sdk.conformance")]
    assert not bad, "sdk/device and sdk/compile are separate products:\n" + "\n".join(bad)


def test_reference_backends_use_only_the_public_sdk():
    import torchvendor.ir
    import torchvendor.sdk

    public = {"torchvendor.sdk": set(torchvendor.sdk.__all__), "torchvendor.ir": set(torchvendor.ir.__all__)}
    bad = []
    for path in _files("reference_backends"):
        own = "torchvendor.reference_backends." + path.relative_to(ROOT / "reference_backends").parts[0]
        for n, module in _imports(path):
            if not module.startswith("torchvendor") or module.startswith(own):
                continue
            head, _, name = module.rpartition(".")
            if module in public or (head in public and name in public[head]):
                continue
            if module in ("torchvendor.ir.loop_ir",) or head == "torchvendor.ir.loop_ir":
                continue  # the loop IR schema is the LOOP level's public contract (docs/loop_ir.md)
            bad.append(f"{path.relative_to(ROOT)}:{n}: {module}")
    assert not bad, "reference backends may use only torchvendor.sdk / torchvendor.ir public names:\n" + "\n".join(bad)


def test_no_function_over_80_lines():
    """STYLE.md: small functions, none over 80 lines outside the tests (issue 12 split the long ones)."""
    long = []
    for package in (*PACKAGES, "bench", "examples"):
        for path in _files(package):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                                f"({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


def test_the_rules_catch_a_violation(tmp_path):
    """The checkers are not vacuous: a file with each kind of violation is flagged."""
    p = ROOT / "ir" / "_layering_probe.py"
    p.write_text("import torch._dynamo\nfrom torchvendor.sdk import Backend\nx = torch._C._foo\n")
    try:
        assert [m for _, m in _imports(p) if PRIVATE_TORCH.match(m)] == ["torch._dynamo"]
        assert ("torchvendor.sdk" in [m for _, m in _imports(p)])
        assert _attribute_chains(p) == [(3, "torch._C._foo"), (3, "torch._C")]
    finally:
        p.unlink()


def test_ir_levels_share_one_layout():
    """Issue 12: one naming scheme for the per-level modules. Each level is a package
    ``ir/<level>_ir/`` whose ``capture.py`` holds its hook and capture and whose ``program.py``
    its Program class; the only ``interpreter.py`` is the loop level's (FX graphs run in
    ``ir/fx_graph.py``); no module is named ``capture`` at the top, where it is the function."""
    import importlib

    from torchvendor.ir import CAPTURE_LEVELS
    from torchvendor.ir.program import Program

    for level in CAPTURE_LEVELS:
        package = ROOT / "ir" / f"{level}_ir"
        assert {"__init__.py", "capture.py", "program.py"} <= {p.name for p in package.glob("*.py")}, package
        capture = importlib.import_module(f"torchvendor.ir.{level}_ir.capture")
        assert callable(getattr(capture, f"capture_{level}")) and callable(getattr(capture, f"{level}_ir_hook"))
        importlib.import_module(f"torchvendor.ir.{level}_ir.program")
        assert Program._by_level[level].__module__ == f"torchvendor.ir.{level}_ir.program"
    assert [p.relative_to(ROOT).as_posix() for p in _files("ir") if p.name == "interpreter.py"] == \
        ["ir/loop_ir/interpreter.py"]
    assert not (ROOT / "ir" / "capture.py").exists()
