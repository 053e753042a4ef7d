"""torch's own device-generic test machinery, run for the device under test (area ``torch``).

PyTorch tests every backend with one mechanism: a *generic* test class whose tests take
``device`` (and ``dtype`` and ``op``) arguments is instantiated once per device type by
``instantiate_device_type_tests``; an out-of-tree device is reached through its
``PrivateUse1TestBase``. The OpInfo database carries per-test knowledge for that mechanism:
``DecorateInfo`` entries (skips, expected failures, tolerances) keyed by test class and test name,
which the ``@ops`` decorator applies per op, dtype and device type.

This area builds generic classes named as torch's own (``TestCommon``, with its test names), so
that this knowledge applies, instantiates them for the device with torch's machinery (through
``torchvendor.ir.compat``) and runs each instantiated test as one case. torch's test files
(``test/test_ops.py``) are not in the wheel: the test bodies here are the suite's own, written to
the contracts those names stand for. ``tests/test_conformance_torch.py`` shows the same classes
collected by pytest, which is how a vendor adds them to its own CI.

    >>> from torchvendor.sdk.conformance.core import Target
    >>> cases(Target(device="cpu"), "device")
    []
"""
from __future__ import annotations

import unittest
from functools import cache
from typing import Any, Callable

import torch

from torchvendor.ir import compat

from . import opinfo
from .core import Case, Target

__all__ = ["cases", "generic_classes", "GENERIC_OPS"]

#: the OpInfos the generic tests run over (the device sweep runs every OpInfo its own way)
GENERIC_OPS = opinfo.REPRESENTATIVE_OPS


def _to_cpu(x: Any) -> Any:
    return x.to("cpu") if isinstance(x, torch.Tensor) else x


def _run(op: Any, sample: Any) -> Any:
    torch.manual_seed(0)  # random ops draw the same numbers on both sides
    return sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))


def _test_common(ops: list[Any]) -> type:
    """A generic ``TestCommon`` over ``ops`` (float32): the device against the CPU on OpInfo's
    reference inputs, and the device against itself on non-contiguous samples."""
    tools = compat.device_test_tools()

    class TestCommon(tools.TestCase):  # named as torch's, so OpInfo's DecorateInfo entries apply
        @tools.ops(ops, allowed_dtypes=(torch.float32,))
        def test_compare_cpu(self, device: str, dtype: torch.dtype, op: Any) -> None:
            for sample in op.reference_inputs(device, dtype):
                self.assertEqual(_run(op, sample), _run(op, sample.transform(_to_cpu)), exact_device=False)

        @tools.ops(ops, allowed_dtypes=(torch.float32,))
        def test_noncontiguous_samples(self, device: str, dtype: torch.dtype, op: Any) -> None:
            for sample in op.sample_inputs(device, dtype):
                # compared on the CPU: the suite's own comparison never runs on the device under test
                self.assertEqual(opinfo.to_cpu(_run(op, sample.noncontiguous())), opinfo.to_cpu(_run(op, sample)))

    return TestCommon


@cache
def generic_classes(names: tuple[str, ...] = GENERIC_OPS) -> tuple[type, ...]:
    """The generic classes over the OpInfos ``names``, instantiated for the PrivateUse1 device
    (register it first). Each class's ``test_*`` methods are torch's instantiated tests.

    >>> cls, = generic_classes(("add",))  # the tests are named test_<name>_<op>_<device>_<dtype>
    >>> [n for n in dir(cls) if n.startswith("test_compare")]
    ['test_compare_cpu_add_acme_float32']
    """
    return (compat.instantiate_for_privateuse1(_test_common(opinfo.opinfo_ops(torch.float32, names))),)


def _tests(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if n.startswith("test_") and callable(getattr(cls, n)))


@cache
def _set_up(cls: type) -> None:
    cls.setUpClass()  # a unittest runner calls it once per class; this area runs tests one by one


def _outcome(result: unittest.TestResult) -> dict[str, Any] | None:
    """None for a pass, ``{"skip": why}`` for a skip or an expected failure OpInfo declares;
    raises AssertionError with the test's message otherwise."""
    problems = result.errors + result.failures
    if problems:
        text = problems[0][1].strip()
        raise AssertionError(text[-4000:])  # the tail of the traceback: the assertion and its cause
    if result.unexpectedSuccesses:
        raise AssertionError("OpInfo marks this test as an expected failure on this device, but it passed: "
                             "the DecorateInfo entry is stale")
    if result.skipped:
        return {"skip": f"skipped by torch's test machinery: {result.skipped[0][1][:300]}"}
    if result.expectedFailures:
        return {"skip": "OpInfo marks this test as an expected failure on this device (it fails)"}
    return None


def _case(cls: type, name: str) -> Callable[[Target], Any]:
    def run(target: Target) -> Any:
        from .op_cases import _fallback_counter

        _set_up(cls)
        reset, counts = _fallback_counter(target.device)
        reset()
        result = unittest.TestResult()
        cls(name).run(result)
        outcome = _outcome(result)
        if outcome is not None:
            return outcome
        return {"fallback": counts(), "reason": "ran through the device's CPU fallback"}
    return run


def _op_of(name: str, ops: dict[str, str]) -> str:
    for formatted, full in sorted(ops.items(), key=lambda kv: -len(kv[0])):
        if f"_{formatted}_" in name:
            return full
    return ""


def cases(target: Target, profile: str) -> list[Case]:
    """torch's instantiated device-generic tests, one case each (device and full profiles)."""
    if target.device in ("cpu", "cuda", "meta") or profile not in ("device", "full"):
        return []
    ops = {op.formatted_name: op.full_name for op in opinfo.opinfo_ops(torch.float32, GENERIC_OPS)}
    out = []
    for cls in generic_classes():
        for name in _tests(cls):
            variant = "compare_cpu" if name.startswith("test_compare_cpu") else "noncontiguous_samples"
            tags = {"op": _op_of(name, ops), "dtype": "float32", "variant": variant}
            # torch names the class after the device type it had then ("PRIVATEUSE1" or the device's):
            # the case id uses the generic name, the same in every process
            out.append(Case(f"torch/TestCommon.{name}", "torch", _case(cls, name), tags))
    return out
