"""No import circles among our modules, over the whole import graph of the core packages.

An edge A -> B is any import of B written in A: at module level, inside a function (a lazy
import still couples A to B: it only moves the circle to run time), under ``if TYPE_CHECKING:``
(the types couple them too), an ``importlib.import_module`` of a constant name, and a name a
package serves lazily (``from torchvendor.ir import capture`` is an edge to
``torchvendor.ir.levels``, read from the package's ``lazy_getattr`` table). An edge from a module
to one of its own packages does not count: Python imports those first. Dynamic imports of computed
names (a registry loading a level's module by a table) are not followed.
"""
from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGES = ("sdk", "ir", "pattern_matcher", "partitioner", "reference_backends")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(("torchvendor", *parts))


def _lazy_table(package: str) -> dict[str, str]:
    """name -> absolute module of a package served by ``torchvendor.ir.lazy.lazy_getattr``."""
    module = sys.modules.get(package) or importlib.import_module(package)
    table = getattr(getattr(module, "__getattr__", None), "lazy_table", {})
    return {name: f"{package}.{sub}" for name, sub in table.items()}


def _imported(node: ast.AST, package: str) -> list[tuple[str, list[str]]]:
    """(module, names taken from it) of one import statement or ``importlib.import_module`` call."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        return [(module, [a.name for a in node.names])]
    if (isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        name = node.args[0].value
        return [(importlib.util.resolve_name(name, package) if name.startswith(".") else name, [])]
    return []


def _edges(path: Path, modules: set[str], lazy: dict[str, dict[str, str]]) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        for module, names in _imported(node, package):
            targets = [module]
            for n in names:
                sub = f"{module}.{n}"
                targets.append(sub if sub in modules else lazy.get(module, {}).get(n, module))
            # a module's own packages are imported before it in any case (``from . import x`` names one)
            out |= {t for t in targets if t in modules and t != name and not name.startswith(t + ".")}
    return out


def import_graph() -> dict[str, set[str]]:
    paths = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts]
    modules = {_module_name(p) for p in paths}
    lazy = {_module_name(p): _lazy_table(_module_name(p)) for p in paths
            if p.name == "__init__.py" and "lazy_getattr" in p.read_text()}
    return {_module_name(p): _edges(p, modules, lazy) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_among_our_modules():
    found = cycles(import_graph())
    assert not found, "import circles (any import, lazy ones included):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_follows_lazy_imports(tmp_path):
    """The edges the module-level-only graph missed: a function-level import, a TYPE_CHECKING
    import, and a name a lazy package serves."""
    probe = ROOT / "ir" / "_import_probe.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .program import Program\n"
                     "def f():\n    from torchvendor.ir import capture\n    from .loop_ir import schema\n")
    try:
        graph = import_graph()
    finally:
        probe.unlink()
    assert {"torchvendor.ir.program", "torchvendor.ir.levels", "torchvendor.ir.loop_ir.schema"} <= \
        graph["torchvendor.ir._import_probe"]
