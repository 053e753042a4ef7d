"""One name per concept: no top-level name is defined in two modules of the core packages (sdk,
ir, partitioner, pattern_matcher) with different meanings.

A *definition* is a top-level ``def``, ``class`` or assignment (imports are uses, not
definitions). The names checked are the public ones and the private ones another module imports
(a private name that crosses a module boundary is a shared concept too; a module's own helpers,
``_x`` used only where they are written, are local by Python's convention). Two definitions have
the same meaning when their code is the same, or when one is a facade that returns the call of a
function of the same name (``def f(): return compat.f()``). Anything else needs an entry in
:data:`ALLOWLIST`, with the reason the one name is right for both.

Keyed by name, not by file, so that modules moving between files (sdk/compile is being split)
keep the check meaningful.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).parent.parent
CORE = ("sdk", "ir", "partitioner", "pattern_matcher")

#: name -> why the one name is right in each module that defines it
ALLOWLIST: dict[str, str] = {
    "main": "the command-line entry point of each module run with `python -m` (one role, per module)",
    "cases": "each conformance area module's case list, which the runner collects by this name (one role)",
}

#: name -> the owner who is renaming it (issue 36): definitions in files outside the ir/ side's
#: reach when the test was written. Entries that no longer collide are reported, not failed, so
#: that a rename landing elsewhere never breaks this test; remove them when you see them.
PENDING: dict[str, str] = {
    "DTYPES": "conformance (sdk/conformance/device_cases.py, runtime_abi.py)",
    "DeviceProperties": "device layer (sdk/device/module.py) and conformance (sdk/conformance/runtime_abi.py)",
    "Level": "levels (sdk/compile/fx_pattern.py's Literal beside sdk/compile/levels.py's enum)",
    "Unsupported": "native (partitioner/support.py) and conformance (sdk/conformance/core.py)",
    "check": "native (partitioner/support.py) and conformance (sdk/conformance/runtime_probe.py)",
    "explain": "levels (sdk/compile/fx_pattern.py, patterns.py) and conformance (runtime_order.py)",
    "model_cases": "conformance (sdk/conformance/compile_cases.py, models/cases.py)",
    "names": "levels (sdk/compile/patterns.py) and conformance (models/catalog.py, zoo.py)",
    "native_counts": "device layer (sdk/device/kernels.py, module.py)",
    "run_suite": "conformance (sdk/conformance/runner.py, models/suite.py)",
    "_API": "device layer (sdk/device/module.py's registry beside the packages' lazy-export tables)",
}


def _files() -> list[Path]:
    return sorted(p for pkg in CORE for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _defined(tree: ast.Module) -> dict[str, ast.stmt]:
    out: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            out.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node
    return {n: d for n, d in out.items() if not (n.startswith("__") and n.endswith("__"))}


def _imported_from_core(tree: ast.Module) -> set[str]:
    """Names this module imports from our core packages (relative imports, ``torchvendor.<core>``)."""
    return {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and (node.level or (node.module or "").split(".")[:2] in [["torchvendor", c] for c in CORE])
            for a in node.names}


def _facade(name: str, node: ast.stmt) -> bool:
    """``def name(...): [docstring] return <...>.name(...)``: the same function, re-exposed."""
    if not isinstance(node, ast.FunctionDef):
        return False
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    calls = [c for c in ast.walk(body[0]) if isinstance(c, ast.Call)]
    return any((isinstance(c.func, ast.Attribute) and c.func.attr == name) or
               (isinstance(c.func, ast.Name) and c.func.id == name) for c in calls)


def _code(node: ast.stmt) -> str:
    """The definition without its docstring and annotations (two copies that differ only in
    words or type hints mean the same)."""
    node = ast.parse(ast.unparse(node)).body[0]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body and \
            isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
        node.body = node.body[1:] or [ast.Pass()]
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sub.returns = None
        elif isinstance(sub, ast.arg):
            sub.annotation = None
    return ast.dump(node)


def collisions() -> dict[str, list[str]]:
    """name -> the modules defining it with different meanings."""
    defs: dict[str, list[tuple[str, ast.stmt]]] = defaultdict(list)
    shared_private: set[str] = set()
    for path in _files():
        tree = ast.parse(path.read_text())
        for name, node in _defined(tree).items():
            defs[name].append((_module(path), node))
        shared_private |= {n for n in _imported_from_core(tree) if n.startswith("_")}
    out = {}
    for name, where in defs.items():
        if len(where) < 2 or (name.startswith("_") and name not in shared_private):
            continue
        meanings = {_code(node) for _, node in where if not _facade(name, node)}
        if len(meanings) > 1:
            out[name] = sorted(module for module, _ in where)
    return out


def test_one_name_per_concept():
    found = {n: m for n, m in collisions().items() if n not in ALLOWLIST and n not in PENDING}
    assert not found, ("a name defined in several core modules with different meanings (rename one, or "
                       "add it to ALLOWLIST with the reason):\n" +
                       "\n".join(f"  {n}: {', '.join(m)}" for n, m in sorted(found.items())))


def test_allowlist_is_short_and_explained():
    assert len(ALLOWLIST) <= 6 and all(len(why) > 20 for why in ALLOWLIST.values())


def test_pending_entries_still_collide():
    """A pending rename that landed is reported (a warning), never a failure."""
    import warnings

    done = sorted(set(PENDING) - set(collisions()))
    if done:
        warnings.warn(f"tests/test_names.py: renamed already, drop from PENDING: {done}")


def test_the_check_sees_a_collision(tmp_path):
    a, b = ROOT / "ir" / "_names_probe_a.py", ROOT / "ir" / "_names_probe_b.py"
    a.write_text("THING = (1, 2)\ndef same():\n    return compat.same()\n")
    b.write_text("THING = {1: 2}\ndef same():\n    '''words'''\n    return 3\n")
    try:
        found = collisions()
    finally:
        a.unlink()
        b.unlink()
    assert found.get("THING") == ["ir._names_probe_a", "ir._names_probe_b"] and "same" not in found


def test_ir_modules_share_no_private_names():
    """A name another module of ``ir/`` needs is public (in the defining module's ``__all__`` or
    at least without the underscore): no ``from .x import _y`` inside ir/ (the extension module
    ``torchvendor._C`` aside)."""
    bad = []
    for path in sorted((ROOT / "ir").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("torchvendor.")):
                bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {a.name}" for a in node.names
                        if a.name.startswith("_") and a.name != "_C"]
    assert not bad, "private names imported across ir/ modules:\n" + "\n".join(bad)
