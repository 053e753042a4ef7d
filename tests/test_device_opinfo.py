"""PyTorch's own OpInfo corpus (op_db, float32) run on the device through its CPU fallback and
native kernels, compared with CPU eager (see device_utils.run_opinfo_corpus for the rules).

Default tier: a fixed representative subset (device_utils.REPRESENTATIVE_OPS).
Slow tier (-m slow): every float32 OpInfo, one test per OpInfo full name.

The selected OpInfos run once per session in a child process (run_opinfo_corpus_isolated), so
a device bug that crashes or hangs the process fails that OpInfo's test instead of the whole
pytest session; each test then reports its OpInfo's result."""
from __future__ import annotations

import types

import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

from device_utils import DEVICE, REPRESENTATIVE_OPS, corpus_on_device, format_failure, opinfo_ops, run_opinfo_op, summarize

_F32_OPS = {op.full_name: op for op in opinfo_ops(torch.float32)}


_CORPUS_TESTS = ("test_opinfo_representative", "test_opinfo_full_corpus")

# Known device-layer gaps (reported to the lead; see the report of the device tests). Each
# entry is a strict xfail, so the test turns red as soon as the gap is closed and the entry
# must go. Key: OpInfo full name; value: the reason.
_SPARSE = "sparse layouts on the device: no Sparse*PrivateUse1 kernels or fallback"
KNOWN_DEVICE_BUGS: dict[str, str] = {
    "sparse.sampled_addmm": _SPARSE, "sparse.mm.reduce": _SPARSE, "to_sparse": _SPARSE,
}


def _params(names):
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_DEVICE_BUGS[n]))
            if n in KNOWN_DEVICE_BUGS else n for n in names]


@pytest.fixture(scope="session")
def opinfo_results(request):
    """Results of every OpInfo this session's selected corpus tests ask for, run once."""
    names = {item.callspec.params["name"] for item in request.session.items
             if getattr(item, "originalname", None) in _CORPUS_TESTS
             and hasattr(item, "callspec")}
    return corpus_on_device(frozenset(names))


def _check(results, name: str):
    res = results.get(name)
    assert res is not None, f"{name}: no result from the corpus runner"
    if res.status == "skip":
        pytest.skip(res.reason)
    if res.status == "fail":
        pytest.fail(format_failure(res), pytrace=False)
    assert res.passed == res.samples > 0
    return res


def test_representative_subset_exists():
    missing = [n for n in REPRESENTATIVE_OPS if n not in _F32_OPS]
    assert not missing, f"not float32 OpInfos in this torch: {missing}"
    assert 35 <= len(REPRESENTATIVE_OPS) <= 60


@pytest.mark.parametrize("name", _params(REPRESENTATIVE_OPS))
def test_opinfo_representative(opinfo_results, name):
    _check(opinfo_results, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", _params(sorted(_F32_OPS)))
def test_opinfo_full_corpus(opinfo_results, name):
    _check(opinfo_results, name)


# ---------------------------------------------------------------------------------------------
# negative controls: the runner must catch broken devices
# ---------------------------------------------------------------------------------------------

def _fake_op(fn, name="fake"):
    def sample_inputs(device, dtype, requires_grad=False, **kw):
        x = torch.linspace(-2, 2, 12, device=device, dtype=dtype).reshape(3, 4)
        yield SampleInput(x, args=(torch.ones(4, device=device, dtype=dtype),))
        yield SampleInput(x.t(), args=(torch.full((3,), 2.0, device=device, dtype=dtype),))
    return types.SimpleNamespace(name=name, full_name=name, decorators=(),
                                 sample_inputs=sample_inputs, op=fn)


def test_runner_passes_a_correct_op(acme):
    r = run_opinfo_op(_fake_op(torch.add), DEVICE)
    assert (r.status, r.samples, r.passed) == ("pass", 2, 2)


def test_runner_catches_wrong_values(acme):
    def bad(x, y):
        out = torch.add(x, y)
        return out + 1e-3 if out.device.type == DEVICE else out
    r = run_opinfo_op(_fake_op(bad), DEVICE)
    assert r.status == "fail" and r.failure_class == "mismatch: values" and r.failed == 2


def test_runner_catches_wrong_output_device(acme):
    r = run_opinfo_op(_fake_op(lambda x, y: torch.add(x, y).cpu()), DEVICE)
    assert r.status == "fail" and r.failure_class == "wrong output device"


def test_runner_catches_inplace_into_a_copy(acme):
    def inplace(x, y):
        if x.device.type == DEVICE:
            return x.clone().add_(y)  # the Paddle#50045 bug: result right, input untouched
        return x.add_(y)
    r = run_opinfo_op(_fake_op(inplace), DEVICE)
    assert r.status == "fail" and r.failure_class == "in-place/input mutation mismatch"


def test_runner_classifies_missing_kernels(acme):
    def missing(x, y):
        if x.device.type == DEVICE:
            raise NotImplementedError("Could not run 'aten::fake' with arguments from the "
                                      "'PrivateUse1' backend")
        return x + y
    r = run_opinfo_op(_fake_op(missing), DEVICE)
    assert r.status == "fail" and r.failure_class.startswith("device error: not implemented")
    s = summarize({r.name: r})
    assert s["ops_fail"] == 1 and s["sample_pass_rate"] == 0.0
