"""``compat.decompositions``: the core-ATen table, the broken entries left out of it, torch's
registered decompositions and the ``torch._refs`` mode, on the installed release."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchvendor.ir import capture, compat, decompositions as D


def test_core_aten_table_is_plain_dict() -> None:
    """2.13 returns a lazily materialized ``CustomDecompTable`` (a dict subclass); the shim
    always returns a plain dict of OpOverloads."""
    from torch._decomp import core_aten_decompositions

    raw = core_aten_decompositions()
    table = compat.core_aten_decomposition_table()
    assert type(table) is dict and isinstance(raw, dict)
    assert type(raw).__name__ == ("CustomDecompTable" if compat.TORCH_VERSION >= (2, 6) else "dict")
    assert all(isinstance(op, compat.OpOverload) for op in table)


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


def test_registered_decompositions_expand_packets() -> None:
    table = compat.registered_decompositions([torch.ops.aten.gelu])
    assert torch.ops.aten.gelu.default in table
    assert all(isinstance(op, compat.OpOverload) for op in table)


def test_refs_mode_runs_kept_ops_whole() -> None:
    calls = []

    def keep(op):
        calls.append(op)
        return op is torch.ops.aten.silu.default

    with compat.refs_mode(keep):
        out = F.silu(torch.ones(2)) + 1
    torch.testing.assert_close(out, F.silu(torch.ones(2)) + 1)
    assert calls
