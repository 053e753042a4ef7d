"""The one module that touches torch's private APIs.

Everything torchvendor needs from ``torch._dynamo``, ``torch._functorch``, ``torch._inductor``
and other private modules is imported or wrapped here, so that a torch release that moves
something breaks one file, and ``tests/test_compat.py`` names what moved. Supported releases:
2.11 to 2.15.

Example::

    >>> from torchvendor.ir import compat
    >>> compat.TORCH_VERSION >= (2, 11)
    True
"""
from __future__ import annotations

import torch

__all__ = ["TORCH_VERSION", "OpOverload", "OpOverloadPacket", "HigherOrderOperator", "LazyGraphModule",
           "fx_insert_node", "fx_erase_node"]


def _version(v: str) -> tuple[int, int]:
    major, minor = v.split("+")[0].split(".")[:2]
    return int(major), int(minor)


#: (major, minor) of the running torch.
TORCH_VERSION: tuple[int, int] = _version(torch.__version__)

# ---- operator objects (torch._ops) --------------------------------------------------------------
from torch._ops import HigherOrderOperator, OpOverload, OpOverloadPacket  # noqa: E402

# ---- FX ------------------------------------------------------------------------------------------
try:  # GraphModules that generate their Python code on first call (torch.fx._lazy_graph_module)
    from torch.fx._lazy_graph_module import _LazyGraphModule as LazyGraphModule  # noqa: E402
except ImportError:  # pragma: no cover - a release without it: plain, eagerly compiled modules
    LazyGraphModule = torch.fx.GraphModule


def _fx_graph_internals_ok() -> bool:
    """Whether ``fx.Graph`` keeps the private books :func:`fx_insert_node` updates (2.13)."""
    g = torch.fx.Graph()
    return (hasattr(g, "_graph_namespace") and hasattr(g._graph_namespace, "create_name")
            and hasattr(g, "_find_nodes_lookup_table") and hasattr(g, "_len") and hasattr(g, "_target_to_str"))


#: :func:`fx_insert_node` and :func:`fx_erase_node` use FX's private books directly (else the
#: public ``create_node``/``erase_node``, same result, slower)
HAS_FX_FAST_EDITS: bool = _fx_graph_internals_ok()
_FX_NAMES: dict[int, tuple[_Any, str]] = {}  # id(target) -> (target, FX's name stem for it)


def fx_insert_node(graph: torch.fx.Graph, op: str, target: _Any, args: tuple, kwargs: dict,
                   before: torch.fx.Node) -> torch.fx.Node:
    """``graph.create_node(op, target, args, kwargs)`` inserted before ``before``, without its
    per-call costs that a rewrite pass does not need: the pytree walk that warns about raw
    SymInt arguments (rewrites pass nodes and constants of the matched graph), the
    ``inserting_before`` context, and the name stem recomputed from the target each time (cached
    here). The node gets a unique name from the graph's namespace, the owning module's
    create-node hooks run, and the graph's index by target and its length are kept, as
    ``create_node`` does.

    >>> g = torch.fx.Graph(); x = g.placeholder("x"); out = g.output(x)
    >>> n = fx_insert_node(g, "call_function", torch.relu, (x,), {}, out)
    >>> [m.name for m in g.nodes], g.find_nodes(op="call_function", target=torch.relu) == [n]
    (['x', 'relu', 'output'], True)
    """
    if not HAS_FX_FAST_EDITS:  # pragma: no cover - a release that moved the books
        with graph.inserting_before(before):
            return graph.create_node(op, target, args, kwargs)
    hit = _FX_NAMES.get(id(target))
    if hit is None or hit[0] is not target:
        hit = _FX_NAMES[id(target)] = (target, graph._target_to_str(target))
    namespace = graph._graph_namespace
    name = namespace.create_name(hit[1], None)
    node = torch.fx.Node(graph, name, op, target, args, kwargs or _EMPTY_KWARGS)
    owner = graph.owning_module
    if owner is not None:
        for hook in getattr(owner, "_create_node_hooks", None) or ():
            hook(node)
    namespace.associate_name_with_obj(name, node)
    before.prepend(node)
    graph._find_nodes_lookup_table.insert(node)
    graph._len += 1
    return node


def fx_erase_node(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """``graph.erase_node(node)`` for a node without users whose arguments are flat (nodes and
    constants, no containers): its inputs are unlinked with one call instead of a ``map_arg``
    walk; any other node goes through ``erase_node``.

    >>> g = torch.fx.Graph(); x = g.placeholder("x"); r = g.call_function(torch.relu, (x,))
    >>> fx_erase_node(g, r); [n.name for n in g.nodes], len(x.users)
    (['x'], 0)
    """
    if (not HAS_FX_FAST_EDITS or node.users or node.kwargs or node.graph is not graph or node._erased
            or not all(type(a) in _FLAT_ARGS for a in node.args)):
        graph.erase_node(node)
        return
    owner = graph.owning_module
    if owner is not None:
        for hook in getattr(owner, "_erase_node_hooks", None) or ():
            hook(node)
    graph._find_nodes_lookup_table.remove(node)
    node._remove_from_list()
    node._erased = True
    graph._len -= 1
    node._update_args_kwargs(tuple(None if type(a) is _FxNode else a for a in node.args), _EMPTY_KWARGS)


_FxNode = torch.fx.Node
_FLAT_ARGS = frozenset({torch.fx.Node, int, float, bool, str, type(None)})
try:
    from torch.fx.immutable_collections import immutable_dict as _immutable_dict  # noqa: E402
    _EMPTY_KWARGS: _Any = _immutable_dict()
except ImportError:  # pragma: no cover
    _EMPTY_KWARGS = {}

# ---- Dynamo / AOTAutograd / decompositions (torch and ATen IR) ----------------------------------
# Owned by the torch/ATen IR code (levels.py, torch_ir/, aten_ir/, fx_graph.py, decompositions.py).
# Heavy modules (torch._dynamo, torch._functorch) are imported inside the functions, so that
# importing this module stays cheap. Each feature that differs between releases is detected
# once, named in a ``HAS_*`` flag, and checked by tests/test_compat.py.
import contextlib as _contextlib  # noqa: E402
import importlib as _importlib  # noqa: E402
import inspect as _inspect  # noqa: E402
from typing import Any as _Any, Callable as _Callable, Iterator as _Iterator, Sequence as _Sequence  # noqa: E402


def _has_module(name: str) -> bool:
    try:
        _importlib.import_module(name)
        return True
    except ImportError:
        return False


#: AOTAutograd tags graph inputs/outputs with descriptors (``node.meta["desc"]``, e.g.
#: ``PlainAOTInput(idx=0)``, ``TangentAOTInput(output=PlainAOTOutput(idx=1))``). Present in
#: 2.13; without it the ATen capture falls back to the positional layout of ViewAndMutationMeta.
HAS_AOT_DESCRIPTORS: bool = _has_module("torch._functorch._aot_autograd.descriptors")

#: ``torch.utils._pytree`` is the pytree module in every supported release (no public alias yet).
from torch.utils._pytree import tree_flatten, tree_unflatten  # noqa: E402,F401


def _cache_entry_lister() -> _Callable[[_Any], list] | None:
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    except ImportError:
        return None
    return _debug_get_cache_entry_list


def has_cache_entry_guards() -> bool:
    """Whether Dynamo exposes a frame's compiled cache entries, each with its ``guard_manager``
    (``torch._dynamo.eval_frame._debug_get_cache_entry_list``, 2.13). When missing, guard
    summaries come from the tracing context instead, and say so. A function, not a flag, so
    that importing compat does not import Dynamo."""
    return _cache_entry_lister() is not None


def dynamo_reset() -> None:
    """Clear Dynamo's compiled-code caches (``torch.compiler.reset``). Benchmarks only."""
    torch.compiler.reset()


def aot_autograd_backend(**kwargs: _Any) -> _Callable[..., _Any]:
    """``torch._dynamo.backends.common.aot_autograd(**kwargs)``: a Dynamo backend running AOTAutograd."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(**kwargs)


def make_boxed_func(fn: _Callable[..., _Any]) -> _Callable[..., _Any]:
    """Wrap ``fn(*args)`` in AOTAutograd's boxed calling convention (``fn(args_list)``)."""
    from torch._functorch.aot_autograd import make_boxed_func as _boxed

    return _boxed(fn)


def partitioner(name: str) -> _Callable[..., _Any]:
    """AOTAutograd's joint-graph partitioners: ``"default"`` (save what the forward computed)
    or ``"min_cut"`` (``min_cut_rematerialization_partition``: recompute cheap ops)."""
    from torch._functorch import partitioners

    table = {"default": partitioners.default_partition, "min_cut": partitioners.min_cut_rematerialization_partition}
    if name not in table:
        raise ValueError(f"unknown partitioner {name!r}; choose one of {sorted(table)}")
    return table[name]


def core_aten_decomposition_table() -> dict:
    """The core-ATen decomposition table as a plain ``dict`` (2.13 returns a lazily
    materialized ``CustomDecompTable``, a ``dict`` subclass; older releases a plain dict)."""
    from torch._decomp import core_aten_decompositions

    table = core_aten_decompositions()
    return dict(table.items())


def broken_core_aten_decompositions() -> list[OpOverload]:
    """Entries of torch's core-ATen table known to give wrong results in the running release;
    :func:`torchvendor.ir.decompositions.core_aten` leaves them out.

    - 2.11 to 2.14: ``aten._scaled_dot_product_flash_attention_for_cpu`` decomposes to math
      whose second output is the attention weights, while the backward stays the fused
      ``..._for_cpu_backward`` kernel, which reads it as logsumexp: gradients are wrong by O(1)
      under ``aot_autograd(decompositions=core_aten_decompositions())``. tests/test_compat.py
      reproduces it and fails once a release fixes it.
    """
    aten = torch.ops.aten
    return [aten._scaled_dot_product_flash_attention_for_cpu.default] if TORCH_VERSION >= (2, 11) else []


def registered_decompositions(ops: _Sequence[_Any]) -> dict:
    """torch's registered (post-autograd) decompositions for ``ops`` (packets expand to overloads)."""
    from torch._decomp import get_decompositions

    return dict(get_decompositions(list(ops)))


def is_composite_implicit(op: OpOverload) -> bool:
    """Whether ``op`` is CompositeImplicitAutograd: the dispatcher decomposes it during tracing,
    before any decomposition table is consulted (``aten.linear``, ``aten.scaled_dot_product_attention``)."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"))


#: Whether this release's TorchRefsMode maps a packet call (``aten.where(c, a, b)``) to the
#: ``.default`` overload's decomposition (which then fails to bind): 2.13 and 2.14 do, 2.11 maps
#: it right (2.12 is not checked here). :func:`refs_mode` guards against it on every release
#: (the check is a no-op where torch is right); tests/test_compat.py checks this flag against
#: torch, so it notices when a release fixes it.
REFS_MODE_PACKET_MAPPING_BROKEN: bool = TORCH_VERSION >= (2, 13)


@_contextlib.contextmanager
def refs_mode(keep: _Callable[[_Any], bool]) -> _Iterator[None]:
    """``torch._prims.context.TorchRefsMode``: torch and ATen calls run as their ``torch._refs`` /
    decompositions, down to ``prims.*``; ops for which ``keep(op)`` is true run whole."""
    from torch._prims.context import TorchRefsMode

    def should_fallback(*a: _Any) -> bool:
        # 2.13 calls should_fallback_fn(mode, orig_func, ref, args, kwargs); take them positionally.
        orig, ref, args, kwargs = a[1], a[2], a[3], a[4]
        if keep(orig):
            return True
        if isinstance(orig, OpOverloadPacket):
            # 2.13 maps a packet call to its ``.default`` overload's decomposition even when the
            # arguments are another overload's (aten.where(c, a, b) -> _where_default(c)): run
            # such calls whole instead of failing.
            try:
                _inspect.signature(ref).bind(*args, **(kwargs or {}))
            except TypeError:
                return True
            except ValueError:
                pass
        return False

    with TorchRefsMode(should_fallback_fn=should_fallback):
        yield


def make_fx(fn: _Callable[..., _Any], *args: _Any) -> torch.fx.GraphModule:
    """Trace ``fn(*args)`` to an ATen FX graph with ``make_fx``; fake/symbolic ``args`` are kept
    in their own fake mode (the one AOTAutograd used), so SymInt sizes stay symbolic."""
    from torch.fx.experimental.proxy_tensor import make_fx as _make_fx

    return _make_fx(fn)(*args)


def detect_fake_mode(values: _Sequence[_Any]) -> _Any:
    """The FakeTensorMode the FakeTensors in ``values`` belong to, or None."""
    from torch._guards import detect_fake_mode as _detect

    return _detect(list(values))


def is_fake(value: _Any) -> bool:
    """Whether ``value`` is a FakeTensor."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, FakeTensor)


def aot_forward_metadata() -> _Any:
    """AOTAutograd's ViewAndMutationMeta for the graph being compiled (inside a fw/bw/inference
    compiler), or None outside one. Fields used: ``input_info``, ``output_info``,
    ``num_intermediate_bases``, ``mutated_inp_runtime_indices``."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    return getattr(ctx, "fw_metadata", None) if ctx is not None else None


def aot_plain_inference(metadata: _Any, n_outputs: int) -> str | None:
    """Why AOTAutograd's runtime wrappers around an inference graph do something, or None when
    they do nothing (the compiled graph alone, run under no_grad, is the whole compiled function):
    no mutated inputs, every output a fresh tensor (no alias of an input or intermediate), no
    effect tokens, no functionalized RNG, no tensor subclasses, no grad-mode change, and the
    graph returns exactly ``n_outputs`` values (the Dynamo graph's outputs)."""
    if metadata is None:
        return "no AOTAutograd metadata"
    from torch._functorch._aot_autograd.schemas import OutputType

    for i, info in enumerate(getattr(metadata, "input_info", None) or ()):
        if info.mutates_data or info.mutates_metadata or getattr(info, "mutates_storage_metadata", False):
            return f"input {i} is mutated"
    outputs = list(getattr(metadata, "output_info", None) or ())
    if len(outputs) != n_outputs:
        return f"{len(outputs)} AOTAutograd outputs for {n_outputs} graph outputs"
    for i, info in enumerate(outputs):
        if info.output_type != OutputType.non_alias:
            return f"output {i} is {info.output_type.name}"
    checks = {"intermediate bases": getattr(metadata, "num_intermediate_bases", 1),
              "effect tokens": len(getattr(metadata, "tokens", None) or {}),
              "functionalized RNG": getattr(metadata, "is_rng_op_functionalized", True),
              "graph-safe RNG states": getattr(metadata, "num_graphsafe_rng_states", 1),
              "a grad-mode change": getattr(metadata, "grad_enabled_mutation", None) is not None}
    for what, value in checks.items():
        if value:
            return f"it has {what}"
    metas = [*(getattr(metadata, "subclass_inp_meta", None) or ()), *(getattr(metadata, "subclass_fw_graph_out_meta", None) or ())]
    if any(type(m).__name__ == "SubclassCreationMeta" for m in metas):
        return "it has tensor subclasses"
    return None


def any_autocast_enabled() -> bool:
    """Whether autocast is on for any device (AOTAutograd's ``disable_amp`` test)."""
    return bool(torch._C._is_any_autocast_enabled())


def fake_propagate(gm: torch.fx.GraphModule, inputs: _Sequence[torch.Tensor]) -> None:
    """Set ``meta["val"]`` on every node of ``gm`` by running it on FakeTensors shaped like
    ``inputs`` (static shapes, a fresh FakeTensorMode): what a rebuilt graph needs before it is
    partitioned and compiled like one AOTAutograd handed over."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode()
    with mode:
        fakes = [torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=t.device)
                 for t in inputs]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)


def aot_descriptor(desc: _Any) -> tuple:
    """Normalize an AOTAutograd descriptor to a tuple of plain values, e.g.
    ``("input", 0)``, ``("param", "lin.weight")``, ``("output", 1)``, ``("mutation", ("input", 0))``,
    ``("saved", 2)``, ``("tangent", ("output", 0))``, ``("grad", ("input", 3))``, ``("other", repr)``.
    ``None`` (no descriptor) gives ``("none",)``."""
    if desc is None:
        return ("none",)
    kind = type(desc).__name__
    simple = {"PlainAOTInput": ("input", "idx"), "ParamAOTInput": ("param", "target"),
              "BufferAOTInput": ("buffer", "target"), "PlainAOTOutput": ("output", "idx"),
              "SavedForBackwardsAOTOutput": ("saved", "idx"), "IntermediateBaseAOTOutput": ("base", "idx")}
    if kind in simple:
        tag, attr = simple[kind]
        return (tag, getattr(desc, attr, None))
    nested = {"InputMutationAOTOutput": ("mutation", "mutated_input"), "TangentAOTInput": ("tangent", "output"),
              "GradAOTOutput": ("grad", "grad_of")}
    if kind in nested:
        tag, attr = nested[kind]
        return (tag, aot_descriptor(getattr(desc, attr, None)))
    return ("other", repr(desc))


def guard_lines(code: _Any) -> list[str] | None:
    """The guards Dynamo installed on ``code``'s compiled entries, one ``KIND: expression`` line
    each (source comments dropped); None when this release does not expose cache entries."""
    lister = _cache_entry_lister()
    if lister is None:
        return None
    lines: list[str] = []
    for entry in lister(code):
        manager = getattr(entry, "guard_manager", None)
        if manager is None:
            return None
        for raw in str(manager).splitlines():
            text = raw.lstrip("| +-").strip()
            if not text or text.startswith(("TREE_GUARD_MANAGER", "RootGuardManager", "GuardManager", "DictGuardManager")):
                continue
            lines.append(text.split("  # ")[0].rstrip())
    return lines


def tracing_guard_lines() -> list[str]:
    """Fallback guard summary from the active tracing context (inside a Dynamo backend)."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    if ctx is None:
        return []
    out = []
    for g in ctx.guards_context.dynamo_guards:
        out.append(f"{getattr(g, 'create_fn_name', lambda: '?')()}: {g.name or g.source}")
    return sorted(out)

# ---- Inductor (loop IR) ---------------------------------------------------------------------------
# Everything the loop IR (``torchvendor.ir.loop_ir``) needs from ``torch._inductor`` and
# ``torch._dynamo.device_interface``. Inductor is imported lazily (it is heavy): call
# :func:`inductor` to get the namespace. Release differences handled here are tested in
# ``tests/test_compat_inductor.py``.
import contextlib as _contextlib  # noqa: E402
import functools as _functools  # noqa: E402
import types as _types  # noqa: E402
from typing import Any as _Any, Iterator as _Iterator  # noqa: E402

__all__ += ["inductor", "inductor_config_patch", "scoped_inductor_backend", "ensure_device_hooks",
            "sympy_index_functions", "loop_body_of", "is_fallback_kernel", "autograd_cache_patch",
            "run_and_get_code", "fx_cache_hashes_custom_backend_passes", "inductor_decompositions"]


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
    )


def _conditional_node_class(ir: _Any) -> type:
    """The Inductor IR node that ``torch.cond`` lowers to: ``ir.Conditional`` up to 2.13;
    2.14 renamed it ``ir.Switch`` (it also serves the new ``torch.ops.higher_order.switch``)."""
    cls = getattr(ir, "Conditional", None)
    return cls if cls is not None else ir.Switch


def inductor_config_patch(**changes: _Any) -> _Any:
    """``torch._inductor.config.patch(...)`` limited to keys this release knows (others are
    dropped, so one call site serves 2.11-2.14). Use as a context manager."""
    config = inductor().config
    known = {k: v for k, v in changes.items() if hasattr(config, k.split(".")[0])}
    return config.patch(known)


def autograd_cache_patch(enabled: bool) -> _Any:
    """Scope ``torch._functorch.config.enable_autograd_cache`` (a context manager)."""
    import torch._functorch.config as fconfig

    if not hasattr(fconfig, "enable_autograd_cache"):  # pragma: no cover - release dependent
        return _contextlib.nullcontext()
    return fconfig.patch(enable_autograd_cache=enabled)


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


def inductor_decompositions() -> dict[_Any, _Any]:
    """Inductor's decomposition table (``select_decomp_table()``): the ATen graphs Inductor
    lowers must be decomposed with it."""
    from torch._inductor.decomposition import select_decomp_table

    return dict(select_decomp_table())


# ---- Dynamo's backend registry (the SDK's Backend template) -------------------------------------
# ``torch._dynamo.register_backend`` is documented, but it lives in a private module, and the
# registry's two dicts (loaded backends, entry points not loaded yet) have no public reader.


def dynamo_backend_state(name: str) -> str | None:
    """``"loaded"`` (a compiler function is registered), ``"entry_point"`` (a
    ``torch_dynamo_backends`` entry point names it, not loaded yet) or None.

    >>> dynamo_backend_state("inductor"), dynamo_backend_state("no_such_backend")
    ('loaded', None)
    """
    from torch._dynamo.backends import registry

    registry._lazy_import()
    if name in registry._COMPILER_FNS:
        return "loaded"
    if name in registry._BACKENDS:
        return "entry_point"
    return None


def dynamo_registered_backend(name: str) -> _Callable[..., _Any] | None:
    """The compiler function registered under ``name`` (None if none is loaded)."""
    from torch._dynamo.backends import registry

    return registry._COMPILER_FNS.get(name)


def dynamo_register_backend(fn: _Callable[..., _Any], name: str) -> None:
    """Register ``fn`` as the Dynamo backend ``name`` (``torch._dynamo.register_backend``)."""
    import torch._dynamo

    torch._dynamo.register_backend(compiler_fn=fn, name=name)


def dynamo_counters() -> _Any:
    """Dynamo's event counters (``torch._dynamo.utils.counters``), e.g. ``["stats"]["unique_graphs"]``."""
    from torch._dynamo.utils import counters

    return counters


def outside_tracing_context() -> _Any:
    """A context manager hiding the current ``TracingContext``: for compiling several subgraphs
    of one AOTAutograd graph with Inductor (``compile_fx_inner`` records one graph's output
    strides in the context and asserts it does so once).

    >>> with outside_tracing_context():
    ...     pass
    """
    from torch._guards import tracing

    return tracing(None)


# ---- the conformance suite: PyTorch's OpInfo database and test machinery -----------------------------

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402,F401  (no public alias)


def neg_view(t: torch.Tensor) -> torch.Tensor:
    """``torch._neg_view``: a view with the negative bit set (to rebuild a neg-view sample)."""
    return torch._neg_view(t)


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


def dynamo_backend_names() -> list[str]:
    """Every ``torch.compile`` backend name Dynamo knows, debug and experimental ones included
    (``relu_compile_error_TESTING_ONLY`` and friends are the suite's negative controls).

    >>> "inductor" in dynamo_backend_names()
    True
    """
    import torch._dynamo

    return list(torch._dynamo.list_backends(exclude_tags=()))


# ---- PrivateUse1 registration (the device layer, sdk/device/registry.py) ----------------------------------------

def privateuse1_backend_name() -> str:
    """The name PrivateUse1 has in this process (``"privateuseone"`` while nobody renamed it).

    >>> isinstance(privateuse1_backend_name(), str)
    True
    """
    return torch._C._get_privateuse1_backend_name()


def register_device_module(name: str, module: _Any) -> None:
    """``torch._register_device_module``: make ``module`` available as ``torch.<name>``."""
    torch._register_device_module(name, module)


# ---- torch.distributed (the device's process group, sdk/device/distributed.py) -------------------------

def process_group_set_backend(group: _Any, device: str, backend_type: _Any, backend: _Any) -> None:
    """``ProcessGroup._register_backend``: the C++ backend a group uses for one device type (what
    c10d's dispatched collectives and ``barrier`` reach)."""
    group._register_backend(torch.device(device), backend_type, backend)


def gloo_all_gather_into(gloo: _Any, output: torch.Tensor, input: torch.Tensor, opts: _Any) -> _Any:
    """gloo's all_gather_into_tensor on a bare gloo group object (``_allgather_base``)."""
    return gloo._allgather_base(output, input, opts)


def gloo_reduce_scatter_into(gloo: _Any, output: torch.Tensor, input: torch.Tensor, opts: _Any) -> _Any:
    """gloo's reduce_scatter_tensor on a bare gloo group object (``_reduce_scatter_base``)."""
    return gloo._reduce_scatter_base(output, input, opts)


def functional_collectives() -> _Any:
    """``torch.distributed._functional_collectives``: the collectives DTensor and FSDP2 call (what
    the conformance suite checks a device's process group against)."""
    import torch.distributed._functional_collectives as fc

    return fc


def all_gather_into_tensor_out(input: torch.Tensor, world: int, group_name: str, out: torch.Tensor) -> torch.Tensor:
    """``_c10d_functional.all_gather_into_tensor_out``: the ``out=`` functional all-gather (it
    reaches ``ProcessGroup._allgather_base``)."""
    return torch.ops._c10d_functional.all_gather_into_tensor_out(input, world, group_name, out=out)


def ordered_set() -> type:
    """Inductor's ``OrderedSet`` (its scheduler hands and expects them)."""
    from torch.utils._ordered_set import OrderedSet

    return OrderedSet


def backward_without_context(outputs: _Sequence[torch.Tensor], grads: _Sequence[torch.Tensor]) -> None:
    """``outputs.backward(grads)`` straight through the C++ autograd engine.

    ``Tensor.backward`` stashes the caller's ``contextvars`` context in the graph task's
    thread-local state (2.13 and later). A device's autograd worker drops the graph task after the
    caller has returned, and dropping that Python object needs the GIL: if the interpreter is
    finalizing by then, Python ends the worker with ``pthread_exit`` and the forced unwind through
    a C++ destructor aborts the process ("terminate called without an active exception"). A graph
    task started here holds no Python object, so its worker never needs the GIL to drop it.

    >>> x = torch.ones(2, requires_grad=True)
    >>> backward_without_context([x * 3], [torch.ones(2)])
    >>> x.grad
    tensor([3., 3.])
    """
    torch.autograd.Variable._execution_engine.run_backward(  # type: ignore[attr-defined]
        tuple(outputs), tuple(grads), False, False, (), True, True)


# ---- the conformance suite: torch's device-generic test machinery -------------------------------------

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


# ==== torch 2.15 (issue 25, helper `dist`) =========================================================
# Merge note: `loop` is turning this module into the package ir/compat/; these two belong in its
# torch.distributed and Inductor parts respectively.

def process_group_set_default_backend(group: _Any, backend_type: _Any) -> None:
    """``ProcessGroup._set_default_backend``: the backend c10d's C++ side treats as the group's own
    (``getDefaultBackend``). A Python process group returned by a backend's creator replaces the
    group c10d built and so has none until it sets one; torch 2.15's ``init_process_group``
    attaches its flight recorder through it ("Could not find the default backend type 0")."""
    group._set_default_backend(backend_type)
