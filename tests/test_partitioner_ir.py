"""The partitioner on the other IRs: loop IR programs (``ProgramView``) and ONNX graphs
(``OnnxView``). Outlined pieces are executed one by one with each IR's reference interpreter
and compared with the whole program."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from torchvendor.partitioner import Partition, outline, partition, supported_ops, unsupported_ops
from torchvendor.partitioner.outline import emission_order

from test_partitioner import contracted_is_acyclic, is_convex, run_lower_bound


def check_partitions(view, result):
    assert contracted_is_acyclic(view, result.partitions)
    for p in result.partitions:
        assert is_convex(view, p.nodes) and all(view.kind(n) == "op" for n in p.nodes)
    assert len(result.partitions) == run_lower_bound(view, lambda n: n in result.assignment)


# ---------------------------------------------------------------------------------------------
# loop IR: a program's kernels and extern kernels
# ---------------------------------------------------------------------------------------------
def _model(x, w):
    h = torch.relu(x @ w)
    s = torch.softmax(h * 2, -1)
    return (s @ w).sin() + h.sum(-1, keepdim=True), h.exp()


@pytest.fixture(scope="module")
def loop_program():
    from torchvendor.ir.loop_ir import capture_loop, view as view_mod

    inputs = [torch.randn(6, 8), torch.randn(8, 8)]
    return view_mod, capture_loop(_model, inputs).inference, inputs


def run_piecewise(view, result, inputs):
    """Run every partition and every fallback operation as its own subprogram, in emission
    order, passing buffers by name."""
    from torchvendor.ir.loop_ir import run_program

    program = view.program
    env = dict(zip(program.inputs, inputs))
    for item in emission_order(result):
        nodes = item.nodes if isinstance(item, Partition) else [item]
        if view.kind(nodes[0]) != "op":
            continue
        sub = view.subprogram(nodes, name=f"piece_{view.name(nodes[0])}")
        outs = run_program(sub, [env[name] for name in sub.inputs])
        env.update({ref.name: value for ref, value in zip(sub.outputs, outs)})
    return [env[ref.name] for ref in program.outputs]


def test_loop_ir_program_partitions_and_runs(loop_program):
    view_mod, program, inputs = loop_program
    from torchvendor.ir.loop_ir import run_program

    view = view_mod.ProgramView(program)
    ops = [view.op(n) for n in view.nodes() if view.kind(n) == "op"]
    assert "kernel.pointwise" in ops and any(op.startswith("aten.") or "mm" in op for op in ops), ops
    expected = run_program(program, inputs)
    # kernels supported, extern kernels (library calls) fall back
    result = partition(view, lambda v, n: v.op(n).startswith("kernel."))
    check_partitions(view, result)
    assert result.fallback and result.partitions
    for got, want in zip(run_piecewise(view, result, inputs), expected):
        torch.testing.assert_close(got, want)
    # every support pattern over the operations: pieces still compute the program
    op_nodes = [n for n in view.nodes() if view.kind(n) == "op"]
    for mask in range(min(2 ** len(op_nodes), 64)):
        sup = {n for k, n in enumerate(op_nodes) if mask >> k & 1}
        res = partition(view, lambda v, n: n in sup)
        check_partitions(view, res)
        for got, want in zip(run_piecewise(view, res, inputs), expected):
            torch.testing.assert_close(got, want)


def test_loop_ir_generic_outline(loop_program):
    view_mod, program, _ = loop_program
    view = view_mod.ProgramView(program)
    result = partition(view, lambda v, n: v.op(n).startswith("kernel."))
    out = outline(result)
    assert len(out.subgraphs) == len(result.partitions)
    assert [n.op for n in out.parent.nodes()].count("torchvendor.partition") == len(result.partitions)
    assert sum(len(p) for p in result.partitions) == sum(
        1 for sg in out.subgraphs for n in sg.nodes() if n.kind == "op")


# ---------------------------------------------------------------------------------------------
# ONNX
# ---------------------------------------------------------------------------------------------
@pytest.fixture()
def onnx_model():
    onnx = pytest.importorskip("onnx")  # an optional external dependency; our adapter must then import
    import torchvendor.ir.onnx_view  # noqa: F401
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Sin", ["r"], ["s"]),            # unsupported
        helper.make_node("Exp", ["h"], ["e"]),            # independent branch: horizontal merge
        helper.make_node("Split", ["e"], ["e0", "e1"], axis=1, num_outputs=2),
        helper.make_node("Concat", ["e1", "e0"], ["c"], axis=1),
        helper.make_node("Add", ["s", "c"], ["a"]),
        helper.make_node("Cos", ["a"], ["b"]),            # unsupported
        helper.make_node("Mul", ["b", "r"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
                               helper.make_tensor_value_info("c", TensorProto.FLOAT, [3, 4])], [w])
    return onnx, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_onnx_graph_partitions_and_runs(onnx_model):
    onnx, model = onnx_model
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from torchvendor.ir.onnx_view import OnnxView

    view = OnnxView(model.graph)
    result = partition(view, unsupported_ops({"Sin", "Cos"}))
    check_partitions(view, result)
    names = [[view.name(n) for n in p.nodes] for p in result.partitions]
    assert len(names) == 3 and {view.op(n) for n in result.fallback} == {"Sin", "Cos"}
    assert all(view.kind(n) == "op" for p in result.partitions for n in p.nodes)  # initializer w stays out
    # run each partition as its own ONNX model (and each fallback node), values passed by name
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})
    env = {"x": x, "w": onnx.numpy_helper.to_array(model.graph.initializer[0])}
    graph_outputs = {o.name for o in model.graph.output}
    for item in emission_order(result):
        members = item.nodes if isinstance(item, Partition) else [item]
        if view.kind(members[0]) != "op":
            continue
        protos = [n.proto for n in members]
        made = {o for p in protos for o in p.output}
        ins = list(dict.fromkeys(i for p in protos for i in p.input if i and i not in made))
        later = {i for n in view.nodes() if view.kind(n) == "op" and n not in members for i in n.proto.input}
        outs = [o for o in dict.fromkeys(o for p in protos for o in p.output) if o in later or o in graph_outputs]
        sub = helper.make_graph(protos, "piece", [helper.make_empty_tensor_value_info(i) for i in ins],
                                [helper.make_empty_tensor_value_info(o) for o in outs])
        values = ReferenceEvaluator(helper.make_model(sub, opset_imports=model.opset_import)).run(
            None, {i: env[i] for i in ins})
        env.update(zip(outs, values))
    for got, want in zip([env[o.name] for o in model.graph.output], expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_onnx_generic_outline_and_min_size(onnx_model):
    _, model = onnx_model
    from torchvendor.ir.onnx_view import OnnxView

    view = OnnxView(model.graph)
    out = outline(partition(view, unsupported_ops({"Sin", "Cos"})))
    assert [n.op for n in out.parent.nodes()].count("torchvendor.partition") == 3
    small = partition(view, supported_ops({"MatMul", "Relu", "Exp", "Split", "Concat", "Add", "Mul"}), min_size=3)
    assert [len(p) for p in small.partitions] == [5] and "below min_size=3" in small.report().summary()
