"""One test per difference between torch releases (2.11 to 2.15) that ir/compat.py's
Dynamo / AOTAutograd / decompositions section handles: each asserts the shim picks the right
branch for the running torch, and, for workarounds, notices when they are no longer needed."""
from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

from torchvendor.ir import capture, compat, decompositions as D, torch_ir_hook
from torchvendor.ir.aten_ir.program import _forward_roles


def test_version_parsed() -> None:
    assert (2, 11) <= compat.TORCH_VERSION <= (2, 14) or compat.TORCH_VERSION > (2, 14)
    assert compat.TORCH_VERSION == tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def test_aot_descriptors_branch() -> None:
    """AOTAutograd descriptors (``node.meta["desc"]``) exist in 2.13; the ATen capture reads
    graph roles from them, else from ViewAndMutationMeta positions."""
    present = importlib.util.find_spec("torch._functorch._aot_autograd.descriptors") is not None
    assert compat.HAS_AOT_DESCRIPTORS == present
    prog = capture(lambda x: (x.sin() * 2).sum(), [torch.randn(3, requires_grad=True)], "aten", training=True)
    has_desc = "desc" in prog.forward.graph.output_node().meta
    assert has_desc == compat.HAS_AOT_DESCRIPTORS


def test_positional_roles_match_descriptor_roles() -> None:
    """The fallback for releases without descriptors gives the same roles as the descriptors."""
    def f(x, y):
        y.mul_(2)
        return x.cos() + y, x.sum()

    prog = capture(f, [torch.randn(3, requires_grad=True), torch.randn(3)], "aten", training=True)
    fw = prog.forward
    meta = fw.meta["aot_metadata"]
    desc = fw.graph.output_node().meta.pop("desc", None)
    try:
        positional = _forward_roles(fw, meta, 0, [])
    finally:
        if desc is not None:
            fw.graph.output_node().meta["desc"] = desc
    assert positional == prog.forward_roles


def test_aot_metadata_only_inside_compilers() -> None:
    assert compat.aot_forward_metadata() is None
    prog = capture(lambda x: x * 2, [torch.randn(2)], "aten")
    assert type(prog.inference.meta["aot_metadata"]).__name__ == "ViewAndMutationMeta"


def test_core_aten_table_is_plain_dict() -> None:
    """2.13 returns a lazily materialized ``CustomDecompTable`` (a dict subclass); the shim
    always returns a plain dict of OpOverloads."""
    from torch._decomp import core_aten_decompositions

    raw = core_aten_decompositions()
    table = compat.core_aten_decomposition_table()
    assert type(table) is dict and isinstance(raw, dict)
    assert type(raw).__name__ == ("CustomDecompTable" if compat.TORCH_VERSION >= (2, 6) else "dict")
    assert all(isinstance(op, compat.OpOverload) for op in table)


def test_cache_entry_guards_branch(monkeypatch: pytest.MonkeyPatch) -> None:
    """2.13 exposes guards on cache entries (``_debug_get_cache_entry_list``); without it the
    summary comes from the tracing context and says so."""
    assert compat.has_cache_entry_guards()
    prog = capture(lambda x: x + 1, [torch.randn(2)], "torch")
    assert any(g.startswith("TENSOR_MATCH") for g in prog.guards)
    monkeypatch.setattr(compat, "guard_lines", lambda code: None)  # our shim, not torch
    prog = capture(lambda x: x + 2, [torch.randn(2)], "torch")
    assert "not exposed by torch" in prog.guards[0] and len(prog.guards) > 1


def test_broken_sdpa_decomposition_still_needed() -> None:
    """Fails once torch fixes the CPU flash-attention decomposition: then drop it from
    compat.broken_core_aten_decompositions()."""
    broken = compat.broken_core_aten_decompositions()
    assert broken == ([torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default]
                      if compat.TORCH_VERSION >= (2, 11) else [])
    if not broken:
        return
    q, k, v = (torch.randn(1, 2, 5, 8, requires_grad=True) for _ in range(3))
    be = compat.aot_autograd_backend(fw_compiler=lambda gm, ex: compat.make_boxed_func(gm.forward),
                                     decompositions=compat.core_aten_decomposition_table(),
                                     partition_fn=compat.partitioner("default"))
    got = torch.autograd.grad(torch.compile(F.scaled_dot_product_attention, backend=be)(q, k, v).sum(), q)[0]
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v).sum(), q)[0]
    assert not torch.allclose(got, want, atol=1e-3), "torch fixed it: remove the workaround from compat"
    assert broken[0] not in D.core_aten()


def test_refs_mode_fallback_signature() -> None:
    """TorchRefsMode calls should_fallback_fn(mode, orig_func, ref, args, kwargs) in 2.13; the
    shim takes the op positionally, so kept ops survive the prims retrace."""
    prog = capture(lambda x: F.silu(x) + 1, [torch.randn(3)], "aten", decompositions=D.prims().keeping("aten.silu"))
    text = str(prog)
    assert "aten.silu.default" in text and "prims.add" in text


def test_composite_implicit_detection() -> None:
    assert compat.is_composite_implicit(torch.ops.aten.linear.default)
    assert not compat.is_composite_implicit(torch.ops.aten.addmm.default)


def test_backend_accepts_compile_options() -> None:
    """torch.compile passes ``options=``/``mode=`` to a backend only when the user sets them."""
    seen = []
    f = torch.compile(lambda x: x * 3, backend=torch_ir_hook(lambda gm, ex: seen.append(gm)), options={"k": 1})
    torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 3.0))
    assert len(seen) == 1


def test_partitioners() -> None:
    assert compat.partitioner("default").__name__ == "default_partition"
    assert compat.partitioner("min_cut").__name__ == "min_cut_rematerialization_partition"
    with pytest.raises(ValueError, match="unknown partitioner"):
        compat.partitioner("greedy")


def test_refs_mode_packet_workaround_still_needed() -> None:
    """2.13's and 2.14's TorchRefsMode map a packet call (``aten.where(c, a, b)``, made by the
    ``slice_scatter`` decomposition) to the ``.default`` overload's decomposition, which takes one
    argument; 2.11's maps it right. compat.refs_mode runs such calls whole on every release;
    this fails once a release's behaviour differs from compat.REFS_MODE_PACKET_MAPPING_BROKEN."""
    from torch._prims.context import TorchRefsMode

    x = torch.randn(4, 6, requires_grad=True)
    prog = capture(lambda t: t[:3].sum(), [x], "aten", training=True)
    bw, fakes = prog.backward, [n.meta["val"] for n in prog.backward.graph.nodes if n.op == "placeholder"]
    mode = compat.detect_fake_mode(fakes)
    if not any(n.target == torch.ops.aten.slice_scatter.default for n in bw.graph.nodes):
        pytest.skip("this release's backward has no slice_scatter to retrace")
    raw_failed = False
    try:
        with mode, TorchRefsMode():
            compat.make_fx(lambda *a: torch.fx.Interpreter(bw).run(*a), *fakes)
    except TypeError as e:
        raw_failed = "_where_default" in str(e)
    assert raw_failed == compat.REFS_MODE_PACKET_MAPPING_BROKEN, (
        "torch fixed TorchRefsMode's packet mapping: update compat.REFS_MODE_PACKET_MAPPING_BROKEN "
        "(and drop the bind check in compat.refs_mode once no supported release needs it)"
        if not raw_failed else "TorchRefsMode maps packets to .default here too: update the flag")
    prims_prog = capture(lambda t: t[:3].sum(), [x], "aten", training=True, decompositions=D.prims())
    torch.testing.assert_close(prims_prog.run_backward(x), prog.run_backward(x))


def test_capture_compiles_its_own_entry_frame() -> None:
    """torch 2.11's torch.compile runs a function whose source file inspect cannot find inside
    a shared wrapper frame (``torch._dynamo.external_utils.wrap_inline``), so every capture's
    cache entries piled up on one code object and the 9th capture hit the recompile limit;
    2.13 wraps only non-functions. torch_ir registers each entry function's source with
    linecache, so all releases compile the entry's own code object."""
    import inspect

    import torch._dynamo

    from torchvendor.ir.torch_ir.capture import _entry_function

    entry = _entry_function(lambda x: x * 2, 1)
    assert inspect.getsourcefile(entry) is not None

    def f(x):
        return x.relu() + 1

    for _ in range(torch._dynamo.config.recompile_limit + 2):
        prog = capture(f, [torch.randn(3)], "torch")
        assert prog.guards and "not exposed" not in prog.guards[0]


# ---- torch 2.15 (issue 25) ------------------------------------------------------------------------

def test_device_process_group_has_a_default_backend() -> None:
    """c10d's C++ side asks a group for its default backend (2.15's init_process_group attaches its
    flight recorder that way); the device's Python group sets the device backend as its default on
    every release, so the question reaches that backend instead of failing with "Could not find
    the default backend type 0"."""
    import torch.distributed as dist

    from torchvendor.sdk import register_device, register_distributed

    register_device("acme")
    dist.init_process_group(register_distributed(), store=dist.HashStore(), rank=0, world_size=1,
                            device_id=torch.device("acme:0"))
    try:
        with pytest.raises(RuntimeError) as e:  # the device backend has no sequence numbers
            dist.group.WORLD._get_sequence_number_for_group()
        assert "tvgloo" in str(e.value) and "default backend type" not in str(e.value), str(e.value)
    finally:
        dist.destroy_process_group()
