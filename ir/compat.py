"""The one module that touches torch's private APIs.

Everything torchvendor needs from ``torch._dynamo``, ``torch._functorch``, ``torch._inductor``
and other private modules is imported or wrapped here, so that a torch release that moves
something breaks one file, and ``tests/test_compat.py`` names what moved. Supported releases:
2.11 to 2.14.

Example::

    >>> from torchvendor.ir import compat
    >>> compat.TORCH_VERSION >= (2, 11)
    True
"""
from __future__ import annotations

import torch

__all__ = ["TORCH_VERSION", "OpOverload", "OpOverloadPacket", "HigherOrderOperator"]


def _version(v: str) -> tuple[int, int]:
    major, minor = v.split("+")[0].split(".")[:2]
    return int(major), int(minor)


#: (major, minor) of the running torch.
TORCH_VERSION: tuple[int, int] = _version(torch.__version__)

# ---- operator objects (torch._ops) --------------------------------------------------------------
from torch._ops import HigherOrderOperator, OpOverload, OpOverloadPacket  # noqa: E402

# ---- Dynamo / AOTAutograd / decompositions (torch and ATen IR) ----------------------------------

# ---- Inductor (loop IR) ---------------------------------------------------------------------------
