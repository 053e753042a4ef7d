"""The conformance ``models`` area: the model suite as conformance cases, one per model and part.

``minimal`` checks one small model's inference; ``inference`` the inference of every model
(``models/<name>/inference``); ``training`` the fast tier's second shape (a dynamic-shape
recompile after the first) and training step; ``full`` every part of every model. Each case
compares with float64 truth, eager float32's distance to it being the yardstick, both computed on
the CPU, so a broken device fails its model cases (:mod:`.check`).

    >>> from torchvendor.sdk.conformance.core import Target
    >>> [c.id for c in model_cases(Target(backend="eager"), "minimal")]
    ['models/moe_topk/inference']
    >>> len(model_cases(Target(backend="eager"), "inference")) >= 40
    True
"""
from __future__ import annotations

from typing import Any, Callable

from ..core import Case, Target
from .catalog import SPECS, names

__all__ = ["model_cases", "CI_MODELS"]

#: the ci profile's models: a mixture of experts, a recurrent net, a transformers decoder
CI_MODELS = ("moe_topk", "lstm_lm", "gpt2")


def _plan(profile: str) -> list[tuple[str, str]]:
    if profile == "minimal":
        return [("moe_topk", "inference")]
    if profile == "ci":  # three families, each cheap to compile: the same three on every commit
        return [(n, "inference") for n in CI_MODELS]
    if profile == "inference":
        return [(n, "inference") for n in names()]
    if profile == "training":
        return [(n, p) for n in names("fast") for p in ("dynamic", "training")]
    return [(n, p) for n in names() for p in ("inference", "dynamic", "training")]


def _case(name: str, part: str) -> Callable[[Target], Any]:
    def run(t: Target) -> Any:
        from .check import check_model

        backend = t.backend_name()
        parts = ("inference", part) if part == "dynamic" else (part,)  # the second shape recompiles
        out = check_model(name, [backend], device=t.device, parts=parts, timing=part == "inference", warm=False,
                          budget=0.2, options=dict(t.options))
        if "eager_error" in out:
            return {"skip": f"eager on the CPU fails on {name}: {out['eager_error']}"}
        res = out["backends"][backend]
        bad = {p: r for p, r in res["parts"].items() if not r["ok"]}
        if bad:
            raise AssertionError("; ".join(f"{p}: {r['raised']}" if "raised" in r else
                                           f"{p}: relative RMS error to the float64 truth {r['error']:.2e}, above "
                                           f"3 x eager float32 on the CPU's ({r['eager_error']:.2e}) + 1e-5"
                                           for p, r in bad.items()))
        ms, cov = out["ms"], res.get("coverage") or {}
        metrics = {"compile_s": res["compile_s"].get(parts[0], 0.0)}
        if backend in ms and "eager" in ms:
            metrics.update(eager_ms=ms["eager"], compiled_ms=ms[backend], speedup=ms["eager"] / ms[backend])
        if cov.get("coverage") is not None:   # the counts too: a run's coverage in total weighs models by size
            metrics.update(coverage=cov["coverage"], compute_ops=cov["compute_ops"], vendor_ops=cov["vendor_ops"])
        reasons = "; ".join(cov.get("fallback_reasons", []))
        return {"metrics": metrics, "fallback": cov.get("outside", {}),
                "reason": reasons or "some compute ops ran outside the vendor's compiled code"}
    return run


def model_cases(target: Target, profile: str) -> list[Case]:
    """The suite's cases for ``profile`` (none without a backend, or in the device profile)."""
    if not target.backend or profile == "device":
        return []
    return [Case(f"models/{n}/{p}", "models", _case(n, p), {"model": n, "family": SPECS[n].family}, timeout=900,
                 cost=_COST[p]) for n, p in _plan(profile)]


#: the runner hands out costly cases first. A model's dynamic case compiles its inference graphs
#: again before the second shape: handed out after every inference case, it finds them in the
#: artifact cache (convnext on acme: 2.1 s of compile instead of 28 s) instead of compiling them
#: beside its inference case on the other worker.
_COST = {"training": 30.0, "inference": 20.0, "dynamic": 19.0}
