"""The Inductor (loop IR) section of ``torchvendor.ir.compat``: every private name it needs
exists in this torch release, scoped registrations restore exactly what was there, and the
facts our workarounds rely on still hold (so a release that changes them fails here, by name)."""
from __future__ import annotations

import sympy
import torch

from torchvendor.ir import compat


def test_namespace_names_exist() -> None:
    ns = compat.inductor()
    for name in ("config", "ir", "V", "common", "compile_fx", "compile_fx_inner", "CppScheduling", "BaseScheduling",
                 "SchedulerNode", "FusedSchedulerNode", "ExternKernelSchedulerNode", "NopKernelSchedulerNode",
                 "PythonWrapperCodegen", "DefaultHandler", "CustomGraphModulePass", "CpuDeviceOpOverrides",
                 "DeviceInterface", "device_interface", "ValueWithLineMap"):
        assert getattr(ns, name) is not None, name
    common = ns.common
    for name in ("register_backend_for_device", "device_codegens", "custom_backend_passes",
                 "custom_backend_codegen_configs", "init_backend_registration", "register_device_op_overrides",
                 "device_op_overrides_dict"):
        assert hasattr(common, name), f"torch._inductor.codegen.common.{name} moved"
    for name in ("ReinterpretView", "NonOwningLayout", "NoneLayout", "MultiOutputLayout", "MultiOutput",
                 "FallbackKernel", "ScatterFallback", "IndexPutFallback", "ShapeAsConstantBuffer",
                 "NoneAsConstantBuffer", "WhileLoop", "InvokeSubgraph", "UserDefinedTritonKernel"):
        assert hasattr(ns.ir, name), f"torch._inductor.ir.{name} moved"
    assert hasattr(ns.device_interface, "device_interfaces")
    # The ops handler protocol the recorder implements.
    for name in ("load", "store", "reduction", "store_reduction", "masked", "indirect_indexing", "index_expr",
                 "to_dtype", "constant"):
        assert hasattr(ns.DefaultHandler, name), name


def test_conditional_node_branch() -> None:
    """torch.cond lowers to ``ir.Conditional`` up to 2.13 and to ``ir.Switch`` from 2.14 (renamed
    when ``torch.switch`` arrived); the namespace's ``Conditional`` is whichever this release has."""
    ns = compat.inductor()
    if compat.TORCH_VERSION >= (2, 14):
        assert not hasattr(ns.ir, "Conditional")
        assert ns.Conditional is ns.ir.Switch
    else:
        assert ns.Conditional is ns.ir.Conditional
    assert issubclass(ns.Conditional, ns.ir.ExternKernel)


def test_scoped_backend_restores_previous_and_absent_registrations() -> None:
    common = compat.inductor().common
    common.init_backend_registration()
    before = common.device_codegens["cpu"], common.custom_backend_passes.get("cpu")

    class Pass(compat.inductor().CustomGraphModulePass):
        def __call__(self, gm: torch.fx.GraphModule) -> None:
            pass

        def uuid(self) -> str:
            return "test"

    with compat.scoped_inductor_backend("cpu", object, object, Pass()):
        assert common.device_codegens["cpu"].scheduling is object
        assert common.get_custom_backend_pass_for_device("cpu").uuid() == "test"
        # the other wrappers (cpp, fx) are kept from the stock registration
        assert common.device_codegens["cpu"].cpp_wrapper_codegen is before[0].cpp_wrapper_codegen
    assert (common.device_codegens["cpu"], common.custom_backend_passes.get("cpu")) == before
    with compat.scoped_inductor_backend("tv_no_such_device", object, object, None):
        assert "tv_no_such_device" in common.device_codegens
    assert "tv_no_such_device" not in common.device_codegens
    assert "tv_no_such_device" not in common.custom_backend_passes


def test_config_patch_drops_unknown_keys() -> None:
    config = compat.inductor().config
    old = config.fx_graph_cache
    with compat.inductor_config_patch(fx_graph_cache=not old, tv_key_from_a_future_release=1):
        assert config.fx_graph_cache is (not old)
    assert config.fx_graph_cache is old


def test_config_patch_leaves_settings_in_force_alone() -> None:
    """A patch nested in one of the same settings patches nothing (the loop level's compiles set
    Inductor's config once, however deep the lowering sits)."""
    config = compat.inductor().config
    old = config.fx_graph_cache
    outer = compat.inductor_config_patch(fx_graph_cache=not old)
    assert outer.changes == {"fx_graph_cache": not old}
    with outer:
        assert compat.inductor_config_patch(fx_graph_cache=not old).changes == {}
    assert config.fx_graph_cache is old


def test_ensure_device_hooks_keeps_existing() -> None:
    ns = compat.inductor()
    common, di = ns.common, ns.device_interface
    marker = ns.CpuDeviceOpOverrides()
    common.register_device_op_overrides("tv_hooks_dev", marker)
    try:
        compat.ensure_device_hooks("tv_hooks_dev")
        assert common.device_op_overrides_dict["tv_hooks_dev"] is marker
        iface = di.device_interfaces["tv_hooks_dev"]
        assert iface.Worker.get_device_properties().multi_processor_count >= 1
    finally:
        common.device_op_overrides_dict.pop("tv_hooks_dev", None)
        di.device_interfaces.pop("tv_hooks_dev", None)


def test_index_functions_and_semantics() -> None:
    fns = compat.sympy_index_functions()
    for name in ("FloorDiv", "ModularIndexing", "CleanDiv", "Min", "Max", "PythonMod"):
        assert name in fns, f"torch.utils._sympy.functions.{name} moved"
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    assert fns["ModularIndexing"](sympy.Integer(13), 2, 4) == 2
    assert fns["FloorDiv"](sympy.Integer(13), 4) == 3
    assert isinstance(fns["FloorDiv"](i, 4), fns["FloorDiv"])


def test_fx_cache_key_facts() -> None:
    # Our cache separation rests on the per-device custom pass entering the FX-graph cache
    # key; the Scheduling class itself does not (that is why the pass is needed).
    assert compat.fx_cache_hashes_custom_backend_passes()
    import inspect

    from torch._inductor import codecache

    assert "Scheduling" not in inspect.getsource(codecache.FxGraphHashDetails)


def test_loop_body_of_and_fallback_kernel() -> None:
    from torchvendor.ir.loop_ir import loop_backend

    seen = []

    def sink(program: object) -> None:
        seen.append(program)

    f = torch.compile(lambda x: x.sin().sum(0), backend=loop_backend(on_program=sink))
    torch.testing.assert_close(f(torch.ones(3, 2)), torch.ones(3, 2).sin().sum(0))
    assert seen and seen[0].kernels
    assert not compat.is_fallback_kernel(object())


def test_has_device_scheduling() -> None:
    assert compat.has_device_scheduling("cpu")
    assert not compat.has_device_scheduling("tv_no_such_device")
