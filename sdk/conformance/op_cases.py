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
from dataclasses import dataclass
from functools import cache
from typing import Any, Callable

import torch

from torchvendor.ir import compat

from .zoo import leaves as _leaves
from . import opinfo
from .core import Case, Target, Unsupported
from .op_kinds import is_compute

__all__ = ["cases", "MINIMAL_OPS", "ci_sample", "family"]

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


def _to(x: Any, device: str, memo: dict | None = None) -> Any:
    """Error inputs on the device, keeping their aliasing: tensors that share a storage on the CPU
    (an ``out=`` that is also an input) share one on the device, as views of one copy of it.
    Plain copies made the device's inputs independent, so it could never see the overlap the CPU
    rejects."""
    memo = {} if memo is None else memo
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu":   # e.g. a meta tensor, there to check a device mismatch
            return x
        if x.layout != torch.strided or x.is_conj() or x.is_neg() or x.untyped_storage().nbytes() == 0:
            return x.to(device)
        key = (x.untyped_storage().data_ptr(), x.dtype)
        if key not in memo:
            whole = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), 0,
                                                       (x.untyped_storage().nbytes() // x.element_size(),))
            memo[key] = whole.to(device)
        return memo[key].as_strided(x.size(), x.stride(), x.storage_offset())
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device, memo) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device, memo) for k, v in x.items()}
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
            if opinfo.all_not_implemented(res):
                raise Unsupported(f"{res.failure_class}: {res.reason}")
            torch_defined = _device_defined_algorithm(op, dtype, target.device)
            if torch_defined:
                return {"xfail": f"{torch_defined}; {res.failure_class}: {res.reason}"}
            raise AssertionError(f"{res.failure_class}: {res.reason}")
        if res.status == "skip":
            return {"skip": res.reason}
        return {"fallback": res.fallback_ops, "reason": "ran through the device's CPU fallback"}
    return run


_LCE = ("torch picks this op's algorithm by device type (LinearCrossEntropyOptions' 'auto': on the CPU the "
        "'accurate' policy accumulating in float32, on a device it does not list the 'compact' policy "
        "accumulating in the input's dtype), so the device runs another, less accurate algorithm than the "
        "CPU reference")
#: ops whose eager algorithm torch itself chooses by device type, in some dtypes: op -> (dtypes, why).
#: Their failures against the CPU are torch's, not the device's; they count as xfail, with the reason.
DEVICE_DEFINED_ALGORITHMS = {
    f"nn.functional.linear_cross_entropy.{v}": ((torch.float16, torch.bfloat16), _LCE) for v in ("chunked", "chunked_none")}


def _device_defined_algorithm(op: Any, dtype: torch.dtype, device: str) -> str:
    """Why torch computes ``op`` in ``dtype`` on ``device`` with another algorithm than on the CPU, or ''."""
    dtypes, why = DEVICE_DEFINED_ALGORITHMS.get(op.full_name, ((), ""))
    return why if dtype in dtypes and torch.device(device).type != "cpu" else ""


def _errors_case(op: Any) -> Callable[[Target], Any]:
    """OpInfo's error inputs: what the CPU rejects, the device must reject with the same type."""
    def run(target: Target) -> Any:
        if getattr(op, "error_inputs_func", None) is None:
            return {"skip": "OpInfo has no error inputs for this op"}
        try:
            errors = opinfo.op_error_inputs(op)[:8]
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
                memo: dict = {}  # one for args and kwargs: an out= aliases an input
                args, kwargs = _to([s.input, *s.args], target.device, memo), _to(s.kwargs, target.device, memo)
                try:
                    op.op(*args, **kwargs)
                except ei.error_type:
                    continue
                except Exception as e:  # noqa: BLE001
                    raise AssertionError(f"raised {type(e).__name__} ({e}) where the CPU raises "
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


def _channels_last(sample: Any) -> Any:
    """The sample with every 4-D (5-D) tensor in channels-last (channels-last-3d) memory format."""
    def convert(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.layout == torch.strided and x.dim() in (4, 5):
            fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
            return x.detach().contiguous(memory_format=fmt).requires_grad_(x.requires_grad)
        return x
    return sample.transform(convert)


def _has_4d(sample: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.dim() in (4, 5)
               for t in opinfo._tensors((sample.input, sample.args, sample.kwargs)))


#: eager variants: how each one picks and transforms OpInfo's samples (at most 4 per op)
_VARIANT_SAMPLES: dict[str, Callable[[list[Any]], list[Any]]] = {
    "noncontiguous": lambda samples: [s.noncontiguous() for s in samples[:4]],
    "nan_inf": lambda samples: [_plant_nan(s) for s in samples[:4]],
    "channels_last": lambda samples: [_channels_last(s) for s in samples if _has_4d(s)][:4],
}


def _fallback_counter(device: str) -> tuple[Callable[[], None], Callable[[], dict[str, int]]]:
    module = getattr(torch, torch.device(device).type, None)
    reset = getattr(module, "reset_fallback_counts", lambda: None)
    counts = getattr(module, "fallback_counts", dict)
    return reset, lambda: {k: v for k, v in counts().items() if v}


#: Ops whose result is undefined once NaN/Inf are planted: in the nan_inf variant only their
#: metadata is comparable. torch's CPU kernels of the orthogonal polynomials return a value never
#: assigned for a NaN argument (torch 2.13: chebyshev_polynomial_u(NaN, 5) = 1.2e22, later 5.9e14,
#: laguerre_polynomial_l 0, 4.6e-41 or 34.66, shifted_chebyshev_polynomial_t -7e14; on 2.11
#: chebyshev_polynomial_t and _u and laguerre differed between the device and the CPU).
#: max_unpool's values at duplicate indices are a max pool's, equal until one becomes NaN; which
#: one lands then depends on the order of torch 2.11's parallel CPU writes.
_POLY = "the CPU kernel returns an unassigned value for a NaN argument (another on each call)"
_UNPOOL = "NaN makes the values at duplicate indices differ: the CPU's parallel write order decides"
NAN_UNDEFINED_OPS = {
    **{f"special.{kind}_polynomial_{n}": _POLY for kind, ns in (
        ("chebyshev", "tuvw"), ("shifted_chebyshev", "tuvw"), ("hermite", ("h", "he")), ("laguerre", "l"),
        ("legendre", "p")) for n in ns},
    **{f"nn.functional.max_unpool{d}d": _UNPOOL for d in (1, 2, 3)},
}


def _cpu_reproducible(op: Any, sample: Any) -> bool:
    """Whether the CPU gives ``sample`` one answer: a run on the sample itself (as the reference
    ran) and four on copies (two keeping the layout, two contiguous) agree. NaN or Inf planted where they have no meaning leave some CPU kernels
    unreproducible, e.g. max_unpool's values at duplicate indices (a max pool's, equal until one
    became NaN), written in parallel by torch 2.11's CPU kernel; such a sample says nothing of the
    device."""
    def run(how: str) -> Any:
        s = sample if how == "itself" else sample.transform(
            lambda x: (x.contiguous() if how == "contiguous" else x).clone() if isinstance(x, torch.Tensor) else x)
        return op.op(s.input, *s.args, **s.kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            results = [run(how) for how in ("itself", "copy", "contiguous", "copy", "contiguous")]
        except Exception:  # noqa: BLE001 - the comparison itself reports errors
            return True
    try:
        for other in results[1:]:
            torch.testing.assert_close(other, results[0], equal_nan=True)
    except AssertionError:
        return False
    except (TypeError, ValueError):  # not comparable by assert_close (the comparison decides)
        pass
    return True


def _drop_unreproducible(res: Any, op: Any, samples: list[Any]) -> None:
    """Failed samples whose CPU answer is not reproducible count as skipped, not failed (checked
    only once a sample failed: some kernels crash on such inputs, e.g. MKL's eigvals on NaN)."""
    kept = [f for f in res.failures if _cpu_reproducible(op, samples[f.index])]
    dropped = len(res.failures) - len(kept)
    res.failures, res.failed = kept, res.failed - dropped
    res.samples, res.skipped = res.samples - dropped, res.skipped + dropped


def _run_variant(op: Any, dtype: torch.dtype, device: str, variant: str) -> Any:
    """Non-contiguous, NaN/Inf, channels-last or backward samples on the device vs the CPU, through
    the OpInfo runner's comparison (it keeps views and checks mutated inputs)."""
    res = opinfo.OpResult(name=op.full_name)
    backward = variant == "backward"
    if backward and not op.supports_autograd:
        res.status, res.reason = "skip", "the op has no autograd"
        return res
    try:
        samples = opinfo.op_samples(op, dtype, requires_grad=backward)
    except Exception as e:  # noqa: BLE001
        res.status, res.reason = "skip", f"sample generation failed: {e}"
        return res
    if not backward:
        try:
            samples = _VARIANT_SAMPLES[variant](samples)
        except Exception as e:  # noqa: BLE001 - e.g. sparse samples have no non-contiguous form
            res.status, res.reason = "skip", f"OpInfo's samples have no {variant} form: {type(e).__name__}: {e}"
            return res
    reset, counts = _fallback_counter(device)
    reset()
    _, tol, _ = opinfo._compare_cpu_decorations(op, "privateuse1", dtype)
    tol_kwargs = {"atol": tol.atol, "rtol": tol.rtol} if tol is not None else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if backward:
            opinfo.run_backward_samples(res, op.op, samples, torch.device(device), tol_kwargs)
        else:
            meta_only = "nondeterministic" if _nondeterministic(op, dtype) else ""
            if variant == "nan_inf" and op.full_name in NAN_UNDEFINED_OPS:
                meta_only = NAN_UNDEFINED_OPS[op.full_name]
            opinfo._run_samples(res, op.op, samples, torch.device(device), meta_only, tol_kwargs)
            if variant == "nan_inf" and res.failed:
                _drop_unreproducible(res, op, samples)
    res.fallback_ops = counts()
    if res.failed:
        res.status, res.failure_class = "fail", res.failures[0].kind
        res.reason = f"sample {res.failures[0].index}: {res.failures[0].message}"
    elif res.samples == 0:
        res.status, res.reason = "skip", ("no 4-D or 5-D input" if variant == "channels_last" and not samples
                                          else "no sample ran")
    return res


# ---- compiled: all of an op's samples in one compiled call ----------------------------------------------

def _pick_samples(op: Any, dtype: torch.dtype, backward: bool, count: int) -> list[Any]:
    batch = opinfo.op_samples(op, dtype, requires_grad=backward)
    # the largest samples exercise the most (OpInfo lists 0-d and size-1 cases first)
    return sorted(batch, key=lambda s: -s.input.numel() if isinstance(s.input, torch.Tensor) else 0)[:count]


@dataclass
class _Call:
    """One sample as an eager call and an independent copy for the compiled call."""

    eager: tuple[Any, list[Any], dict[str, Any]]
    compiled: tuple[Any, list[Any], dict[str, Any]]
    expected: Any = None
    #: OpInfo's output_process_fn_grad: what of the output a gradient is taken of (e.g. linalg.eig's
    #: eigenvectors made independent of their phase, without which the gradient is ill-defined)
    process: Callable[[Any], Any] = staticmethod(lambda out: out)
    #: the CPU sample itself: its float64 run is the truth a result beyond the tolerance is measured by
    sample: Any = None

    def wide(self) -> tuple[Any, list[Any], dict[str, Any]]:
        """The sample on the CPU in float64 (new leaves where it requires grad)."""
        s = self.sample
        inp, args, kwargs = opinfo._to_float64((s.input, list(s.args), s.kwargs))
        return inp, args, kwargs


def _eager_calls(op: Any, batch: list[Any], device: str) -> tuple[list[_Call], list[str]]:
    """Each sample moved to the device twice (views, aliasing and strides kept) and run eagerly on
    one copy; samples that eager itself rejects on the device are left out (their errors returned)."""
    calls, rejected = [], []
    for sample in batch:
        copies = []
        for _ in range(2):
            inp, args, kwargs, mover = opinfo._move_sample(sample, torch.device(device), copy=True)
            copies.append((inp, list(args), kwargs))
        if mover.foreign:
            continue
        call = _Call(copies[0], copies[1], process=sample.output_process_fn_grad, sample=sample)
        inp, args, kwargs = call.eager
        try:
            call.expected = op.op(inp, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - nothing to compare with on this device
            rejected.append(f"{type(e).__name__}: {e}")
            continue
        calls.append(call)
    return calls, rejected


def _batched(op: Any, calls: list[_Call]) -> tuple[Callable[..., Any], list[Any]]:
    """One function running every sample (tensors as graph inputs, other arguments as constants),
    so that Dynamo, AOTAutograd and the backend compile once per op instead of once per sample."""
    flat: list[Any] = []
    plan: list[tuple[int, int, dict[str, Any]]] = []
    for call in calls:
        inp, args, kwargs = call.compiled
        plan.append((len(flat), 1 + len(args), kwargs))
        flat += [inp, *args]

    def run_all(*values: Any) -> tuple[Any, ...]:
        return tuple(op.op(*values[start:start + n], **kwargs) for start, n, kwargs in plan)
    return _fresh(run_all), flat


#: Outputs whose shape torch defines per device: batch norm's saved statistics in evaluation are
#: empty (0,) from the CPU kernel (which serves a torchvendor device through its fallback) and the
#: running statistics (C,) from torch's decomposition (torch._decomp's native_batch_norm_helper)
#: on every device but the CPU, as CUDA's kernel gives them; OpInfo marks TestCommon.test_compare_cpu
#: an expected failure for these ops for the same reason. Unused by any backward in evaluation.
#: op -> positions of those outputs, compared only when the eager one is not empty.
DEVICE_DEFINED_OUTPUTS = {"_native_batch_norm_legit": (1, 2), "native_batch_norm": (1, 2)}


def _device_defined(op_name: str, position: int, expected: Any) -> bool:
    return position in DEVICE_DEFINED_OUTPUTS.get(op_name, ()) and expected.numel() == 0


def _assert_close_or_as_accurate(got: torch.Tensor, want: torch.Tensor, truth: Callable[[], list], what: str) -> None:
    """``assert_close(got, want)``; beyond its tolerance, ``got`` still passes when it is as close
    to the float64 truth as eager's ``want`` (opinfo._no_less_accurate: the model suite's rule)."""
    try:
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{what}: {opinfo.headline(got, want)}\n{m}")
    except AssertionError:
        if not opinfo._no_less_accurate([got], [want], truth):
            raise


def _check_outputs(calls: list[_Call], got: tuple[Any, ...], meta_only: bool, op_name: str = "", op: Any = None) -> None:
    for i, (call, out) in enumerate(zip(calls, got)):
        outs, refs = _leaves(out), _leaves(call.expected)
        assert len(outs) == len(refs), f"sample {i}: compiled returned {len(outs)} tensors, eager {len(refs)}"
        for position, (o, r) in enumerate(zip(outs, refs)):
            if _device_defined(op_name, position, r):
                continue
            assert o.shape == r.shape and o.dtype == r.dtype, \
                f"sample {i}: compiled {tuple(o.shape)}/{o.dtype} vs eager {tuple(r.shape)}/{r.dtype}"
            if not meta_only:
                def truth(call: _Call = call, position: int = position) -> list:
                    inp, args, kwargs = call.wide()
                    return [_leaves(call.process(op.op(inp, *args, **kwargs)))[position]]
                _assert_close_or_as_accurate(o.detach().cpu(), r.detach().cpu(),
                                             truth if op is not None and call.sample is not None else lambda: [],
                                             f"sample {i}")
        if not meta_only:  # an input the op mutates is mutated alike (a dropped mutation is caught)
            mine, eager = opinfo.to_cpu(call.compiled), opinfo.to_cpu(call.eager)
            try:
                torch.testing.assert_close(mine, eager, equal_nan=True)
            except AssertionError as e:
                raise AssertionError(f"sample {i}: an input differs from eager's after the call (what the op "
                                     f"mutates, or a copy of it): {opinfo.headline(mine, eager)}\n{e}") from None
            except (TypeError, ValueError):
                pass


def _real_sum(t: torch.Tensor) -> torch.Tensor:
    """A real scalar to differentiate (autograd refuses a complex one): the sum of the real and
    imaginary parts of a complex output."""
    return torch.view_as_real(t.resolve_conj()).sum() if t.is_complex() else t.sum()


def _check_grads(calls: list[_Call], got: tuple[Any, ...], op: Any = None) -> None:
    def grads(outputs: list[Any], sides: list[Any]) -> list[Any]:
        outs = [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]
        wrt = opinfo._grad_targets(sides)
        if not outs or not wrt:
            return []
        return list(torch.autograd.grad([_real_sum(o) for o in outs], wrt, allow_unused=True))
    mine = grads(_leaves(tuple(c.process(out) for c, out in zip(calls, got))), [c.compiled for c in calls])
    ref = grads(_leaves(tuple(c.process(c.expected) for c in calls)), [c.eager for c in calls])
    assert len(mine) == len(ref), f"compiled gave {len(mine)} gradients, eager {len(ref)}"

    def truth() -> list:  # the same gradients of the samples run in float64 on the CPU
        wide = [c.wide() for c in calls]
        return grads(_leaves(tuple(c.process(op.op(w[0], *w[1], **w[2])) for c, w in zip(calls, wide))), wide)
    truths: list[Any] = []
    for k, (a, b) in enumerate(zip(mine, ref)):
        assert (a is None) == (b is None), f"gradient {k}: {'none' if a is None else 'one'} compiled, " \
                                           f"{'none' if b is None else 'one'} eager"
        if a is not None:
            def truth_k(k: int = k) -> list:
                if not truths:
                    truths.append(truth() if op is not None else [])
                return truths[0][k:k + 1] if len(truths[0]) == len(mine) else []
            _assert_close_or_as_accurate(a.cpu(), b.cpu(), truth_k, f"gradient {k}")


def _fallback_of(report: Any) -> tuple[dict[str, int], list[str]]:
    """What of a compiled call did not run in the vendor's code, per op, and why in words: ops not
    claimed, claimed compute ops the partitioner left outside (a view left at a region's edge is
    free in eager: never a fallback), ops the device's CPU fallback served, and every op of a
    partition that fell back, with its whole reason."""
    fallback: dict[str, int] = {}
    why: list[str] = []

    def add(op: str, n: int) -> None:
        fallback[op] = fallback.get(op, 0) + n
    for op, n in report.unsupported().items():
        add(op, n)
    if report.unsupported():
        why.append(f"not claimed by the backend: {', '.join(sorted(report.unsupported()))}")
    left = report.left_outside() if callable(getattr(report, "left_outside", None)) else {}
    for op, reasons in left.items():
        if is_compute(op):
            add(op, sum(reasons.values()))
            why.append(f"{op} claimed but left outside by the partitioner: {'; '.join(sorted(reasons))}")
    for op, n in report.device_fallback().items():
        add(op, n)
    for p in report.partitions:
        if p.status == "fallback":
            for op, n in p.ops.items():
                if is_compute(op):
                    add(op, n)
            why.append(f"partition {p.name} ({', '.join(sorted(p.ops))}) fell back: {p.reason}")
    return fallback, why


def _compiled_case(op: Any, dtype: torch.dtype, backward: bool, samples: int) -> Callable[[Target], Any]:
    def run(target: Target) -> Any:
        from torchvendor.sdk import last_report

        name = target.backend_name()
        if backward and not op.supports_autograd:
            return {"skip": "the op has no autograd"}
        try:
            batch = _pick_samples(op, dtype, backward, samples)
        except Exception as e:  # noqa: BLE001
            return {"skip": f"sample generation failed: {e}"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            calls, rejected = _eager_calls(op, batch, target.device)
            if not calls:
                return {"skip": f"eager itself raises on {target.device}: {rejected[0]}" if rejected
                        else "no samples for this dtype"}
            fn, flat = _batched(op, calls)
            compat.dynamo_reset()
            before = id(last_report())
            got = torch.compile(fn, backend=name, options=dict(target.options) or None, dynamic=False)(*flat)
        meta_only = _nondeterministic(op, dtype)
        _check_outputs(calls, got, meta_only, op.name, op)
        if backward and not meta_only:
            _check_grads(calls, got, op)
        report = last_report()
        fallback, why = _fallback_of(report) if report is not None and id(report) != before else ({}, [])
        return {"fallback": fallback, "reason": "; ".join(why) or "some ops ran through the device's CPU fallback",
                "metrics": {"samples": len(calls)}}
    return run


#: eager variants per profile (errors: float32 only)
_EAGER_VARIANTS = {"minimal": ("eager",),
                   "device": ("eager", "noncontiguous", "channels_last", "nan_inf", "backward"),
                   "full": ("eager", "noncontiguous", "channels_last", "nan_inf", "backward")}


def _op_cases(target: Target, profile: str, op: Any, dtype: torch.dtype) -> list[Case]:
    name, dn = op.full_name, _dtype_name(dtype)
    tags = {"op": name, "dtype": dn}
    out: list[Case] = []
    if target.device != "cpu" and profile in _EAGER_VARIANTS:
        for v in _EAGER_VARIANTS[profile]:
            out.append(Case(f"ops/{name}/{dn}/{v}", "ops", _eager_case(op, dtype, v), {**tags, "variant": v}))
        if profile != "minimal" and dtype == torch.float32:
            out.append(Case(f"ops/{name}/errors", "ops", _errors_case(op), {"op": name, "variant": "errors"}))
    if target.backend and profile != "device" and dtype == torch.float32:
        samples = 1 if profile == "minimal" else 3
        # a compile costs more than an eager run: the runner starts the costly cases first
        out.append(Case(f"ops/{name}/{dn}/compiled", "ops", _compiled_case(op, dtype, False, samples),
                        {**tags, "variant": "compiled"}, cost=5.0))
        if profile in ("training", "full"):
            out.append(Case(f"ops/{name}/{dn}/compiled_backward", "ops", _compiled_case(op, dtype, True, 1),
                            {**tags, "variant": "compiled_backward"}, cost=8.0))
    return out


#: the ci profile's strata: OpInfo name prefixes, then OpInfo classes (the rest is "other")
_PREFIX_FAMILIES = ("linalg", "nn.functional", "special", "fft", "masked", "sparse", "signal")
_CLASS_FAMILIES = {"UnaryUfuncInfo": "unary", "BinaryUfuncInfo": "binary", "ReductionOpInfo": "reduction",
                   "ShapeFuncInfo": "shape", "ForeachFuncInfo": "foreach", "SpectralFuncInfo": "fft"}
#: ops sampled in all, shared by the families in proportion to their size (at least 2 each), a
#: third of each family's also compiled; the extra variant each sampled op gets, in turn (a dtype
#: other than float32, or a layout, NaN/Inf, backward, error inputs)
CI_OPS = 60
_CI_EXTRA = (("bfloat16", "eager"), ("float32", "noncontiguous"), ("float16", "eager"), ("float32", "backward"),
             ("float32", "nan_inf"), ("float32", "channels_last"), ("float32", "errors"))


def family(op: Any) -> str:
    """The stratum of an OpInfo for sampling: its namespace, else its kind (unary, reduction, ...)."""
    head = next((p for p in _PREFIX_FAMILIES if op.name.startswith(p + ".")), None)
    return head or _CLASS_FAMILIES.get(type(op).__name__, "other")


def ci_sample(seed: int) -> list[tuple[str, str, str]]:
    """The ci profile's ops: (OpInfo name, dtype, variant), a stratified sample that rotates with
    ``seed``: about ``CI_OPS`` ops shared by the families in proportion (at least 2 each), each
    eager in float32 with one more variant in turn, a third of each family's compiled too.

    >>> ci_sample(3) == ci_sample(3), ci_sample(3) != ci_sample(4)
    (True, True)
    """
    import random

    ops = _ops_by_name(torch.float32)
    by_family: dict[str, list[str]] = {}
    for name in sorted(ops):
        by_family.setdefault(family(ops[name]), []).append(name)
    rng = random.Random(seed)
    out: list[tuple[str, str, str]] = []
    turn = rng.randrange(len(_CI_EXTRA))
    total = sum(map(len, by_family.values()))
    for fam in sorted(by_family):
        share = max(2, round(CI_OPS * len(by_family[fam]) / total))
        picked = rng.sample(by_family[fam], min(share, len(by_family[fam])))
        for k, name in enumerate(picked):
            out.append((name, "float32", "eager"))
            dtype, variant = _CI_EXTRA[turn % len(_CI_EXTRA)]
            turn += 1
            if name in _ops_by_name(getattr(torch, dtype)):
                out.append((name, dtype, variant))
            if k < max(1, len(picked) // 3):
                out.append((name, "float32", "compiled"))
    return out


def _ci_cases(target: Target) -> list[Case]:
    from .core import run_seed

    out: list[Case] = []
    for name, dn, variant in ci_sample(run_seed()):
        dtype = getattr(torch, dn)
        op = _ops_by_name(dtype)[name]
        tags = {"op": name, "dtype": dn, "variant": variant}
        if variant == "compiled":
            if target.backend:
                out.append(Case(f"ops/{name}/{dn}/compiled", "ops", _compiled_case(op, dtype, False, 3), tags, cost=5.0))
        elif target.device != "cpu":
            if variant == "errors":
                out.append(Case(f"ops/{name}/errors", "ops", _errors_case(op), {"op": name, "variant": "errors"}))
            else:
                out.append(Case(f"ops/{name}/{dn}/{variant}", "ops", _eager_case(op, dtype, variant), tags))
    return out


def cases(target: Target, profile: str) -> list[Case]:
    """Op cases for the target's device (eager variants) and backend (compiled variants)."""
    if profile == "ci":
        return _ci_cases(target)
    dtypes = [torch.float32] + ([torch.bfloat16, torch.float16] if profile == "full" else [])
    out: list[Case] = []
    for dtype in dtypes:
        ops = _ops_by_name(dtype)
        names = [n for n in MINIMAL_OPS if n in ops] if profile == "minimal" else sorted(ops)
        for name in names:
            out += _op_cases(target, profile, ops[name], dtype)
    return out
