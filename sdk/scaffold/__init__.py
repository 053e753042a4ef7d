"""torchvendor.sdk.scaffold: ``torchvendor new``, the first step of a vendor's bring-up.

- ``generate``: :func:`new` writes a complete out-of-tree vendor package (runtime, kernel library,
  backend at a level, manifest, pytest configuration, CI script, README)
- ``names``: the names a package is built from (:class:`VendorNames`) and their checks
- ``native``: the runtime and kernel sources, copied from the installed templates and renamed
- ``cli``: the ``torchvendor new`` command

Example::

    >>> from torchvendor.sdk.scaffold import LEVELS
    >>> sorted(LEVELS)
    ['aten', 'loop', 'onnx', 'torch']
"""
from __future__ import annotations

from .generate import LEVELS, ci_profile, new
from .names import ScaffoldError, VendorNames

__all__ = ["new", "LEVELS", "ci_profile", "ScaffoldError", "VendorNames"]
