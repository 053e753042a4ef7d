"""torch's test machinery (``torch.testing._internal``), for the conformance suite: the OpInfo
database and the device-generic test classes. Both need the ``expecttest`` package.
"""
from __future__ import annotations

import types as _types
from typing import Any as _Any

from .privateuse1 import privateuse1_backend_name

__all__ = ["opinfo_db", "device_test_tools", "instantiate_for_privateuse1"]


def opinfo_db() -> list[_Any]:
    """PyTorch's OpInfo database (``common_methods_invocations.op_db``; needs ``expecttest``).

    >>> len(opinfo_db()) > 500
    True
    """
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"PyTorch's OpInfo database needs the package {e.name!r}: "
                                  f"pip install {e.name}") from e
    return op_db


def device_test_tools() -> _types.SimpleNamespace:
    """torch's device-generic test machinery (``torch.testing._internal.common_device_type``):
    ``TestCase``, the ``ops`` and ``dtypes`` decorators, ``OpDTypes`` and
    ``instantiate_device_type_tests`` (needs ``expecttest``, as the OpInfo database does).

    >>> sorted(vars(device_test_tools()))
    ['OpDTypes', 'TestCase', 'dtypes', 'instantiate_device_type_tests', 'ops']
    """
    try:
        from torch.testing._internal import common_device_type as cdt
        from torch.testing._internal.common_utils import TestCase
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"PyTorch's device-generic test machinery needs the package {e.name!r}: "
                                  f"pip install {e.name}") from e
    return _types.SimpleNamespace(TestCase=TestCase, ops=cdt.ops, dtypes=cdt.dtypes, OpDTypes=cdt.OpDTypes,
                                  instantiate_device_type_tests=cdt.instantiate_device_type_tests)


def instantiate_for_privateuse1(generic: type) -> type:
    """The device-specific class that ``instantiate_device_type_tests`` makes from ``generic`` for
    the PrivateUse1 device (through torch's ``PrivateUse1TestBase``; its tests are named
    ``test_<name>_<op>_<device>_<dtype>``).

    torch decides at the import of ``common_device_type`` whether PrivateUse1 is a test device,
    so the device must be registered before that import (``register_device`` first).
    """
    from torch.testing._internal import common_device_type as cdt

    scope = {generic.__name__: generic}
    cdt.instantiate_device_type_tests(generic, scope, only_for="privateuse1")
    made = [cls for name, cls in scope.items() if name != generic.__name__]
    if not made:
        raise RuntimeError(f"torch's device-generic test machinery has no PrivateUse1 test base "
                           f"(PrivateUse1 is {privateuse1_backend_name()!r}): register the device before "
                           f"torch.testing._internal is first imported")
    return made[0]
