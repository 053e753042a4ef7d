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
