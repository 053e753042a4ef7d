"""The names a vendor package is built from: one lowercase NAME gives all of them.

    >>> n = VendorNames.of("demo_vendor")
    >>> n.device, n.package, n.cls, n.upper, n.runtime_lib
    ('demo_vendor', 'demo_vendor_torch', 'DemoVendor', 'DEMO_VENDOR', 'libdemo_vendor_runtime.so')
"""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

__all__ = ["VendorNames", "ScaffoldError"]

class ScaffoldError(ValueError):
    """A name, level or folder the scaffold cannot use; the message says why and what to do."""


@dataclass(frozen=True)
class VendorNames:
    """Every name in a generated vendor package, derived from the device name."""

    device: str

    @classmethod
    def of(cls, name: str) -> "VendorNames":
        """Check ``name`` (a device name: a lowercase identifier that is no PyTorch device type)."""
        from torchvendor.sdk.device.registry import _check_name  # the device layer's own rule

        try:
            _check_name(name)
        except ValueError as e:
            raise ScaffoldError(str(e)) from None
        if keyword.iskeyword(name) or name.endswith("_"):
            raise ScaffoldError(f"{name!r} cannot name a vendor package (a Python keyword, or a trailing '_')")
        return cls(name)

    @property
    def package(self) -> str:
        """The Python package: ``<name>_torch``."""
        return f"{self.device}_torch"

    @property
    def cls(self) -> str:
        """The backend class: the name in CamelCase."""
        return "".join(part.capitalize() for part in self.device.split("_") if part)

    @property
    def upper(self) -> str:
        return self.device.upper()

    @property
    def runtime_lib(self) -> str:
        return f"lib{self.device}_runtime.so"

    @property
    def kernels_lib(self) -> str:
        return f"lib{self.device}_kernels.so"

    def substitutions(self) -> dict[str, str]:
        """The ``{{key}}`` values of the package's text templates."""
        return {"name": self.device, "NAME": self.upper, "Name": self.cls, "package": self.package,
                "runtime_lib": self.runtime_lib, "kernels_lib": self.kernels_lib,
                "runtime_path": f"build/runtime/{self.runtime_lib}",
                "kernels_path": f"build/kernels/{self.kernels_lib}"}


_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def fill(text: str, values: dict[str, str], where: str = "template") -> str:
    """``text`` with every ``{{key}}`` replaced; an unknown key raises (a template bug).

    >>> fill("{{name}}: {{Name}}", {"name": "nimbus", "Name": "Nimbus"})
    'nimbus: Nimbus'
    """
    def value(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise KeyError(f"{where}: unknown placeholder {m.group(0)}; known: {sorted(values)}")
        return values[m.group(1)]

    return _PLACEHOLDER.sub(value, text)
