"""OnnxView: the GraphView adapter for ONNX GraphProtos (read, rewrite, validate with onnx.checker)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from torchvendor.ir.graph_view import GraphView, MutableGraphView  # noqa: E402
from torchvendor.ir.onnx_view import OnnxView  # noqa: E402


def make_model() -> onnx.ModelProto:
    """y = Relu(MatMul(x, W) + b); z = Softmax(y, axis=-1); also a custom-domain op on y."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 3])
    w = helper.make_tensor_value_info("t", TensorProto.FLOAT, ["batch", 3])
    W = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "W")
    b = numpy_helper.from_array(np.ones(3, dtype=np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "b"], ["add"], name="add"),
        helper.make_node("Relu", ["add"], ["y"], name="relu"),
        helper.make_node("Softmax", ["y"], ["z"], name="softmax", axis=-1),
        helper.make_node("Scale", ["y"], ["t"], name="scale", domain="com.acme", factor=2.0),
    ]
    graph = helper.make_graph(nodes, "g", [x], [z, w], [W, b],
                              value_info=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.acme", 1)])


def by_name(view: OnnxView, name: str):
    return next(n for n in view.nodes() if view.name(n) == name)


def test_protocol_and_nodes() -> None:
    view = OnnxView(make_model().graph)
    assert isinstance(view, GraphView) and isinstance(view, MutableGraphView)
    assert [view.op(n) for n in view.nodes()] == ["placeholder", "initializer", "initializer", "MatMul", "Add", "Relu",
                                                   "Softmax", "com.acme.Scale", "output"]
    assert [view.kind(n) for n in view.nodes()] == ["input", "constant", "constant"] + ["op"] * 5 + ["output"]
    assert [view.name(n) for n in view.nodes()] == ["x", "W", "b", "mm", "add", "relu", "softmax", "scale", "output"]


def test_inputs_users_attrs_meta() -> None:
    view = OnnxView(make_model().graph)
    x, W, mm, relu, softmax, scale, out = (by_name(view, n) for n in ("x", "W", "mm", "relu", "softmax", "scale", "output"))
    assert view.inputs(mm) == [x, W]
    assert view.users(relu) == [softmax, scale]
    assert view.inputs(out) == [softmax, scale]
    assert view.users(softmax) == [out]
    assert view.attrs(softmax) == {"axis": -1}
    assert view.attrs(scale) == {"factor": 2.0}
    np.testing.assert_array_equal(view.attrs(W)["value"], np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    assert view.meta(x)["dtype"] == "float32" and view.meta(x)["shape"] == ("batch", 4)
    assert view.meta(W)["shape"] == (4, 3)
    assert view.meta(relu)["shape"] == ("batch", 3)  # from value_info
    assert view.meta(mm) == {"outputs": ["mm"]}       # no type information for "mm"


def test_rewrite_fuses_matmul_add_and_stays_valid() -> None:
    model = make_model()
    view = OnnxView(model.graph)
    mm, add, x, W, b = (by_name(view, n) for n in ("mm", "add", "x", "W", "b"))
    gemm = view.create("Gemm", [x, W, b], {"alpha": 1.0}, before=add, meta={"dtype": "float32", "shape": ("batch", 3)})
    view.replace_uses(add, gemm)
    view.erase(add)
    view.erase(mm)
    onnx.checker.check_model(model, full_check=False)
    assert [view.op(n) for n in view.nodes()] == ["placeholder", "initializer", "initializer", "Gemm", "Relu", "Softmax",
                                                   "com.acme.Scale", "output"]
    assert [n.op_type for n in model.graph.node] == ["Gemm", "Relu", "Softmax", "Scale"]
    relu = by_name(view, "relu")
    assert view.inputs(relu) == [gemm] and view.users(gemm) == [relu]
    assert view.attrs(gemm) == {"alpha": 1.0} and view.meta(gemm)["shape"] == ("batch", 3)


def test_replace_graph_output_and_erase_initializer() -> None:
    model = make_model()
    view = OnnxView(model.graph)
    relu, softmax, out = by_name(view, "relu"), by_name(view, "softmax"), by_name(view, "output")
    view.replace_uses(softmax, relu)   # the graph output now reads relu's value
    view.erase(softmax)
    assert view.inputs(out)[0] is relu and model.graph.output[0].name == "y"
    extra = numpy_helper.from_array(np.zeros(2, dtype=np.float32), "unused")
    model.graph.initializer.append(extra)
    view = OnnxView(model.graph)
    view.erase(by_name(view, "unused"))
    assert [t.name for t in model.graph.initializer] == ["W", "b"]
    onnx.checker.check_model(model)


def test_errors_name_the_problem() -> None:
    view = OnnxView(make_model().graph)
    with pytest.raises(ValueError, match="still used"):
        view.erase(by_name(view, "relu"))
    with pytest.raises(ValueError, match="output node"):
        view.erase(by_name(view, "output"))
    with pytest.raises(TypeError, match="GraphProto"):
        OnnxView(make_model())


def test_unnamed_nodes_and_constants() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones(2, np.float32))),
             helper.make_node("Add", ["x", "c"], ["a"]), helper.make_node("Add", ["a", "a"], ["y"])]
    view = OnnxView(helper.make_graph(nodes, "g", [x], [y]))
    names = [view.name(n) for n in view.nodes()]
    assert names == ["x", "Constant", "Add", "Add_1", "output"]
    const, add1 = view.nodes()[1], view.nodes()[3]
    assert view.kind(const) == "constant"
    np.testing.assert_array_equal(view.attrs(const)["value"], np.ones(2, np.float32))
    assert view.inputs(add1) == [view.nodes()[2]] * 2  # duplicates kept
