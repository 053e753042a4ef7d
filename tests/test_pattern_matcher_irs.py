"""One pattern written once, matched and rewritten on every IR: FX (ATen and torch level), loop-IR
kernel bodies and ONNX graphs, through their GraphView adapters."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchvendor.sdk.compile.fx_pattern import rewrite_fx
from torchvendor.ir.fx_view import FxView
from torchvendor.pattern_matcher import P, PatternMatcher, Rule, T, Template, find_all, map_keys

GENERIC = P("mul", P("relu", P("add", "a", "b")), "c")           # written once, loop-IR spelling
SWAPPED = Template(T("mul", "c", T("relu", T("add", "b", "a"))))  # same value, different graph


def model(x, y, z):
    return torch.relu(x + y) * z, torch.softmax(x, -1)


ARGS = [torch.randn(4, 8) for _ in range(3)]


def translate(template: Template, table: str) -> Template:
    from torchvendor.pattern_matcher.keymap import KEYMAPS

    keys = {g: ks[0] for g, ks in KEYMAPS[table].items()}

    def tr(t: T | str) -> T | str:
        return T(keys[t.op], *[tr(i) for i in t.inputs], attrs=t.attrs) if isinstance(t, T) else t

    return Template(*[tr(o) for o in template.outputs_spec])


def test_fx_aten_and_torch_level():
    gm = make_fx(model)(*ARGS)
    assert len(PatternMatcher([Rule(map_keys(GENERIC, "aten"))]).match(FxView(gm.graph)).matches) == 1
    assert rewrite_fx(gm, [Rule(map_keys(GENERIC, "aten"), translate(SWAPPED, "aten"))]).replaced == 1
    torch.testing.assert_close(gm(*ARGS), model(*ARGS))
    tg = torch.fx.symbolic_trace(model)
    assert len(find_all(FxView(tg.graph), map_keys(GENERIC, "torch"))) == 2           # add commutes


@pytest.fixture(scope="module")
def loop_program():
    from torchvendor.ir.loop_ir import capture_loop, view as loop_ir

    return loop_ir, capture_loop(model, ARGS).inference


def test_loop_ir_kernel_bodies(loop_program):
    view_mod, program = loop_program
    from torchvendor.ir.loop_ir import run_program

    (kernel,) = program.kernels
    view = view_mod.KernelBodyView(kernel)
    # the generic pattern, as is (loop keys are the generic ones); loads are its wildcards
    (m,) = PatternMatcher([Rule(map_keys(GENERIC, "loop"))]).match(view).matches
    assert [view.attrs(m[k])["buffer"] for k in "abc"] in (["arg0_1", "arg1_1", "arg2_1"],
                                                             ["arg1_1", "arg0_1", "arg2_1"])
    # load -> sub -> exp chains of softmax, and the max reduction feeding them through a buffer
    chain = P("exp", P("sub", P("load", attrs={"buffer": "arg0_1"}), P("load", name="mx")))
    (e,) = find_all(view, chain)
    (red,) = find_all(view, P("reduction", P("load"), attrs={"kind": "max"}))
    (store,) = view.users(red.outputs[0])
    assert view.kind(store) == "output" and view.attrs(e["mx"])["buffer"] == view.attrs(store)["buffer"]
    # rewrite the body, rebuild the program, run it with the reference interpreter
    assert PatternMatcher([Rule(GENERIC, SWAPPED)]).rewrite(view).replaced == 1
    new_kernel = view.to_kernel()
    ops = tuple(new_kernel if op is kernel else op for op in program.ops)
    new_program = dataclasses.replace(program, ops=ops)
    out = run_program(new_program, ARGS)
    for got, want in zip(out, model(*ARGS)):
        torch.testing.assert_close(got, want)


def onnx_graph():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 8])  # noqa: E731
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Mul", ["z", "r"], ["m"]),                        # operands commuted
             helper.make_node("Softmax", ["x"], ["p"], axis=-1)]
    graph = helper.make_graph(nodes, "g", [vi("x"), vi("y"), vi("z")], [vi("m"), vi("p")])
    return onnx, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_onnx_graphs():
    onnx, model_proto = onnx_graph()  # skips if the external onnx package is missing
    from torchvendor.ir import onnx_view
    from onnx.reference import ReferenceEvaluator

    feeds = {n: a.numpy() for n, a in zip("xyz", ARGS)}
    before = ReferenceEvaluator(model_proto).run(None, feeds)
    view = onnx_view.OnnxView(model_proto.graph)
    pattern = map_keys(GENERIC, "onnx")
    (m,) = PatternMatcher([Rule(pattern)]).match(view).matches
    assert [view.name(m[k]) for k in "c"] == ["z"]
    assert PatternMatcher([Rule(pattern, translate(SWAPPED, "onnx"))]).rewrite(view).replaced == 1
    onnx.checker.check_model(model_proto)
    after = ReferenceEvaluator(model_proto).run(None, feeds)
    for got, want in zip(after, before):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert [view.op(n) for n in view.nodes()].count("Add") == 1
    # a fused vendor op in its own domain
    fused = PatternMatcher([Rule(map_keys(GENERIC, "onnx"), "com.acme.FusedMlp")])
    _, model2 = onnx_graph()
    view2 = onnx_view.OnnxView(model2.graph)
    assert fused.rewrite(view2).replaced == 1
    assert [(n.domain, n.op_type) for n in model2.graph.node][0] == ("com.acme", "FusedMlp")
