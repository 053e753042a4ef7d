"""``compat.version``: the running release."""
from __future__ import annotations

import torch

from torchvendor.ir import compat
from torchvendor.ir.compat.version import _version


def test_version_parsed() -> None:
    assert compat.SUPPORTED_RELEASES[0] <= compat.TORCH_VERSION
    assert compat.TORCH_VERSION == tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def test_version_strings() -> None:
    assert _version("2.13.0+cpu") == (2, 13)
    assert _version("2.11.0a0+git1234") == (2, 11)
    assert _version("2.15.0.dev20260101+cu130") == (2, 15)
