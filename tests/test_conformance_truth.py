"""The suite's float64 rule: a reduced-precision result beyond the strict tolerance passes when it
is as close to float64 truth as the CPU's own (opinfo._no_less_accurate, the model suite's rule),
in the eager comparisons and the compiled ones; a result that computes something else fails."""
from __future__ import annotations

import pytest
import torch

from torchvendor.sdk.conformance import op_cases, opinfo
from torchvendor.sdk.conformance.core import Case, Target, run_case


def _ill_conditioned() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # a sum with cancellation: float32 results differ from each other by more than the strict
    # tolerance depending on the accumulation order
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4096, generator=g, dtype=torch.float64) * 1e3
    x[:, 0] = -x[:, 1:].sum(1) + 100.0
    x = x.float()
    truth = x.double().sum(1)                               # the float32 inputs summed in float64
    cpu = x.sum(1)                                          # the CPU's float32 cascade sum: 1e-4 off
    wider = x.double().sum(1).float()                       # a kernel accumulating in double
    return cpu, wider, truth


def test_a_different_rounding_passes_and_a_wrong_result_fails() -> None:
    cpu, wider, truth = _ill_conditioned()
    with pytest.raises(AssertionError):
        torch.testing.assert_close(wider, cpu)  # the strict comparison alone fails
    assert opinfo._no_less_accurate([wider], [cpu], lambda: [truth])
    wrong = cpu * (1 + 1e-2)                                # a kernel that computes something else
    assert not opinfo._no_less_accurate([wrong], [cpu], lambda: [truth])
    assert not opinfo._no_less_accurate([wider], [cpu], lambda: [])  # no truth: no pass
    assert not opinfo._no_less_accurate([wider], [cpu], lambda: 1 / 0)  # truth raised
    ints = torch.arange(3)
    assert not opinfo._no_less_accurate([ints + 1], [ints], lambda: [ints.double()])  # exact dtypes


def test_compiled_comparison_applies_the_rule() -> None:
    cpu, wider, truth = _ill_conditioned()
    op_cases._assert_close_or_as_accurate(wider, cpu, lambda: [truth], "sample 0")
    with pytest.raises(AssertionError, match=r"sample 0: values: 64 of 64 elements differ(.|\n)*Tensor-likes are not close"):
        op_cases._assert_close_or_as_accurate(cpu * (1 + 1e-2), cpu, lambda: [truth], "sample 0")


def test_float64_copies_keep_grad_leaves() -> None:
    x = torch.randn(3, requires_grad=True)
    inp, args, kwargs = opinfo._to_float64((x, [torch.ones(2, dtype=torch.bfloat16), 3], {"w": torch.arange(2)}))
    assert inp.dtype == torch.float64 and inp.requires_grad and inp.is_leaf
    assert args[0].dtype == torch.float64 and args[1] == 3 and kwargs["w"].dtype == torch.int64


def test_an_algorithm_torch_picks_by_device_is_an_xfail_with_its_reason(acme) -> None:
    # linear_cross_entropy's chunked path: torch's 'auto' options accumulate in float32 on the CPU and
    # in the input's dtype on a device it does not list; the device's result is the CPU's for that pick
    name = "nn.functional.linear_cross_entropy.chunked"
    ops = opinfo.opinfo_ops(torch.bfloat16, [name])
    if not ops:
        pytest.skip("this torch has no chunked linear_cross_entropy (torch < 2.13)")
    run = op_cases._eager_case(ops[0], torch.bfloat16, "eager")
    on_device = run_case(Case(f"ops/{name}/bfloat16/eager", "ops", run), Target(device="acme"))
    assert on_device.status == "xfail", on_device
    assert "LinearCrossEntropyOptions" in on_device.reason and "output mismatch" in on_device.reason
    assert run_case(Case(f"ops/{name}/bfloat16/eager", "ops", run), Target(device="cpu")).status == "pass"
    assert op_cases._device_defined_algorithm(ops[0], torch.float32, "acme") == ""
