"""No decision of the SDK depends on a backend's or device's name (issue 32): the SDK's packages
(sdk/, ir/, partitioner/, pattern_matcher/) are scanned for name checks — a comparison with a
device or backend name of ours (``== "acme"``, ``in ("torchvendor_cpu", ...)``), a
``startswith("torchvendor")``, an import of a reference backend's module — and any is a failure
naming the file and line. A vendor's backend is treated exactly as a reference is; the second
test shows it on the model suite's coverage: a backend named ``nimbus`` and the same class
registered as ``torchvendor_nimbus`` get the same numbers.
"""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("sdk", "ir", "partitioner", "pattern_matcher")
#: where a name check is the registration of the references themselves: path -> why (none today;
#: the references register through pyproject.toml's entry points)
ALLOWED: dict[str, str] = {}
_PREFIX = "torchvendor"
_REFERENCE_MODULE = re.compile(r"(^|\.)reference_backends(\.|$|:)")


def _our_names() -> set[str]:
    """Device and backend names of ours: the simulator's, the GPU device's, the trial vendor's and
    every entry point our pyproject registers."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    points = data.get("project", {}).get("entry-points", {}).get("torch_dynamo_backends", {})
    return {"acme", "gpu", "nimbus", *points}


def _is_name(value: object, names: set[str]) -> bool:
    return isinstance(value, str) and (value in names or value in (_PREFIX, _PREFIX + ".")
                                       or value.startswith(_PREFIX + "_"))


def _constants(node: ast.AST) -> list[object]:
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def offences(source: str, names: set[str] | None = None) -> list[tuple[int, str]]:
    """(line, what) for every name check in ``source``.

    >>> offences('if backend.startswith("torchvendor"): pass')
    [(1, 'startswith("torchvendor")')]
    """
    names = _our_names() if names is None else names
    tree = ast.parse(source)
    docs = _docstrings(tree)
    hits: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                for value in _constants(side):
                    if _is_name(value, names):
                        hits.append((node.lineno, f"comparison with {value!r}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith", "removeprefix", "removesuffix") and node.args:
            for value in _constants(node.args[0]):
                if _is_name(value, names):
                    hits.append((node.lineno, f'{node.func.attr}("{value}")'))
        elif isinstance(node, ast.ImportFrom) and _REFERENCE_MODULE.search(node.module or ""):
            hits.append((node.lineno, f"import from {node.module}"))
        elif isinstance(node, ast.Import):
            hits += [(node.lineno, f"import {a.name}") for a in node.names if _REFERENCE_MODULE.search(a.name)]
        elif isinstance(node, ast.Constant) and id(node) not in docs and isinstance(node.value, str) and \
                " " not in node.value and _REFERENCE_MODULE.search(node.value):
            hits.append((node.lineno, f"reference module named: {node.value!r}"))
    return sorted(set(hits))


def test_the_scan_finds_each_kind_of_name_check():
    """The scanner itself: the name checks issue 32 found (as they were written) are caught,
    ordinary code is not."""
    caught = {
        'if self.backend.startswith("torchvendor"): pass': "startswith",
        'if spec.startswith("torchvendor_"): pass': "startswith",
        '_REFERENCE_DEVICE = "acme"\nif d == _REFERENCE_DEVICE: pass\nif d.split(":")[0] == "acme": pass': "comparison",
        'import importlib\nimportlib.import_module(f"torchvendor.reference_backends.{x}")': "reference module",
        'if spec.name.startswith("torchvendor."): pass': "startswith",
        'from torchvendor.reference_backends.cuda.runtime import build_runtime': "import from",
        'ok = backend in ("torchvendor_cpu", "torchvendor_cuda")': "comparison",
    }
    for source, kind in caught.items():
        found = offences(source)
        assert found and kind in found[0][1], (source, found)
    clean = ('"""A docstring naming torchvendor.reference_backends.cpu and acme."""\n'
             'x = device == "cpu"\nimport importlib.resources\n'
             'p = importlib.resources.files("torchvendor") / "lib"\nok = tag == "torchvendor.fx/1"\nmsg = f"device {name!r} such as \'acme\'"')
    assert offences(clean) == []


def test_no_decision_of_the_sdk_depends_on_a_name():
    names = _our_names()
    found = []
    for root in SCANNED:
        for path in sorted((ROOT / root).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel in ALLOWED:
                continue
            found += [f"{rel}:{line}: {what}" for line, what in offences(path.read_text(), names)]
    assert not found, "name checks in the SDK (treat every backend and device alike):\n" + "\n".join(found)


def _nimbus_classes():
    import torch

    from torchvendor.sdk import AtenBackend

    class Nimbus(AtenBackend):
        """A vendor's ATEN backend that claims matmuls and additions only (the rest falls back)."""

        name = "nimbus"
        supported_ops = {"aten.mm.default", "aten.addmm.default", "aten.add.Tensor", "aten.mul.Tensor",
                         "aten.relu.default"}

        def compile(self, gm: torch.fx.GraphModule, example_inputs):
            return gm

    class Renamed(Nimbus):
        name = "torchvendor_nimbus"

    return Nimbus, Renamed


def test_a_vendor_backend_gets_the_coverage_of_the_same_backend_under_our_prefix():
    """Issue 32's trial: the same class as ``nimbus`` and as ``torchvendor_nimbus``: the same
    coverage, status and fallback ops in the model suite (before: ``nimbus`` read "correct, 100 %
    native" with no coverage at all)."""
    from torchvendor.sdk import register_backend
    from torchvendor.sdk.conformance.models.check import check_model

    results = {}
    for cls in _nimbus_classes():
        register_backend(cls)
        out = check_model("moe_topk", [cls.name], parts=("inference",), timing=False, warm=False)
        results[cls.name] = out["backends"][cls.name]
    a, b = results["nimbus"], results["torchvendor_nimbus"]
    assert a.get("coverage") and a["coverage"]["compute_ops"] > 0, a
    assert a["coverage"]["coverage"] < 1.0 and a["status"] == "fell back", a
    assert (a["status"], a["coverage"]["coverage"], a["coverage"]["outside"]) == \
        (b["status"], b["coverage"]["coverage"], b["coverage"]["outside"])


@pytest.mark.parametrize("backend", ["nimbus", "torchvendor_nimbus"])
def test_baselines_are_torchs_backends_not_names(backend):
    """``baseline_parts`` applies to backends that are not torchvendor Backends (eager here), never
    to a vendor's because of its name."""
    from torchvendor.sdk import register_backend
    from torchvendor.sdk.conformance.models.check import _baselines

    for cls in _nimbus_classes():
        register_backend(cls)
    assert _baselines(["eager", backend]) == {"eager"}


def test_a_model_no_graph_of_which_reaches_the_backend_is_not_native():
    """nn.LSTM runs eagerly under Dynamo: a vendor backend that compiled nothing of lstm_lm read
    "pass, 100 % native" (no compile report, so no coverage); it falls back now, with the reason."""
    from torchvendor.sdk import register_backend
    from torchvendor.sdk.conformance.models.check import NO_GRAPH, check_model

    nimbus, _ = _nimbus_classes()
    register_backend(nimbus)
    res = check_model("lstm_lm", [nimbus.name], parts=("inference",), timing=False, warm=False)["backends"][nimbus.name]
    if res.get("coverage", {}).get("compute_ops"):
        return  # this torch traces the LSTM: the ordinary coverage applies
    assert res["status"] == "fell back" and res["coverage"]["outside"] == {NO_GRAPH: 1}, res
