"""The vendor path beside the reference (issue 32, slow tier): ``torchvendor new`` writes a LOOP
and an ATEN vendor for one device, ``boreas`` (a name that shares nothing with ours), both are
built out of tree as generated, and the ``inference`` profile runs for each and for
``torchvendor_cpu`` on the same device (the vendor's runtime, kernels and manifest). Case by case
a vendor's status equals the reference's, except where the vendor claims less: then the vendor's
is ``fallback`` or ``unsupported`` where the reference's is ``pass`` or ``fallback``, never a
different pass/fail.

What makes it affordable on two shared cores (``docs/vendor_guide.md`` has a run's numbers):

- the two vendors are one device (their generated runtime and kernel sources are the same
  bytes, which the test checks), so the reference runs once for both, and the three runs go at
  once;
- of the profile's three areas, ``ops`` and ``compile`` run whole; ``models`` runs the model
  catalog's ``fast`` tier (one or two models per family, ``catalog.names("fast")``): a model case
  is mostly Dynamo tracing a ``transformers`` model, the same for every backend (gpt2, warm: 20 s
  of its 24 s), and on the loaded two cores the first nine models took 37-97 s each, about an
  hour of worker time per backend for all 58. ``TORCHVENDOR_VENDOR_MODELS=all`` runs every model;
- compiled kernels stay in the artifact cache (``~/.cache/torchvendor`` unless
  ``TORCHVENDOR_CACHE_DIR``), keyed by backend and source: a second run builds nothing.

    .venv/bin/python -m pytest tests/test_vendor_vs_reference.py -m slow -s   # -s: counts and times
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchvendor.sdk.conformance.models.catalog import names
from torchvendor.sdk.scaffold import new

#: the device both vendors drive, and their backends' name
NAME = "boreas"
LEVELS = ("loop", "aten")
#: a vendor status that claims less than the reference's (vendor status -> reference statuses it may replace)
CLAIMS_LESS = {"fallback": ("pass",), "unsupported": ("pass", "fallback")}


def _env() -> dict[str, str]:
    bin_dir = os.path.dirname(sys.executable)
    return dict(os.environ, PYTHON=sys.executable, PATH=bin_dir + os.pathsep + os.environ["PATH"],
                PYTHONWARNINGS="ignore")


def _only() -> list[str]:
    """The ``--only`` patterns of the run: see the module docstring."""
    if os.environ.get("TORCHVENDOR_VENDOR_MODELS") == "all":
        return []
    return ["ops/*", "compile/*", *(f"models/{model}/*" for model in names("fast"))]


def _sources(package: Path) -> dict[str, bytes]:
    return {str(p.relative_to(package)): p.read_bytes() for d in ("runtime", "kernels") for p in (package / d).rglob("*")
            if p.is_file()}


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    """The two vendors, generated and built (runtime, kernels) as a vendor builds them."""
    if shutil.which("cmake") is None:
        pytest.skip("no cmake")
    root = tmp_path_factory.mktemp("vendors")
    out = {level: new(NAME, level, root / level / NAME) for level in LEVELS}
    assert _sources(out["loop"]) == _sources(out["aten"]), "the two vendors' runtimes differ: not one device"
    for package in out.values():
        build = subprocess.run(["bash", "-c", 'cmake -S . -B build -Dtorchvendor_DIR="$("$PYTHON" -m '
                                'torchvendor.sdk.cli config --cmake-dir)" && cmake --build build -j 2'],
                               cwd=package, env=_env(), capture_output=True, text=True, timeout=900)
        assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return out


def _start(package: Path, backend: str, report: str) -> tuple[subprocess.Popen, Path]:
    """Start the inference profile (as :func:`_only` selects) for ``backend`` on the package's
    device, with its runtime and manifest."""
    cmd = [sys.executable, "-m", "torchvendor.sdk.cli", "conformance", "--device", NAME, "--runtime",
           f"build/runtime/lib{NAME}_runtime.so", "--backend", backend, "--manifest", "manifest.toml",
           "--profile", "inference", "--jobs", "2", "--report", report, "--no-progress"]
    for pattern in _only():
        cmd += ["--only", pattern]
    with open(package / f"{report}.log", "w") as out:
        proc = subprocess.Popen(cmd, cwd=package, env=_env(), stdout=out, stderr=subprocess.STDOUT)
    return proc, package / report


def _statuses(proc: subprocess.Popen, report: Path) -> dict[str, tuple[str, str]]:
    """Case id -> (status, reason) of a run :func:`_start` started, once it is over."""
    code = proc.wait(timeout=6 * 3600)
    assert code in (0, 1), Path(f"{report}.log").read_text()[-3000:]
    doc = json.loads((report / "report.json").read_text())
    print(f"\n{doc['target']['backend']} on {NAME}: {doc['summary']}, {doc['seconds']:.0f} s")
    return {c["id"]: (c["status"], c.get("reason") or "") for c in doc["cases"]}


@pytest.fixture(scope="module")
def statuses(packages) -> dict[str, dict[str, tuple[str, str]]]:
    """The reference's statuses (one run for both vendors: one device) and each vendor's, the
    three runs at once (on more cores, the comparison takes the time of one run)."""
    runs = {"reference": _start(packages["loop"], "torchvendor_cpu", "reference-report"),
            **{level: _start(packages[level], f"{NAME}_torch.backend:{NAME.capitalize()}", f"{level}-report")
               for level in LEVELS}}
    try:
        return {key: _statuses(*run) for key, run in runs.items()}
    finally:
        for proc, _ in runs.values():
            if proc.poll() is None:
                proc.terminate()


def _differences(reference: dict[str, tuple[str, str]], mine: dict[str, tuple[str, str]]) -> tuple[dict, dict]:
    """(allowed, wrong): case -> (reference status, vendor status, vendor reason) where they differ."""
    allowed, wrong = {}, {}
    for case, (status, reason) in mine.items():
        theirs = reference[case][0]
        if status != theirs:
            (allowed if theirs in CLAIMS_LESS.get(status, ()) else wrong)[case] = (theirs, status, reason)
    return allowed, wrong


def test_claiming_less_is_fallback_or_unsupported_never_another_verdict():
    reference = {"a": ("pass", ""), "b": ("pass", ""), "c": ("fail", ""), "d": ("fallback", ""), "e": ("skip", "")}
    mine = {"a": ("pass", ""), "b": ("fallback", "x"), "c": ("fallback", "y"), "d": ("pass", ""), "e": ("skip", "")}
    allowed, wrong = _differences(reference, mine)
    assert allowed == {"b": ("pass", "fallback", "x")}
    assert wrong == {"c": ("fail", "fallback", "y"), "d": ("fallback", "pass", "")}


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_vendor_statuses_equal_the_reference_where_it_claims_as_much(statuses, level):
    reference, mine = statuses["reference"], statuses[level]
    assert set(mine) == set(reference), sorted(set(mine) ^ set(reference))[:20]
    allowed, wrong = _differences(reference, mine)
    kinds: dict[str, int] = {}
    for theirs, status, _ in allowed.values():
        kinds[f"{theirs}->{status}"] = kinds.get(f"{theirs}->{status}", 0) + 1
    print(f"{level} vendor: {len(mine)} cases, {len(mine) - len(allowed) - len(wrong)} equal, claims less in "
          f"{len(allowed)} {kinds or ''}, {len(wrong)} different verdicts")
    assert not wrong, (f"the {level} vendor's status differs from torchvendor_cpu's beyond claiming less in "
                       f"{len(wrong)} case(s) (reference -> vendor: vendor's reason):\n" +
                       "\n".join(f"  {case}: {theirs} -> {status}: {reason[:300]}"
                                 for case, (theirs, status, reason) in sorted(wrong.items())[:40]))
