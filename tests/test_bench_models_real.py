"""The real-size tier of bench/bench_models.py: each config at its published size (built on the
meta device, parameters counted), each architecture's inputs at a tiny size through eager, and
the bench's plumbing (events, rows, table, the page) on the CPU."""
from __future__ import annotations

import argparse
import json
import shlex
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


def test_every_model_has_a_cost_estimate_and_the_order_is_cheapest_first():
    assert set(real.INDUCTOR_COLD_S) == set(real.SPECS)
    units = [(m, p, "bf16") for m in real.SPECS for p in real.PARTS]
    ordered = real.order_units(units, ["eager", "inductor", "torchvendor_cuda"])
    costs = [real.estimate_s(u, ["eager", "inductor", "torchvendor_cuda"]) for u in ordered]
    assert sorted(ordered) == sorted(units) and costs == sorted(costs)
    assert real.estimate_s(units[0], ["eager", "inductor_max_autotune"]) > real.estimate_s(units[0], ["eager", "inductor"])


def _fake_run():
    def row(model, part, ms, peak, cold, graphs=0):
        ours = {"ms": ms[2], "peak_gb": peak[1], "compile_s": {"cold": cold[1], "warm": cold[1] / 4}}
        if graphs:
            ours["cuda_graphs"] = {"captured": graphs}
        return {"model": model, "part": part, "dtype": "bf16", "gpu": 1, "start_s": 2.0, "seconds": 50.0,
                "backends": {"eager": {"ms": ms[0]}, "inductor": {"ms": ms[1], "peak_gb": peak[0],
                                                                  "compile_s": {"cold": cold[0], "warm": cold[0] / 4}},
                             "v": ours}}
    rows = [row("a", "training", (4.0, 2.0, 1.0), (1.0, 2.0), (10.0, 20.0)),
            row("b", "training", (4.0, 2.0, 4.0), (1.0, 1.0), (10.0, 10.0), graphs=3),
            {"model": "c", "part": "training", "dtype": "bf16", "not_run": "--stop reached", "backends": {}}]
    return {"vendors": ["v"], "backends": ["eager", "inductor", "v"], "rows": rows, "device": "cuda",
            "machine": "m", "scale": "real", "torch": "t", "transformers": "x", "when": "w", "seconds": 9.0,
            "tree": "abc123", "settings": {"iters": 3, "warmup": 1, "tf32": False, "gpus": 2, "per_gpu": 1}}


def test_summary_has_geomeans_against_each_baseline_and_ratios_to_inductor():
    line, = [x for x in real.summary(_fake_run()) if x.startswith("| v |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:4] == ["v", "training", "bf16", "2"]
    assert cells[4].startswith("2.00× (n=2; min 1.00× b)")      # vs eager: 4/1 and 4/4
    assert cells[5].startswith("1.00× (n=2; min 0.50× b)")      # vs inductor: 2/1 and 2/4
    assert cells[6].startswith("1.41× (n=2; max 2.00× a)")      # peak: 2/1 and 1/1
    assert cells[7].startswith("1.41× (n=2; max 2.00× a)")      # cold compile
    assert cells[9] == "1 of 2"                                 # b replayed CUDA graphs


def test_render_says_what_ran_where_and_when_and_what_did_not_run():
    text = "\n".join(real.render([_fake_run()]))
    assert "| b | training (graphs) | bf16 |" in text and "| 1.00× |" in text  # b's peak over Inductor's
    assert "- a training bf16: GPU 1, from +2 s, 50 s" in text and "tree abc123" in text
    assert "| c | training | bf16 | not run: --stop reached |" in text


def test_the_json_is_written_while_a_child_runs_and_a_stopped_child_keeps_its_results(tmp_path):
    """A child still running shows in the JSON with the backends it finished; --stop ends it
    (its whole process group) and marks the backend it was in."""
    events = tmp_path / "e.jsonl"
    events.write_text(json.dumps({"start": ["inference", "bf16", "eager"]}) + "\n"
                      + json.dumps({"result": {"part": "inference", "dtype": "bf16", "backend": "eager", "ms": 2.0}})
                      + "\n" + json.dumps({"start": ["inference", "bf16", "v"]}) + "\n")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    unit = ("gpt2_124m", "inference", "bf16")
    r = real._Running(unit, proc, events, tmp_path / "err.txt", 0.0, gpu=1)
    args = argparse.Namespace(log=str(tmp_path / "log.txt"))
    d = real._Driver(args, ["eager", "v"], {"units": [unit], "vendors": ["v"]}, [], tmp_path / "run.json")
    d.running[0] = r
    d.write()
    row, = json.loads((tmp_path / "run.json").read_text())["rows"]
    assert row["running"] and row["backends"] == {"eager": {"ms": 2.0}} and row["gpu"] == 1
    d.finish(r, 0, "stopped after 5 s (--stop/--timeout)")
    assert proc.returncode is not None and not d.running
    row, = d.write()["rows"]
    assert row["backends"]["v"]["raised"].startswith("the process died: stopped after 5 s")
    assert "gpt2_124m inference bf16 on gpu 1" in (tmp_path / "log.txt").read_text()


def test_gpu_lock_takes_a_file_lock_when_children_share_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHVENDOR_BENCH_LOCK", str(tmp_path / "gpu0.lock"))
    with real.gpu_lock() as waited:
        assert waited >= 0.0 and (tmp_path / "gpu0.lock").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_smoke_every_model_through_torchvendor_cpu(name):
    """What `--smoke` does, one model at a time: tiny, inference and training, bf16 autocast,
    torchvendor_cpu against eager (catches a broken model before GPU time is spent on it). ResNet
    first in a process covers compat.select_decomp_table importing Inductor's lowering, which
    torch 2.13's max_pool2d_with_indices decomposition calls without importing it."""
    assert real.smoke([name], dtypes=("bf16",), say=lambda line: None) == []


def test_skip_leaves_out_units_an_earlier_run_measured_with_every_backend(tmp_path):
    done = {"rows": [{"model": "gpt2_124m", "part": "inference", "dtype": "bf16",
                      "backends": {"eager": {"ms": 1.0}, "v": {"ms": 2.0}}},
                     {"model": "gpt2_124m", "part": "training", "dtype": "bf16",
                      "backends": {"eager": {"ms": 1.0}, "v": {"raised": "x"}}}]}
    (tmp_path / "a.json").write_text(json.dumps(done))
    units = [("gpt2_124m", "inference", "bf16"), ("gpt2_124m", "training", "bf16")]
    left, skipped = real.skip_measured(units, ["eager", "v"], [str(tmp_path / "a.json"), str(tmp_path / "none.json")])
    assert left == units[1:] and skipped == units[:1]


def test_the_bar_names_every_target_met_not_met_or_not_measured():
    lines = real.targets(_fake_run())
    assert len(lines) == len(real.BAR)
    assert "- v, inference: speed ≥ 1.0× inductor (geomean): **not measured** (no inference row measured)" in lines
    assert any("inductor_max_autotune" in x and "**not measured** (no inductor_max_autotune in this run)" in x
               for x in lines)
    speed, = [x for x in lines if x.startswith("- v, training: speed")]
    assert "**met** (1.00×; 2 of 8 models: a, b)" in speed


def test_the_page_says_which_models_no_run_measured_and_how_to_measure_them():
    text = "\n".join(real.render([_fake_run()]))
    assert "**Not measured in any run: 8 of 8**" in text  # the fake run's models are not the tier's
    assert "### w: v on `cuda` (m), scale real" in text and "Tree `abc123`; beside it on the host: not recorded" in text
    for what, cmd in real.NEXT_COMMANDS[:2]:
        assert cmd in text
        flags = shlex.split(cmd.replace("\\\n", " ").split("bench/bench_models.py --size real", 1)[1])
        assert real.parser().parse_args(flags).device == "cuda"


def test_one_command_merges_a_run_from_the_gpu_machine_and_records_what_ran_beside(tmp_path):
    run = {**_fake_run(), "when": "2026-11-29 02:10 UTC"}
    del run["settings"], run["machine"]  # a foreign or older JSON: the page still renders
    (tmp_path / "gpt2.json").write_text(json.dumps(run))
    out = tmp_path / "real"
    assert real.main(["--merge", str(tmp_path / "gpt2.json"), "--out", str(out), "--beside", "tests on GPU 0"]) == 0
    merged = json.loads((out / "gpt2_20261129_0210.json").read_text())
    assert merged["beside"] == "tests on GPU 0" and merged["tree"] == "abc123"
    assert all("run" not in r for r in merged["rows"])  # one run: no "which command" in where_when
    text = "\n".join(real.render(real.load_runs(out)))
    assert "beside it on the host: tests on GPU 0" in text and "- a training bf16: GPU 1" in text
