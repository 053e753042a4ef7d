"""``compat.testing``: torch's OpInfo database and device-generic test machinery (both need
``expecttest``; a clear error names it when missing)."""
from __future__ import annotations

import importlib.util

import pytest

from torchvendor.ir import compat

needs_expecttest = pytest.mark.skipif(importlib.util.find_spec("expecttest") is None, reason="needs expecttest")


@needs_expecttest
def test_opinfo_db_and_device_test_tools() -> None:
    db = compat.opinfo_db()
    assert len(db) > 500 and any(op.name == "add" for op in db)
    tools = compat.device_test_tools()
    assert sorted(vars(tools)) == ["OpDTypes", "TestCase", "dtypes", "instantiate_device_type_tests", "ops"]
    assert callable(compat.instantiate_for_privateuse1)


def test_missing_expecttest_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    if "torch.testing._internal.common_methods_invocations" in sys.modules:
        pytest.skip("the OpInfo database is already imported in this process")
    monkeypatch.setitem(sys.modules, "expecttest", None)
    with pytest.raises(ModuleNotFoundError, match="expecttest"):
        compat.opinfo_db()
