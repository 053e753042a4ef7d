"""The ``unsupported`` status: what the device does not implement is told apart from a wrong answer,
and becomes a failure where the manifest claims it."""
from __future__ import annotations

import torch

from torchvendor.sdk.conformance.core import Case, Target, Unsupported, load_manifest, run_case
from torchvendor.sdk.conformance.report import to_dict
from torchvendor.sdk.conformance.runner import SuiteRun


def _raise(exc: Exception):
    def run(target: Target) -> None:
        raise exc
    return run


def _sparse_add(target: Target) -> None:
    # the CPU backend has no kernel for this op on a sparse CSR tensor: torch raises NotImplementedError
    x = torch.eye(3).to_sparse_csr()
    torch.ops.aten.cumsum.default(x, 0)


def test_not_implemented_is_unsupported_not_a_failure():
    target = Target()
    case = Case("ops/cumsum/float32/sparse", "ops", _sparse_add, {"op": "cumsum", "dtype": "float32"})
    result = run_case(case, target)
    assert result.status == "unsupported" and "NotImplementedError" in result.reason, result
    assert run_case(Case("device/x", "device", _raise(Unsupported("no sparse layout"))), target).status == "unsupported"
    assert run_case(Case("device/y", "device", _raise(AssertionError("3 != 4"))), target).status == "fail"


def test_a_manifest_that_claims_the_op_turns_unsupported_into_a_failure(tmp_path):
    case = Case("ops/cumsum/float32/sparse", "ops", _raise(NotImplementedError("no kernel")),
                {"op": "cumsum", "dtype": "float32"})
    other = Case("device/sparse", "device", _raise(Unsupported("no sparse layout")))
    m = tmp_path / "m.toml"
    m.write_text('dtypes = ["float32"]\n')  # defaults claim nothing explicitly
    assert run_case(case, Target(), load_manifest(m)).status == "unsupported"
    m.write_text('ops = ["cum*"]\nareas = ["ops", "device"]\n')
    claimed = run_case(case, Target(), load_manifest(m))
    assert claimed.status == "fail" and "claimed by the manifest" in claimed.reason
    assert run_case(other, Target(), load_manifest(m)).status == "fail"  # area claimed
    m.write_text('ops = ["cum*"]\n[xfail]\n"ops/cumsum/*" = "CSR kernels come next release"\n')
    assert run_case(case, Target(), load_manifest(m)).status == "xfail"


def test_unsupported_has_its_own_column():
    results = [run_case(Case("ops/a", "ops", _raise(NotImplementedError("x"))), Target()),
               run_case(Case("ops/b", "ops", lambda t: None), Target())]
    doc = to_dict(SuiteRun(Target(), "minimal", results, 1.0, "."))
    assert doc["summary"]["unsupported"] == 1 and doc["summary"]["pass"] == 1 and doc["summary"]["fail"] == 0
    assert doc["areas"]["ops"]["unsupported"] == 1


# ---- every status true for every backend (issue 33) ---------------------------------------------------

def _acme_only_backend():
    """A LOOP backend that generates code for one device only, as a vendor's does."""
    from torchvendor.reference_backends.cpu.backend import CpuBackend
    from torchvendor.sdk import register_backend

    class AcmeOnly(CpuBackend):
        name = "tv_test_acme_only"
        device = "acme"

    register_backend(AcmeOnly)
    return AcmeOnly


def test_an_input_less_graph_runs_on_the_backends_device():
    """arange, eye, linspace, the windows: no inputs, the output on the device. Before, the graph's
    device was read from its inputs ("the inputs are on cpu") and the backend refused it."""
    from torchvendor.sdk import last_report, register_device

    register_device("acme")
    backend = _acme_only_backend()
    torch._dynamo.reset()
    f = torch.compile(lambda: torch.arange(6, device="acme", dtype=torch.float32) * 2, backend=backend.name)
    assert torch.equal(f().cpu(), torch.arange(6, dtype=torch.float32) * 2)
    report = last_report()
    assert not report.unsupported(), report.unsupported()
    assert [p.status for p in report.partitions] == ["compiled"], report


def test_a_view_left_outside_a_claimed_region_is_not_a_fallback():
    """The compiled op case of a view (transpose) on a backend that claims every op: the partitioner
    may leave the view at the region's edge (free in eager), which is never counted as a fallback."""
    from torchvendor.sdk.conformance import op_cases
    from torchvendor.sdk.conformance.op_kinds import is_compute

    class Report:
        def unsupported(self):
            return {}

        def left_outside(self):
            return {"aten.transpose.int": {"a view at a partition's edge": 1}, "aten.mul.Tensor": {"too small": 1}}

        def device_fallback(self):
            return {}

        partitions = []

    fallback, why = op_cases._fallback_of(Report())
    assert fallback == {"aten.mul.Tensor": 1} and "too small" in why[0], (fallback, why)
    assert not is_compute("aten.transpose.int") and is_compute("aten.mul.Tensor")


def test_the_reports_first_line_names_the_entry_to_fix_first(tmp_path):
    from torchvendor.sdk.conformance.core import Result
    from torchvendor.sdk.conformance.report import summary_table, write_reports
    from torchvendor.sdk.conformance.runtime_order import explain

    results = explain([
        Result("runtime/allocations_disjoint", "runtime", "fail",
               'runtime.h, malloc: "Device memory": two live allocations overlap. Suspect: malloc, memset.'),
        Result("runtime/memcpy_exact_bytes", "runtime", "fail",
               'runtime.h, memcpy: "Copy n bytes": byte 4096 of 4097 reads 0xee, expected 0x3. Suspect: memcpy.'),
        Result("models/gpt2/inference", "models", "fail", "AssertionError: inference: relative RMS error ..."),
    ])
    run = SuiteRun(Target(device="acme"), "minimal", results, 1.0, str(tmp_path))
    doc = to_dict(run)
    assert summary_table(doc).splitlines()[0] == \
        "Fix first: memcpy (runtime/memcpy_exact_bytes); 1 failure of other areas may follow from it"
    assert [c["id"] for c in doc["failures"]][0] == "runtime/memcpy_exact_bytes"
    blocked = next(c for c in doc["failures"] if c["id"] == "runtime/allocations_disjoint")
    assert blocked["reason"].startswith("blocked by memcpy (see runtime/memcpy_exact_bytes); what it saw:")
    assert "Suspect" not in blocked["reason"]
    md = open(write_reports(run)["markdown"]).read()
    assert md.splitlines()[0].startswith("# Fix first: memcpy (runtime/memcpy_exact_bytes)")


def test_the_ci_sample_rotates_with_the_seed_and_is_listed_in_the_report(tmp_path):
    from torchvendor.sdk.conformance.core import Result
    from torchvendor.sdk.conformance.op_cases import ci_sample, family

    a, b = ci_sample(1), ci_sample(2)
    assert a == ci_sample(1) and a != b
    ops = {n for n, _, _ in a}
    import torchvendor.sdk.conformance.op_cases as oc

    families = {family(oc._ops_by_name(torch.float32)[n]) for n in ops}
    assert {"linalg", "nn.functional", "unary", "binary", "reduction", "other"} <= families
    assert {d for _, d, _ in a} >= {"float32", "bfloat16", "float16"} and any(v == "compiled" for _, _, v in a)
    run = SuiteRun(Target(device="acme"), "ci", [Result("ops/add/float32/eager", "ops", "pass")], 1.0, str(tmp_path),
                   seed=7)
    doc = to_dict(run)
    assert doc["seed"] == 7 and doc["ran"] == ["ops/add/float32/eager"]
