"""A pytest plugin: the conformance cases as tests in a vendor's own CI.

In the vendor's ``conftest.py``: ``pytest_plugins = ["torchvendor.sdk.conformance.pytest_plugin"]``,
and one test file::

    def test_conformance(conformance_case):
        conformance_case.check()

then ``pytest --tv-device acme --tv-backend acme_torch.backend:Acme --tv-profile minimal``: one test
per case id (``-k`` selects them); a failing case fails, an unclaimed one skips, a manifest's
expected failure xfails, one the device does not implement skips as unsupported, and a case
that ran through a CPU fallback passes with a warning.

    >>> isinstance(CaseRunner.__doc__, str)
    True
"""
from __future__ import annotations

import warnings
from typing import Any

import pytest

from .core import Case, Manifest, Target, cases_for, load_manifest, run_case

__all__ = ["CaseRunner", "pytest_addoption", "pytest_generate_tests"]


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("torchvendor conformance")
    group.addoption("--tv-device", default="cpu", help="device under test (cpu, cuda, or a torchvendor device)")
    group.addoption("--tv-runtime", default=None, help="vendor runtime library to bring the device up from")
    group.addoption("--tv-backend", default=None, help="compile backend: a name or module:Class")
    group.addoption("--tv-profile", default="minimal", help="minimal, device, inference, training or full")
    group.addoption("--tv-manifest", default=None, help="vendor manifest (TOML)")


class CaseRunner:
    """One conformance case, run by :meth:`check` inside a pytest test."""

    def __init__(self, case: Case, target: Target, manifest: Manifest | None) -> None:
        self.case, self.target, self.manifest = case, target, manifest

    def check(self) -> None:
        result = run_case(self.case, self.target, self.manifest)
        if result.status == "fail":
            pytest.fail(f"{result.id}: {result.reason}", pytrace=False)
        if result.status == "skip":
            pytest.skip(result.reason)
        if result.status == "unsupported":
            pytest.skip(f"unsupported on the device: {result.reason}")
        if result.status == "xfail":
            pytest.xfail(result.reason)
        if result.status == "fallback":
            warnings.warn(f"{result.id}: ran through a CPU fallback: {result.fallback}", UserWarning)


def _setup(config: Any) -> tuple[Target, Manifest | None, list[Case]]:
    cached = getattr(config, "_tv_conformance", None)
    if cached is None:
        opt = config.getoption
        # the manifest's kernel libraries load as they do for the CLI (else the vendor's own
        # kernels would be judged through the CPU fallback)
        manifest = load_manifest(opt("--tv-manifest")) if opt("--tv-manifest") else None
        target = Target(device=opt("--tv-device"), backend=opt("--tv-backend"), runtime=opt("--tv-runtime"),
                        kernels=tuple(manifest.kernels) if manifest else ())
        target.setup()
        cached = config._tv_conformance = (target, manifest, cases_for(target, opt("--tv-profile"), manifest))
    return cached


def pytest_generate_tests(metafunc: Any) -> None:
    if "conformance_case" in metafunc.fixturenames:
        target, manifest, cases = _setup(metafunc.config)
        metafunc.parametrize("conformance_case", [CaseRunner(c, target, manifest) for c in cases],
                             ids=[c.id for c in cases])
