"""The real-size tier of bench/bench_models.py: each config at its published size (built on the
meta device, parameters counted), each architecture's inputs at a tiny size through eager, and
the bench's plumbing (events, rows, table, the page) on the CPU."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_models_real as real  # noqa: E402

pytest.importorskip("transformers")

#: published parameter counts (model cards, papers); the two cut-down decoders: their shapes'
#: count by hand (Llama: TinyLlama-1.1B's layer shapes, 4 layers; Mixtral: h1024, 8 experts)
PUBLISHED = {"gpt2_124m": 124e6, "bert_base": 110e6, "llama_h2048_l4": 307.25e6, "t5_small": 60e6,
             "vit_b16": 86e6, "resnet50": 25.6e6, "whisper_base": 74e6, "mixtral_h1024": 430.48e6}


def test_the_tier_has_the_issues_eight_architectures():
    assert set(PUBLISHED) == set(real.SPECS)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_real_config_has_its_published_size(name):
    model = real.SPECS[name].build("real", device="meta")
    count = sum(p.numel() for p in model.parameters())
    assert all(p.device.type == "meta" for p in model.parameters())
    assert abs(count / PUBLISHED[name] - 1) < 0.025, f"{name}: {count / 1e6:.2f}M vs {PUBLISHED[name] / 1e6:.2f}M"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_tiny_inputs_run_through_eager(name):
    spec = real.SPECS[name]
    model = spec.build("tiny")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        out = model.eval()(**spec.inputs(model.config, "inference", "tiny", g))
    assert real._fingerprint(out).numel() > 0
    loss = model.train()(**spec.inputs(model.config, "training", "tiny", g)).loss
    assert loss.ndim == 0 and torch.isfinite(loss)


def _args(**kw):
    base = dict(device="cpu", parts="inference,training", dtypes="fp32", scale="tiny", iters=2, warmup=1,
                profile_calls=1, no_warm=False, backends="eager")
    return argparse.Namespace(**{**base, **kw})


def test_run_model_emits_a_result_per_part_dtype_and_backend(tmp_path):
    events = []
    real.run_model("gpt2_124m", _args(workdir=str(tmp_path)), events.append)
    rows = real._assemble("gpt2_124m", events, None)
    assert [(r["part"], r["dtype"]) for r in rows] == [("inference", "fp32"), ("training", "fp32")]
    for r in rows:
        res = r["backends"]["eager"]
        assert "raised" not in res, res
        assert res["ms"] > 0 and res["compile_s"]["cold"] > 0 and res["rel_second"] == 0.0
        assert 0.0 <= res["profile"]["extern_mm"] <= 1.0
        assert res["profile"]["top"] and all(ms >= 0 for _, ms, _ in res["profile"]["top"])
    lines = real.table({"vendors": [], "backends": ["eager"], "rows": rows})
    assert len(lines) == 4 and lines[2].startswith("| gpt2_124m | inference | fp32 |")


def test_a_process_that_died_marks_the_backend_it_was_in():
    events = [{"start": ["training", "bf16", "eager"]}, {"result": {"part": "training", "dtype": "bf16",
                                                                    "backend": "eager", "ms": 1.0}},
              {"start": ["training", "bf16", "torchvendor_cuda"]}]
    row, = real._assemble("gpt2_124m", events, "exit -11")
    assert row["backends"]["eager"]["ms"] == 1.0
    assert row["backends"]["torchvendor_cuda"]["raised"].startswith("the process died: exit -11")


def test_merge_from_the_command_line(tmp_path):
    rows = [{"model": "m", "part": "training", "dtype": "bf16", "backends": {"eager": {"ms": 3.0}}}]
    a = {"vendors": ["v"], "backends": ["eager", "v"], "seconds": 1.0, "note": "", "rows": rows}
    b = {**a, "rows": [{**rows[0], "backends": {"v": {"ms": 1.0}}}]}
    for name, run in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
    assert real.main(["--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(tmp_path / "m"),
                      "--name", "ab"]) == 0
    merged = json.loads((tmp_path / "m" / "ab.json").read_text())
    assert merged["rows"][0]["backends"] == {"eager": {"ms": 3.0}, "v": {"ms": 1.0}}
    assert "| m | training | bf16 | 3.00 / 1.00 | 3.00× |" in "\n".join(real.table(merged))


def test_module_doctests():
    import doctest

    assert doctest.testmod(real).failed == 0


def test_backend_options_in_the_name():
    assert real._literal("False") is False and real._literal("3") == 3 and real._literal("min_cut") == "min_cut"


@pytest.mark.slow
def test_bench_cli_smoke_with_the_cpu_backend(tmp_path):
    """The whole driver (a child process, the JSON) with torchvendor_cpu at a tiny size."""
    cmd = [sys.executable, str(ROOT / "bench" / "bench_models.py"), "--size", "real", "--scale", "tiny",
           "--device", "cpu", "--backend", "torchvendor_cpu", "--baseline", "eager", "--models", "gpt2_124m",
           "--parts", "inference,training", "--dtypes", "fp32", "--iters", "2", "--warmup", "1",
           "--out", str(tmp_path), "--name", "smoke"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((tmp_path / "smoke.json").read_text())
    assert run["backends"] == ["eager", "torchvendor_cpu"] and len(run["rows"]) == 2
    for row in run["rows"]:
        ours = row["backends"]["torchvendor_cpu"]
        assert "raised" not in ours, ours
        assert ours["rel_second"] < 1e-4 and ours["compile_s"]["warm"] > 0
        assert ours["coverage"]["coverage"] == 1.0
    assert "torchvendor_cpu × eager" in "\n".join(real.render([run]))


def test_stop_ends_the_children_and_still_writes_the_run(tmp_path):
    args = real.parser().parse_args(["--scale", "tiny", "--backend", "", "--baseline", "eager", "--models",
                                     "gpt2_124m,resnet50", "--parts", "inference", "--dtypes", "fp32", "--stop", "0.5",
                                     "--out", str(tmp_path), "--name", "cut", "--workdir", str(tmp_path / "w")])
    run = real.run(args)
    assert json.loads((tmp_path / "cut.json").read_text())["rows"] == run["rows"]
    assert [r["model"] for r in run["rows"]] == ["gpt2_124m", "resnet50"]
    assert all("not_run" in r for r in run["rows"]), run["rows"]
    assert "not run" in "\n".join(real.render([run]))
