"""torch's device-generic test machinery run for the vendor device, collected by pytest.

The conformance area ``torch`` (sdk/conformance/torch_tests.py) builds generic test classes named
as torch's own and instantiates them for the PrivateUse1 device with
``instantiate_device_type_tests``; binding the instantiated classes into a test module is all a
vendor's CI needs (the device must be registered first: tests/conftest.py does it at start-up).
Here over a few ops, so it stays quick; ``pytest tests/test_conformance_torch.py -v`` lists
``TestCommonPRIVATEUSE1::test_compare_cpu_add_acme_float32`` and its siblings.
"""
from __future__ import annotations

import unittest

import pytest
import torch

from torchvendor.sdk.conformance import torch_tests
from torchvendor.sdk.conformance.core import Target, cases_for, run_case

OPS = ("add", "softmax", "nn.functional.conv2d", "nn.functional.embedding", "bernoulli")

for _cls in torch_tests.generic_classes(OPS):
    globals()[_cls.__name__] = _cls  # collected by pytest like any unittest class
del _cls  # (pytest collects every unittest class bound in the module, whatever its name)


def test_the_area_runs_torchs_instantiated_tests_as_cases(acme):
    target = Target(device="acme")
    cases = {c.id: c for c in cases_for(target, "device") if c.area == "torch"}
    assert len(cases) == 2 * len(torch_tests.GENERIC_OPS)  # test_compare_cpu, test_noncontiguous_samples
    add = run_case(cases["torch/TestCommon.test_compare_cpu_add_acme_float32"], target)
    assert add.status == "fallback" and add.tags["op"] == "add" and add.fallback
    # OpInfo's own knowledge applies: it skips test_compare_cpu for non-deterministic ops
    bern = run_case(cases["torch/TestCommon.test_compare_cpu_bernoulli_acme_float32"], target)
    assert bern.status == "skip" and "non-deterministic" in bern.reason


def test_a_failing_torch_test_is_a_failed_case(acme):
    class Broken(unittest.TestCase):
        def test_wrong(self):
            self.assertEqual(torch.ones(2, device="acme").cpu().tolist(), [1.0, 2.0])

        def test_fine(self):
            pass

    wrong = torch_tests._case(Broken, "test_wrong")
    with pytest.raises(AssertionError, match="AssertionError"):
        wrong(Target(device="acme"))
    assert torch_tests._case(Broken, "test_fine")(Target(device="acme"))["fallback"] is not None
