"""The ONNX level: the FX -> ONNX converter (ir/onnx_ir/), Level.ONNX (sdk/compile/onnx_level.py),
fusion patterns over ONNX graphs, and the torchvendor_ort reference backend."""
from __future__ import annotations

import warnings

import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from torchvendor.ir import capture  # noqa: E402
from torchvendor.ir.onnx_ir import OPSET, ExportError, to_onnx, unsupported_reason  # noqa: E402
from torchvendor.pattern_matcher import Fused, P, Rule, W  # noqa: E402
from torchvendor.reference_backends.ort import OrtBackend, OrtEngine  # noqa: E402
from torchvendor.sdk import BackendDefinitionError, LoopBackend, OnnxBackend, last_report, register_backend  # noqa: E402
from torchvendor.sdk.conformance import zoo  # noqa: E402


def _run_onnx(model, *args):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: (a.numpy() if isinstance(a, torch.Tensor) else torch.tensor(a).numpy())
             for i, a in zip(model.graph.input, args)}
    return [torch.from_numpy(o) for o in session.run(None, feeds)]


# ---- the converter -------------------------------------------------------------------------------

def test_export_names_opset_initializers_and_numerics():
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU(), torch.nn.LayerNorm(3)).eval()
    x = torch.randn(5, 4)
    gm = capture(m, [x], level="aten").graphs()["inference"]
    model = to_onnx(gm)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == OPSET
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    assert [i.name for i in model.graph.input] == placeholders
    calls = {n.name: n for n in gm.graph.nodes if n.op == "call_function"}
    produced = {o for n in model.graph.node for o in n.output}
    assert {"addmm", "gelu"} <= produced & set(calls)            # values named after their FX nodes
    assert {n.doc_string for n in model.graph.node} >= {"aten.addmm.default", "aten.gelu.default"}
    assert model.graph.initializer                                 # gelu's constants
    (got,) = _run_onnx(model, m[0].weight.detach(), m[0].bias.detach(), x, m[2].weight.detach(),
                       m[2].bias.detach())
    torch.testing.assert_close(got, m(x).detach())


def test_dynamic_shapes_become_dim_params_and_symint_inputs():
    gm = capture(lambda x: (x * 2).view(-1).softmax(0), [torch.randn(6, 4)], level="aten",
                 dynamic=True).graphs()["inference"]
    model = to_onnx(gm)
    sym_inputs = [i for i in model.graph.input if not i.type.tensor_type.shape.dim]
    x_input = [i for i in model.graph.input if i.type.tensor_type.shape.dim][0]
    assert sym_inputs and sym_inputs[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert x_input.type.tensor_type.shape.dim[0].dim_param  # e.g. "s77"
    placeholders = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    x_dims = [str(d) for d in placeholders[-1].shape]
    for rows in (3, 7):
        x = torch.randn(rows, 4)
        sizes = [x.shape[x_dims.index(str(p))] for p in placeholders[:-1]]  # each SymInt input's value
        (got,) = _run_onnx(model, *sizes, x)
        torch.testing.assert_close(got, (x * 2).view(-1).softmax(0))


def test_ops_without_onnx_form_are_named_and_refused():
    gm = capture(lambda x: torch.sort(x).values + torch.view_as_real(x.to(torch.complex64)).sum(-1),
                 [torch.randn(4)], level="aten").graphs()["inference"]
    reasons = {n.target.__name__: unsupported_reason(n) for n in gm.graph.nodes if n.op == "call_function"}
    assert reasons["sort.default"] == "aten.sort.default has no ONNX mapping"
    assert "complex64" in reasons["_to_copy.default"]
    with pytest.raises(ExportError, match="sort.default has no ONNX converter"):
        to_onnx(gm)


def _compiled_all_in_ort(fn, *args, grad=False):
    """fn compiled by torchvendor_ort beside eager: outputs (and gradients of every float input
    when ``grad``), and the reports' unclaimed ops and fallbacks, which must be none."""
    torch._dynamo.reset()
    ours = [a.clone().requires_grad_(grad and a.is_floating_point()) for a in args]
    ref = [a.clone().requires_grad_(grad and a.is_floating_point()) for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("error", category=Warning.__subclasses__()[0])  # no vendor fallback warning
        got = torch.compile(fn, backend="torchvendor_ort")(*ours)
        if grad:
            got.backward(torch.ones_like(got))
    want = fn(*ref)
    torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-5, atol=1e-5, equal_nan=True)  # a fully masked row
    if grad:
        want.backward(torch.ones_like(want))
        for a, b in zip(ours, ref):
            if a.requires_grad:
                torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    for g in last_report().graphs:
        assert not g.unsupported.keys() - {"aten.alias.default"}, g.unsupported
        assert all(p.status == "compiled" for p in g.partitions)


@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"scale": 0.3}, {"mask": "float"}, {"mask": "bool"}])
def test_attention_forward_and_backward_run_in_onnx(kw):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for n in (5, 7, 7))
    mask = {"float": torch.zeros(5, 7).index_fill_(0, torch.tensor([1]), float("-inf")),  # row 1: every key masked
            "bool": torch.rand(2, 1, 5, 7, generator=g) > 0.3}.get(kw.pop("mask", None))
    attend = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)  # noqa: E731
    _compiled_all_in_ort(attend, q, k, v, grad=True)


@pytest.mark.parametrize("where", ["01", "12", "13", "023"])
def test_indexing_and_index_put_by_several_index_tensors(where):
    x = torch.randn(4, 5, 6, 7)
    i, j = torch.tensor([[0, 1], [3, -1]]), torch.tensor([2, -4])
    index = [None] * 4
    for axis, t in zip(map(int, where), (i, j, torch.tensor([[1], [0]]))):
        index[axis] = t
    key = tuple(slice(None) if t is None else t for t in index)
    _compiled_all_in_ort(lambda x: x[key] * 2, x)
    values = torch.randn(x[key].shape[-1])  # broadcast against torch's layout of the indexed result
    for accumulate in (False, True):
        _compiled_all_in_ort(lambda x, v: torch.ops.aten.index_put(x, index, v, accumulate), x, values)


def test_slice_select_and_element_scatter():
    x = torch.randn(6, 8, 5)
    aten = torch.ops.aten
    _compiled_all_in_ort(lambda x, s: aten.slice_scatter(x, s, 1, 1, 8, 3), x, torch.randn(6, 3, 5))
    _compiled_all_in_ort(lambda x, s: aten.slice_scatter(x, s, 2, -3), x, torch.randn(6, 8, 3))
    _compiled_all_in_ort(lambda x, s: aten.select_scatter(x, s, -1, -2), x, torch.randn(6, 8))
    index = torch.tensor([[0, 5, 2], [1, 1, 7]])
    _compiled_all_in_ort(lambda x, s: x.scatter(1, index, s), x[:, :, 0], torch.randn(4, 5))  # src larger than index
    _compiled_all_in_ort(lambda x: x.scatter(-1, index, 2.5), x[:, :, 0])


@pytest.mark.parametrize("k", [0, 3])
def test_addmm_scales_the_bias_itself_and_runs_empty_products_in_onnx(k):
    # OpInfo's largest addmm sample: K = 0, beta = 0.2 (the result is 0.2 * bias). ONNX Runtime
    # releases whose Gemm returns the bias unscaled when K = 0 gave 5x the bias, so the converter
    # leaves Gemm's beta at 1; the empty inputs also need the engine's scratch buffer, which must
    # not be made under the fake mode that compile runs in (the partition fell back to eager)
    bias, x, y = torch.randn(5, 10), torch.randn(5, k), torch.randn(k, 10)
    addmm = lambda c, a, b: torch.addmm(c, a, b, beta=0.2, alpha=0.6)  # noqa: E731
    _compiled_all_in_ort(addmm, bias, x, y, grad=True)
    model = to_onnx(capture(addmm, [bias, x, y], level="aten").graphs()["inference"])
    (gemm,) = [n for n in model.graph.node if n.op_type == "Gemm"]
    assert {a.name: onnx.helper.get_attribute_value(a) for a in gemm.attribute}.get("beta", 1.0) == 1.0
    (got,) = _run_onnx(model, bias, x, y)
    torch.testing.assert_close(got, addmm(bias, x, y))


def test_reductions_the_model_suite_needs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 8, 5, generator=g)
    x[0, 1, :] = 0
    _compiled_all_in_ort(lambda x: torch.stack([x.any(-1), x.all(-1)]).float(), x)      # Falcon, T5
    _compiled_all_in_ort(lambda x: torch.ops.aten.any.dims(x > 1, [0, 2]).float(), x)   # Switch Transformers
    _compiled_all_in_ort(lambda x: x.max() - x.min() + x.abs().any().float(), x)          # ViLT
    for order in (2, 1, 3.5, float("inf")):                                             # wav2vec2's weight norm
        _compiled_all_in_ort(lambda x: torch.linalg.vector_norm(x, order, dim=(0, 2), keepdim=True), x, grad=True)
    _compiled_all_in_ort(lambda x: torch.topk(x, 3, dim=1).values * 2, x, grad=True)      # MoE routing
    # indices of equal values: ONNX's TopK takes the lower index first, torch's order is its own
    _compiled_all_in_ort(lambda x: torch.topk(x, 2, largest=False)[1].float(), x[1:])
    gn = torch.nn.GroupNorm(4, 8)
    _compiled_all_in_ort(lambda x: gn(x), x)                                             # wav2vec2, WavLM


def test_shapes_and_masks_the_model_suite_needs():
    x = torch.randn(2, 3, 7, 5)
    _compiled_all_in_ort(lambda x: torch.nn.functional.avg_pool2d(x, (2, 1), stride=(2, 1), ceil_mode=True), x)  # Funnel
    _compiled_all_in_ort(lambda x: torch.nn.functional.avg_pool2d(x, 9, ceil_mode=True), x)  # EfficientNet's pooler
    _compiled_all_in_ort(lambda x: torch.nn.functional.pad(x, (0, 0, 1, -1)) + 1, x)  # RWKV's time shift
    _compiled_all_in_ort(lambda x: torch.nn.functional.pad(x, (-2, 3)) + 1, x)
    positions = lambda n: torch.arange(0.1, 77.9, 0.3) + n  # noqa: E731  ViLT
    _compiled_all_in_ort(positions, torch.zeros(len(torch.arange(0.1, 77.9, 0.3))))
    mask = torch.rand(2, 3) > 0.5
    for accumulate in (False, True):                                                     # masked pooling
        _compiled_all_in_ort(lambda x: torch.ops.aten.index_put(x, [mask], torch.tensor(-1.5), accumulate), x)
    x[1, 0, 6] = 2.0  # a fully masked row: NaN in eager, NaN in ONNX Runtime
    _compiled_all_in_ort(lambda x: x.masked_fill(x > 0.5, float("-inf")).softmax(-1), x)
    for accumulate in (False, True):
        # one value per selected position, or one row broadcast over them
        _compiled_all_in_ort(lambda x, v: torch.ops.aten.index_put(x, [mask], v, accumulate), x,
                             torch.randn(int(mask.sum()), 7, 5))
        _compiled_all_in_ort(lambda x, v: torch.ops.aten.index_put(x, [mask], v, accumulate), x, torch.randn(5))


def test_convolution_with_one_element_parameter_lists():
    # torch repeats padding=[1] over both spatial dimensions (EfficientNet's depthwise convolutions)
    x, w = torch.randn(1, 4, 9, 9), torch.randn(4, 1, 3, 3)
    _compiled_all_in_ort(lambda x, w: torch.ops.aten.convolution(x, w, None, [2], [1], [1], False, [0], 4), x, w)


def test_a_permuted_partition_output_keeps_its_layout_for_eager_as_strided():
    # ONNX values have no strides; as_strided in eager PyTorch reads the partition output's memory
    def f(x):
        return (x + 1).transpose(0, 1).as_strided((3, 2), (1, 4)) * 2

    x = torch.randn(4, 5)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, backend="torchvendor_ort")(x), f(x), rtol=0, atol=0)
    assert last_report().graphs[0].unsupported == {"aten.as_strided.default": 1}


# ---- Level.ONNX ----------------------------------------------------------------------------------

class _Recording(OnnxBackend):
    name = "test_onnx_recording"
    supported_ops = {"aten.addmm", "aten.relu", "aten.mul", "aten.sum", "aten.mm", "aten.permute",
                     "aten.threshold_backward", "aten.view", "aten.t"}
    models: list = []

    def compile(self, model, example_inputs):
        assert isinstance(model, onnx.ModelProto) and len(model.graph.input) == len(example_inputs)
        self.models.append(model)
        return OrtBackend().compile(model, example_inputs)


register_backend(_Recording)


def test_level_onnx_hands_models_for_inference_forward_and_backward():
    _Recording.models = []
    m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 6)
    f = torch.compile(m, backend="test_onnx_recording")
    loss = (f(x) * 3).sum()
    loss.backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    (m(x) * 3).sum().backward()
    for g, p in zip(grads, m.parameters()):
        torch.testing.assert_close(g, p.grad)
    rep = last_report()
    assert [g.kind for g in rep.graphs] == ["forward", "backward"]
    assert all(p.status == "compiled" for p in rep.partitions) and len(_Recording.models) >= 2
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m, backend="test_onnx_recording")(x), m(x))
    assert last_report().graphs[0].kind == "inference"


def test_level_onnx_leaves_ops_without_onnx_form_to_eager():
    f = torch.compile(lambda x: torch.sort(x.relu()).values * 2, backend="torchvendor_ort")
    with torch.no_grad():
        x = torch.randn(8)
        torch.testing.assert_close(f(x), torch.sort(x.relu()).values * 2)
    graph = last_report().graphs[0]
    assert graph.unsupported["aten.sort.default"] == 1
    assert graph.reasons["aten.sort.default"] == ["aten.sort.default has no ONNX mapping"]


def test_decompositions_allowed_at_onnx_level_not_at_loop():
    from torchvendor.ir.decompositions import core_aten

    class Onnxy(OnnxBackend):
        name = "test_onnx_decomp"
        decompositions = core_aten()

        def compile(self, model, example_inputs):
            return None

    register_backend(Onnxy)

    class Loopy(LoopBackend):
        name = "test_loop_decomp"
        decompositions = core_aten()

        def compile(self, kernel):
            return None

    with pytest.raises(BackendDefinitionError, match="AtenBackend and OnnxBackend only"):
        register_backend(Loopy)


# ---- fusion patterns over ONNX graphs ----------------------------------------------------------------

class _FusedGemm(OrtBackend):
    """A vendor rewriting Gemm + Relu into one op of its own domain (here ONNX Runtime's own
    contrib op com.microsoft.FusedGemm, so the rewritten model still runs)."""

    name = "test_ort_fused_gemm"
    onnx_patterns = [Rule(P("Relu", P("Gemm", W("a"), W("b"), W("c"))),
                          Fused("com.microsoft.FusedGemm", attrs={"activation": "Relu"}))]
    models: list = []

    def compile(self, model, example_inputs):
        self.models.append(model)
        return super().compile(model, example_inputs)


register_backend(_FusedGemm)


def test_onnx_patterns_rewrite_into_a_vendor_domain_op_before_compile():
    _FusedGemm.models = []
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m, backend="test_ort_fused_gemm")(x), m(x))
    (model,) = _FusedGemm.models
    ops = [(n.domain, n.op_type) for n in model.graph.node]
    assert ("com.microsoft", "FusedGemm") in ops and ("", "Relu") not in ops
    assert {(o.domain, o.version) for o in model.opset_import} >= {("com.microsoft", 1)}
    assert last_report().graphs[0].fusions == {"com.microsoft.FusedGemm": 1}


# ---- torchvendor_ort ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt_block"])  # encoder: eval runs one fused op
def test_ort_backend_zoo_inference_matches_eager(name):
    model, inputs = zoo.build(name)
    model.eval()
    with torch.no_grad():
        want = model(*inputs)
        got = torch.compile(model, backend="torchvendor_ort")(*inputs)
    for g, w in zip(zoo.leaves(got), zoo.leaves(want)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert any(p.status == "compiled" for p in last_report().partitions)
    assert not [p for p in last_report().partitions if p.status == "fallback"]


def test_ort_backend_trains_and_handles_dynamic_sizes():
    model, (x,) = zoo.build("mlp")
    f = torch.compile(model, backend="torchvendor_ort", dynamic=True)
    zoo.loss(f(x)).backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    zoo.loss(model(x)).backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        bigger = torch.randn(x.shape[0] + 3, *x.shape[1:])
        torch.testing.assert_close(f(bigger), model(bigger), rtol=1e-4, atol=1e-5)
    assert not [p for p in last_report().partitions if p.status == "fallback"]


def test_ort_engine_binds_torch_memory_and_takes_noncontiguous_inputs():
    gm = capture(lambda x, y: torch.relu(x) + y, [torch.randn(3, 4), torch.randn(3, 4)],
                 level="aten").graphs()["inference"]
    model = to_onnx(gm)
    engine = OrtBackend().compile(model, [torch.empty(3, 4), torch.empty(3, 4)])
    assert isinstance(engine, OrtEngine)
    x, y = torch.randn(4, 3).t(), torch.randn(3, 4)   # x is a transposed view
    (out,) = engine(x, y)
    torch.testing.assert_close(out, torch.relu(x) + y)
    assert out.is_contiguous() and out.dtype == torch.float32


def test_ort_backend_on_a_torchvendor_device():
    from torchvendor.sdk import register_device

    register_device("acme")
    model, (x,) = zoo.build("mlp")
    model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", category=Warning.__subclasses__()[0])  # no vendor fallback warning
        got = torch.compile(model.to("acme"), backend="torchvendor_ort")(x.to("acme"))
    assert got.device.type == "acme"
    torch.testing.assert_close(got.cpu(), model.cpu()(x), rtol=1e-4, atol=1e-5)
    assert all(p.status == "compiled" for p in last_report().partitions)


# ---- torchvendor_ort on cuda (the GPU machine) ---------------------------------------------------

class _Engines(OrtBackend):
    """torchvendor_ort keeping the engines it made (their sessions' providers and devices)."""
    name = "test_ort_engines"
    engines: list = []

    def compile(self, model, example_inputs):
        self.engines.append(super().compile(model, example_inputs))
        return self.engines[-1]


register_backend(_Engines)


def _on_cuda(dynamic):
    _Engines.engines = []
    torch._dynamo.reset()
    model, (x,) = zoo.build("gpt_block")
    model = model.eval().cuda()
    with torch.no_grad():
        f = torch.compile(model, backend="test_ort_engines", dynamic=dynamic)
        for rows in (x.shape[0], x.shape[0] + 1) if dynamic else (x.shape[0],):
            xs = torch.randn(rows, *x.shape[1:], device="cuda")
            for g, w in zip(zoo.leaves(f(xs)), zoo.leaves(model(xs))):
                assert g.device.type == "cuda"
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert _Engines.engines and not [p for p in last_report().partitions if p.status == "fallback"]
    return _Engines.engines


def _needs_cuda_provider():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip(f"onnxruntime {ort.__version__} has no CUDA execution provider (providers: "
                    f"{ort.get_available_providers()}); install onnxruntime-gpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dynamic", [False, True])
def test_ort_backend_runs_cuda_partitions_in_the_cuda_execution_provider(dynamic):
    _needs_cuda_provider()
    for engine in _on_cuda(dynamic):
        assert engine.session.get_providers()[0] == "CUDAExecutionProvider" and engine.device.type == "cuda"


@pytest.mark.gpu
@pytest.mark.parametrize("dynamic", [False, True])
def test_ort_engine_on_cuda_binds_device_memory_without_copies(dynamic):
    _needs_cuda_provider()
    fn = lambda x, y: (torch.relu(x) + y).view(-1).softmax(0)  # noqa: E731
    x, y = torch.randn(6, 4), torch.randn(6, 4)
    gm = capture(fn, [x, y], level="aten", dynamic=dynamic).graphs()["inference"]
    values = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    sizes = {str(d): s for v, t in zip(tensors, (x, y)) for d, s in zip(v.shape, t.shape)}  # a SymInt's value
    on_cuda = iter([x.cuda(), y.cuda()])
    args = [next(on_cuda) if isinstance(v, torch.Tensor) else sizes[str(v)] for v in values]
    engine = OrtBackend().compile(to_onnx(gm), args)
    assert engine.device.type == "cuda" and engine.session.get_providers()[0] == "CUDAExecutionProvider"
    engine(*args)  # the first run allocates ONNX Runtime's arena
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        (out,) = engine(*args)
    assert out.device.type == "cuda"
    torch.testing.assert_close(out, fn(x, y).cuda())
    copies = [e.name for e in prof.events() if e.name in ("aten::copy_", "aten::_to_copy")]
    # a static output is ONNX Runtime's write into torch's tensor; a symbolic one (ONNX Runtime
    # allocates it) is one copy on the device
    assert copies == (["aten::copy_"] if dynamic else []), copies


@pytest.mark.gpu
def test_ort_backend_without_cuda_provider_runs_cuda_partitions_on_the_cpu_with_a_warning():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA execution provider (the test above covers it)")
    with pytest.warns(RuntimeWarning, match="CPU execution provider.*install onnxruntime-gpu"):
        engines = _on_cuda(False)
    assert all(e.device.type == "cpu" for e in engines)
