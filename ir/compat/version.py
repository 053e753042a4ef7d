"""The running torch release, and the releases torchvendor supports.

    >>> SUPPORTED_RELEASES[0] <= TORCH_VERSION
    True
"""
from __future__ import annotations

import torch

__all__ = ["TORCH_VERSION", "SUPPORTED_RELEASES"]


def _version(v: str) -> tuple[int, int]:
    major, minor = v.split("+")[0].split(".")[:2]
    return int(major), int(minor)


#: (major, minor) of the running torch.
TORCH_VERSION: tuple[int, int] = _version(torch.__version__)

#: The first and the last supported torch release, (major, minor): pyproject's
#: ``torch>=2.11,<2.16`` and every "torch 2.11 to 2.15" of the docs say the same
#: (``tests/test_docs.py`` holds them together).
SUPPORTED_RELEASES: tuple[tuple[int, int], tuple[int, int]] = ((2, 11), (2, 15))
