"""The ``torchvendor_cuda`` backend: LOOP level, loop IR kernels -> CUDA C -> NVRTC cubins, cached on
disk by content hash, launched on torch's ``cuda`` device or on a PrivateUse1 GPU device.

>>> from torchvendor.reference_backends.cuda.backend import CudaBackend
>>> CudaBackend.name, CudaBackend.level.value
('torchvendor_cuda', 'loop')
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from torchvendor.ir.loop_ir import Kernel, host_onto_device, merge_epilogues
from torchvendor.sdk import BackendError, CompiledProgram, LoopBackend, loop_kernels

from .aligned import aligned_matmul
from .codegen import CodegenError, CudaKernel, generate
from .externs import on_cuda
from .graphs import GRAPH_MAX_BYTES_PER_OP, GraphedProgram, graphs_enabled
from .launch import CompiledKernel, nvrtc_compile

__all__ = ["CudaBackend", "device_arch"]


def device_arch(device: str) -> tuple[str, int]:
    """(``sm_XY``, multiprocessor count) of device ``device`` (``cuda`` or a PrivateUse1 GPU device).

    >>> device_arch("cuda") if torch.cuda.is_available() else ("sm_90", 132)  # doctest: +ELLIPSIS
    ('sm_...', ...)
    """
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}", torch.cuda.get_device_properties().multi_processor_count
    mod = getattr(torch, device, None)
    if mod is None or not hasattr(mod, "get_device_properties"):
        raise BackendError(f"torchvendor_cuda generates code for 'cuda' or a registered PrivateUse1 GPU device; "
                           f"the kernel's device is {device!r}")
    props = mod.get_device_properties(mod.current_device())
    return f"sm_{props.major}{props.minor}", props.multi_processor_count


class CudaBackend(LoopBackend):
    """Loop IR kernels as CUDA C (see :mod:`.codegen`), compiled with NVRTC at run time."""

    name = "torchvendor_cuda"
    device = None            # wherever the inputs are: torch's cuda, or a PrivateUse1 GPU device
    supported_ops = None     # every op: what the code generator cannot do falls back per partition
    #: cuda_graphs: replay each partition's launches from a CUDA graph once its input layout has
    #: run (see :mod:`.graphs`; ``$TORCHVENDOR_CUDA_GRAPHS=0`` also turns it off);
    #: cuda_graph_max_bytes_per_op: only layouts whose call touches at most this many bytes per
    #: operation (launch-bound ones) are graphed, the others run the SDK runner (None: all are)
    default_options: dict[str, Any] = {"cuda_graphs": True, "cuda_graph_max_bytes_per_op": GRAPH_MAX_BYTES_PER_OP}
    version = "2"
    #: host buffers that only kernels use declared on the GPU: no synchronising copy per call,
    #: and the partition can be captured in a CUDA graph
    transforms = (host_onto_device,)

    def compile_program(self, program: Any) -> CompiledProgram:
        """A partition's loop program (host-only intermediates already on the GPU: :attr:`transforms`)
        with each row-reduction kernel followed directly by a pointwise kernel over the same rows (a
        softmax's or layer norm's epilogue, or var's division, which the loop IR puts in a kernel
        of its own) merged into one kernel where that takes fewer launches (the public transform
        :func:`~torchvendor.ir.loop_ir.transforms.merge_epilogues` with this backend's launch
        count as its ``accept``); then every kernel compiled (:meth:`compile`). The merge is a
        rewrite of the program (one :class:`Kernel` with both nests, named after the second),
        so the SDK runs the rewritten program and no kernel needs to know its neighbours."""
        if program.device == "cpu":
            raise BackendError("torchvendor_cuda runs on a GPU; this program's buffers are on cpu "
                               "(move the model and inputs to 'cuda')")
        return super().compile_program(_merge_epilogues(program, device_arch(program.device)[1]))

    def compile(self, kernel: Any) -> Callable[..., None]:
        """One :class:`torchvendor.sdk.LoopKernel` -> ``fn(*buffers, *sizes)``, a CUDA C kernel
        compiled by NVRTC (cached on disk by its source)."""
        arch, sms = device_arch(kernel.device)
        code = _generate(kernel, sms)

        def build(path: str) -> None:
            Path(path).write_bytes(nvrtc_compile(code.source, f"{code.name}.cu", arch))

        cubin = self.cache.get_or_build(f"{arch}\n{code.source}", build, suffix=".cubin")
        writes = kernel.kernel.writes()
        written = [i for i, b in enumerate(kernel.buffers) if b.name in writes]
        return CompiledKernel(code, Path(cubin).read_bytes(), home=kernel.device, written=written)

    def extern_kernel(self, extern: Any, aten: Callable[..., Any], device: str) -> Callable[..., Any]:
        """Extern kernels run ATen's CUDA operators (cuBLAS, cuDNN): on ``cuda`` as they are, on a
        PrivateUse1 GPU device on aliases of its memory (:mod:`.externs`), not through the
        device's CPU fallback. Matmuls run at 16-byte leading dimensions (:mod:`.aligned`)."""
        aten = aligned_matmul(aten)
        return aten if device == "cuda" else on_cuda(aten, device)

    def program_runner(self, runner: Callable[..., Any], program: Any) -> Callable[..., Any]:
        """The SDK's runner for a partition, replayed from a CUDA graph on ``cuda`` where its calls
        are launch-bound (the runner's per-call host work is what bounds small models; large
        calls keep the runner, its replay and its boxed call: see :mod:`.graphs`)."""
        if not (self.options["cuda_graphs"] and graphs_enabled()):
            return runner
        limit = self.options["cuda_graph_max_bytes_per_op"]
        return GraphedProgram(runner, program, None if limit is None else int(limit))


def _merge_epilogues(program: Any, sms: int) -> Any:
    """The public :func:`~torchvendor.ir.loop_ir.transforms.merge_epilogues` with this backend's
    cost model: a (reduction kernel, pointwise kernel) pair is merged where the merged code takes
    fewer launches than the two apart (``sms``: the device's multiprocessor count)."""
    def fewer_launches(before: Any, after: Any, first: Kernel, second: Kernel) -> bool:
        return _launches(after, (second.name,), sms) < _launches(before, (first.name, second.name), sms)
    return merge_epilogues(program, accept=fewer_launches)


def _launches(program: Any, names: tuple[str, ...], sms: int) -> float:
    """How many launches the kernels ``names`` of ``program`` take (inf: cannot be generated)."""
    try:
        return sum(len(_generate(lk, sms).launches) for lk in loop_kernels(program) if lk.name in names)
    except CodegenError:
        return float("inf")


def _generate(kernel: Any, sms: int) -> CudaKernel:
    """Generate ``kernel``; buffers that other ops of its program use (or the program returns,
    or that are bases of such views) are stored, the rest may stay in registers."""
    program = kernel.program
    elsewhere = {n for op in program.ops if getattr(op, "name", None) != kernel.name for n in (*op.reads(), *op.writes())}
    elsewhere |= program.returned
    views = {b.name: b.view_of for b in program.buffers if b.view_of}
    for name in list(elsewhere):   # a view used elsewhere makes its base used elsewhere
        while name in views:
            name = views[name]
            elsewhere.add(name)
    mine = {b.name for b in kernel.buffers}
    return generate(kernel.kernel, kernel.buffers, kernel.size_vars, frozenset(elsewhere & mine), sms)
