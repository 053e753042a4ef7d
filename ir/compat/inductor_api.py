"""Inductor (``torch._inductor``, ``torch._dynamo.device_interface``): everything the loop IR
(``torchvendor.ir.loop_ir``) needs. Inductor is imported lazily (it is heavy): call
:func:`inductor` to get the namespace.

    >>> inductor().BaseScheduling.__name__
    'BaseScheduling'
"""
from __future__ import annotations

import contextlib as _contextlib
import functools as _functools
import types as _types
from typing import Any as _Any, Iterator as _Iterator

__all__ = ["inductor", "inductor_config_patch", "scoped_inductor_backend", "ensure_device_hooks",
           "sympy_index_functions", "loop_body_of", "is_fallback_kernel", "run_and_get_code",
           "fx_cache_hashes_custom_backend_passes", "select_decomp_table", "ordered_set",
           "has_device_scheduling"]


@_functools.cache
def inductor() -> _types.SimpleNamespace:
    """The private Inductor names the loop IR uses, imported once, in one namespace.

    >>> ns = inductor()
    >>> ns.BaseScheduling.__name__
    'BaseScheduling'
    """
    import torch._inductor.config as config
    import torch._inductor.ir as ir
    import torch._inductor.scheduler as scheduler
    from torch._dynamo import device_interface
    from torch._inductor import compile_fx, custom_graph_pass
    from torch._inductor.codegen import common
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.ops_handler import DefaultHandler
    from torch._inductor.utils import ValueWithLineMap
    from torch._inductor.virtualized import V

    try:  # dtype inference of ops.* values; optional (absent before 2.6).
        from torch._inductor.dtype_propagation import DtypePropagationOpsHandler
    except ImportError:  # pragma: no cover - depends on the release
        DtypePropagationOpsHandler = None
    return _types.SimpleNamespace(
        config=config, ir=ir, V=V, common=common, compile_fx=compile_fx.compile_fx,
        Conditional=_conditional_node_class(ir),
        compile_fx_inner=compile_fx.compile_fx_inner, CppScheduling=CppScheduling,
        BaseScheduling=scheduler.BaseScheduling, SchedulerNode=scheduler.SchedulerNode,
        FusedSchedulerNode=scheduler.FusedSchedulerNode,
        ExternKernelSchedulerNode=scheduler.ExternKernelSchedulerNode,
        NopKernelSchedulerNode=scheduler.NopKernelSchedulerNode,
        PythonWrapperCodegen=PythonWrapperCodegen, DefaultHandler=DefaultHandler,
        CustomGraphModulePass=custom_graph_pass.CustomGraphModulePass,
        CpuDeviceOpOverrides=CpuDeviceOpOverrides, DeviceInterface=device_interface.DeviceInterface,
        device_interface=device_interface, DtypePropagationOpsHandler=DtypePropagationOpsHandler,
        ValueWithLineMap=ValueWithLineMap,
    )


def _conditional_node_class(ir: _Any) -> type:
    """The Inductor IR node that ``torch.cond`` lowers to: ``ir.Conditional`` up to 2.13;
    2.14 renamed it ``ir.Switch`` (it also serves the new ``torch.ops.higher_order.switch``)."""
    cls = getattr(ir, "Conditional", None)
    return cls if cls is not None else ir.Switch


def inductor_config_patch(**changes: _Any) -> _Any:
    """``torch._inductor.config.patch(...)`` limited to keys this release knows (others are
    dropped, so one call site serves every supported release) whose value differs from the one in
    force (a nested patch of the same settings patches nothing). Use as a context manager."""
    config = inductor().config
    known = {k: v for k, v in changes.items() if hasattr(config, k.split(".")[0])}
    return config.patch({k: v for k, v in known.items() if _config_value(config, k) != v})


def _config_value(config: _Any, key: str) -> _Any:
    obj = config
    for part in key.split("."):
        obj = getattr(obj, part, _MISSING)
    return obj


_MISSING = object()


@_contextlib.contextmanager
def scoped_inductor_backend(device: str, scheduling: _Any, wrapper: _Any, custom_pass: _Any) -> _Iterator[None]:
    """Register ``scheduling``/``wrapper`` for ``device`` with ``register_backend_for_device`` for
    the duration of the block, then put back exactly what was registered before (including
    nothing). The custom pass's ``uuid()`` enters the FX-graph cache key, so code generated
    under the override is never served to compiles outside it, nor the reverse."""
    ns = inductor()
    common = ns.common
    common.init_backend_registration()
    had = device in common.device_codegens
    saved = (common.device_codegens.get(device), common.custom_backend_passes.get(device),
             common.custom_backend_codegen_configs.get(device))
    prev = saved[0]
    common.register_backend_for_device(
        device, scheduling, wrapper,
        getattr(prev, "cpp_wrapper_codegen", None), getattr(prev, "fx_wrapper_codegen", None),
        device_custom_pass=custom_pass, device_custom_config=saved[2])
    try:
        yield
    finally:
        if had:
            common.device_codegens[device] = saved[0]
            common.custom_backend_passes[device] = saved[1]
            common.custom_backend_codegen_configs[device] = saved[2]
        else:
            common.device_codegens.pop(device, None)
            common.custom_backend_passes.pop(device, None)
            common.custom_backend_codegen_configs.pop(device, None)


def ensure_device_hooks(device: str) -> None:
    """The two registrations besides ``register_backend_for_device`` that Inductor needs for a
    renamed PrivateUse1 device: a ``DeviceOpOverrides`` (the host-side wrapper treats the
    device like ``cpu``) and a Dynamo ``DeviceInterface``. Existing registrations are kept."""
    ns = inductor()
    common, di = ns.common, ns.device_interface
    if hasattr(common, "_initialize_device_op_overrides"):
        common._initialize_device_op_overrides()
    else:  # older releases import the built-in devices' overrides only at a lookup while the table is
        # empty; once anything is registered, cuda would get our host-like ones (`with pass:` wrappers)
        import importlib

        for name in ("cpu_device_op_overrides", "cuda.device_op_overrides", "xpu.device_op_overrides"):
            try:
                importlib.import_module(f"torch._inductor.codegen.{name}")
            except ImportError:  # pragma: no cover - release dependent
                pass
    if device not in common.device_op_overrides_dict:
        common.register_device_op_overrides(device, ns.CpuDeviceOpOverrides())
    if device not in di.device_interfaces:
        di.register_interface_for_device(device, _host_like_interface(device))


def _host_like_interface(device: str) -> type:
    """A DeviceInterface for a device whose kernels the host launches (no streams exposed to
    Inductor); enough for lowering (``Reduction.num_splits`` asks for properties)."""
    import torch

    base = inductor().DeviceInterface
    mod = getattr(torch, device, None)

    class _Props:
        multi_processor_count = 1
        type = device
        major, minor = 0, 0
        name = device

    class _Worker:
        @staticmethod
        def set_device(index: int) -> None:
            pass

        @staticmethod
        def current_device() -> int:
            return 0

        @staticmethod
        def get_device_properties(index: _Any = None) -> _Any:
            return _Props()

    class HostLikeInterface(base):  # type: ignore[misc, valid-type]
        Worker = _Worker

        @staticmethod
        def current_device() -> int:
            fn = getattr(mod, "current_device", None)
            return int(fn()) if fn else 0

        @staticmethod
        def set_device(index: int) -> None:
            fn = getattr(mod, "set_device", None)
            if fn:
                fn(index)

        @staticmethod
        def device_count() -> int:
            fn = getattr(mod, "device_count", None)
            return int(fn()) if fn else 1

        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def get_compute_capability(device: _Any = None) -> int:
            return 0

        @staticmethod
        def synchronize(device: _Any = None) -> None:
            fn = getattr(mod, "synchronize", None)
            if fn:
                fn()

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return 0

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

    HostLikeInterface.__name__ = f"{device.capitalize()}HostLikeInterface"
    return HostLikeInterface


@_functools.cache
def sympy_index_functions() -> dict[str, _Any]:
    """The integer functions Inductor puts in index expressions, by the name the loop IR's
    printer gives them (``torch.utils._sympy.functions``)."""
    from torch.utils._sympy import functions as f

    names = ["FloorDiv", "ModularIndexing", "CleanDiv", "CeilDiv", "Min", "Max", "PythonMod", "Mod",
             "Identity", "Where", "TruncToInt", "FloorToInt", "CeilToInt", "RoundToInt", "IntTrueDiv",
             "BitwiseFn_bitwise_and", "BitwiseFn_bitwise_or", "LShift", "RShift", "PowByNatural",
             "ToFloat", "FloatTrueDiv", "TruncToFloat", "IsNonOverlappingAndDenseIndicator"]
    return {n: getattr(f, n) for n in names if hasattr(f, n)}


def loop_body_of(snode: _Any) -> tuple[_Any, tuple[_Any, _Any]]:
    """(LoopBody, (iteration sizes, reduction sizes)) of a SchedulerNode after fusion."""
    return snode._body, snode._sizes


def is_fallback_kernel(node: _Any) -> bool:
    """Whether an Inductor IR node is a FallbackKernel (an ATen op called as a library kernel)."""
    return isinstance(node, inductor().ir.FallbackKernel)


def run_and_get_code(fn: _Any, *args: _Any, **kwargs: _Any) -> tuple[_Any, list[str]]:
    """``(fn(*args), [generated wrapper sources])`` (``torch._inductor.utils.run_and_get_code``)."""
    from torch._inductor.utils import run_and_get_code as _rgc

    return _rgc(fn, *args, **kwargs)


def fx_cache_hashes_custom_backend_passes() -> bool:
    """Whether the FX-graph cache key includes the per-device custom passes (what keys our
    compiles apart from stock Inductor's). If a release drops it, the loop IR must stop relying
    on ``device_custom_pass.uuid()`` for cache separation."""
    import inspect

    from torch._inductor import codecache

    return "custom_backend_passes" in inspect.getsource(codecache.FxGraphHashDetails)


def select_decomp_table() -> dict[_Any, _Any]:
    """Inductor's own decomposition table (a copy of ``select_decomp_table()``); the loop level's
    is ``torchvendor.ir.loop_ir.inductor_decompositions`` (this one with two fixes). Inductor's
    lowering module is imported with it: some of these decompositions call into it
    (``max_pool2d_with_indices`` on torch 2.13), and a process whose first graph is a CNN's has
    not imported it yet."""
    import torch._inductor.lowering  # noqa: F401
    from torch._inductor.decomposition import select_decomp_table

    return dict(select_decomp_table())


def has_device_scheduling(device_type: str) -> bool:
    """Whether Inductor has a Scheduling registered for ``device_type`` now (its built-in
    devices always; a torchvendor device only inside ``scoped_inductor_backend``). Decompositions
    that ask the device's backend features (``has_backend_feature``) assert without one."""
    common = inductor().common
    common.init_backend_registration()
    return common.get_scheduling_for_device(device_type) is not None


def ordered_set() -> type:
    """Inductor's ``OrderedSet`` (its scheduler hands and expects them)."""
    from torch.utils._ordered_set import OrderedSet

    return OrderedSet
