"""The package ``ir/compat/``: one module per torch subsystem, each with a true ``__all__``,
everything re-exported by the package, and a test file per module
(``tests/test_compat_<module>.py``) that exercises its functions on the installed release."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from torchvendor.ir import compat

TESTS = Path(__file__).parent


@pytest.mark.parametrize("module", compat.MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_module_all_is_true(module) -> None:
    """``__all__`` lists exactly the module's public top-level names (defined or imported there)."""
    tree = ast.parse(inspect.getsource(module))
    public = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            public.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            public |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__" and not node.level:  # siblings: not exports
            public |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Try):
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom):
                    public |= {a.asname or a.name for a in sub.names}
    public = {n for n in public if not n.startswith("_")} - {"__all__"}
    assert set(module.__all__) == public
    assert len(module.__all__) == len(set(module.__all__))


def test_package_reexports_every_name_once() -> None:
    names = [n for m in compat.MODULES for n in m.__all__]
    assert len(names) == len(set(names)), "two compat modules export the same name"
    for module in compat.MODULES:
        for name in module.__all__:
            assert getattr(compat, name) is getattr(module, name), name
    assert sorted(compat.__all__) == sorted(names)


def test_every_module_has_its_test_file() -> None:
    package = Path(compat.__file__).parent
    modules = {p.stem for p in package.glob("*.py")} - {"__init__"}
    assert modules == {m.__name__.rsplit(".", 1)[1] for m in compat.MODULES}, "add the new module to compat.MODULES"
    missing = [m for m in sorted(modules) if not (TESTS / f"test_compat_{m}.py").exists()]
    assert not missing, f"compat modules without tests/test_compat_<module>.py: {missing}"
