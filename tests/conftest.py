"""Shared fixtures. PrivateUse1 can be renamed once per process, so every test that needs the
device uses the session-wide ``acme`` device registered on the reference simulated runtime."""
from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Register before any test runs a backward pass: torch's autograd engine sizes its per-device
    # queues once, at the first backward of the process, from the device guards registered then
    # (a vendor package registers at import or through autoload for the same reason).
    from torchvendor.sdk import register_device

    register_device("acme")


@pytest.fixture(scope="session")
def acme():
    """The ``torch.acme`` device module (the reference simulated runtime, two devices)."""
    from torchvendor.sdk import register_device

    return register_device("acme")


@pytest.fixture(autouse=True, scope="module")
def _fresh_dynamo():
    """Each test file starts with Dynamo's caches empty: files share a worker under xdist, and the
    compiles of earlier files (of shared helper code objects) would otherwise count against a
    later file's recompile limit, which then runs eagerly and sees no graphs."""
    from torchvendor.ir import compat

    compat.dynamo_reset()
    yield
