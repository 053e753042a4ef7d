"""The running torch release.

    >>> TORCH_VERSION >= (2, 11)
    True
"""
from __future__ import annotations

import torch

__all__ = ["TORCH_VERSION"]


def _version(v: str) -> tuple[int, int]:
    major, minor = v.split("+")[0].split(".")[:2]
    return int(major), int(minor)


#: (major, minor) of the running torch.
TORCH_VERSION: tuple[int, int] = _version(torch.__version__)
