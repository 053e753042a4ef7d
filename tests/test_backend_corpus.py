"""The IR corpus through compile backends, compared with eager: outputs, mutated inputs, gradients,
and other sizes for dynamic cases.

Backends: a LOOP-level backend whose kernels run in the loop IR's reference interpreter (it
checks the SDK's loop plumbing: lowering per partition, the program runner, training, dynamic
shapes) on every case, and the reference CPU backend ``torchvendor_cpu`` (generated C++).

Each ``torchvendor_cpu`` case costs a C++ compile per kernel (2-18 s on two cores), so the
default tier runs it on :data:`CPU_DEFAULT`, a set cover of the corpus: these 17 of the 53 cases
execute every line and branch of the CPU code generator (then ``reference_backends/cpu/codegen.py``,
whose walk now lives in ``sdk/compile/c_renderer.py``) and ``toolchain.py`` that all 53 execute, hand the code generator every statement op x dtype, attribute value and
index function that all 53 do, and include training, dynamic, random and mutating cases
(measured with coverage.py and a record of each compiled kernel, Nov 2026). ``-m slow`` runs
the other 36.
"""
from __future__ import annotations

import copy
import importlib

import pytest
import torch
from ir_corpus import CORPUS, SEED

from torchvendor.ir import compat
from torchvendor.sdk import LoopBackend, last_report, reference_kernel, register_backend
from torchvendor.sdk.conformance.zoo import leaves as _leaves


class InterpretedLoop(LoopBackend):
    """LOOP level; each kernel runs in the reference interpreter."""

    name = "tv_loop_reference"

    def compile(self, kernel):
        return reference_kernel(kernel)


register_backend(InterpretedLoop)

BACKENDS = {"tv_loop_reference": None, "torchvendor_cpu": "torchvendor.reference_backends.cpu"}

#: The corpus cases ``torchvendor_cpu`` runs in the default tier (see the module docstring).
CPU_DEFAULT = frozenset({
    "transformer_block", "pools", "pointwise_chain", "dict_output", "slicing", "embedding_tied",
    "conv_bn_relu", "mask_logic", "type_promotion", "unary_mix", "broadcast_add", "batch_norm_eval",
    "clamp_hardtanh", "dynamic_mlp", "dropout", "group_norm", "log_softmax",
})


def _params():
    for case in CORPUS:
        for backend in BACKENDS:
            slow = backend == "torchvendor_cpu" and case.name not in CPU_DEFAULT
            yield pytest.param(case, backend, id=f"{case.name}-{backend}", marks=[pytest.mark.slow] if slow else [])


def _clone(x):
    if isinstance(x, torch.Tensor):
        y = x.detach().clone()
        y.requires_grad_(x.requires_grad)
        return y
    return copy.deepcopy(x)


def _run(fn, inputs):
    torch.manual_seed(SEED)
    return fn(*inputs)


def test_cpu_default_cases_are_corpus_cases():
    assert CPU_DEFAULT <= {c.name for c in CORPUS}


@pytest.mark.parametrize("case,backend", list(_params()))
def test_corpus_matches_eager(case, backend):
    if BACKENDS[backend]:
        importlib.import_module(BACKENDS[backend])
    compat.dynamo_reset()
    fn = case.make()
    ref_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled = torch.compile(fn, backend=backend, dynamic=case.dynamic or None)
    inputs = case.inputs()
    ours_in, ref_in = [_clone(x) for x in inputs], [_clone(x) for x in inputs]
    ours, ref = _run(compiled, ours_in), _run(ref_fn, ref_in)
    tol = case.tolerances
    assert not [p for g in last_report().graphs for p in g.partitions if p.status == "fallback"], str(last_report())
    if case.rng:
        for o, r in zip(_leaves(ours), _leaves(ref), strict=True):
            assert (o.shape, o.dtype) == (r.shape, r.dtype)
        if case.check:
            case.check(ours_in, _leaves(ours))
        return
    for o, r in zip(_leaves(ours), _leaves(ref), strict=True):
        torch.testing.assert_close(o, r, **tol)
    if case.mutates:
        for o, r in zip(ours_in, ref_in):
            if isinstance(o, torch.Tensor):
                torch.testing.assert_close(o, r, **tol)
        if isinstance(fn, torch.nn.Module):
            for o, r in zip(fn.buffers(), ref_fn.buffers()):
                torch.testing.assert_close(o, r, **tol)
    if case.trainable:
        grads_of = [x for x in ours_in if isinstance(x, torch.Tensor) and x.requires_grad]
        ref_grads_of = [x for x in ref_in if isinstance(x, torch.Tensor) and x.requires_grad]
        if isinstance(fn, torch.nn.Module):
            grads_of += list(fn.parameters())
            ref_grads_of += list(ref_fn.parameters())
        outs = [o for o in _leaves(ours) if o.requires_grad]
        ref_outs = [o for o in _leaves(ref) if o.requires_grad]
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
        torch.autograd.backward(ref_outs, [torch.ones_like(o) for o in ref_outs])
        for a, b in zip(grads_of, ref_grads_of):
            torch.testing.assert_close(a.grad, b.grad, **tol)
    if case.dynamic and case.inputs2 is not None:
        inputs2 = case.inputs2()
        with torch.no_grad():
            for o, r in zip(_leaves(_run(compiled, [_clone(x) for x in inputs2])),
                            _leaves(_run(ref_fn, [_clone(x) for x in inputs2])), strict=True):
                torch.testing.assert_close(o, r, **tol)
