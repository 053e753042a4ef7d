"""The model suite (torchvendor.sdk.conformance.models): what it holds, how it judges numerics
against float64 truth, coverage from compile reports, crash attribution, and negative controls
(a backend with a real numerical bug is caught)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import torchvendor.reference_backends.cpu  # noqa: F401  (registers torchvendor_cpu)
from torchvendor.sdk import AtenBackend, register_backend
from torchvendor.sdk.compile.report import CompileReport, GraphReport, PartitionRecord
from torchvendor.sdk.conformance.core import Target
from torchvendor.sdk.conformance.models import catalog, check, suite
from torchvendor.sdk.conformance.models.cases import model_cases

ROOT = Path(__file__).parent.parent


class BFloat16Matmul(AtenBackend):
    """A vendor bug the suite must catch: matmuls computed in bfloat16 (a silent precision loss)."""

    name = "tv_models_bf16_matmul"

    def compile(self, gm, example_inputs):
        for n in list(gm.graph.nodes):
            if n.op == "call_function" and n.target in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
                with gm.graph.inserting_before(n):
                    args = [gm.graph.call_function(torch.ops.prims.convert_element_type.default, (a, torch.bfloat16))
                            if isinstance(a, torch.fx.Node) else a for a in n.args]
                    low = gm.graph.call_function(n.target, tuple(args), n.kwargs)
                    back = gm.graph.call_function(torch.ops.prims.convert_element_type.default, (low, torch.float32))
                n.replace_all_uses_with(back)
                gm.graph.erase_node(n)
        gm.recompile()
        return gm


register_backend(BFloat16Matmul)


def test_the_catalog_spans_the_families_the_issue_names():
    names = catalog.names()
    assert len(names) >= 40 and len(set(names)) == len(names)
    families = {catalog.SPECS[n].family for n in names}
    assert families == set(catalog.FAMILIES)
    hf = [n for n in names if catalog.SPECS[n].make.__qualname__.startswith("_hf")]
    assert len(hf) >= 40, f"{len(hf)} transformers architectures"
    assert 4 <= len(catalog.names("fast")) < len(names)
    with pytest.raises(ValueError, match="unknown family"):
        catalog.names(family="quantum")


@pytest.mark.slow
def test_every_model_builds_and_runs_both_input_shapes():
    for name in catalog.names():
        spec = catalog.SPECS[name]
        model, inputs = spec.build(0)
        with torch.no_grad():
            a = check.leaves(model(**inputs))
            b = check.leaves(model(**spec.make_inputs(model, 1)))
        assert a and b, name
        assert [t.shape for t in a] != [t.shape for t in b], f"{name}: the second input shape changes no output shape"


def test_the_yardstick_is_eagers_own_distance_to_float64_truth():
    truth = [torch.randn(64, dtype=torch.float64)]
    eager = [truth[0].float()]
    assert check._compare(eager, eager, truth)[0]
    assert check._compare([eager[0] * (1 + 1e-6)], eager, truth)[0]       # within 3x eager + 1e-5
    ok, err, base = check._compare([eager[0] * (1 + 1e-3)], eager, truth)  # bfloat16-sized error
    assert not ok and err > 1e-4 > base
    with pytest.raises(AssertionError, match="output 0 has shape"):       # a wrong shape, said as such
        check._compare([eager[0][:10]], eager, truth)
    with pytest.raises(AssertionError, match="returned 2 floating-point"):  # an extra output
        check._compare([eager[0], eager[0]], eager, truth)
    nan = torch.tensor([1.0, float("nan")], dtype=torch.float64)
    assert check.relative_error(torch.tensor([1.0, float("nan")]), nan) == 0.0
    assert check.relative_error(torch.tensor([1.0, 2.0]), nan) == float("inf")


def test_coverage_leaves_views_out_and_counts_what_fell_back():
    g = GraphReport(kind="inference", backend="b", device="cpu")
    g.partitions += [PartitionRecord("fused_0", {"aten.mm.default": 2, "aten.view.default": 5}),
                     PartitionRecord("fused_1", {"aten.sin.default": 1}, status="fallback", reason="run failed: X"),
                     PartitionRecord("fused_2", {"aten.add.Tensor": 3}, device_fallback={"aten.add.Tensor": 1})]
    g.unsupported = {"aten.sort.default": 2, "aten.permute.default": 1}
    cov = check.coverage([CompileReport("b", {}, [g])])
    assert (cov["compute_ops"], cov["vendor_ops"]) == (8, 4)
    assert cov["outside"] == {"aten.sin.default": 1, "aten.add.Tensor": 1, "aten.sort.default": 2}
    assert cov["fallback_reasons"] == ["inference fused_1: run failed: X"]


def test_torchvendor_cpu_runs_a_model_correctly_and_all_in_its_own_code():
    out = check.check_model("moe_topk", ["torchvendor_cpu"], parts=("inference", "dynamic"), timing=False, warm=False)
    res = out["backends"]["torchvendor_cpu"]
    assert res["status"] == "correct", res
    assert res["coverage"]["coverage"] == 1.0 and res["coverage"]["compute_ops"] > 20


def test_a_backend_with_a_precision_bug_is_wrong():
    out = check.check_model("moe_topk", ["eager", BFloat16Matmul.name], parts=("inference", "training"),
                            timing=False, warm=False)
    assert out["backends"]["eager"]["status"] == "correct"
    bad = out["backends"][BFloat16Matmul.name]
    assert bad["status"] == "wrong"
    assert bad["parts"]["inference"]["error"] > 100 * bad["parts"]["inference"]["eager_error"]


def test_a_backend_that_raises_while_timed_is_an_error_and_the_others_are_still_timed():
    calls = {"ok": 0}

    def fine() -> None:
        calls["ok"] += 1

    def breaks_on_the_third_call(state={"n": 0}) -> None:  # noqa: B006 - a counter for this test
        state["n"] += 1
        if state["n"] == 3:
            raise RuntimeError("pool invariant broken")
    ms, errors = check._min_ms([fine, breaks_on_the_third_call], budget=0.0)
    assert ms[0] is not None and errors[0] is None and calls["ok"] >= 7  # 2 warm-up + 5 timed
    assert ms[1] is None and errors[1] == "RuntimeError: pool invariant broken"


def test_a_dead_child_is_reported_as_a_crash_of_the_step_it_was_in(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(json.dumps(e) for e in [
        {"begin": ["inductor", "inference"]},
        {"backend": "inductor", "part": "inference", "result": {"ok": True, "error": 0.0, "eager_error": 0.0}},
        {"begin": ["torchvendor_cuda", "training"]}]) + "\n{\"backend\": \"torchv")
    record = suite._assemble("t5", events, -11, "Fatal Python error: Segmentation fault\n", 3.0)
    assert record["crash"]["backend"] == "torchvendor_cuda" and record["crash"]["step"] == "training"
    assert record["backends"]["torchvendor_cuda"]["status"] == "crashed"
    assert record["backends"]["inductor"]["status"] == "not finished"
    assert "Segmentation fault" in " ".join(record["crash"]["stderr"])


def test_the_suite_runs_a_process_per_model_and_times_out_cleanly(tmp_path):
    rows = suite.run_suite(["argmax_routing", "moe_topk"], ["eager"], parts=("inference",), timing=False,
                           jobs=2, workdir=str(tmp_path), timeout=0.01)
    assert [r["model"] for r in rows] == ["argmax_routing", "moe_topk"]
    assert all(r["crash"]["why"] == "timeout" for r in rows)
    with pytest.raises(ValueError, match="unknown model"):
        suite.run_suite(["no_such_model"], ["eager"])



def test_the_suite_ends_at_its_stop_time_and_returns_what_finished(tmp_path):
    """A run under an outer time limit (``timeout 600``) lost every finished model's record when
    the limit killed it: ``stop`` ends the models still running, which show as not run."""
    rows = suite.run_suite(["argmax_routing", "moe_topk"], ["eager"], parts=("inference",), timing=False,
                           jobs=2, workdir=str(tmp_path), stop=0.0)
    assert [r["model"] for r in rows] == ["argmax_routing", "moe_topk"]
    assert all(r["not_run"].startswith("ended at the run's time limit") for r in rows)

def test_the_models_area_runs_the_suite_per_profile():
    t = Target(backend="eager")
    inference = [c.id for c in model_cases(t, "inference")]
    assert len(inference) >= 40 and all(i.endswith("/inference") for i in inference)
    training = [c.id for c in model_cases(t, "training")]
    assert {i.rsplit("/", 1)[1] for i in training} == {"dynamic", "training"}
    assert len(model_cases(t, "full")) == 3 * len(catalog.names())
    assert model_cases(Target(backend=None), "full") == []


def test_bench_renders_statuses_coverage_and_crashes():
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_models

    ok = {"status": "correct", "parts": {}, "compile_s": {"inference": 1.0, "warm": 0.1},
          "coverage": {"compute_ops": 10, "vendor_ops": 9, "coverage": 0.9, "outside": {"aten.sort.default": 1}}}
    run = {"backend": "torchvendor_cpu", "backends": ["torchvendor_cpu", "inductor"], "device": "cpu",
           "machine": "m", "torch": "2.13", "when": "now", "threads": 1, "load": "1.0", "parts": ["inference"],
           "baseline_parts": ["inference"], "seconds": 1.0,
           "rows": [{"model": "a", "family": "decoder", "backends": {"torchvendor_cpu": ok, "inductor": ok},
                     "ms": {"eager": 2.0, "torchvendor_cpu": 1.0, "inductor": 0.5}},
                    {"model": "b", "family": "vision", "ms": {}, "backends": {"torchvendor_cpu": {"status": "crashed"}},
                     "crash": {"backend": "torchvendor_cpu", "step": "training", "why": "exit status -11",
                               "stderr": ["Segmentation fault"]}}]}
    s = bench_models.summarize(run)
    assert s["coverage"] == 0.9 and s["torchvendor_cpu"] == {"correct": 1, "crashed": 1}
    assert s["geomean"]["torchvendor_cpu"] == 2.0 and s["geomean_vs_inductor"] == 0.5
    text = bench_models.render([run])
    assert "| a | decoder | correct / correct | 90.0% | 2.00 | 2.00× | 4.00× | 0.50× |" in text
    assert "the process died (exit status -11) in torchvendor_cpu / training" in text



def test_a_conformance_run_of_the_models_gives_the_coverage_in_total(tmp_path):
    """The conformance models cases carry the compute-op counts, so a run made from a report
    weighs each model by its size (the coverage in total was "—" without them)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_models

    def case(name, vendor, total):
        return {"id": f"models/{name}/inference", "area": "models", "status": "pass" if vendor == total else "fallback",
                "reason": "", "fallback": {}, "tags": {"family": "decoder"},
                "metrics": {"compile_s": 1.0, "coverage": vendor / total, "compute_ops": total, "vendor_ops": vendor}}
    doc = {"target": {"backend": "torchvendor_cpu", "device": "cpu"}, "cases": [case("a", 10, 10), case("b", 0, 30)]}
    (tmp_path / "report.json").write_text(json.dumps(doc))
    s = bench_models.summarize(bench_models.from_conformance(str(tmp_path), "m", "1.0"))
    assert s["coverage"] == 0.25 and s["coverage_lowest"] == 0.0

def test_bench_renders_several_vendor_backends_side_by_side():
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_models

    def res(cov):
        return {"status": "correct", "parts": {}, "compile_s": {"inference": 2.0},
                "coverage": {"compute_ops": 10, "vendor_ops": int(cov * 10), "coverage": cov}}
    run = {"backend": "torchvendor_ort", "vendors": ["torchvendor_ort", "torchvendor_cpu"],
           "backends": ["torchvendor_ort", "torchvendor_cpu", "inductor"], "device": "cpu", "machine": "m",
           "torch": "2.13", "when": "now", "threads": 1, "load": "1.0", "parts": ["inference"],
           "baseline_parts": ["inference"], "seconds": 1.0,
           "rows": [{"model": "a", "family": "decoder", "ms": {"eager": 4.0, "torchvendor_ort": 2.0,
                                                               "torchvendor_cpu": 1.0, "inductor": 2.0},
                     "backends": {"torchvendor_ort": res(0.8), "torchvendor_cpu": res(1.0), "inductor": res(1.0)}},
                    {"model": "b", "family": "vision", "ms": {}, "backends": {}, "not_run": "budget"}]}
    s = bench_models.summarize(run)
    assert s["coverage_of"] == {"torchvendor_ort": (0.8, 0.8), "torchvendor_cpu": (1.0, 1.0)}
    assert s["vs"] == {"torchvendor_ort": 1.0, "torchvendor_cpu": 2.0}
    text = bench_models.render([run])
    assert "| a | decoder | correct / correct / correct | 80.0% / 100.0% | 4.00 | 2.00× | 4.00× | 2.00× | 1.00× / 2.00× |" in text
    row = next(line for line in text.splitlines() if line.startswith("| b |"))
    header = next(line for line in text.splitlines() if line.startswith("| model |"))
    assert row.count("|") == header.count("|")


def test_a_gradient_that_cancels_to_noise_is_judged_by_absolute_error():
    """A truth at the noise level (a gradient that cancels to ~0) gives every backend a huge
    relative error; the absolute form of the harness's rule decides there, and a wrong tensor still
    fails both forms."""
    from torchvendor.sdk.conformance.models.check import _compare

    truth = [torch.full((64,), 1e-17, dtype=torch.float64), torch.linspace(1, 2, 64, dtype=torch.float64)]
    eager = [torch.full((64,), 1e-9), truth[1].float()]
    noisy = [torch.full((64,), -4e-8), truth[1].float()]
    assert _compare(noisy, eager, truth)[0]
    wrong = [torch.full((64,), 1e-9), truth[1].float() * 1.01]
    assert not _compare(wrong, eager, truth)[0]


def test_a_models_dynamic_case_is_handed_out_after_every_inference_case():
    # the runner's order (costly first, stable): the dynamic case's first compile then hits the
    # artifact cache its model's inference case filled, instead of running beside it
    cases = model_cases(Target(backend="eager"), "full")
    order = [c.id for c in sorted(cases, key=lambda c: -c.cost)]
    parts = [i.rsplit("/", 1)[1] for i in order]
    assert parts == sorted(parts, key=("training", "inference", "dynamic").index)
    assert len(cases) == 3 * len(catalog.names())


@pytest.mark.parametrize("name", ["lstm_lm", "gru_tagger"])
def test_a_model_dynamo_runs_eagerly_falls_back_with_dynamos_reason(name):
    """Dynamo gives up on a frame that calls ``nn.LSTM`` / ``nn.GRU`` (``allow_rnn`` off, its
    default): no graph of the model reaches the backend. The case falls back (not "100 %
    native") and says what Dynamo said, its hint included."""
    from torch._dynamo import config

    if getattr(config, "allow_rnn", False):
        pytest.skip("this torch traces RNN modules")
    res = check.check_model(name, ["torchvendor_cpu"], parts=("inference",), timing=False,
                            warm=False)["backends"]["torchvendor_cpu"]
    assert res["status"] == "fell back" and res["coverage"]["outside"] == {check.NO_GRAPH: 1}, res
    (reason,) = res["coverage"]["fallback_reasons"]
    assert reason.startswith(f"{check.NO_GRAPH}: Dynamo ran the model eagerly: ") and "RNN" in reason, reason
    assert "allow_rnn" in reason, reason
