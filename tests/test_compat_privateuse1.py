"""``compat.privateuse1``: the PrivateUse1 key's name and device-module registration (in a child
process: both are process-wide and permanent)."""
from __future__ import annotations

import subprocess
import sys

from torchvendor.ir import compat

_CHILD = """
import types, torch
from torchvendor.ir import compat
assert compat.privateuse1_backend_name() == "privateuseone"
torch.utils.rename_privateuse1_backend("tvcompat")
assert compat.privateuse1_backend_name() == "tvcompat"
mod = types.SimpleNamespace(is_available=lambda: False)
compat.register_device_module("tvcompat", mod)
assert torch.tvcompat is mod
print("ok")
"""


def test_privateuse1_name_and_device_module() -> None:
    assert isinstance(compat.privateuse1_backend_name(), str)
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
