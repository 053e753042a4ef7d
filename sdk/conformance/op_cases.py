"""Operators: every OpInfo of PyTorch's database × dtype, eager on the device against the CPU
(all samples, also non-contiguous and with NaN/Inf planted in floating inputs, and OpInfo's error
inputs: what the CPU rejects, the device must reject), and compiled with
the backend against eager (forward, and backward in the training profiles), recording which ops
the backend did not run and which ran through the device's CPU fallback.

    >>> from torchvendor.sdk.conformance.core import Target
    >>> ids = [c.id for c in cases(Target(device="cpu", backend="inductor"), "minimal")]
    >>> "ops/add/float32/compiled" in ids
    True
"""
from __future__ import annotations

import itertools
import types
import warnings
from functools import cache
from typing import Any, Callable

import torch

from torchvendor.ir import compat

from ..zoo import leaves as _leaves
from . import opinfo
from .core import Case, Target

__all__ = ["cases", "MINIMAL_OPS"]

#: the minimal profile's operators: one or two of each family
MINIMAL_OPS = ("add", "mul", "div.no_rounding_mode", "exp", "sigmoid", "where", "clamp", "sum", "mean", "amax",
               "argmax", "softmax", "mm", "addmm", "nn.functional.linear", "nn.functional.gelu",
               "nn.functional.layer_norm", "nn.functional.conv2d", "cat", "transpose", "reshape", "index_select",
               "gather", "cumsum", "nn.functional.embedding")

_FRESH = itertools.count()


@cache
def _ops_by_name(dtype: torch.dtype) -> dict[str, Any]:
    return {op.full_name: op for op in opinfo.opinfo_ops(dtype)}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _fresh(fn: Callable[..., Any]) -> Callable[..., Any]:
    code = fn.__code__.replace(co_name=f"conformance_case_{next(_FRESH)}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def _to(x: Any, device: str) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def _nondeterministic(op: Any, dtype: torch.dtype) -> bool:
    skip_reasons, _, _ = opinfo._compare_cpu_decorations(op, "privateuse1", dtype)
    return op.name in opinfo.UNINITIALIZED_OPS or any("determin" in r.lower() for r in skip_reasons) or \
        any(k in op.name for k in ("rand", "bernoulli", "normal", "multinomial", "dropout", "uniform"))


def _eager_case(op: Any, dtype: torch.dtype, variant: str) -> Callable[[Target], Any]:
    def run(target: Target) -> Any:
        if variant == "eager":
            res = opinfo.run_opinfo_op(op, target.device, dtype)
        else:
            res = _run_variant(op, dtype, target.device, variant)
        if res.status == "fail":
            raise AssertionError(f"{res.failure_class}: {res.reason}")
        if res.status == "skip":
            return {"skip": res.reason}
        return {"fallback": res.fallback_ops, "reason": "ran through the device's CPU fallback"}
    return run


def _errors_case(op: Any) -> Callable[[Target], Any]:
    """OpInfo's error inputs: what the CPU rejects, the device must reject with the same type."""
    def run(target: Target) -> Any:
        try:
            errors = list(op.error_inputs("cpu"))[:8]
        except Exception as e:  # noqa: BLE001
            return {"skip": f"error-input generation failed: {e}"}
        if not errors:
            return {"skip": "OpInfo has no error inputs for this op"}
        checked = 0
        for ei in errors:
            s = ei.sample_input
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:  # the error must be the op's on the CPU (some error inputs target another call)
                    op.op(s.input, *s.args, **s.kwargs)
                    continue
                except ei.error_type:
                    pass
                except Exception:  # noqa: BLE001
                    continue
                checked += 1
                args, kwargs = _to([s.input, *s.args], target.device), _to(s.kwargs, target.device)
                try:
                    op.op(*args, **kwargs)
                except ei.error_type:
                    continue
                except Exception as e:  # noqa: BLE001
                    raise AssertionError(f"raised {type(e).__name__} ({str(e)[:200]}) where the CPU raises "
                                         f"{ei.error_type.__name__} ({ei.error_regex})") from None
            raise AssertionError(f"no error for an input the CPU rejects with {ei.error_type.__name__} "
                                 f"({ei.error_regex})")
        return None if checked else {"skip": "no error input fails on the CPU through op.op"}
    return run


def _plant_nan(sample: Any) -> Any:
    def plant(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() >= 3:
            x = x.clone()
            flat = x.view(-1) if x.is_contiguous() else None
            if flat is not None:
                flat[0], flat[1], flat[2] = float("nan"), float("inf"), float("-inf")
        return x
    return sample.transform(plant)


def _run_variant(op: Any, dtype: torch.dtype, device: str, variant: str) -> Any:
    """Non-contiguous or NaN/Inf samples on the device vs the CPU, through the OpInfo runner's
    comparison (it keeps views and checks mutated inputs)."""
    res = opinfo.OpResult(name=op.full_name)
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:4]
    except Exception as e:  # noqa: BLE001
        res.status, res.reason = "skip", f"sample generation failed: {e}"
        return res
    samples = [s.noncontiguous() if variant == "noncontiguous" else _plant_nan(s) for s in samples]
    module = getattr(torch, torch.device(device).type, None)
    if hasattr(module, "reset_fallback_counts"):
        module.reset_fallback_counts()
    meta_only = "nondeterministic" if _nondeterministic(op, dtype) else ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opinfo._run_samples(res, op.op, samples, torch.device(device), meta_only, {})
    if hasattr(module, "fallback_counts"):
        res.fallback_ops = {k: v for k, v in module.fallback_counts().items() if v}
    if res.failed:
        res.status, res.failure_class, res.reason = "fail", res.failures[0].kind, res.failures[0].message
    elif res.samples == 0:
        res.status, res.reason = "skip", "no sample ran"
    return res


def _compiled_case(op: Any, dtype: torch.dtype, backward: bool, samples: int) -> Callable[[Target], Any]:
    def run(target: Target) -> Any:
        from torchvendor.sdk import last_report

        name = target.backend_name()
        options = dict(target.options)
        if backward and not op.supports_autograd:
            return {"skip": "the op has no autograd"}
        try:
            batch = list(op.sample_inputs("cpu", dtype, requires_grad=backward))
            # the largest samples exercise the most (OpInfo lists 0-d and size-1 cases first)
            batch = sorted(batch, key=lambda s: -s.input.numel() if isinstance(s.input, torch.Tensor) else 0)[:samples]
        except Exception as e:  # noqa: BLE001
            return {"skip": f"sample generation failed: {e}"}
        if not batch:
            return {"skip": "no samples for this dtype"}
        meta_only = _nondeterministic(op, dtype)
        fallback: dict[str, int] = {}
        for sample in batch:
            inputs = [sample.input, *sample.args]
            kwargs = sample.kwargs
            moved = _to(inputs, target.device)
            if backward:
                moved = [x.detach().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x for x in moved]
            fn = _fresh(lambda *a: op.op(*a, **kwargs))
            compat.dynamo_reset()
            before = id(last_report())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    expected = op.op(*moved, **kwargs)
                except Exception as e:  # noqa: BLE001 - nothing to compare with on this device
                    return {"skip": f"eager itself raises on {target.device}: {type(e).__name__}: {str(e)[:120]}"}
                got = torch.compile(fn, backend=name, options=options or None)(*moved)
            outs, refs = _leaves(got), _leaves(expected)
            assert len(outs) == len(refs), f"compiled returned {len(outs)} tensors, eager {len(refs)}"
            for o, r in zip(outs, refs):
                assert o.shape == r.shape and o.dtype == r.dtype, \
                    f"compiled {tuple(o.shape)}/{o.dtype} vs eager {tuple(r.shape)}/{r.dtype}"
                if not meta_only:
                    torch.testing.assert_close(o.detach().cpu(), r.detach().cpu(), equal_nan=True)
            if backward:
                wrt = [x for x in moved if isinstance(x, torch.Tensor) and x.requires_grad]
                diff = [(o, r) for o, r in zip(outs, refs) if o.requires_grad and r.requires_grad]
                if wrt and diff and not meta_only:
                    g = torch.autograd.grad([o.sum() for o, _ in diff], wrt, allow_unused=True)
                    g_ref = torch.autograd.grad([r.sum() for _, r in diff], wrt, allow_unused=True)
                    for a, b in zip(g, g_ref):
                        if a is not None or b is not None:
                            torch.testing.assert_close(a.cpu(), b.cpu(), equal_nan=True)
            report = last_report()
            if report is not None and id(report) != before:
                for key, n in {**report.unsupported(), **report.device_fallback()}.items():
                    fallback[key] = fallback.get(key, 0) + n
                for p in report.partitions:
                    if p.status == "fallback":
                        fallback[f"partition {p.name}: {p.reason[:80]}"] = 1
        return {"fallback": fallback, "reason": "some ops did not run in the backend (see fallback)"}
    return run


def cases(target: Target, profile: str) -> list[Case]:
    """Op cases for the target's device (eager variants) and backend (compiled variants)."""
    dtypes = [torch.float32] + ([torch.bfloat16, torch.float16] if profile == "full" else [])
    out: list[Case] = []
    for dtype in dtypes:
        ops = _ops_by_name(dtype)
        names = [n for n in MINIMAL_OPS if n in ops] if profile == "minimal" else sorted(ops)
        dn = _dtype_name(dtype)
        for name in names:
            op = ops[name]
            tags = {"op": name, "dtype": dn}
            if target.device != "cpu" and profile in ("minimal", "device", "full"):
                variants = ("eager",) if profile == "minimal" else ("eager", "noncontiguous", "nan_inf")
                for v in variants:
                    out.append(Case(f"ops/{name}/{dn}/{v}", "ops", _eager_case(op, dtype, v), {**tags, "variant": v}))
                if profile != "minimal" and dtype == torch.float32:
                    out.append(Case(f"ops/{name}/errors", "ops", _errors_case(op), {"op": name, "variant": "errors"}))
            if target.backend and profile != "device" and dtype == torch.float32:
                samples = 1 if profile == "minimal" else 3
                out.append(Case(f"ops/{name}/{dn}/compiled", "ops", _compiled_case(op, dtype, False, samples),
                                {**tags, "variant": "compiled"}))
                if profile in ("training", "full"):
                    out.append(Case(f"ops/{name}/{dn}/compiled_backward", "ops", _compiled_case(op, dtype, True, 1),
                                    {**tags, "variant": "compiled_backward"}))
    return out
