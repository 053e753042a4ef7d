"""One model of the suite against compile backends, in this process: inference, a second input
shape (Dynamo recompiles with dynamic shapes) and one SGD training step, each compared with a
float64 truth; eager float32's own distance to the truth is the yardstick (as in the Dynamo
benchmark harness: a backend is right when its error is at most ``3 x eager's + 1e-5``, relative
RMS). Truth and yardstick are computed on the CPU, never on the device under test: a device
whose copies or kernels are broken fails the case instead of moving its own yardstick.
Per backend it also measures vendor coverage (from the compile reports), run time beside
eager's (interleaved, min of N), and compile time cold (first call) and warm (after a Dynamo
reset, disk caches kept).

Progress goes to an event sink one JSON object at a time, ``begin`` before each step and the
result after it, so a driver that sees the process die knows which backend and step killed it
(:mod:`.suite`).

    >>> events = []
    >>> result = check_model("moe_topk", ["eager"], parts=("inference",), timing=False, sink=events.append)
    >>> result["backends"]["eager"]["status"], events[0]["begin"]
    ('correct', ['eager', 'inference'])
"""
from __future__ import annotations

import contextlib
import copy
import time
import warnings
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from torchvendor.ir import compat

from ..op_kinds import is_compute
from ..zoo import leaves, loss
from .catalog import SPECS

__all__ = ["check_model", "relative_error", "coverage", "full_float32", "PARTS", "MULTIPLIER", "TOLERANCE"]

PARTS = ("inference", "dynamic", "training")
#: what a model case falls back on when no graph of it reached a torchvendor backend
NO_GRAPH = "no graph reached the backend"
MULTIPLIER, TOLERANCE = 3.0, 1e-5
LEARNING_RATE = 0.05
def relative_error(value: torch.Tensor, truth: torch.Tensor) -> float:
    """RMS distance to the float64 truth over the truth's RMS (0 when both are zero).

    >>> relative_error(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0], dtype=torch.float64))
    0.0
    >>> relative_error(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0], dtype=torch.float64))
    inf
    """
    t = truth.detach().double().cpu()
    d = value.detach().double().cpu() - t
    finite = torch.isfinite(t)
    if not bool(finite.all()):  # a NaN or Inf in the truth must appear where the truth has it
        if not torch.equal(torch.isfinite(value.detach().cpu()), finite):
            return float("inf")
        t, d = t[finite], d[finite]
    elif not bool(torch.isfinite(d).all()):  # a NaN or Inf where the truth has none
        return float("inf")
    scale = float(t.norm())
    err = float(d.norm())
    return err / scale if scale else err


def _rms(value: torch.Tensor, truth: torch.Tensor) -> float:
    """RMS distance to the float64 truth over the truth's finite elements."""
    t, v = truth.detach().double().cpu(), value.detach().double().cpu()
    finite = torch.isfinite(t)
    return float((v[finite] - t[finite]).pow(2).mean().sqrt()) if bool(finite.any()) else 0.0


def _compare(got: Sequence[Any], eager: Sequence[Any], truth: Sequence[Any]) -> tuple[bool, float, float]:
    """Whether ``got`` is as close to the truth as eager is: (ok, worst error, eager's there)."""
    got, eager, truth = ([t for t in leaves(x) if t.is_floating_point()] for x in (got, eager, truth))
    # a different structure is said as such, not as an infinite error (run() reports what raised)
    if len(got) != len(truth):
        raise AssertionError(f"returned {len(got)} floating-point output(s), the model returns {len(truth)}")
    ok, worst, base = True, 0.0, 0.0
    for i, (g, e, t) in enumerate(zip(got, eager, truth)):
        if g.shape != t.shape:
            raise AssertionError(f"output {i} has shape {tuple(g.shape)}, the model's has {tuple(t.shape)}")
        eg, ee = relative_error(g, t), relative_error(e, t)
        # Dynamo's harness rule on absolute RMS errors as well: a tensor whose truth is at the
        # noise level (a gradient that cancels to ~0) has a huge relative error for every backend,
        # eager included, and its absolute errors decide
        if eg > MULTIPLIER * ee + TOLERANCE and _rms(g, t) > MULTIPLIER * _rms(e, t) + TOLERANCE:
            ok = False
        if eg >= worst:
            worst, base = eg, ee
    return ok, worst, base


@contextlib.contextmanager
def full_float32() -> Iterator[None]:
    """float32 math in full precision (TF32 off for cuDNN and cuBLAS) while a model is checked.

    The check compares float32 arithmetic with a float64 truth. torch lets cuDNN convolutions use
    TF32 by default, and whether cuDNN does depends on the algorithm it picks for a layout: the
    channels-last layout Inductor's layout optimization gives a ResNet's convolutions made both
    Inductor and torchvendor_cuda 1.9e-4 off the truth where eager (NCHW, no TF32) was 4.2e-7
    (H100, torch 2.11); with TF32 off all three were within 4.2e-7. A precision mode of the
    extern library, not of the backend under test, so it is off for every backend alike.

    >>> with full_float32():
    ...     torch.backends.cudnn.allow_tf32
    False
    """
    cudnn, saved = torch.backends.cudnn, torch.get_float32_matmul_precision()
    # cudnn's flags() context (torch's test utilities forbid setting its flags directly) and the
    # public matmul-precision setting ("highest": no TF32 in cuBLAS)
    with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                     allow_tf32=False):
        torch.set_float32_matmul_precision("highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(saved)


def _compute(key: str) -> bool:
    return is_compute(key)


def coverage(reports: Iterable[Any]) -> dict[str, Any]:
    """Vendor coverage of torchvendor compile reports: compute ops (views, tuple access and size
    arithmetic left out) that ran in compiled partitions, minus those that ran through the device's CPU fallback,
    over all compute ops of the graphs; with the ops that did not, and why partitions fell back."""
    total = vendor = 0
    outside: dict[str, int] = {}
    reasons: list[str] = []
    for report in reports:
        for graph in report.graphs:
            for p in graph.partitions:
                n = sum(c for op, c in p.ops.items() if _compute(op))
                total += n
                if p.status == "compiled":
                    dev = sum(p.device_fallback.values())
                    vendor += n - dev
                    for op, c in p.device_fallback.items():
                        outside[op] = outside.get(op, 0) + c
                else:
                    reasons.append(f"{graph.kind} {p.name}: {p.reason}")
                    for op, c in p.ops.items():
                        if _compute(op):
                            outside[op] = outside.get(op, 0) + c
            left = {op: sum(r.values()) for op, r in getattr(graph, "left_outside", {}).items()}
            for op, c in [*graph.unsupported.items(), *left.items()]:  # not claimed, or claimed and left out
                if _compute(op):
                    total += c
                    outside[op] = outside.get(op, 0) + c
    return {"compute_ops": total, "vendor_ops": vendor, "coverage": vendor / total if total else None,
            "outside": outside, "fallback_reasons": sorted(set(reasons))}


def _to(value: Any, device: str, dtype: torch.dtype | None = None) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device, dtype if dtype is not None and value.is_floating_point() else value.dtype)
    return value


def _inputs(kwargs: dict[str, Any], device: str, dtype: torch.dtype | None = None) -> dict[str, Any]:
    return {k: _to(v, device, dtype) for k, v in kwargs.items()}


def _detach(out: Any) -> list[torch.Tensor]:
    return [t.detach().cpu() for t in leaves(out)]


def _train_step(model: torch.nn.Module, run: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """One SGD step: the loss, every gradient, and the output after the step (no_grad)."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    opt.zero_grad(set_to_none=True)
    value = loss(run(**kwargs))
    value.backward()
    grads = [p.grad.detach().cpu() if p.grad is not None else torch.zeros(p.shape, dtype=p.dtype)
             for p in model.parameters()]
    opt.step()
    with torch.no_grad():
        after = _detach(run(**kwargs))
    return {"loss": [value.detach().cpu()], "grads": grads, "after": after}


class _Reference:
    """The float64 truth and the yardstick, eager float32, both computed on the CPU for both input
    variants: never on the device under test, whose broken copy or kernel would otherwise move
    the yardstick with the result it judges. The device's eager model is kept for the timing."""

    def __init__(self, name: str, device: str, parts: Sequence[str]) -> None:
        spec = SPECS[name]
        model, inputs = spec.build(0)
        self.spec, self.device = spec, device
        self.initial = copy.deepcopy(model).cpu()
        self.model = model.to(device).eval()
        cpu_model = copy.deepcopy(self.initial).eval()
        # the truth runs in eval mode like the model it judges (dropout off; models such as
        # XLNet return other outputs in training mode); _train_step sets train() itself
        self.truth_model = copy.deepcopy(self.initial).double().eval()
        self.inputs = [inputs, spec.make_inputs(model, 1)]
        self.eager: dict[str, Any] = {}
        self.truth: dict[str, Any] = {}
        with torch.no_grad():
            for v, part in ((0, "inference"), (1, "dynamic")):
                if part in parts or (part == "inference"):
                    self.eager[part] = _detach(cpu_model(**_inputs(self.inputs[v], "cpu")))
                    self.truth[part] = _detach(self.truth_model(**_inputs(self.inputs[v], "cpu", torch.float64)))
        if "training" in parts:
            m = copy.deepcopy(self.initial)
            self.eager["training"] = _train_step(m, m, _inputs(self.inputs[0], "cpu"))
            t = copy.deepcopy(self.truth_model)
            self.truth["training"] = _train_step(t, t, _inputs(self.inputs[0], "cpu", torch.float64))

    def device_inputs(self, variant: int) -> dict[str, Any]:
        return _inputs(self.inputs[variant], self.device)

    def fresh(self) -> torch.nn.Module:
        return copy.deepcopy(self.initial).to(self.device).eval()


class _Session:
    """One backend on one model: a compiled copy of the model, its compile reports, its results."""

    def __init__(self, ref: _Reference, backend: str, options: dict[str, Any] | None) -> None:
        self.ref, self.backend, self.options = ref, backend, options
        self.model = ref.fresh()
        self.compiled = self._compile()
        self.reports: list[Any] = []
        #: why Dynamo ran code of the model eagerly during this session (its first lines)
        self.skips: dict[str, None] = {}
        self.result: dict[str, Any] = {"parts": {}, "compile_s": {}}

    def _compile(self) -> Callable[..., Any]:
        if self.backend == "eager":
            return self.model
        if self.backend == "inductor_cudagraphs":  # Inductor with CUDA graphs
            return torch.compile(self.model, backend="inductor", mode="reduce-overhead")
        return torch.compile(self.model, backend=self.backend, options=self.options or None)

    def _collect(self, before: set[int]) -> None:
        from torchvendor.sdk import reports

        self.reports += [r for r in reports() if id(r) not in before and r.backend == self.backend]

    def run(self, part: str) -> None:
        from torchvendor.sdk import reports

        before = {id(r) for r in reports()}
        skipped = _dynamo_skips()
        started = time.perf_counter()
        try:
            if part == "training":
                got = _train_step(self.model, self.compiled, self.ref.device_inputs(0))
                checks = [_compare(got[k], self.ref.eager[part][k], self.ref.truth[part][k]) for k in got]
                ok = all(c[0] for c in checks)
                worst = max(checks, key=lambda c: c[1])
                out = {"ok": ok, "error": worst[1], "eager_error": worst[2]}
            else:
                with torch.no_grad():
                    got = _detach(self.compiled(**self.ref.device_inputs(0 if part == "inference" else 1)))
                ok, err, base = _compare(got, self.ref.eager[part], self.ref.truth[part])
                out = {"ok": ok, "error": err, "eager_error": base}
        except Exception as e:  # noqa: BLE001 - a failing backend is data
            out = {"ok": False, "raised": f"{type(e).__name__}: {e}"[:1500]}
        self.result["compile_s"][part] = time.perf_counter() - started
        self.result["parts"][part] = out
        self._collect(before)
        self.skips.update(dict.fromkeys(k for k, n in _dynamo_skips().items() if n > skipped.get(k, 0)))

    def warm_compile(self) -> None:
        """Compile again after a Dynamo reset (the disk caches kept): the first call's time."""
        if self.backend == "eager":
            return
        compat.dynamo_reset()
        self.model.eval()
        self.compiled = self._compile()
        started = time.perf_counter()
        try:
            with torch.no_grad():
                self.compiled(**self.ref.device_inputs(0))
            self.result["compile_s"]["warm"] = time.perf_counter() - started
        except Exception as e:  # noqa: BLE001
            self.result["compile_s"]["warm_raised"] = f"{type(e).__name__}: {e}"[:500]

    def finish(self) -> dict[str, Any]:
        parts = self.result["parts"].values()
        if self.reports:  # every backend that writes compile reports, whatever its name
            self.result["coverage"] = coverage(self.reports)
        elif self.backend not in _baselines([self.backend]):  # a torchvendor Backend that got no graph
            why = "; ".join(self.skips) or "no reason recorded"
            self.result["coverage"] = {"compute_ops": 0, "vendor_ops": 0, "coverage": 0.0, "outside": {NO_GRAPH: 1},
                                       "fallback_reasons": [f"{NO_GRAPH}: Dynamo ran the model eagerly: {why}"]}
        cov = self.result.get("coverage", {})
        if any("raised" in p for p in parts):
            status = "error"
        elif not all(p["ok"] for p in parts):
            status = "wrong"
        elif cov.get("fallback_reasons") or (cov.get("coverage") is not None and cov["coverage"] < 1.0):
            status = "fell back"
        else:
            status = "correct"
        self.result["status"] = status
        return self.result


def _min_ms(fns: Sequence[Callable[[], Any]], budget: float, sync: Callable[[], Any] = lambda: None,
            min_reps: int = 5, max_reps: int = 100) -> tuple[list[float | None], list[str | None]]:
    """Min wall time (ms) of each function, run interleaved (a burst of load hits all alike);
    ``sync`` waits for the device. A function that raises leaves the rotation (its time ``None``,
    its error beside it) and the others go on: one backend's crash on a repeated call is its own."""
    best: list[float] = [float("inf")] * len(fns)
    spent = [0.0] * len(fns)
    errors: list[str | None] = [None] * len(fns)

    def timed(i: int) -> float:
        start = time.perf_counter()
        try:
            fns[i]()
            sync()
        except Exception as e:  # noqa: BLE001 - a failing backend is data
            errors[i] = f"{type(e).__name__}: {e}"[:1500]
        return time.perf_counter() - start
    for i in range(len(fns)):
        for _ in range(2):  # warm-up
            if errors[i] is None:
                timed(i)
    reps = 0
    while reps < min_reps or (reps < max_reps and max(spent) < budget):
        for i in range(len(fns)):
            if errors[i] is None:
                took = timed(i)
                best[i], spent[i] = min(best[i], took), spent[i] + took
        reps += 1
    return [None if e else b * 1e3 for b, e in zip(best, errors)], errors


def _timing(ref: _Reference, sessions: dict[str, _Session], budget: float) -> dict[str, float]:
    """Each backend's time in ms; a backend that raises while timed gets a ``timing`` part with
    the error (its status becomes ``error``) and no time."""
    inputs = ref.device_inputs(0)
    runners = {"eager": ref.model, **{b: s.compiled for b, s in sessions.items() if b != "eager"
                                      and "raised" not in s.result["parts"].get("inference", {"raised": 1})}}

    def call(f: Callable[..., Any]) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return f(**inputs)
        return run
    module = getattr(torch, torch.device(ref.device).type, None)
    sync = getattr(module, "synchronize", None) if ref.device != "cpu" else None
    ms, errors = _min_ms([call(f) for f in runners.values()], budget, sync or (lambda: None))
    for b, error in zip(runners, errors):
        if error is not None and b in sessions:
            sessions[b].result["parts"]["timing"] = {"ok": False, "raised": error}
    return {b: t for b, t in zip(runners, ms) if t is not None}


def _dynamo_skips() -> dict[str, int]:
    """Dynamo's count of each reason it ran code eagerly so far (a graph break, or a frame it
    gave up on, such as one calling ``nn.LSTM``), by the reason's first line."""
    counters = compat.dynamo_counters()
    out: dict[str, int] = {}
    for kind in ("graph_break", "unimplemented"):
        for reason, n in counters.get(kind, {}).items():
            lines = [line.strip() for line in str(reason).strip().splitlines() if line.strip()] or [kind]
            hints = [line[len("Hint:"):].strip() for line in lines[1:] if line.startswith("Hint:")]
            said = f"{lines[0]} (Dynamo's hint: {hints[0]})" if hints else lines[0]
            out[said] = out.get(said, 0) + n
    return out


def _baselines(backends: Sequence[str]) -> set[str]:
    """The backends that are not torchvendor ``Backend`` s (torch's own: eager, inductor, ...):
    decided by what is registered, never by a name."""
    from torchvendor.sdk import registered_backends

    ours = set(registered_backends())
    return {b for b in backends if b not in ours}


def check_model(name: str, backends: Sequence[str], *, device: str = "cpu", parts: Sequence[str] = PARTS,
                baseline_parts: Sequence[str] | None = None, timing: bool = True, warm: bool = True,
                budget: float = 1.0, options: dict[str, Any] | None = None,
                sink: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Check model ``name`` on ``backends`` (``torch.compile`` names) in this process.

    Returns ``{"model", "family", "device", "backends": {name: {"status", "parts", "compile_s",
    "coverage"}}, "ms": {backend: ms}}``; ``status`` is ``correct``, ``fell back`` (right, but
    some compute ran outside the vendor's code), ``wrong`` or ``error`` (raised), or the whole
    result has ``eager_error`` when eager itself fails on the model. ``sink`` gets progress events.
    ``baseline_parts``: the parts run for backends that are not torchvendor ``Backend`` s (default: ``parts``).
    """
    unknown = [p for p in parts if p not in PARTS]
    if unknown or name not in SPECS:
        raise ValueError(f"unknown part(s) {unknown} (choose from {PARTS})" if unknown else
                         f"unknown model {name!r}; see torchvendor.sdk.conformance.models.catalog.names()")
    emit = sink or (lambda event: None)
    spec = SPECS[name]
    out: dict[str, Any] = {"model": name, "family": spec.family, "device": device, "backends": {}, "ms": {}}
    with warnings.catch_warnings(), full_float32():
        warnings.simplefilter("ignore")
        compat.dynamo_reset()
        try:
            ref = _Reference(name, device, parts)
        except Exception as e:  # noqa: BLE001 - the model is outside the suite where eager fails
            out["eager_error"] = f"{type(e).__name__}: {e}"[:1500]
            emit({"eager_error": out["eager_error"]})
            return out
        sessions: dict[str, _Session] = {}
        baselines = _baselines(backends)
        order = [p for p in PARTS if p in parts]
        for part in order:  # inference (the cold compiles) first, then the timing, then the rest
            if part != "inference" and timing and sessions and not out["ms"]:
                emit({"begin": ["all", "timing"]})
                out["ms"] = _timing(ref, sessions, budget)
            for b in backends:
                if b in baselines and baseline_parts is not None and part not in baseline_parts:
                    continue
                emit({"begin": [b, part]})
                sessions.setdefault(b, _Session(ref, b, options)).run(part)
                emit({"backend": b, "part": part, "result": sessions[b].result["parts"][part]})
        if timing and sessions and not out["ms"]:
            emit({"begin": ["all", "timing"]})
            out["ms"] = _timing(ref, sessions, budget)
        for b, s in sessions.items():
            if warm and "inference" in parts:
                emit({"begin": [b, "warm"]})
                s.warm_compile()
            out["backends"][b] = s.finish()
    emit({"done": out})
    return out
