"""The warm-compile bypass (sdk/compile/warm.py): a warm inference compile skips AOTAutograd, the rest does not."""
from __future__ import annotations

import hashlib

import pytest
import torch

import torchvendor.reference_backends.cpu  # noqa: F401
from torchvendor.ir import compat
from torchvendor.sdk import AtenBackend, get_backend, last_report
from torchvendor.sdk.compile.warm import SUFFIX


class AtenEcho(AtenBackend):
    name = "test_warm_aten"
    supported_ops = {"aten.mm", "aten.relu", "aten.add.Tensor", "aten.mul.Tensor", "aten.sin"}

    def compile(self, gm, example_inputs):
        return gm


def compile_once(fn, args, tmp_path, *, grad=False, dynamic=False, backend=AtenEcho):
    """A process-fresh compile: Dynamo reset, a new backend object, the disk cache kept.
    Returns (outputs, report, how many graphs AOTAutograd traced)."""
    compat.dynamo_reset()
    be = backend(cache_dir=str(tmp_path))
    before = compat.dynamo_counters()["aot_autograd"]["total"]
    with torch.set_grad_enabled(grad):
        out = torch.compile(fn, backend=be, dynamic=dynamic)(*args)
    return out, last_report(), compat.dynamo_counters()["aot_autograd"]["total"] - before


def entries(tmp_path):
    return sorted(tmp_path.rglob("*" + SUFFIX))


def f_plain(x, w):
    return (x @ w).relu() + x.sin() * 2


def test_a_warm_inference_compile_skips_aot_autograd(tmp_path):
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    out, rep, traced = compile_once(f_plain, (x, w), tmp_path)
    assert traced == 1 and rep.graphs[0].graph_cache == "stored" and not rep.graphs[0].from_cache
    assert len(entries(tmp_path)) == 1
    out2, rep2, traced2 = compile_once(f_plain, (x, w), tmp_path)
    assert traced2 == 0
    graph = rep2.graphs[0]
    assert graph.from_cache and graph.kind == "inference" and graph.partitions
    assert all(p.status == "compiled" and p.calls == 1 for p in graph.partitions)
    assert "from the artifact cache" in str(rep2) and rep2.to_dict()["graphs"][0]["from_cache"] is True
    torch.testing.assert_close(out2, f_plain(x, w))
    torch.testing.assert_close(out, out2)
    # other shapes are another key: a miss, traced again, correct
    y = torch.randn(3, 8)
    out3, rep3, traced3 = compile_once(f_plain, (y, w), tmp_path)
    assert traced3 == 1 and not rep3.graphs[0].from_cache
    torch.testing.assert_close(out3, f_plain(y, w))


def test_grad_enabled_without_inputs_requiring_grad_is_an_inference_graph(tmp_path):
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    compile_once(f_plain, (x, w), tmp_path, grad=True)
    out, rep, traced = compile_once(f_plain, (x, w), tmp_path, grad=True)
    assert traced == 0 and rep.graphs[0].from_cache and not out.requires_grad
    torch.testing.assert_close(out, f_plain(x, w))


def mutates(x):
    x.add_(1)
    return x * 2


def returns_view(x):
    return x.view(-1), x.sin()


@pytest.mark.parametrize("fn, why", [(mutates, "input 0 is mutated"), (returns_view, "output 0 is")])
def test_graphs_whose_aot_wrappers_do_work_are_not_stored(tmp_path, fn, why):
    for _ in range(2):
        x = torch.randn(4, 4)
        expected_in = x.clone()
        expected = fn(expected_in)
        out, rep, traced = compile_once(fn, (x,), tmp_path)
        assert traced == 1 and not rep.graphs[0].from_cache
        assert rep.graphs[0].graph_cache.startswith(f"not stored: {why}")
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x, expected_in)  # the mutation happened, once
    assert not entries(tmp_path)
    if fn is returns_view:
        assert out[0]._base is x  # still a view of the input


def test_a_training_graph_is_not_bypassed(tmp_path):
    w = torch.randn(8, 8, requires_grad=True)
    for _ in range(2):
        x = torch.randn(4, 8)
        out, rep, traced = compile_once(f_plain, (x, w), tmp_path, grad=True)
        assert traced == 1 and [g.kind for g in rep.graphs] == ["forward"]
        out.sum().backward()
        w_ref = w.detach().clone().requires_grad_()
        f_plain(x, w_ref).sum().backward()
        torch.testing.assert_close(w.grad, w_ref.grad)
        w.grad = None
    assert not entries(tmp_path)


def test_a_dynamic_shape_graph_is_not_bypassed(tmp_path):
    w = torch.randn(8, 8)
    for n in (4, 4):
        x = torch.randn(n, 8)
        out, rep, traced = compile_once(f_plain, (x, w), tmp_path, dynamic=True)
        assert traced == 1 and not rep.graphs[0].from_cache
        torch.testing.assert_close(out, f_plain(x, w))
    assert not entries(tmp_path)


def test_a_corrupt_entry_is_rebuilt(tmp_path):
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    compile_once(f_plain, (x, w), tmp_path)
    (entry,) = entries(tmp_path)
    entry.write_bytes(entry.read_bytes()[:-10])  # truncated: the checksum no longer matches
    with pytest.warns(RuntimeWarning, match="corrupt"):
        out, rep, traced = compile_once(f_plain, (x, w), tmp_path)
    assert traced == 1 and rep.graphs[0].graph_cache == "stored"
    torch.testing.assert_close(out, f_plain(x, w))
    # a checksummed entry that does not decode (e.g. written by a broken release) is removed too
    (entry,) = entries(tmp_path)
    entry.write_bytes(b'{"format": "torchvendor.warm/1", "graph": {"nodes": 1}}')
    entry.with_name(entry.name + ".sha256").write_text(hashlib.sha256(entry.read_bytes()).hexdigest())
    out, rep, traced = compile_once(f_plain, (x, w), tmp_path)
    assert traced == 1 and rep.graphs[0].graph_cache == "stored"
    torch.testing.assert_close(out, f_plain(x, w))
    out, rep, traced = compile_once(f_plain, (x, w), tmp_path)
    assert traced == 0 and rep.graphs[0].from_cache
    torch.testing.assert_close(out, f_plain(x, w))


def test_the_loop_level_cpu_backend_warm_compile_skips_aot_autograd(tmp_path):
    cpu = type(get_backend("torchvendor_cpu"))
    x = torch.randn(16, 32)
    fn = lambda t: torch.softmax(t * 2, dim=-1)  # noqa: E731
    compile_once(fn, (x,), tmp_path, backend=cpu)
    files = sorted(tmp_path.rglob("*"))
    out, rep, traced = compile_once(fn, (x,), tmp_path, backend=cpu)
    assert traced == 0 and rep.graphs[0].from_cache
    assert sorted(tmp_path.rglob("*")) == files  # programs and kernels came from the cache too
    assert all(p.status == "compiled" for p in rep.graphs[0].partitions)
    torch.testing.assert_close(out, fn(x))


def test_autocast_is_not_bypassed(tmp_path):
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, rep, traced = compile_once(f_plain, (x, w), tmp_path)
            expected = f_plain(x, w)
        assert traced == 1 and not rep.graphs[0].from_cache
        torch.testing.assert_close(out, expected)
    assert not entries(tmp_path)


def test_an_input_at_a_storage_offset_is_not_bypassed(tmp_path):
    base, w = torch.randn(5, 8), torch.randn(8, 8)
    for _ in range(2):
        out, rep, traced = compile_once(f_plain, (base[1:], w), tmp_path)
        assert traced == 1 and not rep.graphs[0].from_cache
        torch.testing.assert_close(out, f_plain(base[1:], w))
