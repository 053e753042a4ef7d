"""``compat.aot_autograd``: AOTAutograd's backend, boxed calling convention, partitioners,
descriptors and metadata, and its cache switch, on the installed release."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from torchvendor.ir import capture, compat
from torchvendor.ir.aten_ir.program import _forward_roles


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


def test_partitioners() -> None:
    assert compat.partitioner("default").__name__ == "default_partition"
    assert compat.partitioner("min_cut").__name__ == "min_cut_rematerialization_partition"
    with pytest.raises(ValueError, match="unknown partitioner"):
        compat.partitioner("greedy")


def test_backend_boxed_compiler_and_plain_inference_metadata() -> None:
    seen = []

    def fw(gm, example_inputs):
        meta = compat.aot_forward_metadata()
        seen.append(compat.aot_plain_inference(meta, 1))
        return compat.make_boxed_func(gm.forward)

    backend = compat.aot_autograd_backend(fw_compiler=fw)
    with torch.no_grad():
        out = torch.compile(lambda x: x.cos() * 2, backend=backend)(torch.ones(3))
    torch.testing.assert_close(out, torch.ones(3).cos() * 2)
    assert seen == [None]
    assert compat.aot_plain_inference(None, 1) == "no AOTAutograd metadata"


def test_plain_inference_names_a_mutated_input() -> None:
    seen = []

    def fw(gm, example_inputs):
        seen.append(compat.aot_plain_inference(compat.aot_forward_metadata(), 1))
        return compat.make_boxed_func(gm.forward)

    def f(x):
        x.add_(1)
        return x * 2

    with torch.no_grad():
        torch.compile(f, backend=compat.aot_autograd_backend(fw_compiler=fw))(torch.ones(3))
    assert seen and seen[0] is not None and "mutated" in seen[0]


def test_descriptor_normalization() -> None:
    assert compat.aot_descriptor(None) == ("none",)
    if not compat.HAS_AOT_DESCRIPTORS:
        pytest.skip("this release has no AOTAutograd descriptors")
    from torch._functorch._aot_autograd.descriptors import PlainAOTInput, PlainAOTOutput, TangentAOTInput

    assert compat.aot_descriptor(PlainAOTInput(idx=2)) == ("input", 2)
    assert compat.aot_descriptor(TangentAOTInput(output=PlainAOTOutput(idx=1))) == ("tangent", ("output", 1))
    assert compat.aot_descriptor(object())[0] == "other"


def test_autograd_cache_patch_scopes_the_flag() -> None:
    import torch._functorch.config as fconfig

    old = fconfig.enable_autograd_cache
    with compat.autograd_cache_patch(not old):
        assert fconfig.enable_autograd_cache is (not old)
    assert fconfig.enable_autograd_cache is old
