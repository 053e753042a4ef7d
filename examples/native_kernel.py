"""A native kernel for aten::add.Tensor on a torchvendor device, written in Python.

The vendor's compiled kernel (here ``tv_add_f32`` from the reference simulator's kernel module,
``torchvendor/lib/libtorchvendor_sim_kernels.so``) is loaded through the runtime's
``module_load_file``/``module_get_function`` entries and launched on the current stream with
``launch``. Registering it for PrivateUse1 makes it take precedence over the CPU fallback, so
``torch.<name>.fallback_counts()`` stops listing ``add``. Cases the kernel does not cover
(other dtypes, broadcasting, non-contiguous inputs, alpha != 1) go to ``aten::add.out``, which
reaches the counted CPU fallback as before.

    $ python examples/native_kernel.py
    native add: ok; fallback counts after: {}
"""
from __future__ import annotations

import importlib.resources
import os
import struct

import torch

from torchvendor.sdk import get_function, launch, load_module, register_device


def kernels_path() -> str:
    """The simulator's sample kernel module."""
    return os.fspath(importlib.resources.files("torchvendor") / "lib"
                     / "libtorchvendor_sim_kernels.so")


def register_native_add(name: str = "acme") -> torch.library.Library:
    """Register ``tv_add_f32`` as the ``name`` kernel of aten::add.Tensor; keep the returned
    Library alive for as long as the kernel should stay registered.

    Example::

        >>> lib = register_native_add("acme")
        >>> (torch.ones(4, device="acme") + torch.ones(4, device="acme")).cpu()
        tensor([2., 2., 2., 2.])
    """
    device_module = register_device(name)  # idempotent: returns torch.<name>
    functions: dict[int, int] = {}  # device index -> function handle (a module per device)

    def add_f32(index: int) -> int:
        if index not in functions:
            functions[index] = get_function(load_module(kernels_path(), index), "tv_add_f32")
        return functions[index]

    def add_tensor(self: torch.Tensor, other: torch.Tensor | float, *, alpha: float = 1
                   ) -> torch.Tensor:
        native = (isinstance(other, torch.Tensor) and alpha == 1
                  and self.dtype == other.dtype == torch.float32
                  and self.device == other.device and self.shape == other.shape
                  and self.is_contiguous() and other.is_contiguous())
        if not native:  # not this kernel's case: the .out overload reaches the CPU fallback
            if not isinstance(other, torch.Tensor):
                other = torch.tensor(other)  # 0-dim CPU scalar, as the dispatcher allows
            shape = torch.broadcast_shapes(self.shape, other.shape)
            out = torch.empty(shape, dtype=torch.result_type(self, other), device=self.device)
            return torch.ops.aten.add.out(self, other, alpha=alpha, out=out)
        out = torch.empty_like(self, memory_format=torch.contiguous_format)
        index = self.device.index
        args = struct.pack("<qQQQ", self.numel(), self.data_ptr(), other.data_ptr(),
                           out.data_ptr())
        launch(add_f32(index), grid=(1,), block=(1,), args=args, pointer_offsets=(8, 16, 24),
               stream=device_module.current_stream(index))
        return out

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("add.Tensor", add_tensor, "PrivateUse1")
    return lib


def main() -> None:
    acme = register_device("acme")
    lib = register_native_add("acme")
    a = torch.randn(1000, device="acme")
    b = torch.randn(1000, device="acme")
    acme.reset_fallback_counts()
    c = a + b
    assert torch.equal(c.cpu(), a.cpu() + b.cpu()), "native add disagrees with the CPU"
    counts = {k: v for k, v in acme.fallback_counts().items() if k.startswith("add")}
    print(f"native add: ok; fallback counts after: {counts}")
    del lib


if __name__ == "__main__":
    main()
