"""The conformance suite's model: targets, cases, results, areas, profiles and the vendor manifest.

A :class:`Target` names what is tested: a device (any registered device, or one brought up from
the vendor's runtime library), a compile backend, or both. Each *area* is a function that
lists the :class:`Case` s it has for a target; a *profile* picks areas and variants. Running a
case gives a :class:`Result`: ``pass``, ``fallback`` (right answer, but some of it ran through
a CPU fallback instead of the vendor's code), ``fail`` (a wrong answer or a broken contract),
``unsupported`` (the device does not implement it: ``NotImplementedError``, a fallback the device
refused, a layout it lacks; a failure instead when the manifest claims the op or area), ``skip``
(the target does not claim it) or ``xfail`` (the manifest expects the failure, with a reason).

Example::

    >>> t = Target(device="cpu", backend=None)
    >>> [c.id for c in cases_for(t, "minimal") if c.area == "compile"]
    []
    >>> sorted(PROFILES)
    ['ci', 'device', 'full', 'inference', 'minimal', 'training']
"""
from __future__ import annotations

import fnmatch
import importlib
import os
import sys
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .reasons import describe_exception

__all__ = ["Target", "Case", "Result", "Manifest", "ManifestError", "ConformanceError", "Unsupported", "PROFILES",
           "AREAS", "STATUSES", "cases_for", "run_case", "load_manifest", "run_seed", "SEED_ENV"]

STATUSES = ("pass", "fallback", "fail", "unsupported", "skip", "xfail")


class Unsupported(Exception):
    """Raised by a case when the device does not implement what it checks (no kernel, a refused
    fallback, a layout the device lacks): not a wrong answer. ``NotImplementedError`` counts the same."""


class ConformanceError(ValueError):
    """A bad request: an unknown backend, device or profile, a runtime that does not load."""


class ManifestError(ConformanceError):
    """A malformed manifest; the message names the file, the line and the field."""


@dataclass(frozen=True)
class Target:
    """What the suite tests. ``device``: a device type ("cpu", "acme", ...); ``runtime``: the
    vendor runtime library to register the device from (None: already registered, or the
    simulator for a new torchvendor device); ``backend``: a ``torch.compile`` backend name or
    ``module:Class`` of a ``torchvendor.sdk.Backend`` subclass; ``options``: its options;
    ``kernels``: the vendor's eager kernel libraries (``load_kernel_library``), loaded in every
    process that runs cases."""

    device: str = "cpu"
    backend: str | None = None
    runtime: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    kernels: tuple[str, ...] = ()

    def setup(self) -> None:
        """Register the device and load the backend in this process (idempotent)."""
        import torch

        if self.device not in ("cpu", "cuda", "meta"):
            from torchvendor.sdk import register_device

            try:
                register_device(self.device, runtime=self.runtime)
            except Exception as e:
                raise ConformanceError(f"cannot bring up device {self.device!r}"
                                       f"{f' from {self.runtime}' if self.runtime else ''}: {e}") from e
        elif self.device == "cuda" and not torch.cuda.is_available():
            raise ConformanceError("device 'cuda' was asked for but torch.cuda.is_available() is False")
        self._load_kernels()
        if self.backend:
            self.backend_name()

    def _load_kernels(self) -> None:
        if not self.kernels:
            return
        if self.device in ("cpu", "cuda", "meta"):
            raise ConformanceError(f"kernel libraries serve a torchvendor device, not {self.device!r}: "
                                   f"pass --device NAME of the vendor's device with --kernels")
        from torchvendor.sdk import load_kernel_library

        for path in self.kernels:
            full = str(Path(path).resolve())
            if full in _LOADED_KERNELS:
                continue  # once per process: a second load would serve the same operators twice
            try:
                _LOADED_KERNELS[full] = load_kernel_library(full).operators
            except (OSError, ValueError, RuntimeError) as e:
                raise ConformanceError(f"cannot load kernel library {path}: {e}") from e

    def backend_name(self) -> str:
        """The ``torch.compile`` name of the backend, importing and registering it if needed."""
        spec = self.backend or ""
        if ":" in spec:
            module, _, cls_name = spec.partition(":")
            try:
                cls = getattr(importlib.import_module(module), cls_name)
            except (ImportError, AttributeError) as e:
                raise ConformanceError(f"cannot load backend {spec!r}: {e}") from e
            from torchvendor.sdk import register_backend

            register_backend(cls)
            return cls.name
        _import_entry_point(spec)
        known = _dynamo_backends()
        if spec not in known:
            raise ConformanceError(f"unknown compile backend {spec!r}; known: {sorted(known)} (or pass "
                                   f"module:Class of a torchvendor Backend)")
        return spec

    def describe(self) -> dict[str, Any]:
        return {"device": self.device, "backend": self.backend, "runtime": self.runtime,
                "options": dict(self.options), "kernels": list(self.kernels)}


def _import_entry_point(name: str) -> None:
    """Import the package a ``torch_dynamo_backends`` entry point of ``name`` names (any vendor's,
    ours alike), so that its backend is registered before Dynamo is asked for it."""
    from importlib.metadata import entry_points

    for point in entry_points(group="torch_dynamo_backends"):
        if point.name == name:
            try:
                importlib.import_module(point.module)
            except ImportError as e:
                raise ConformanceError(f"cannot load backend {name!r} from its entry point {point.value}: {e}") from e
            return


#: kernel libraries loaded in this process (resolved path -> the operators each serves)
_LOADED_KERNELS: dict[str, tuple[str, ...]] = {}


def _dynamo_backends() -> list[str]:
    from torchvendor.ir import compat

    return compat.dynamo_backend_names()


@dataclass
class Case:
    """One check. ``run(target)`` returns None (pass), a dict ``{"fallback": {op: n}}`` when the
    right answer came partly from a CPU fallback, or raises (fail). ``tags`` carry the op,
    dtype and variant for reports and manifests."""

    id: str
    area: str
    run: Callable[[Target], Any] = field(repr=False)
    tags: dict[str, str] = field(default_factory=dict)
    timeout: float = 120.0
    cost: float = 1.0  # a relative estimate: the runner hands out costly cases first (fewer idle workers at the end)


@dataclass
class Result:
    id: str
    area: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    fallback: dict[str, int] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    #: what the device's CPU fallback cost during the case, per op: calls, to_host_bytes,
    #: to_device_bytes, seconds (torchvendor devices; see fallback_costs())
    fallback_cost: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Manifest:
    """A vendor's claims: areas and op patterns it claims, dtypes, expected failures (id glob ->
    reason). Unclaimed cases are skipped, so a report shows regressions, not noise. What the
    manifest names itself (``ops`` for a case of an op, ``areas`` for any other) is *claimed*: an
    ``unsupported`` result there is a failure; under the defaults it stays ``unsupported``."""

    areas: tuple[str, ...] = ()
    ops: tuple[str, ...] = ("*",)
    dtypes: tuple[str, ...] = ("float32",)
    xfail: dict[str, str] = field(default_factory=dict)
    path: str = ""
    kernels: tuple[str, ...] = ()
    ops_given: bool = False

    def claims(self, case: Case) -> str | None:
        """None if the manifest claims the case, else why it is skipped."""
        if self.areas and case.area not in self.areas:
            return f"area {case.area!r} is not claimed by the manifest"
        op = case.tags.get("op")
        if op and not any(fnmatch.fnmatchcase(op, p) for p in self.ops):
            return f"op {op!r} is not claimed by the manifest"
        dtype = case.tags.get("dtype")
        if dtype and dtype not in self.dtypes:
            return f"dtype {dtype} is not claimed by the manifest"
        return None

    def claims_explicitly(self, case: Case) -> bool:
        """Whether the manifest names this case's op (its ``ops`` key) or, for a case without an
        op, its area (its ``areas`` key): the vendor says the device implements it."""
        op = case.tags.get("op")
        if op:
            return self.ops_given and any(fnmatch.fnmatchcase(op, p) for p in self.ops)
        return case.area in self.areas

    def expected_failure(self, case_id: str) -> str | None:
        for pattern, reason in self.xfail.items():
            if fnmatch.fnmatchcase(case_id, pattern):
                return reason
        return None


_MANIFEST_FIELDS = {"areas": list, "ops": list, "dtypes": list, "xfail": dict, "kernels": list}


def load_manifest(path: str | Path) -> Manifest:
    """Read a TOML manifest::

        areas = ["device", "ops", "compile"]
        ops = ["aten.*", "add", "nn.functional.*"]
        dtypes = ["float32", "bfloat16"]
        kernels = ["build/libacme_kernels.so"]   # relative to the manifest's directory
        [xfail]
        "ops/nn.functional.conv2d/*" = "no grouped convolution yet"

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "m.toml")
    >>> _ = open(p, "w").write('dtypes = "float32"\\n')
    >>> load_manifest(p)
    Traceback (most recent call last):
    ...
    torchvendor.sdk.conformance.core.ManifestError: ...m.toml, line 1, field 'dtypes': expected a list, got str
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ManifestError(f"cannot read manifest {path}: {e}") from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{path}: not valid TOML: {e}") from e

    def line_of(key: str) -> int:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip().startswith((key, f"[{key}]")):
                return n
        return 0

    for key, value in data.items():
        if key not in _MANIFEST_FIELDS:
            raise ManifestError(f"{path}, line {line_of(key)}, field {key!r}: unknown field; known: "
                                f"{sorted(_MANIFEST_FIELDS)}")
        if not isinstance(value, _MANIFEST_FIELDS[key]):
            raise ManifestError(f"{path}, line {line_of(key)}, field {key!r}: expected a "
                                f"{_MANIFEST_FIELDS[key].__name__}, got {type(value).__name__}")
    missing = [k for k in data.get("kernels", ()) if not (path.parent / str(k)).is_file()]
    if missing:
        raise ManifestError(f"{path}, line {line_of('kernels')}, field 'kernels': no such file {missing[0]!r} "
                            f"(paths are relative to the manifest's directory; build the library first)")
    unknown_areas = sorted(set(data.get("areas", [])) - set(AREAS))
    if unknown_areas:
        raise ManifestError(f"{path}, line {line_of('areas')}, field 'areas': unknown area(s) {unknown_areas}; "
                            f"known: {sorted(AREAS)}")
    return Manifest(areas=tuple(data.get("areas", ())), ops=tuple(data.get("ops", ("*",))), ops_given="ops" in data,
                    dtypes=tuple(data.get("dtypes", ("float32",))),
                    xfail={str(k): str(v) for k, v in data.get("xfail", {}).items()}, path=str(path),
                    kernels=tuple(str(path.parent / k) for k in data.get("kernels", ())))


# ---- areas and profiles ------------------------------------------------------------------------------

#: area name -> module:function listing its cases for (target, profile)
AREAS: dict[str, str] = {
    "runtime": "runtime_cases:cases",
    "device": "device_cases:cases",
    "ops": "op_cases:cases",
    "torch": "torch_tests:cases",
    "compile": "compile_cases:feature_cases",
    "models": "compile_cases:model_cases",
    "distributed": "distributed_cases:cases",
    "training-loop": "training_loop_cases:cases",
}

#: profile -> areas it runs (each area reads the profile to pick its variants)
PROFILES: dict[str, tuple[str, ...]] = {
    "minimal": ("runtime", "device", "ops", "compile", "models"),
    "device": ("runtime", "device", "ops", "torch"),
    "inference": ("ops", "compile", "models"),
    "training": ("ops", "compile", "models", "distributed", "training-loop"),
    "full": ("runtime", "device", "ops", "torch", "compile", "models", "distributed", "training-loop"),
    # what a vendor's CI runs on every commit: every area, a seeded sample of ops x dtypes
    "ci": ("runtime", "device", "ops", "compile", "models", "distributed", "training-loop"),
}

#: the environment variable that carries a run's seed to its worker processes
SEED_ENV = "TORCHVENDOR_CONFORMANCE_SEED"


def run_seed() -> int:
    """The seed of sampled profiles (``ci``): ``TORCHVENDOR_CONFORMANCE_SEED`` when set, else the
    number of the week since 1970 (UTC), so the sample rotates weekly and two commits of one week
    run the same cases; the report records it (``--seed`` reruns a sample).

    >>> import os; os.environ[SEED_ENV] = "7"; run_seed()
    7
    >>> del os.environ[SEED_ENV]
    """
    value = os.environ.get(SEED_ENV)
    return int(value) if value else int(time.time() // (7 * 24 * 3600))


def cases_for(target: Target, profile: str, manifest: Manifest | None = None, *,
              areas: Iterable[str] | None = None) -> list[Case]:
    """Every case of ``profile`` that applies to ``target``, in a stable order; with ``areas``,
    only those of the named areas (building the ``ops`` cases imports torch's OpInfo database,
    seconds that a run of other areas need not pay)."""
    if profile not in PROFILES:
        raise ConformanceError(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}")
    wanted = None if areas is None else set(areas)
    out: list[Case] = []
    for area in PROFILES[profile]:
        if manifest is not None and manifest.areas and area not in manifest.areas:
            continue
        if wanted is not None and area not in wanted:
            continue
        module, _, fn = AREAS[area].partition(":")
        out += getattr(importlib.import_module(f"{__package__}.{module}"), fn)(target, profile)
    return out


def run_case(case: Case, target: Target, manifest: Manifest | None = None) -> Result:
    """Run one case in this process (the target must be set up)."""
    skip = manifest.claims(case) if manifest is not None else None
    if skip:
        return Result(case.id, case.area, "skip", skip, tags=case.tags)
    start = time.perf_counter()
    costs_before = _fallback_costs(target.device)
    status, reason, fallback, metrics = "pass", "", {}, {}
    try:
        out = case.run(target)
        if isinstance(out, dict):
            fallback = {k: int(v) for k, v in out.get("fallback", {}).items() if v}
            metrics = dict(out.get("metrics", {}))
            if out.get("skip"):
                status, reason = "skip", str(out["skip"])
            elif out.get("xfail"):  # a failure the case knows to be torch's (op_cases.DEVICE_DEFINED_ALGORITHMS)
                status, reason = "xfail", str(out["xfail"])
            elif fallback:
                status, reason = "fallback", out.get("reason", "ran (partly) through a CPU fallback")
    except Exception as e:  # noqa: BLE001 - a failing case is data
        status = "unsupported" if isinstance(e, (Unsupported, NotImplementedError)) else "fail"
        reason = describe_exception(e)
        if status == "unsupported" and manifest is not None and manifest.claims_explicitly(case):
            status, reason = "fail", f"claimed by the manifest but not implemented on the device: {reason}"
    expected = manifest.expected_failure(case.id) if manifest is not None else None
    if expected is not None:
        status, reason = ("xfail", f"expected: {expected}") if status in ("fail", "unsupported", "xfail") else \
            ("fail", f"expected to fail ({expected}) but passed: remove it from the manifest")
    return Result(case.id, case.area, status, reason, time.perf_counter() - start, fallback, case.tags, metrics,
                  _cost_since(costs_before, _fallback_costs(target.device)))


def _fallback_costs(device: str) -> dict[str, dict[str, float]]:
    """The device module's fallback_costs() (torchvendor devices), else {} (never imports torch)."""
    torch = sys.modules.get("torch")
    module = getattr(torch, device, None) if torch is not None and device.isidentifier() else None
    costs = getattr(module, "fallback_costs", None)
    return costs() if callable(costs) else {}


def _cost_since(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {}
    for op, cost in after.items():
        delta = {k: v - before.get(op, {}).get(k, 0) for k, v in cost.items()}
        if delta.get("calls"):
            out[op] = delta
    return out
