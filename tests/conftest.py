"""Shared fixtures. PrivateUse1 can be renamed once per process, so every test that needs the
device uses the session-wide ``acme`` device registered on the reference simulated runtime."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def acme():
    """The ``torch.acme`` device module (the reference simulated runtime, two devices)."""
    from torchvendor.sdk import register_device

    return register_device("acme")
