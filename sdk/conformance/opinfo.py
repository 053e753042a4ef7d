"""The OpInfo corpus runner of the conformance suite.

``run_opinfo_corpus(device, dtype)`` runs every OpInfo of PyTorch's ``op_db`` that supports
``dtype`` on CPU, on ``device``, and compares each sample with CPU eager.  It is written so
that the conformance suite can reuse it unchanged: it needs only a device string, returns
plain data (``OpResult`` per OpInfo full name) and never calls pytest.

How a sample is run
  * Samples are generated on CPU (``op_samples``: ``op.sample_inputs("cpu", dtype)``, seeded
    once per op), so generation never
    depends on the device under test and the CPU reference uses exactly the same values.
  * Every tensor in ``input``/``args``/``kwargs`` (tensor lists included) is copied to the
    device as the same view of a device copy of its whole storage (size, stride, storage
    offset, conj/neg bits), so views, partial views and aliasing between tensors are kept.
    Arguments an op requires on the CPU (``KEEP_ARGS_ON_CPU``, e.g. tensor_split's indices)
    stay there.
    ``device=`` arguments naming the generation device ("cpu") are pointed at the device
    under test (so factory functions and ``*_like(device=...)`` samples create device
    tensors; the cross-device ``like(device="cpu")`` samples therefore also target the
    device - a known, documented loss).
  * ``op.op`` runs on the CPU sample and on the device sample.  Device results are copied
    back, both go through ``sample.output_process_fn_grad`` (OpInfo uses it to make e.g. SVD
    signs comparable) and are compared with ``torch.testing.assert_close`` at its default
    per-dtype tolerances (or the ``toleranceOverride`` OpInfo attaches to
    ``TestCommon.test_compare_cpu``), ``equal_nan=True``.  Inputs are compared afterwards
    too, so an in-place op that silently writes into a copy, or a mutated argument that is
    not written back, is caught.  (OpInfos whose ``test_compare_cpu`` OpInfo expects to fail,
    because CUDA kernels differ from CPU ones, are still compared: a CPU fallback runs the CPU
    kernels; a failure carries a note.)
  * Every result tensor must live on the device type under test.
  * Ops whose output is random or uninitialised are compared on metadata only (shape, dtype,
    device): an OpInfo whose ``TestCommon.test_compare_cpu`` is skipped with "non-
    deterministic", the ``empty*`` family, and any sample whose CPU run dispatches an ATen
    op tagged ``nondeterministic_seeded`` (detected with a dispatch mode).  Such samples
    count as passed with ``meta_only`` set, and the report says so.
  * ``run_opinfo_corpus_isolated`` runs the same in a child process restarted after a crash
    or a hang, so one crashing OpInfo is a failure ("process crash: SIGSEGV"), not the end of
    the run.  ``python -m torchvendor.sdk.conformance.opinfo [--json out.json]`` runs the whole corpus.
"""
from __future__ import annotations

import dataclasses
import re
import time
import traceback
import unittest
import warnings
from typing import Any, Callable, Iterable

import torch
from torchvendor.ir import compat

from .differences import what_differs
from .reasons import describe_exception

#: the command line's default device (the simulated accelerator); any device is brought up alike
_DEFAULT_DEVICE = "acme"


def _bring_up(device: str) -> None:
    """Register ``device`` with torchvendor unless torch knows its type already (cpu, cuda, meta,
    or a PrivateUse1 device registered in this process): the same for every name."""
    kind = device.split(":")[0]
    if kind in ("cpu", "cuda", "meta") or hasattr(torch, kind):
        return
    from torchvendor.sdk import register_device

    register_device(kind)

# Ops whose output memory is uninitialised: only metadata is comparable.
UNINITIALIZED_OPS = frozenset({
    "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted",
})

# A fixed representative subset of op_db (OpInfo full names) for the fast default tier:
# pointwise unary/binary, reductions, linear algebra, nn, shape/view, indexing, scans,
# sorting, factories, random and uninitialised outputs, dynamic-shape outputs, fft.
REPRESENTATIVE_OPS = (
    "add", "mul", "div.no_rounding_mode", "abs", "exp", "sin", "sigmoid", "isnan", "isfinite",
    "clamp", "where", "masked_fill",
    "sum", "mean", "amax", "argmax", "var", "cumsum", "logsumexp",
    "mm", "bmm", "addmm", "matmul", "linalg.solve",
    "nn.functional.linear", "nn.functional.conv2d", "nn.functional.avg_pool2d",
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.gelu", "softmax",
    "nn.functional.cross_entropy", "nn.functional.embedding",
    "cat", "stack", "transpose", "reshape", "expand", "narrow",
    "index_select", "gather", "scatter", "index_put", "nonzero", "topk",
    "max.reduction_with_dim",
    "zeros_like", "full", "arange", "randn", "bernoulli", "empty_like", "to", "fft.fft",
)


def _upstream(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A fixed random upstream gradient, made on the CPU (floating or complex ``dtype``)."""
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        parts = [torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(2)]
        return torch.complex(*parts).to(dtype)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 4).to(dtype)


# --------------------------------------------------------------------------------------------
# the OpInfo corpus runner
# --------------------------------------------------------------------------------------------

def _seed(name: str) -> None:
    """Seed the CPU generator, ``random`` and NumPy from ``name`` (the same samples every run)."""
    import random
    import zlib

    seed = zlib.crc32(name.encode())
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def op_samples(op, dtype: torch.dtype, requires_grad: bool = False) -> list:
    """OpInfo's CPU samples of ``op`` for ``dtype``, seeded once per op from its name.

    OpInfo's own iterator reseeds before every sample through ``torch.manual_seed``, which also
    queues a lazy seed for each accelerator module torch has (CUDA, XPU) and formats the whole
    Python stack for it: that was the largest single cost of the device sweep (a third of its
    CPU time), so the suite seeds the CPU generator itself, once.

    >>> op = opinfo_ops(torch.float32, ["add"])[0]
    >>> a, b = op_samples(op, torch.float32), op_samples(op, torch.float32)
    >>> len(a) == len(b) and torch.equal(a[-1].input, b[-1].input)
    True
    """
    _seed(op.full_name)
    return list(op.sample_inputs("cpu", dtype, requires_grad=requires_grad, set_seed=False))


def op_error_inputs(op) -> list:
    """OpInfo's CPU error inputs of ``op``, seeded once (see :func:`op_samples`)."""
    _seed(op.full_name)
    return list(op.error_inputs("cpu", set_seed=False))


@dataclasses.dataclass
class SampleFailure:
    index: int
    kind: str          # failure class, e.g. "mismatch", "device error: NotImplementedError"
    message: str       # first lines of the error


@dataclasses.dataclass
class OpResult:
    name: str                          # OpInfo full name ("div.no_rounding_mode")
    status: str = "pass"               # "pass" | "fail" | "skip"
    reason: str = ""                   # for skip/fail: why (first failure for fail)
    failure_class: str = ""            # for fail: the class of the first failure
    samples: int = 0                   # samples run on the device
    passed: int = 0
    failed: int = 0
    skipped: int = 0                   # samples not run (no device inputs, CPU ref raised)
    meta_only: int = 0                 # passed samples compared on metadata only
    meta_only_reason: str = ""
    failures: list[SampleFailure] = dataclasses.field(default_factory=list)
    fallback_ops: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class _SeededOpDetector(compat.TorchDispatchMode):
    """Notes whether any ATen op tagged ``nondeterministic_seeded`` is dispatched."""

    def __init__(self):
        super().__init__()
        self.seeded: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.seeded.append(str(func))
        return func(*args, **(kwargs or {}))


def _skip_reason(decorator) -> str | None:
    """The reason of a ``unittest.skip(reason)`` decorator, None for other decorators."""
    if decorator is unittest.expectedFailure:
        return None
    try:
        probe = decorator(lambda: None)
    except Exception:
        return None
    if getattr(probe, "__unittest_skip__", False):
        return getattr(probe, "__unittest_skip_why__", "") or "skip"
    return None


def _compare_cpu_decorations(op, device_type: str, dtype: torch.dtype):
    """(skip reasons, tolerance override or None, expected failure?) that OpInfo attaches to
    ``TestCommon.test_compare_cpu``."""
    reasons, tol, xfail = [], None, False
    for info in getattr(op, "decorators", ()):
        if not hasattr(info, "is_active"):
            continue
        if info.test_name != "test_compare_cpu":
            continue
        if not info.is_active("TestCommon", "test_compare_cpu", device_type, dtype, {}):
            continue
        for d in info.decorators:
            if d is unittest.expectedFailure:
                xfail = True
                continue
            if hasattr(d, "d") and isinstance(getattr(d, "d"), dict):  # toleranceOverride
                if dtype in d.d:
                    tol = d.d[dtype]
                continue
            why = _skip_reason(d)
            if why is not None:
                reasons.append(why)
    return reasons, tol, xfail


# Tensor arguments an op requires on the CPU whatever the device (OpInfo samples make them on
# "cpu" on purpose): OpInfo full name -> positions in sample.args.
KEEP_ARGS_ON_CPU = {"tensor_split": (0,)}


class _Mover:
    """Copies a sample's tensors to a device, keeping their storage structure: a view is moved
    as the same view (size, stride, storage offset, conj/neg bits) of a device copy of its whole
    storage, and tensors sharing a storage share the device storage (aliasing preserved)."""

    def __init__(self, device: torch.device, source_device: str = "cpu", keep=(), copy: bool = False):
        self.device = device
        self.copy = copy  # copy even when the device is the source's (two independent copies)
        self.source = source_device
        self.memo: dict[int, torch.Tensor] = {}
        self.storages: dict[tuple[int, int], torch.Tensor] = {}
        self.keep = {id(t) for t in keep}
        self.moved = False
        self.foreign = False  # the sample names another accelerator (OpInfo adds "cuda" samples
        #                       on CUDA machines): a cross-device case, not about this device

    def _move(self, t: torch.Tensor) -> torch.Tensor:
        t = t.detach()
        if (t.layout != torch.strided or t.is_quantized or t.is_nested
                or t.device.type != self.source):
            return t.to(self.device, copy=self.copy)
        st = t.untyped_storage()
        item = t.element_size()
        if st.nbytes() == 0 or st.nbytes() % item:
            return t.to(self.device, copy=self.copy)
        key = (st.data_ptr(), st.nbytes())
        flat = self.storages.get(key)
        if flat is None:
            raw = torch.empty(0, dtype=torch.uint8).set_(st)  # the whole storage, as bytes
            flat = raw.to(self.device, copy=self.copy)
            self.storages[key] = flat
        phys = flat.view(t.dtype).as_strided(t.size(), t.stride(), t.storage_offset())
        if t.is_conj():
            phys = phys.conj()
        if t.is_neg():
            phys = compat.neg_view(phys)
        return phys

    def __call__(self, obj, key=None):
        if isinstance(obj, torch.Tensor):
            if id(obj) in self.keep:
                return obj
            if obj.device.type not in ("cpu", "meta", self.source, self.device.type):
                self.foreign = True  # e.g. a cuda tensor OpInfo made for a cross-device sample
                return obj
            hit = self.memo.get(id(obj))
            if hit is None:
                with torch.no_grad():
                    hit = self._move(obj)
                if obj.requires_grad:
                    hit.requires_grad_(True)
                self.memo[id(obj)] = hit
                self.moved = True
            return hit
        if isinstance(obj, torch.device) and obj.type not in (self.source, self.device.type):
            self.foreign = True
        if isinstance(obj, str) and key == "device" and torch.device(obj).type not in (self.source, self.device.type):
            self.foreign = True
        if isinstance(obj, torch.device) and obj.type == self.source:
            self.moved = True
            return self.device
        if isinstance(obj, str) and (
                re.fullmatch(rf"{self.source}(:\d+)?", obj)
                or (key == "device" and torch.device(obj).type == self.source)):
            self.moved = True  # a device named by a string, e.g. x.to("cpu", ...)
            return self.device
        if isinstance(obj, list):
            return [self(o) for o in obj]
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return tuple(self(o) for o in obj)
        if isinstance(obj, dict):
            return {k: self(v, key=k) for k, v in obj.items()}
        return obj


def to_cpu(obj):
    """Recursively copy tensors back to CPU (structseqs and namedtuples become tuples)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(o) for o in obj) if type(obj) in (list, tuple) else tuple(
            to_cpu(o) for o in obj)
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    return obj


def _tensors(obj) -> Iterable[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


NOT_IMPLEMENTED = "device error: not implemented (no kernel / fallback refused)"


def all_not_implemented(res: "OpResult") -> bool:
    """Whether every failure of ``res`` is the device's "not implemented" (no wrong answer)."""
    return bool(res.failures) and all(f.kind == NOT_IMPLEMENTED for f in res.failures)


def classify_exception(exc: BaseException) -> str:
    """A stable, coarse failure class for an exception raised on the device."""
    msg = str(exc)
    if isinstance(exc, NotImplementedError) or "Could not run" in msg:
        return NOT_IMPLEMENTED
    if isinstance(exc, torch.OutOfMemoryError):
        return "device error: out of memory"
    if "Expected all tensors to be on the same device" in msg or "device type" in msg.lower():
        return "device error: device mismatch"
    if "stride" in msg.lower() or "as_strided" in msg:
        return "device error: strides/views"
    if "dtype" in msg.lower() or "scalar type" in msg.lower():
        return "device error: dtype"
    return f"device error: {type(exc).__name__}"


def _compare_meta(actual, expected, device_type: str):
    a_t, e_t = list(_tensors(actual)), list(_tensors(expected))
    if len(a_t) != len(e_t):
        raise AssertionError(f"output structure differs: {len(a_t)} vs {len(e_t)} tensors")
    for a, e in zip(a_t, e_t):
        if a.shape != e.shape:
            raise AssertionError(f"shape {tuple(a.shape)} != {tuple(e.shape)}")
        if a.dtype != e.dtype:
            raise AssertionError(f"dtype {a.dtype} != {e.dtype}")


class _SampleFailed(Exception):
    """One sample's failure: ``kind`` is its class for reports (see :func:`_failure_kind`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


def _failure_kind(msg: str) -> str:
    first = msg.split("\n")[0].lower()
    return ("wrong output device" if "result tensor on" in msg else
            "in-place/input mutation mismatch" if "input mutation" in msg else
            "mismatch: shape" if "shape" in first else
            "mismatch: dtype" if "dtype" in first else
            "mismatch: values")


def _move_sample(sample, device: torch.device, keep_positions=(), copy: bool = False):
    """(input, args, kwargs, mover) of ``sample`` on ``device``; raises _SampleFailed."""
    keep = [sample.args[j] for j in keep_positions
            if j < len(sample.args) and isinstance(sample.args[j], torch.Tensor)]
    mover = _Mover(device, keep=keep, copy=copy)
    try:
        return mover(sample.input), mover(sample.args), mover(sample.kwargs), mover
    except Exception as exc:
        raise _SampleFailed("copy to device failed", describe_exception(exc)) from None


def headline(actual, expected, tol_kwargs: dict | None = None) -> str:
    """What differs first between two results (tensor by tensor, on the CPU), in words."""
    kw = {"rtol": tol_kwargs["rtol"], "atol": tol_kwargs["atol"]} if tol_kwargs else {}
    for a, e in zip(_tensors(actual), _tensors(expected)):
        try:
            found = what_differs(a, e, **kw)
        except (RuntimeError, TypeError):  # e.g. a layout isclose refuses: torch's message says it
            continue
        if found:
            return found
    return ""


def _assert_close(actual, expected, what: str, tol_kwargs: dict) -> None:
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, check_device=False, **tol_kwargs)
    except AssertionError as exc:
        found = headline(actual, expected, tol_kwargs)
        raise AssertionError(f"{what}: {found}\n{exc}" if found else f"{what}: {exc}") from None
    except (TypeError, ValueError):  # not comparable by assert_close (e.g. plain Python values)
        if what.startswith("output") and actual != expected:
            raise AssertionError(f"output {actual!r} != {expected!r}") from None


#: reduced-precision dtypes whose results are measured against float64 truth when they differ
_WIDENED = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
            torch.complex32: torch.complex128, torch.complex64: torch.complex128}


def _to_float64(obj: Any) -> Any:
    """``obj`` with its reduced-precision floating/complex tensors in float64/complex128
    (``requires_grad`` kept, as new leaves)."""
    def widen(t: torch.Tensor) -> torch.Tensor:
        wide = torch.complex128 if t.is_complex() else torch.float64
        return t.detach().to(wide).requires_grad_(t.requires_grad)
    if isinstance(obj, torch.Tensor):
        return widen(obj) if obj.dtype in _WIDENED else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_float64(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_float64(v) for k, v in obj.items()}
    return obj


def _no_less_accurate(actual: list, expected: list, truth: Callable[[], list]) -> bool:
    """Whether the device's results are as close to the float64 truth as the CPU's, by the model
    suite's rule (``models.check``: relative RMS error at most 3 x the CPU's + 1e-5, the Dynamo
    benchmark harness's). A device kernel that sums in another order or in a wider accumulator
    rounds differently from the CPU's, and ill-conditioned formulas (pinv, lstsq, multi_dot
    gradients) amplify one rounding past the strict tolerance; that is not wrong. A kernel that
    computes something else is as far from the truth as from the CPU, and still fails."""
    from .models.check import MULTIPLIER, TOLERANCE, relative_error

    pairs = [(a, e) for a, e in zip(actual, expected) if isinstance(e, torch.Tensor) and e.dtype in _WIDENED]
    if not pairs or len(actual) != len(expected):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wide = [t for t in truth() if isinstance(t, torch.Tensor) and t.dtype in _WIDENED.values()]
    except Exception:  # noqa: BLE001 - no float64 kernel: no yardstick
        return False
    if len(wide) != len(pairs):
        return False
    for (a, e), t in zip(pairs, wide):
        if not isinstance(a, torch.Tensor) or a.shape != e.shape or t.shape != e.shape or a.is_complex():
            return False
        if relative_error(a, t) > MULTIPLIER * relative_error(e, t) + TOLERANCE:
            return False
    return True


def _compare_sample(sample, actual_dev, expected, d_inputs, device: torch.device, meta_only: str,
                    tol_kwargs: dict, truth: Callable[[], list] | None = None) -> None:
    """Raises AssertionError (or _SampleFailed) when the device's result differs from the CPU's
    (outputs beyond the tolerance pass when ``truth``, the float64 results, shows them no less
    accurate than the CPU's)."""
    for t in _tensors(actual_dev):
        if t.device.type != device.type:
            raise AssertionError(f"result tensor on {t.device}, expected {device.type}")
    try:
        actual, d_inputs_back = to_cpu(actual_dev), to_cpu(d_inputs)
    except Exception as exc:
        raise _SampleFailed("copy to host failed", describe_exception(exc)) from None
    if meta_only:
        _compare_meta(actual, expected, device.type)
        return
    out_actual, out_expected = sample.output_process_fn_grad(actual), sample.output_process_fn_grad(expected)
    try:
        _assert_close(out_actual, out_expected, "output mismatch", tol_kwargs)
    except AssertionError:
        if truth is None or not _no_less_accurate(list(_tensors(out_actual)), list(_tensors(out_expected)), truth):
            raise
    # the CPU reference ran on the original sample: in-place ops mutated it as they must
    _assert_close(d_inputs_back, to_cpu((sample.input, sample.args, sample.kwargs)),
                  "input mutation differs", tol_kwargs)


def _run_one_sample(res: OpResult, fn: Callable, sample, device: torch.device, op_meta_only: str,
                    tol_kwargs: dict) -> str:
    """Run one sample on the device and on the CPU and compare; returns "pass", "skip" or
    "meta" (passed on metadata only, the reason in ``res``); raises _SampleFailed."""
    d_input, d_args, d_kwargs, mover = _move_sample(sample, device, KEEP_ARGS_ON_CPU.get(res.name, ()))
    if not mover.moved or mover.foreign:
        return "skip"  # nothing of the sample lives on the device, or it targets another one
    # CPU reference on the original sample (the device copy is already made, so an in-place op
    # may mutate it; views keep their real storage, as OpInfo intends).
    detector = _SeededOpDetector()
    try:
        with detector:
            expected = fn(sample.input, *sample.args, **sample.kwargs)
    except Exception:
        return "skip"  # an OpInfo sample that CPU eager itself rejects
    meta_only = op_meta_only or (f"random: CPU run dispatches {detector.seeded[0]}" if detector.seeded else "")
    res.samples += 1
    try:
        actual_dev = fn(d_input, *d_args, **d_kwargs)
    except Exception as exc:
        raise _SampleFailed(classify_exception(exc), describe_exception(exc)) from None
    def truth() -> list:
        wide = _to_float64((sample.input, sample.args, sample.kwargs))
        return list(_tensors(sample.output_process_fn_grad(fn(wide[0], *wide[1], **wide[2]))))
    try:
        _compare_sample(sample, actual_dev, expected, (d_input, d_args, d_kwargs), device, meta_only, tol_kwargs,
                        truth)
    except AssertionError as exc:
        raise _SampleFailed(_failure_kind(str(exc)), describe_exception(exc)) from None
    if meta_only:
        res.meta_only_reason = res.meta_only_reason or meta_only
        return "meta"
    return "pass"


def _run_samples(res: OpResult, fn: Callable, samples, device: torch.device,
                 op_meta_only: str, tol_kwargs: dict) -> None:
    """Run each sample on ``device`` vs the CPU, counting into ``res``."""
    for i, sample in enumerate(samples):
        counted = res.samples
        try:
            outcome = _run_one_sample(res, fn, sample, device, op_meta_only, tol_kwargs)
        except _SampleFailed as f:
            res.samples = counted + 1  # a copy that fails counts as a sample run
            res.failed += 1
            res.failures.append(SampleFailure(i, f.kind, f.message))
            continue
        if outcome == "skip":
            res.skipped += 1
        else:
            res.passed += 1
            res.meta_only += outcome == "meta"


# ---- backward: gradients on the device vs the CPU ------------------------------------------------------

def _grad_targets(obj) -> list[torch.Tensor]:
    return [t for t in _tensors(obj) if t.requires_grad]


def _grads(out, inputs, seed: int, device: torch.device | None, like: list | None = None):
    """Gradients of ``out`` (after OpInfo's ``output_process_fn_grad``) for ``inputs``, with a fixed
    random upstream gradient made on the CPU (the same on both sides; with ``like``, the outputs
    of another run, the upstream gradients made for those, widened to ``out``'s dtypes)."""
    outs = [t for t in _tensors(out) if t.requires_grad and (t.is_floating_point() or t.is_complex())]
    if not outs:
        return None
    dtypes = [t.dtype for t in (like or outs)]
    ups = [_upstream(tuple(t.shape), dtypes[k], seed + k).to(t.dtype) for k, t in enumerate(outs)]
    if device is not None:
        ups = [u.to(device) for u in ups]
    return torch.autograd.grad(outs, inputs, ups, allow_unused=True)


def _run_one_backward(res: OpResult, fn: Callable, sample, device: torch.device, tol_kwargs: dict,
                      seed: int) -> str:
    d_input, d_args, d_kwargs, mover = _move_sample(sample, device, KEEP_ARGS_ON_CPU.get(res.name, ()), copy=True)
    wrt, d_wrt = _grad_targets((sample.input, sample.args, sample.kwargs)), _grad_targets((d_input, d_args, d_kwargs))
    if not mover.moved or mover.foreign or not wrt or len(wrt) != len(d_wrt):
        return "skip"
    detector = _SeededOpDetector()
    try:
        with detector:
            out = fn(sample.input, *sample.args, **sample.kwargs)
        expected = _grads(sample.output_process_fn_grad(out), wrt, seed, None)
    except Exception:
        return "skip"  # the CPU itself has no backward for this sample
    if expected is None or detector.seeded:
        return "skip"  # nothing differentiable, or random (dropout): gradients are not comparable
    res.samples += 1
    try:
        actual = _grads(sample.output_process_fn_grad(fn(d_input, *d_args, **d_kwargs)), d_wrt, seed, device)
    except Exception as exc:
        raise _SampleFailed(classify_exception(exc), describe_exception(exc)) from None
    try:
        if actual is None:
            raise AssertionError("gradient mismatch: the device's outputs do not require grad")
        for a, e in zip(actual, expected):
            if (a is None) != (e is None):
                raise AssertionError(f"gradient mismatch: {'no' if a is None else 'a'} gradient on the device, "
                                     f"{'none' if e is None else 'one'} on the CPU")
        got, want = to_cpu([a for a in actual if a is not None]), [e for e in expected if e is not None]
        try:
            _assert_close(got, want, "gradient mismatch", tol_kwargs)
        except AssertionError:
            if not _no_less_accurate(got, want, lambda: _float64_grads(fn, sample, seed, out)):
                raise
    except AssertionError as exc:
        raise _SampleFailed(_failure_kind(str(exc)), describe_exception(exc)) from None
    return "pass"


def _float64_grads(fn: Callable, sample, seed: int, out) -> list:
    """The gradients of ``sample`` computed in float64 on the CPU, for the upstream gradients the
    reduced-precision run ``out`` got: the truth the device and the CPU are measured against."""
    inp, args, kwargs = _to_float64((sample.input, sample.args, sample.kwargs))
    like = [t for t in _tensors(sample.output_process_fn_grad(out))
            if t.requires_grad and (t.is_floating_point() or t.is_complex())]
    wide = fn(inp, *args, **kwargs)
    grads = _grads(sample.output_process_fn_grad(wide), _grad_targets((inp, args, kwargs)), seed, None, like)
    return [g for g in (grads or ()) if g is not None]


def run_backward_samples(res: OpResult, fn: Callable, samples, device: torch.device, tol_kwargs: dict) -> None:
    """Gradients of each sample on ``device`` vs the CPU (samples made with ``requires_grad=True``)."""
    for i, sample in enumerate(samples):
        counted = res.samples
        try:
            outcome = _run_one_backward(res, fn, sample, device, tol_kwargs, seed=1000 + i)
        except _SampleFailed as f:
            res.samples = counted + 1
            res.failed += 1
            res.failures.append(SampleFailure(i, f.kind, f.message))
            continue
        if outcome == "skip":
            res.skipped += 1
        else:
            res.passed += 1


def run_opinfo_op(op, device: str | torch.device, dtype: torch.dtype = torch.float32, *,
                  max_samples: int | None = None, device_module=None) -> OpResult:
    """Run every CPU sample of one OpInfo on ``device``; compare with CPU eager."""
    device = torch.device(device)
    res = OpResult(name=op.full_name)
    t0 = time.perf_counter()
    if device_module is None:
        device_module = getattr(torch, device.type, None)
    has_counts = hasattr(device_module, "fallback_counts") and hasattr(
        device_module, "reset_fallback_counts")
    if has_counts:
        device_module.reset_fallback_counts()

    skip_reasons, tol, xfail = _compare_cpu_decorations(op, "privateuse1", dtype)
    nondet_reasons = [r for r in skip_reasons if "determin" in r.lower()]
    op_meta_only = ""
    if op.name in UNINITIALIZED_OPS:
        op_meta_only = "output is uninitialized memory"
    elif nondet_reasons:
        op_meta_only = f"OpInfo: {nondet_reasons[0]}"
    tol_kwargs = {"atol": tol.atol, "rtol": tol.rtol} if tol is not None else {}

    try:
        samples = op_samples(op, dtype)
    except Exception as exc:  # the corpus itself cannot produce samples
        res.status, res.reason = "skip", f"sample generation failed: {describe_exception(exc)}"
        res.seconds = time.perf_counter() - t0
        return res
    if max_samples is not None:
        samples = samples[:max_samples]
    if not samples:
        res.status, res.reason = "skip", "no samples for this dtype"
        res.seconds = time.perf_counter() - t0
        return res

    fn: Callable = op.op
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _run_samples(res, fn, samples, device, op_meta_only, tol_kwargs)

    if has_counts:
        try:
            res.fallback_ops = {k: v for k, v in device_module.fallback_counts().items() if v}
        except Exception:
            pass
    if res.failed and xfail:
        # OpInfo expects test_compare_cpu to fail (CPU vs CUDA kernel differences); a CPU
        # fallback runs the CPU kernels, so a failure here is still reported, with the note.
        res.status = "fail"
        res.failure_class = res.failures[0].kind
        res.reason = ("(OpInfo marks TestCommon.test_compare_cpu as an expected failure) "
                      + f"sample {res.failures[0].index}: {res.failures[0].message}")
    elif res.failed:
        res.status = "fail"
        res.failure_class = res.failures[0].kind
        res.reason = f"sample {res.failures[0].index}: {res.failures[0].message}"
    elif res.samples == 0:
        res.status, res.reason = "skip", "no sample could run on the device (CPU ref raised)"
    res.seconds = time.perf_counter() - t0
    return res


def opinfo_ops(dtype: torch.dtype = torch.float32, names: Iterable[str] | None = None):
    """OpInfos of op_db that support ``dtype`` on CPU (optionally only the given full names)."""
    op_db = compat.opinfo_db()

    wanted = set(names) if names is not None else None
    ops = [op for op in op_db if dtype in op.supported_dtypes("cpu")]
    if wanted is not None:
        ops = [op for op in ops if op.full_name in wanted]
    return ops


def run_opinfo_corpus(device: str | torch.device, dtype: torch.dtype = torch.float32, *,
                      names: Iterable[str] | None = None, max_samples: int | None = None,
                      progress: Callable[[OpResult], None] | None = None
                      ) -> dict[str, OpResult]:
    """Run the OpInfo corpus (or the named subset) on ``device``: {full_name: OpResult}."""
    results: dict[str, OpResult] = {}
    for op in opinfo_ops(dtype, names):
        try:
            r = run_opinfo_op(op, device, dtype, max_samples=max_samples)
        except Exception as exc:  # a bug in the runner, never in the device: keep going
            r = OpResult(name=op.full_name, status="fail", failure_class="runner error",
                         reason=describe_exception(exc) + "\n" + traceback.format_exc(limit=3))
        results[op.full_name] = r
        if progress is not None:
            progress(r)
    return results


def summarize(results: dict[str, OpResult]) -> dict[str, Any]:
    """Counts and failure classes (with example ops) of a corpus run."""
    from collections import Counter, defaultdict

    status = Counter(r.status for r in results.values())
    classes: dict[str, list[str]] = defaultdict(list)
    for r in results.values():
        if r.status == "fail":
            for kind in sorted({f.kind for f in r.failures} or {r.failure_class}):
                classes[kind].append(r.name)
    samples = sum(r.samples for r in results.values())
    passed = sum(r.passed for r in results.values())
    ran = status["pass"] + status["fail"]
    return {
        "ops": len(results),
        "ops_pass": status["pass"], "ops_fail": status["fail"], "ops_skip": status["skip"],
        "op_pass_rate": (status["pass"] / ran) if ran else 0.0,
        "samples": samples, "samples_pass": passed,
        "samples_meta_only": sum(r.meta_only for r in results.values()),
        "sample_pass_rate": (passed / samples) if samples else 0.0,
        "failure_classes": {k: v for k, v in sorted(classes.items(), key=lambda kv: -len(kv[1]))},
    }


def format_failure(r: OpResult, limit: int = 3) -> str:
    lines = [f"{r.name}: {r.failed}/{r.samples} samples failed"]
    if not r.failures and r.reason:
        lines.append(f"  [{r.failure_class}] {r.reason[:500]}")
    for f in r.failures[:limit]:
        lines.append(f"  sample {f.index} [{f.kind}] {f.message[:500]}")
    return "\n".join(lines)



def _result_from_dict(d: dict) -> OpResult:
    d = dict(d)
    d["failures"] = [SampleFailure(**f) for f in d.get("failures", [])]
    return OpResult(**d)


def run_opinfo_corpus_isolated(device: str, dtype: torch.dtype = torch.float32, *,
                               names: Iterable[str] | None = None,
                               progress: Callable[[OpResult], None] | None = None,
                               op_timeout: float = 600.0,
                               env: dict | None = None) -> dict[str, OpResult]:
    """``run_opinfo_corpus`` in a child process that is restarted after a crash or a hang.

    A device bug that kills the process (a segfault in a copy kernel, an abort) or hangs it
    fails only the OpInfo being run ("crash: <signal>" / "hang"), and the run goes on with the
    next one. The child registers ``device`` with ``torchvendor.sdk.register_device``.
    """
    import json
    import os
    import queue
    import signal
    import subprocess
    import sys
    import threading

    todo = [op.full_name for op in opinfo_ops(dtype, names)]
    results: dict[str, OpResult] = {}
    dtype_name = str(dtype).removeprefix("torch.")
    while todo:
        cmd = [sys.executable, "-W", "ignore", "-m", "torchvendor.sdk.conformance.opinfo", "--worker",
               "--device", device, "--dtype", dtype_name, "--ops", *todo]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        lines: queue.Queue = queue.Queue()
        tail: list[str] = []

        def pump(stream=proc.stdout, q=lines):
            for line in stream:
                q.put(line)
            q.put(None)
        threading.Thread(target=pump, daemon=True).start()
        current = None
        verdict = None
        while True:
            try:
                line = lines.get(timeout=op_timeout)
            except queue.Empty:
                proc.kill()
                verdict = "hang"
                break
            if line is None:
                break
            if line.startswith("@@START "):
                current = line[len("@@START "):].strip()
            elif line.startswith("@@RESULT "):
                r = _result_from_dict(json.loads(line[len("@@RESULT "):]))
                results[r.name] = r
                current = None
                if progress is not None:
                    progress(r)
            else:
                tail = (tail + [line.rstrip()])[-15:]
        rc = proc.wait()
        done = set(results)
        if current is None and rc == 0 and verdict is None:
            break
        if current is None:  # died between ops (e.g. at start-up): give up on the rest
            for name in todo:
                if name not in done:
                    results[name] = OpResult(name=name, status="fail",
                                             failure_class="runner error",
                                             reason=f"worker exited rc={rc}: "
                                                    + " | ".join(tail[-5:]))
            break
        if verdict is None:
            sig = -rc if rc < 0 else None
            verdict = (f"crash: {signal.Signals(sig).name}" if sig else f"crash: exit {rc}")
        r = OpResult(name=current, status="fail", failure_class=f"process {verdict}",
                     reason=f"the process died in this OpInfo ({verdict}); last output: "
                            + " | ".join(t for t in tail[-3:] if t))
        results[current] = r
        if progress is not None:
            progress(r)
        todo = [n for n in todo if n not in results]
    return {name: results[name] for name in [op.full_name for op in opinfo_ops(dtype, names)]
            if name in results}


def _worker(device: str, dtype: torch.dtype, names: list[str]) -> int:
    import json

    _bring_up(device)
    by_name = {op.full_name: op for op in opinfo_ops(dtype, names)}
    for name in names:
        print(f"@@START {name}", flush=True)
        try:
            r = run_opinfo_op(by_name[name], device, dtype)
        except Exception as exc:
            r = OpResult(name=name, status="fail", failure_class="runner error",
                         reason=describe_exception(exc))
        print("@@RESULT " + json.dumps(r.as_dict()), flush=True)
    return 0


def main(argv=None) -> int:
    """``python -m torchvendor.sdk.conformance.opinfo [--device acme] [--dtype float32] [--json out.json]``:
    run the corpus, print a summary and every failure, optionally write JSON results."""
    import argparse
    import faulthandler
    import json
    import sys

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--device", default=_DEFAULT_DEVICE)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json", default=None)
    ap.add_argument("--ops", nargs="*", default=None, help="OpInfo full names (default: all)")
    ap.add_argument("--in-process", action="store_true",
                    help="no child process (a crashing op then ends the whole run)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    faulthandler.enable()
    dtype = getattr(torch, args.dtype)
    if args.worker:
        return _worker(args.device, dtype, args.ops or [])
    def progress(r: OpResult):
        print(f"{r.status:4s} {r.name:55s} {r.passed}/{r.samples} "
              f"{r.seconds:6.2f}s {r.failure_class or r.reason[:60]}", flush=True)

    t0 = time.perf_counter()
    if args.in_process:
        _bring_up(args.device)
        results = run_opinfo_corpus(args.device, dtype, names=args.ops, progress=progress)
    else:
        results = run_opinfo_corpus_isolated(args.device, dtype, names=args.ops,
                                             progress=progress)
    wall = time.perf_counter() - t0
    s = summarize(results)
    print(f"\n== {args.device} {args.dtype}: {s['ops']} OpInfos, {s['ops_pass']} pass, "
          f"{s['ops_fail']} fail, {s['ops_skip']} skip (op pass rate "
          f"{100 * s['op_pass_rate']:.1f} %); samples {s['samples_pass']}/{s['samples']} "
          f"({100 * s['sample_pass_rate']:.2f} %, {s['samples_meta_only']} metadata-only); "
          f"{wall:.0f} s")
    for kind, names in s["failure_classes"].items():
        print(f"  {kind}: {len(names)} ops, e.g. {', '.join(names[:6])}")
    for r in results.values():
        if r.status == "fail":
            print(format_failure(r, 2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "dtype": args.dtype, "torch": torch.__version__,
                       "seconds": wall, "summary": s,
                       "results": {k: v.as_dict() for k, v in results.items()}}, f, indent=1)
    return 0 if s["ops_fail"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
