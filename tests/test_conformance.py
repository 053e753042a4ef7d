"""The conformance suite: it runs, it reports, it resumes, it survives crashes and hangs, it gives
clear errors for bad input, and it catches broken backends and runtimes (negative controls)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import conformance_mutants  # noqa: F401  (registers tv_conf_dropped_mutation)
import pytest
import torch

from torchvendor.sdk import AtenBackend, TorchBackend, register_backend
from torchvendor.sdk.conformance.core import (ConformanceError, ManifestError, Target, cases_for, load_manifest,
                                              run_case)
from torchvendor.sdk.conformance.report import diff, to_dict, write_reports
from torchvendor.sdk.conformance.runner import run_suite

ROOT = Path(__file__).parent.parent
MANIFEST = ROOT / "reference_backends" / "cpu" / "manifest.toml"


def _cli(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "torchvendor.sdk.cli", "conformance", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_minimal_profile_on_the_reference_setup(tmp_path):
    """What ./dev.sh demo runs: torchvendor_cpu on the simulated device, two workers."""
    run = _cli("--backend", "torchvendor_cpu", "--device", "acme", "--profile", "minimal", "--jobs", "2",
               "--manifest", str(MANIFEST), "--report", str(tmp_path), "--no-progress")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert set(doc["areas"]) == {"runtime", "device", "ops", "compile", "models"}
    assert doc["summary"]["fail"] == 0 and doc["summary"]["pass"] > 50
    assert doc["target"] == {"device": "acme", "backend": "torchvendor_cpu", "runtime": None, "options": {},
                             "kernels": []}
    assert doc["torch"] == torch.__version__ and len(doc["opdb_fingerprint"]) == 16
    # the silent CPU fallback is visible: the simulator has no native kernels for eager ops
    assert doc["summary"]["fallback"] > 0 and doc["fallback"]
    rates = doc["rates"]["total"]
    assert rates["claimed"] == sum(doc["summary"].values()) - doc["summary"]["skip"]
    assert rates["native_rate"] < rates["pass_rate"] == 1.0  # the fallback is right, but it is not native
    top = doc["implement_next"][0]  # priced: calls, bytes each way, time
    assert top["calls"] > 0 and top["to_host_bytes"] > 0 and top["to_device_bytes"] > 0 and top["seconds"] > 0
    assert "report.html" in run.stdout and "pass" in run.stdout and "implement next" in run.stdout
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "<script" not in page
    md = (tmp_path / "report.md").read_text()
    assert "| runtime |" in md and md.index("## Failures (0)") < md.index("## Per area") < md.index("## Implement next")


# ---- the runner: parallel, crashes, hangs, resume ------------------------------------------------------

CRASHY = textwrap.dedent("""
    import os, time
    from torchvendor.sdk import AtenBackend
    class Crashy(AtenBackend):
        name = "tv_conf_crashy"
        def compile(self, gm, example_inputs):
            if any(n.target.__name__.startswith("sin") for n in gm.graph.nodes if n.op == "call_function"):
                os._exit(3)          # a vendor compiler that takes the process down
            if any(n.target.__name__.startswith("cos") for n in gm.graph.nodes if n.op == "call_function"):
                time.sleep(3600)     # ... or never returns
            return gm
""")


def test_crash_and_hang_are_that_case_failures_and_the_run_goes_on(tmp_path, monkeypatch):
    (tmp_path / "crashy_backend.py").write_text(CRASHY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    target = Target(device="cpu", backend="crashy_backend:Crashy")
    run = run_suite(target, "minimal", tmp_path / "r", jobs=2, timeout=20, progress=False,
                    only=["ops/exp/*", "ops/mul/*", "compile/mutation", "compile/graph_break", "compile/dynamic_shapes"])
    status = {r.id: (r.status, r.reason) for r in run.results}
    assert status["compile/graph_break"][0] == "fail" and "crashed" in status["compile/graph_break"][1]
    assert status["compile/mutation"][0] == "pass" and status["ops/mul/float32/compiled"][0] == "pass"
    assert status["compile/dynamic_shapes"][0] == "pass"
    assert len(run.results) == 5


def test_resume_keeps_finished_cases(tmp_path):
    target = Target(device="cpu", backend="eager")
    first = run_suite(target, "minimal", tmp_path, only=["compile/mutation"], progress=False)
    assert [r.id for r in first.results] == ["compile/mutation"]
    journal = (tmp_path / "journal.jsonl").read_text()
    again = run_suite(target, "minimal", tmp_path, only=["compile/mutation", "compile/aliasing"], resume=True,
                      progress=False)
    assert [r.id for r in again.results] == ["compile/mutation", "compile/aliasing"]
    assert (tmp_path / "journal.jsonl").read_text().startswith(journal)


def test_diff_lists_regressions_and_fixes(tmp_path):
    target = Target(device="cpu", backend="eager")
    old = run_suite(target, "minimal", tmp_path / "old", only=["compile/mutation", "compile/aliasing"], progress=False)
    write_reports(old)
    new_doc = json.loads((tmp_path / "old" / "report.json").read_text())
    new_doc["cases"][0]["status"], new_doc["cases"][0]["reason"] = "fail", "broken"
    (tmp_path / "new.json").write_text(json.dumps(new_doc))
    d = diff(tmp_path / "old", tmp_path / "new.json")
    assert d.regressions == ["compile/mutation: pass -> fail (broken)"] and d.fixes == []
    run = _cli("diff", str(tmp_path / "old"), str(tmp_path / "new.json"))
    assert run.returncode == 1 and "REGRESSION compile/mutation" in run.stdout
    assert "transitions: pass -> fail: 1" in run.stdout


def test_diff_sees_every_transition(tmp_path):
    """Each pair of statuses: a move down the ranking is a regression (pass -> fallback: lost native),
    up is a fix (fallback -> pass: now native), into or out of skip is coverage."""
    from torchvendor.sdk.conformance.core import STATUSES

    pairs = [(a, b) for a in STATUSES for b in STATUSES if a != b]
    old = {"cases": [{"id": f"{a}>{b}", "status": a, "reason": ""} for a, b in pairs] + [
        {"id": "gone", "status": "pass", "reason": ""}]}
    new = {"cases": [{"id": f"{a}>{b}", "status": b, "reason": "why", "fallback": {"mul.out": 1} if b == "fallback"
                      else {}} for a, b in pairs] + [{"id": "fresh", "status": "fail", "reason": ""}]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    d = diff(tmp_path / "old.json", tmp_path / "new.json")
    assert len(d.regressions) + len(d.fixes) + len(d.coverage) == len(pairs) + 2 and sum(d.transitions.values()) == len(pairs)
    assert "pass>fallback: pass -> fallback (lost native: mul.out)" in d.regressions
    assert d.lost_native == ["pass>fallback: pass -> fallback (lost native: mul.out)"]
    assert "fallback>pass: fallback -> pass (now native: why)" in d.fixes
    for worse in ("fallback>fail", "pass>unsupported", "xfail>fail", "unsupported>fail", "fallback>xfail"):
        assert any(r.startswith(worse + ":") for r in d.regressions), worse
    for better in ("fail>pass", "unsupported>fallback", "fail>xfail", "fail>unsupported"):
        assert any(r.startswith(better + ":") for r in d.fixes), better
    assert all(("skip" in line) or "gone" in line or "new case" in line for line in d.coverage)
    assert "gone: gone (was pass)" in d.coverage and "fresh: new case (fail)" in d.coverage


def test_diff_of_a_missing_or_foreign_directory_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "report.json").write_text(json.dumps({"graphs": []}))
    (tmp_path / "garbage.json").write_text("<html>")
    for bad, says in ((tmp_path / "missing", "does not exist"), (tmp_path / "empty", "holds no report.json"),
                      (tmp_path / "foreign", "is not a conformance report"),
                      (tmp_path / "garbage.json", "not JSON")):
        run = _cli("diff", str(bad), str(tmp_path / "foreign"))
        assert run.returncode == 2 and says in run.stdout and str(bad) in run.stdout, run.stdout
        assert "Traceback" not in run.stdout + run.stderr


# ---- bad input ------------------------------------------------------------------------------------------

def test_bad_input_gets_clear_errors(tmp_path):
    run = _cli("--backend", "no_such_backend", "--report", str(tmp_path))
    assert run.returncode == 2 and "unknown compile backend 'no_such_backend'" in run.stdout
    run = _cli("--device", "acme2", "--runtime", str(tmp_path / "missing.so"), "--report", str(tmp_path))
    assert run.returncode == 2 and "cannot bring up device 'acme2'" in run.stdout and "missing.so" in run.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('areas = ["device"]\nops = ["add"]\ndtypes = 3\n')
    with pytest.raises(ManifestError, match=r"bad.toml, line 3, field 'dtypes': expected a list, got int"):
        load_manifest(bad)
    bad.write_text('colour = ["red"]\n')
    with pytest.raises(ManifestError, match=r"line 1, field 'colour': unknown field"):
        load_manifest(bad)
    bad.write_text('areas = ["teleport"]\n')
    with pytest.raises(ManifestError, match=r"unknown area\(s\) \['teleport'\]"):
        load_manifest(bad)
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o500)
    if os.access(readonly, os.W_OK):  # root ignores permissions: use a path under a file instead
        readonly = tmp_path / "bad.toml" / "sub"
    with pytest.raises(ConformanceError, match="is not writable"):
        run_suite(Target(device="cpu", backend="eager"), "minimal", readonly, progress=False)
    with pytest.raises(ConformanceError, match="unknown profile 'huge'"):
        cases_for(Target(), "huge")


def test_manifest_skips_unclaimed_and_expects_failures(tmp_path):
    m = tmp_path / "m.toml"
    m.write_text('ops = ["add"]\n[xfail]\n"compile/mutation" = "known"\n')
    manifest = load_manifest(m)
    target = Target(device="cpu", backend="tv_conf_dropped_mutation")
    cases = {c.id: c for c in cases_for(target, "minimal", manifest)}
    assert run_case(cases["ops/mul/float32/compiled"], target, manifest).status == "skip"
    assert run_case(cases["compile/mutation"], target).status == "fail"  # the mutant really fails it
    assert run_case(cases["compile/mutation"], target, manifest).status == "xfail"
    assert run_case(cases["compile/aliasing"], target, manifest).status == "pass"


# ---- negative controls: every injected fault is caught -----------------------------------------------

class _Mutant(AtenBackend):
    supported_ops = None

    def compile(self, gm, example_inputs):
        self.mutate(gm)
        gm.recompile()
        return gm

    def mutate(self, gm):
        raise NotImplementedError


def _mutant(name, fn, **attrs):
    cls = type(f"Mutant_{name}", (_Mutant,), {"name": f"tv_conf_{name}", "mutate": lambda self, gm: fn(gm), **attrs})
    register_backend(cls)
    return cls.name


def _retarget(gm, old, new):
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target == old:
            n.target = new


def _wrong_dtype_backend():
    class WrongDtype(AtenBackend):
        name = "tv_conf_wrong_dtype"
        default_options = {}

        def compile(self, gm, example_inputs):
            return lambda *a: tuple(x.double() if isinstance(x, torch.Tensor) else x
                                    for x in (gm(*a) if isinstance(gm(*a), tuple) else (gm(*a),)))
    register_backend(WrongDtype)
    return WrongDtype.name


def _lost_backward_backend():
    class LostBackward(TorchBackend):
        name = "tv_conf_lost_backward"

        def compile(self, gm, example_inputs):
            def run(*a):
                with torch.no_grad():
                    return gm(*a)
            return run
    register_backend(LostBackward)
    return LostBackward.name


MUTANTS = {
    # name: (backend, case ids that must fail)
    "compile_error": ("relu_compile_error_TESTING_ONLY", ["compile/no_grad_inference_mode"]),
    "runtime_error": ("relu_runtime_error_TESTING_ONLY", ["compile/no_grad_inference_mode"]),
    "accuracy_error": ("relu_accuracy_error_TESTING_ONLY", ["compile/no_grad_inference_mode"]),
    "wrong_op": (lambda: _mutant("wrong_op", lambda gm: _retarget(gm, torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor)),
                 ["ops/mul/float32/compiled"]),
    "wrong_reduction": (lambda: _mutant("wrong_reduction", lambda gm: _retarget(gm, torch.ops.aten.amax.default,
                                                                                torch.ops.aten.amin.default)),
                        ["ops/amax/float32/compiled"]),
    "wrong_dtype": (_wrong_dtype_backend, ["ops/exp/float32/compiled"]),
    "dropped_mutation": ("tv_conf_dropped_mutation", ["compile/mutation"]),
    "ignores_strides": (lambda: _mutant("ignores_strides", lambda gm: _retarget(
        gm, torch.ops.aten.exp.default, lambda x: torch.ops.aten.exp.default(
            x.as_strided(x.shape, torch.empty(x.shape).stride())))), ["compile/noncontiguous_input"]),
    "lost_backward": (_lost_backward_backend, ["compile/backward"]),
    "wrong_epilogue": (lambda: _mutant("wrong_epilogue", lambda gm: _retarget(
        gm, torch.ops.aten.gelu.default, lambda x, approximate="none": torch.ops.aten.gelu.default(x, approximate="tanh"))),
                       ["ops/nn.functional.gelu/float32/compiled"]),
    "fused_op_wrong_epilogue": ("tv_conf_fused_wrong_epilogue", ["compile/fused_epilogue"]),
    "log_softmax_for_softmax": (lambda: _mutant("softmax_swap", lambda gm: _retarget(
        gm, torch.ops.aten._softmax.default, torch.ops.aten._log_softmax.default)),
                           ["ops/softmax/float32/compiled"]),
    "dropped_bias": (lambda: _mutant("dropped_bias", lambda gm: _retarget(
        gm, torch.ops.aten.addmm.default, lambda b, x, w, **kw: torch.ops.aten.mm.default(x, w))),
        ["ops/addmm/float32/compiled"]),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_negative_control_is_caught(mutant):
    backend, must_fail = MUTANTS[mutant]
    name = backend() if callable(backend) else backend
    target = Target(device="cpu", backend=name, options=(("strict", True),) if name.startswith("tv_conf") else ())
    target.setup()
    cases = {c.id: c for c in cases_for(target, "inference")}  # three samples per op
    for case_id in must_fail:
        result = run_case(cases[case_id], target)
        assert result.status == "fail", f"{mutant} was not caught by {case_id}: {result}"


def test_report_document_counts():
    from torchvendor.sdk.conformance.core import Result
    from torchvendor.sdk.conformance.runner import SuiteRun

    results = [Result("a/x", "a", "pass"), Result("a/y", "a", "fail", "boom"), Result("b/z", "b", "fallback",
                                                                                        fallback={"aten.mm": 2})]
    doc = to_dict(SuiteRun(Target(), "minimal", results, 1.0, "."))
    assert doc["summary"] == {"pass": 1, "fallback": 1, "fail": 1, "unsupported": 0, "skip": 0, "xfail": 0}
    assert doc["areas"]["a"]["fail"] == 1 and doc["fallback"] == {"aten.mm": 2}
    assert doc["rates"]["total"] == {"claimed": 3, "pass_rate": 2 / 3, "native_rate": 1 / 3}
    assert [c["id"] for c in doc["failures"]] == ["a/y"] and doc["implement_next"][0]["op"] == "aten.mm"


def test_pytest_plugin_runs_cases_in_a_vendors_ci(tmp_path):
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["torchvendor.sdk.conformance.pytest_plugin"]\n')
    (tmp_path / "test_vendor.py").write_text("def test_conformance(conformance_case):\n    conformance_case.check()\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tv-device", "cpu",
                          "--tv-backend", "tv_conf_dropped_mutation", "-k", "compile/mutation or compile/aliasing",
                          "-p", "conformance_mutants"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(  # the caller's path kept
                             [str(Path(__file__).parent), *filter(None, [os.environ.get("PYTHONPATH")])])})
    assert "1 failed, 1 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    assert "compile/mutation" in run.stdout


def test_error_inputs_are_compared_with_the_cpu(acme):
    target = Target(device="acme")
    cases = {c.id: c for c in cases_for(target, "device") if c.id.endswith("/errors")}
    assert run_case(cases["ops/diagonal/errors"], target).status == "pass"
    # found by this area: the device's fallback missed the CPU's overlap checks of an out= aliasing
    # an input (the harness now keeps the aliasing on the device, the fallback checks first)
    for op in ("cat", "gather", "index_select", "kthvalue", "bernoulli", "take", "masked_select"):
        result = run_case(cases[f"ops/{op}/errors"], target)
        assert result.status == "pass", (op, result.reason)
    # gradient's error input puts `spacing` on meta (a device mismatch): it stays there; narrow_copy's
    # dim out of range raises the CPU kernel's RuntimeError (the generic kernel raised IndexError)
    for op in ("gradient", "narrow_copy"):
        result = run_case(cases[f"ops/{op}/errors"], target)
        assert result.status == "pass", (op, result.reason)


def test_decomposed_ops_run_the_cpu_kernel_on_the_device(acme):
    """Ops with a device-generic decomposition beside their CPU kernel run the CPU kernel through
    the fallback: layer norm of one element is 0 as on the CPU (the decomposition gave 1e-4 off),
    group norm takes an empty input, lstsq picks the CPU's driver (gelsy, not gels)."""
    x = torch.tensor([[3.0]])
    assert torch.nn.functional.layer_norm(x.to("acme"), (1,)).cpu().item() == 0.0
    empty = torch.randn(1, 0, 1)
    try:
        expected = torch.nn.functional.group_norm(empty, 1).shape
    except RuntimeError as e:  # 2.14 refuses zero channels in Python, before any kernel
        with pytest.raises(RuntimeError, match=str(e)):
            torch.nn.functional.group_norm(empty.to("acme"), 1)
    else:
        assert torch.nn.functional.group_norm(empty.to("acme"), 1).shape == expected
    a = torch.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])   # rank 1: gels and gelsy differ
    b = torch.tensor([[1.0], [2.0], [3.0]])
    torch.testing.assert_close(torch.linalg.lstsq(a.to("acme"), b.to("acme")).solution.cpu(), torch.linalg.lstsq(a, b).solution)
    counts = torch.acme.fallback_counts()
    assert counts.get("native_layer_norm", 0) >= 1 and counts.get("linalg_lstsq", 0) >= 1
    target = Target(device="acme")
    cases = {c.id: c for c in cases_for(target, "device")}
    for case in ("ops/native_layer_norm/float32/eager", "ops/nn.functional.layer_norm/float32/backward",
                 "ops/nn.functional.group_norm/float32/eager", "ops/linalg.lstsq/float32/backward"):
        assert run_case(cases[case], target).status in ("pass", "fallback"), case


_DIST_CASES = ("ddp_compiled", "fsdp2", "dtensor", "functional_collectives")


def test_distributed_cases_per_target_and_profile():
    """Four cases on the CPU over gloo; on a torchvendor device each also on both collective paths;
    only in the training and full profiles, and only with a backend (the default demo has none)."""
    from torchvendor.sdk.conformance.distributed_cases import cases

    on_cpu = [f"distributed/{n}_two_processes" for n in _DIST_CASES]
    on_acme = on_cpu + [f"distributed/{n}_on_device_{p}" for p in ("native", "staged") for n in _DIST_CASES]
    assert [c.id for c in cases(Target(device="cpu", backend="eager"), "training")] == on_cpu
    assert [c.id for c in cases(Target(device="acme", backend="eager"), "full")] == on_acme
    for profile in ("minimal", "device", "inference"):
        assert cases(Target(device="acme", backend="eager"), profile) == [], profile
    assert cases(Target(device="acme"), "full") == []
    assert not [c for c in cases_for(Target(device="acme", backend="eager"), "minimal") if c.area == "distributed"]


@pytest.mark.slow
def test_distributed_area_over_two_processes_on_cpu(tmp_path):
    """DDP of a compiled model, FSDP2, DTensor and functional collectives over gloo match one CPU process."""
    run = _cli("--backend", "torchvendor_cpu", "--device", "cpu", "--profile", "training", "--only", "distributed/*",
               "--report", str(tmp_path), "--no-progress")
    assert run.returncode == 0, run.stdout[-3000:]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert [(c["id"], c["status"]) for c in doc["cases"]] == [
        (f"distributed/{n}_two_processes", "pass") for n in _DIST_CASES]


@pytest.mark.slow
def test_distributed_area_on_the_device_through_the_runner(tmp_path):
    """The runner's workers may start processes (they are not daemons): every distributed case runs
    on acme, on the simulator's native collectives and staged, and each path is the one counted."""
    run = _cli("--backend", "torchvendor_cpu", "--device", "acme", "--profile", "full", "--only", "distributed/*",
               "--report", str(tmp_path), "--no-progress")
    assert run.returncode == 0, run.stdout[-3000:]
    doc = json.loads((tmp_path / "report.json").read_text())
    statuses = {c["id"]: c["status"] for c in doc["cases"]}
    for name in _DIST_CASES:
        for path in ("native", "staged"):
            assert statuses.get(f"distributed/{name}_on_device_{path}") == "pass", statuses
    assert len(statuses) == 3 * len(_DIST_CASES) and set(statuses.values()) == {"pass"}, statuses


def test_compiled_backward_takes_the_gradient_opinfo_defines():
    """linalg.eig's eigenvectors are defined up to a phase; OpInfo's output_process_fn_grad makes
    the loss independent of it (without it, eager's backward raised 'ill-defined')."""
    target = Target(device="cpu", backend="torchvendor_cpu")
    case = next(c for c in cases_for(target, "training") if c.id == "ops/linalg.eig/float32/compiled_backward")
    result = run_case(case, target)
    assert result.status in ("pass", "fallback"), result.reason


def test_compiled_backward_of_an_op_with_complex_outputs():
    """fft.fft of a float32 input returns complex values: its gradient is taken of a real sum."""
    target = Target(device="cpu", backend="torchvendor_cpu")
    case = next(c for c in cases_for(target, "training") if c.id == "ops/fft.fft/float32/compiled_backward")
    result = run_case(case, target)
    assert result.status == "pass", result.reason


def test_nan_inf_variant_leaves_out_samples_the_cpu_cannot_reproduce():
    """NaN/Inf planted into max_unpool's values made the values at duplicate indices differ, and
    torch 2.11's CPU kernel (parallel writes) then gave another result on each run: such samples
    are left out; reproducible ones stay."""
    import types

    from torch.testing._internal.opinfo.core import SampleInput

    from torchvendor.sdk.conformance.op_cases import _cpu_reproducible

    assert not _cpu_reproducible(types.SimpleNamespace(op=torch.rand_like), SampleInput(torch.ones(3)))
    assert _cpu_reproducible(types.SimpleNamespace(op=torch.neg), SampleInput(torch.tensor([float("nan"), 1.0])))


def test_nan_inf_variant_compares_undefined_results_by_metadata(acme):
    """chebyshev_polynomial_u of NaN is whatever the CPU kernel's register held (5.9e14 once):
    its nan_inf case compares shapes and dtypes only, and says why."""
    from torchvendor.sdk.conformance.op_cases import NAN_UNDEFINED_OPS, _run_variant
    from torchvendor.sdk.conformance.opinfo import opinfo_ops

    op = next(o for o in opinfo_ops(torch.float32) if o.full_name == "special.chebyshev_polynomial_u")
    res = _run_variant(op, torch.float32, "acme", "nan_inf")
    assert res.status == "pass" and res.meta_only == res.samples > 0
    assert res.meta_only_reason == NAN_UNDEFINED_OPS["special.chebyshev_polynomial_u"]
