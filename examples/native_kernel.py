"""Native eager kernels for a torchvendor device, on PyTorch's LibTorch stable ABI.

The kernel template (``examples/stable_kernels``: add, mul, relu, mm, sum, with broadcasting and
type promotion) is built out of tree as docs/runtime.md says (CMake, ``find_package(torchvendor)``,
``TORCH_TARGET 2.11`` so the binary loads on every later torch), loaded with
``load_kernel_library``, and from then on serves those operators on the device: its host code
(C++ on the stable ABI only) launches device code through the runtime's module and launch
entries on the current stream. ``fallback_counts()`` stops listing them; ``native_counts()``
lists them instead.

    $ python examples/native_kernel.py
    native add: ok; fallback counts after: {}
    native calls: {'add.Tensor': 1, 'mul.Tensor': 1, 'relu': 1, 'sum.dim_IntList': 1}
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import torch

from torchvendor.sdk import cmake_dir, load_kernel_library, register_device

TEMPLATE = Path(__file__).resolve().parent / "stable_kernels"


def build_template(build_dir: str | os.PathLike[str] | None = None) -> Path:
    """Build the template (once; CMake rebuilds only what changed) and return the library.

    Example::

        >>> build_template().name
        'libacme_kernels.so'
    """
    build = Path(build_dir or TEMPLATE.parents[1] / "build" / "examples" / "stable_kernels")
    subprocess.run(["cmake", "-S", str(TEMPLATE), "-B", str(build),
                    f"-Dtorchvendor_DIR={cmake_dir()}", "-DTORCH_TARGET=2.11"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    return build / "libacme_kernels.so"


def main() -> None:
    acme = register_device("acme")
    load_kernel_library(build_template())
    a = torch.randn(4, 8, device="acme")
    b = torch.randn(8, device="acme")
    acme.reset_fallback_counts()
    c = ((a + b) * 2).relu().sum(dim=1)
    want = ((a.cpu() + b.cpu()) * 2).relu().sum(dim=1)
    assert torch.allclose(c.cpu(), want), "the native kernels disagree with the CPU"
    print(f"native add: ok; fallback counts after: {acme.fallback_counts()}")
    print(f"native calls: {dict(sorted(acme.native_counts().items()))}")


if __name__ == "__main__":
    main()
