"""``torch._assert_async`` in the loop IR (Inductor's ``ops.device_assert_async``, e.g. from
``one_hot``'s class check in a mixture-of-experts router): a ``device_assert`` statement that the
interpreter and both reference code generators keep, so such a partition compiles instead of
falling back, and a false condition still fails with the message."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchvendor.reference_backends.cpu  # noqa: F401 - registers torchvendor_cpu
from torchvendor.ir import capture
from torchvendor.ir.loop_ir import LoopIRRuntimeError
from torchvendor.reference_backends.cuda import codegen as cuda
from torchvendor.sdk import BackendError, ProgramRunner, last_report, loop_kernels, reference_kernel

MESSAGE = "Class values must be smaller than num_classes."


def f(x, idx):
    torch._assert_async((idx < 8).all(), MESSAGE)
    return x * 2 + idx


def _program():
    return capture(f, [torch.randn(5), torch.arange(5)], level="loop").inference


def _assert_kernel():
    (lk,) = [lk for lk in loop_kernels(_program()) if any(s.op == "device_assert" for n in lk.kernel.nests
                                                          for s in n.stmts())]
    return lk


def test_assert_async_is_a_device_assert_statement():
    st = next(s for n in _assert_kernel().kernel.nests for s in n.stmts() if s.op == "device_assert")
    assert st.name is None and st.attr("msg") == MESSAGE and len(st.args) == 1


@pytest.mark.parametrize("holds", [True, False])
def test_interpreter_checks_the_condition(holds):
    program = _program()
    run = ProgramRunner(program, {lk.name: reference_kernel(lk) for lk in loop_kernels(program)})
    x, idx = torch.randn(5), torch.arange(5) * (1 if holds else 3)
    args = [idx if program.buffer(n).dtype == "int64" else x for n in program.inputs]  # Dynamo's order
    if holds:
        torch.testing.assert_close(run(*args)[0], f(x, idx))
    else:
        with pytest.raises(LoopIRRuntimeError, match=MESSAGE):
            run(*args)


def test_torchvendor_cpu_compiles_it_and_a_false_condition_raises():
    g = torch.compile(f, backend="torchvendor_cpu", options={"strict": True})
    x = torch.randn(5)
    torch.testing.assert_close(g(x, torch.arange(5)), f(x, torch.arange(5)))
    assert all(p.status == "compiled" for gr in last_report().graphs for p in gr.partitions)
    with pytest.raises(BackendError, match="device assertion failed: " + MESSAGE):
        g(x, torch.tensor([0, 1, 30, 2, 3]))


def test_one_hot_partition_compiles():
    g = torch.compile(lambda i: F.one_hot(i, 8).float() * 2, backend="torchvendor_cpu", options={"strict": True})
    i = torch.tensor([0, 3, 7])
    torch.testing.assert_close(g(i), F.one_hot(i, 8).float() * 2)


def test_cuda_code_generator_records_the_message():
    lk = _assert_kernel()
    code = cuda.generate(lk.kernel, lk.buffers, ())
    assert code.checks == (cuda.ASSERTION + MESSAGE,)
    assert "tv_fail(0, 0)" in code.source
