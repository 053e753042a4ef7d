"""The real-size tier of the model benchmark (``bench/bench_models.py --size real``): eight of the
suite's architectures at their published sizes, built from ``transformers`` configs written here
(random weights, nothing downloaded), at batch and sequence sizes users run; inference and a full
training step (forward, backward, AdamW), float32 and bfloat16 autocast; a torchvendor backend
beside eager and Inductor's modes in the same process.

    python bench/bench_models.py --size real --device cuda --backend torchvendor_cuda \\
        --models gpt2_124m --parts training --dtypes bf16 --baseline eager,inductor,inductor_cudagraphs
    .venv/bin/python bench/bench_models.py --size real --device cpu --backend torchvendor_cpu --scale tiny

A process per model (a crash or a poisoned CUDA context costs one model); in it, per part and
dtype, each backend in turn gets a fresh copy of the model, fresh compile caches (cold), a first
call (``compile_s.cold``), warm-up calls, ``--iters`` timed calls (median of CUDA-event times,
``ms``), the peak of ``max_memory_allocated`` over them (reset before; the model, its gradients
and AdamW's state included: ``peak_gb``), a profile of a few calls (the share of GPU time in
library matmuls and convolutions, ``extern_mm``; in Inductor's Triton templates, ``template_mm``;
in library attention, ``attention``; GPU-busy time over wall time, ``gpu_busy``), then a Dynamo
reset and a first call again with the disk caches kept (``compile_s.warm``). Results to
``docs/bench_models/real/<name>.json``; :func:`render` writes the section of
``docs/bench_models.md``.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "bench_models" / "real"

#: baseline name -> ``torch.compile`` keyword arguments (eager: no compile)
BASELINES: dict[str, dict[str, Any] | None] = {
    "eager": None,
    "inductor": {"backend": "inductor"},
    "inductor_cudagraphs": {"backend": "inductor", "mode": "reduce-overhead"},
    "inductor_max_autotune": {"backend": "inductor", "mode": "max-autotune-no-cudagraphs"},
    "inductor_max_autotune_cudagraphs": {"backend": "inductor", "mode": "max-autotune"},
}
DTYPES = ("fp32", "bf16")
PARTS = ("inference", "training")


@dataclass(frozen=True)
class RealSpec:
    """One real-size model: ``config(scale)`` its ``transformers`` config (``scale="tiny"``: the
    same architecture a CPU runs in seconds), ``model`` the class name, ``inputs`` its batch."""

    name: str
    suite: str  #: the small suite's model (sdk/conformance/models/catalog.py) of the same architecture
    what: str
    model: str
    config: Callable[[str], dict[str, Any]] = field(repr=False)
    config_class: str
    inputs: Callable[[Any, str, str, Any], dict[str, Any]] = field(repr=False)
    params: float  #: the published parameter count (or, for a cut-down model, the count of its shapes)

    def build(self, scale: str = "real", device: str = "cpu") -> Any:
        """The model with random weights, dropout off, on ``device`` (``"meta"``: shapes only).

        >>> SPECS["resnet50"].build("tiny").__class__.__name__
        'ResNetForImageClassification'
        """
        import torch
        import transformers

        cfg = getattr(transformers, self.config_class)(**self.config(scale))
        for key in _dropout_keys():
            if isinstance(getattr(cfg, key, None), float):
                setattr(cfg, key, 0.0)
        if hasattr(cfg, "use_cache"):  # a forward over the whole sequence, as in training: no KV cache out
            cfg.use_cache = False
        torch.manual_seed(0)
        with torch.device(device):
            model = getattr(transformers, self.model)(cfg)
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        return model


def _dropout_keys() -> tuple[str, ...]:
    from torchvendor.sdk.conformance.models.catalog import _DROPOUT as keys  # the suite's list

    return tuple(keys)



def _tiny(real: dict[str, Any], tiny: dict[str, Any]) -> Callable[[str], dict[str, Any]]:
    return lambda scale: {**real, **(tiny if scale == "tiny" else {})}


_TINY_TEXT = dict(num_hidden_layers=1, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=512)


def _tokens(batch: int, seq: int, *, decoder: int = 0, key: str = "input_ids") -> Callable[..., dict[str, Any]]:
    """Token inputs: ``labels`` for training (the model computes its loss), else none (an
    encoder-decoder then gets ``decoder_input_ids`` of the labels' length)."""
    def make(cfg: Any, part: str, scale: str, g: Any) -> dict[str, Any]:
        import torch

        b, s, d = (2, 16, 8 if decoder else 0) if scale == "tiny" else (batch, seq, decoder)
        vocab = cfg.vocab_size
        ids = torch.randint(0, vocab, (b, s), generator=g)
        out: dict[str, Any] = {key: ids}
        target = torch.randint(0, vocab, (b, d), generator=g) if d else ids
        if part == "training":
            out["labels"] = target
        elif d:
            out["decoder_input_ids"] = target
        return out
    return make


def _images(batch: int) -> Callable[..., dict[str, Any]]:
    def make(cfg: Any, part: str, scale: str, g: Any) -> dict[str, Any]:
        import torch

        b, size = (2, 32) if scale == "tiny" else (batch, 224)
        out = {"pixel_values": torch.randn(b, 3, size, size, generator=g)}
        if part == "training":
            out["labels"] = torch.randint(0, cfg.num_labels, (b,), generator=g)
        return out
    return make


def _audio(batch: int, decoder: int) -> Callable[..., dict[str, Any]]:
    def make(cfg: Any, part: str, scale: str, g: Any) -> dict[str, Any]:
        import torch

        b, d = (2, 8) if scale == "tiny" else (batch, decoder)
        frames = 2 * cfg.max_source_positions  # Whisper's encoder takes exactly 30 s of frames
        out = {"input_features": torch.randn(b, cfg.num_mel_bins, frames, generator=g)}
        target = torch.randint(0, cfg.vocab_size, (b, d), generator=g)
        out["labels" if part == "training" else "decoder_input_ids"] = target
        return out
    return make


_LLAMA = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4, num_attention_heads=32,
              num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
_MIXTRAL = dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=4, num_attention_heads=16,
                num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000,
                max_position_embeddings=2048)
_WHISPER = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
                encoder_ffn_dim=2048, decoder_ffn_dim=2048, vocab_size=51865, num_mel_bins=80,
                max_source_positions=1500, max_target_positions=448)


def _llama_params(c: dict[str, Any]) -> float:
    """Parameters of a Llama/Mixtral decoder of these shapes (untied head, no biases)."""
    h, kv = c["hidden_size"], c["hidden_size"] // c["num_attention_heads"] * c["num_key_value_heads"]
    mlp = 3 * h * c["intermediate_size"] * c.get("num_local_experts", 1) + h * c.get("num_local_experts", 0)
    return 2 * c["vocab_size"] * h + c["num_hidden_layers"] * (2 * h * h + 2 * h * kv + mlp + 2 * h) + h


SPECS: dict[str, RealSpec] = {s.name: s for s in [
    RealSpec("gpt2_124m", "gpt2", "GPT-2 124M, 8 × 512", "GPT2LMHeadModel",
             _tiny({}, dict(n_embd=64, n_layer=1, n_head=2, vocab_size=512)), "GPT2Config", _tokens(8, 512), 124.44e6),
    RealSpec("bert_base", "bert", "BERT-base, 8 × 512, masked LM", "BertForMaskedLM", _tiny({}, _TINY_TEXT),
             "BertConfig", _tokens(8, 512), 110e6),
    RealSpec("llama_h2048_l4", "llama", "Llama-style h2048 × 4 layers (TinyLlama's shapes), 4 × 1024", "LlamaForCausalLM",
             _tiny(_LLAMA, dict(_TINY_TEXT, num_key_value_heads=1)), "LlamaConfig", _tokens(4, 1024), _llama_params(_LLAMA)),
    RealSpec("t5_small", "t5", "T5-small, 8 × 512 → 128", "T5ForConditionalGeneration",
             _tiny(dict(decoder_start_token_id=0, pad_token_id=0, eos_token_id=1),
                   dict(d_model=64, d_kv=32, d_ff=128, num_layers=1, num_heads=2, vocab_size=512)), "T5Config",
             _tokens(8, 512, decoder=128), 60.5e6),
    RealSpec("vit_b16", "vit", "ViT-B/16, 32 × 224²", "ViTForImageClassification",
             _tiny(dict(num_labels=1000), dict(_TINY_TEXT, image_size=32, patch_size=8)), "ViTConfig", _images(32), 86.6e6),
    RealSpec("resnet50", "resnet", "ResNet-50, 32 × 224²", "ResNetForImageClassification",
             _tiny(dict(num_labels=1000), dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], embedding_size=8)),
             "ResNetConfig", _images(32), 25.56e6),
    RealSpec("whisper_base", "whisper", "Whisper-base, 8 × 30 s → 128 tokens", "WhisperForConditionalGeneration",
             _tiny(_WHISPER, dict(d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                                  decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=512,
                                  num_mel_bins=16, max_source_positions=32, max_target_positions=32,
                                  decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
             "WhisperConfig", _audio(8, 128), 72.6e6),
    RealSpec("mixtral_h1024", "mixtral", "Mixtral-style MoE h1024 × 4 layers, 8 experts top-2, 4 × 1024", "MixtralForCausalLM",
             _tiny(_MIXTRAL, dict(_TINY_TEXT, num_key_value_heads=1, num_local_experts=4)), "MixtralConfig",
             _tokens(4, 1024), _llama_params(_MIXTRAL)),
]}


# ---- one model in one process -------------------------------------------------------------------


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


class _Timer:
    """CUDA-event times on a GPU, ``perf_counter`` elsewhere, in milliseconds."""

    def __init__(self, device: str) -> None:
        self.device = device

    def __call__(self, fn: Callable[[], Any], n: int) -> list[float]:
        import torch

        if self.device != "cuda":
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            return times
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in events]


_EXTERN = re.compile(r"gemm|nvjet|cutlass|cublas|xmma|s\d+_.*mma|cudnn|conv|dgrad|wgrad|splitk|"
                     r"aten::(mm|addmm|bmm|baddbmm|convolution|_convolution|mkldnn_convolution)$", re.I)
_ATTENTION = re.compile(r"flash|fmha|attention|aten::_scaled_dot_product", re.I)


def kernel_shares(kernels: list[tuple[str, float]], wall_us: float) -> dict[str, float]:
    """Shares of device time by kind from ``(name, microseconds)``: library matmuls and
    convolutions (``extern_mm``), Inductor's Triton matmul templates (``template_mm``), library
    attention (``attention``); and device-busy time over the wall time (``gpu_busy``).

    >>> s = kernel_shares([("nvjet_tst_128x64", 6.0), ("triton_poi_fused_add_0", 2.0), ("flash_fwd_kernel", 2.0)], 20.0)
    >>> s["extern_mm"], s["attention"], s["gpu_busy"]
    (0.6, 0.2, 0.5)
    """
    total = sum(us for _, us in kernels) or 1.0
    kinds = {"extern_mm": 0.0, "template_mm": 0.0, "attention": 0.0}
    for name, us in kernels:
        if name.startswith("triton_tem"):
            kinds["template_mm"] += us
        elif _ATTENTION.search(name):
            kinds["attention"] += us
        elif _EXTERN.search(name) and not name.startswith("triton_"):
            kinds["extern_mm"] += us
    return {**{k: v / total for k, v in kinds.items()}, "gpu_busy": total / wall_us if wall_us else 0.0,
            "device_ms_per_call": 0.0}


def _profile(step: Callable[[], Any], device: str, calls: int) -> dict[str, Any]:
    """Profile ``calls`` steps: the shares of :func:`kernel_shares` (on a CPU, of aten ops' self
    time), and the twelve kernels that took longest (name, ms per call, launches per call)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    _sync(device)
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            step()
        _sync(device)
        wall = (time.perf_counter() - t0) * 1e6
    if device == "cuda":
        kernels = [(e.name(), e.duration_ns() / 1e3) for e in prof.profiler.kineto_results.events()
                   if e.device_type() == torch.autograd.DeviceType.CUDA and not e.name().startswith(("Memcpy", "Memset"))]
    else:
        kernels = [(e.key, e.self_cpu_time_total / e.count) for e in prof.key_averages() if e.key.startswith("aten::")
                   for _ in range(e.count)]
    shares: dict[str, Any] = kernel_shares(kernels, wall)
    shares["device_ms_per_call"] = sum(us for _, us in kernels) / calls / 1e3
    by_name: dict[str, list[float]] = {}
    for name, us in kernels:
        by_name.setdefault(name[:120], []).append(us)
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:12]  # where the time goes, for the diagnosis
    shares["top"] = [[name, round(sum(v) / calls / 1e3, 4), len(v) // calls] for name, v in top]
    return shares


def _rel(got: Any, ref: Any) -> float | None:
    import torch

    if got is None or ref is None:
        return None
    got, ref = got.double(), ref.double()
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def _fingerprint(out: Any) -> Any:
    """A small float32 CPU sample of a model output (the first million values of its first tensor)."""
    import torch

    t = out.loss if getattr(out, "loss", None) is not None else None
    if t is None:
        t = next(v for v in (out.values() if hasattr(out, "values") else out) if isinstance(v, torch.Tensor))
    return t.detach().flatten()[:1 << 20].float().cpu()


@dataclass
class _Case:
    spec: RealSpec
    part: str
    dtype: str
    device: str
    inputs: dict[str, Any]
    args: argparse.Namespace

    def autocast(self) -> Any:
        import contextlib

        import torch

        if self.dtype == "bf16":
            return torch.autocast(self.device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def stepper(self, model: Any, run: Callable[..., Any]) -> Callable[[], Any]:
        """One call: inference under ``no_grad``; training: zero_grad, forward, backward, AdamW."""
        import torch

        if self.part == "inference":
            model.eval()

            def infer() -> Any:
                with torch.no_grad(), self.autocast():
                    return run(**self.inputs)
            return infer
        model.train()
        fused = self.device == "cuda"
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=fused, foreach=None if fused else True)

        def train() -> Any:
            opt.zero_grad(set_to_none=True)
            with self.autocast():
                out = run(**self.inputs)
            out.loss.backward()
            opt.step()
            return out
        return train


def _fresh_caches(workdir: Path, tag: str) -> None:
    """Empty disk caches for the next backend (read when used, so a cold compile is cold on disk;
    kernels Inductor compiled earlier in the process stay in its memory)."""
    for var, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"),
                     ("TORCHVENDOR_CACHE_DIR", "torchvendor")):
        path = workdir / tag / sub
        path.mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(path)


def _compile(model: Any, backend: str) -> Callable[..., Any]:
    import torch

    if backend in BASELINES:
        kwargs = BASELINES[backend]
        return model if kwargs is None else torch.compile(model, **kwargs)
    name, _, opts = backend.partition(":")  # torchvendor_cuda:aot_partition=default+cuda_graphs=False
    options = {k: _literal(v) for k, v in (kv.split("=", 1) for kv in opts.split("+") if kv)}
    return torch.compile(model, backend=name, options=options or None)


def _literal(text: str) -> Any:
    return {"True": True, "False": False, "None": None}.get(text, int(text) if text.isdigit() else text)


def _measure(case: _Case, base: Any, backend: str) -> dict[str, Any]:
    """One backend on one case (module docstring), with a sample of its first two results."""
    import torch

    from torchvendor.ir.compat import dynamo_reset

    a, dev = case.args, case.device
    model = copy.deepcopy(base).to(dev)
    step = case.stepper(model, _compile(model, backend))
    res: dict[str, Any] = {"compile_s": {}}
    _sync(dev)
    t0 = time.perf_counter()
    first = step()
    _sync(dev)
    res["compile_s"]["cold"] = time.perf_counter() - t0
    res["first"] = _fingerprint(first)
    second = step()  # training: the loss after one AdamW step, which the gradients decided
    res["second"] = _fingerprint(second)
    del first, second
    timer = _Timer(dev)
    timer(step, a.warmup)
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = timer(step, a.iters)
    res["ms"] = statistics.median(times)
    res["ms_min"], res["ms_max"] = min(times), max(times)
    if dev == "cuda":
        res["peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
    if a.profile_calls:
        res["profile"] = _profile(step, dev, a.profile_calls)
    if backend != "eager" and not a.no_warm:
        del step
        dynamo_reset()
        step = case.stepper(model, _compile(model, backend))
        t0 = time.perf_counter()
        step()
        _sync(dev)
        res["compile_s"]["warm"] = time.perf_counter() - t0
    return res


def _coverage_from_reports(backend: str, before: set[int]) -> dict[str, Any] | None:
    try:
        from torchvendor.sdk import reports
        from torchvendor.sdk.conformance.models.check import coverage
    except ImportError:
        return None
    mine = [r for r in reports() if id(r) not in before and r.backend == backend.split(":")[0]]
    return coverage(mine) if mine else None


def run_model(name: str, args: argparse.Namespace, emit: Callable[[dict[str, Any]], None]) -> None:
    """Every part × dtype × backend of one model, each result handed to ``emit`` when done."""
    import gc

    import torch

    import torchvendor.reference_backends  # noqa: F401 - registers the reference backends
    from torchvendor.ir.compat import dynamo_reset
    from torchvendor.sdk import reports

    spec = SPECS[name]
    base = spec.build(args.scale)
    workdir = Path(args.workdir)
    for part in args.parts.split(","):
        for dtype in args.dtypes.split(","):
            g = torch.Generator().manual_seed(1)
            inputs = {k: v.to(args.device) for k, v in spec.inputs(base.config, part, args.scale, g).items()}
            case = _Case(spec, part, dtype, args.device, inputs, args)
            ref: dict[str, Any] = {}
            for backend in args.backends.split(","):
                _fresh_caches(workdir, f"{name}-{part}-{dtype}-{backend.replace(':', '_')}")
                before = {id(r) for r in reports()}
                emit({"start": [part, dtype, backend]})
                try:
                    res = _measure(case, base, backend)
                except Exception as e:  # noqa: BLE001 - a failing backend is data
                    res = {"raised": f"{type(e).__name__}: {e}"[:1500]}
                samples = {k: res.pop(k) for k in ("first", "second") if k in res}
                if samples and not ref:  # eager when it runs first, else the first backend that ran
                    ref.update(samples, name=backend)
                res["vs"] = ref.get("name")
                for k, v in samples.items():
                    res[f"rel_{k}"] = _rel(v, ref.get(k))
                cov = _coverage_from_reports(backend, before)
                if cov:
                    res["coverage"] = {k: cov[k] for k in ("coverage", "compute_ops", "vendor_ops") if k in cov}
                    res["coverage"]["fallback_reasons"] = cov.get("fallback_reasons", [])[:3]
                emit({"result": {"part": part, "dtype": dtype, "backend": backend, **res}})
                dynamo_reset()
                gc.collect()
                if args.device == "cuda":
                    torch.cuda.empty_cache()


def _child(args: argparse.Namespace) -> None:
    """Run one model, appending its events as JSON lines to ``args.events``."""
    import torch

    if args.tf32:
        torch.set_float32_matmul_precision("high")  # cuDNN's convolutions use TF32 by torch's default
    with open(args.events, "a") as f:
        def emit(event: dict[str, Any]) -> None:
            f.write(json.dumps(event, default=str) + "\n")
            f.flush()
        run_model(args.child, args, emit)
        f.write(json.dumps({"done": True}) + "\n")


# ---- the driver: a process per model ------------------------------------------------------------


def _assemble(name: str, events: list[dict[str, Any]], died: str | None) -> list[dict[str, Any]]:
    """Rows (one per part and dtype) from one model's events; a process that died marks the
    backend it was in."""
    spec = SPECS[name]
    rows: dict[tuple[str, str], dict[str, Any]] = {}

    def row(part: str, dtype: str) -> dict[str, Any]:
        return rows.setdefault((part, dtype), {"model": name, "what": spec.what, "suite": spec.suite,
                                               "params": spec.params, "part": part, "dtype": dtype, "backends": {}})
    current = None
    for e in events:
        if "start" in e:
            current = e["start"]
            row(current[0], current[1])
        elif "result" in e:
            r = dict(e["result"])
            row(r.pop("part"), r.pop("dtype"))["backends"][r.pop("backend")] = r
            current = None
    if died and current:
        row(current[0], current[1])["backends"][current[2]] = {"raised": f"the process died: {died}"[:1500]}
    if died and not rows:  # before its first backend (building the model, say)
        return [{"model": name, "what": spec.what, "not_run": f"the process died: {died}"[:1500], "backends": {}}]
    return list(rows.values())


def _child_command(unit: tuple[str, str, str], args: argparse.Namespace, events: Path, backends: list[str]) -> list[str]:
    name, part, dtype = unit
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--events", str(events),
           "--backends", ",".join(backends), "--device", args.device, "--parts", part, "--dtypes", dtype,
           "--scale", args.scale, "--iters", str(args.iters), "--warmup", str(args.warmup),
           "--profile-calls", str(args.profile_calls), "--workdir", args.workdir]
    return cmd + (["--no-warm"] if args.no_warm else []) + (["--tf32"] if args.tf32 else [])


@dataclass
class _Running:
    unit: tuple[str, str, str]
    proc: subprocess.Popen
    events: Path
    stderr: Path
    started: float


def _launch(unit: tuple[str, str, str], slot: int, args: argparse.Namespace, backends: list[str]) -> _Running:
    """One model, part and dtype in a child process (on GPU ``slot`` when ``--gpus`` > 1)."""
    stem = Path(args.workdir) / "-".join(unit)
    events, stderr = stem.with_suffix(".events.jsonl"), stem.with_suffix(".stderr.txt")
    events.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if args.gpus > 1:
        env["CUDA_VISIBLE_DEVICES"] = str(slot)
    with open(stderr, "w") as err:
        proc = subprocess.Popen(_child_command(unit, args, events, backends), stdout=subprocess.DEVNULL, stderr=err,
                                cwd=ROOT, env=env)
    return _Running(unit, proc, events, stderr, time.time())


def _collect(r: _Running, stopped: str | None) -> list[dict[str, Any]]:
    lines = r.events.read_text().splitlines() if r.events.exists() else []
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            continue  # cut short
    died = stopped
    if died is None and r.proc.returncode != 0:
        died = f"exit {r.proc.returncode}: {r.stderr.read_text()[-1200:] if r.stderr.exists() else ''}"
    if died is None and not any(e.get("done") for e in parsed):
        died = "no end event"
    return _assemble(r.unit[0], parsed, died)


def _run_record(args: argparse.Namespace, vendors: list[str], backends: list[str], started: float,
                rows: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    try:
        import transformers
        tv = transformers.__version__
    except ImportError:
        tv = "not installed"
    gpu = f", {torch.cuda.get_device_name()}" if args.device == "cuda" and torch.cuda.is_available() else ""
    return {"size": "real", "scale": args.scale, "device": args.device, "vendors": vendors, "backends": backends,
            "machine": f"{platform.node()} {os.cpu_count()} cores{gpu}", "torch": torch.__version__,
            "transformers": tv, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "settings": {"iters": args.iters, "warmup": args.warmup, "profile_calls": args.profile_calls,
                         "tf32": bool(args.tf32), "optimizer": "AdamW (fused on CUDA, foreach elsewhere), eager"},
            "seconds": time.time() - started, "note": args.note or "", "rows": rows}


def _units(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    models = args.models.split(",") if args.models else list(SPECS)
    bad = [m for m in models if m not in SPECS]
    if bad:
        raise SystemExit(f"unknown model(s) {bad}; choose from {sorted(SPECS)}")
    return [(m, p, d) for m in models for p in args.parts.split(",") for d in args.dtypes.split(",")]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Each model, part and dtype in its own child process, ``--gpus`` of them at once (one per
    GPU); the run's JSON rewritten after each."""
    vendors = [b for b in args.backend.split(",") if b]
    baselines = [] if args.baseline == "none" else args.baseline.split(",")
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise SystemExit(f"unknown baseline(s) {unknown}; choose from {sorted(BASELINES)}")
    backends = [*baselines, *vendors]  # ours last: a crash then costs no baseline its result
    pending = _units(args)
    order = {u: i for i, u in enumerate(pending)}
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bench_real_")
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    started = time.time()
    deadline = started + (args.stop or 1e9)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.name or args.device + '_' + '_'.join(vendors or ['baselines'])}.json"
    done: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    running: dict[int, _Running] = {}

    def write() -> dict[str, Any]:
        rows = [r for u in sorted(done, key=order.__getitem__) for r in done[u]]
        record = _run_record(args, vendors, backends, started, rows)
        path.write_text(json.dumps(record, indent=1, default=str))
        return record

    while pending or running:
        now = time.time()
        for slot in range(args.gpus):
            if slot not in running and pending and now < deadline:
                print(f"[real] {' '.join(pending[0])} (slot {slot}) ...", file=sys.stderr, flush=True)
                running[slot] = _launch(pending.pop(0), slot, args, backends)
        if now >= deadline:
            for u in pending:
                done[u] = [{"model": u[0], "what": SPECS[u[0]].what, "part": u[1], "dtype": u[2],
                            "not_run": "--stop reached", "backends": {}}]
            pending = []
        for slot, r in list(running.items()):
            stopped = None
            if r.proc.poll() is None and (now >= deadline or now - r.started > args.timeout):
                r.proc.kill()
                stopped = f"stopped after {now - r.started:.0f} s (--stop/--timeout)"
            if r.proc.poll() is not None or stopped:
                r.proc.wait()
                done[r.unit] = _collect(r, stopped)
                del running[slot]
                write()
        time.sleep(0.2)
    record = write()
    print(f"[real] wrote {path}", file=sys.stderr)
    return record


# ---- the Markdown section -----------------------------------------------------------------------


def _f(v: Any, spec: str = ".2f") -> str:
    return "—" if v is None else f"{v:{spec}}"


def _cells(res: dict[str, Any]) -> dict[str, Any]:
    prof = res.get("profile") or {}
    return {"ms": res.get("ms"), "peak": res.get("peak_gb"), "cold": res.get("compile_s", {}).get("cold"),
            "warm": res.get("compile_s", {}).get("warm"), "mm": prof.get("extern_mm"), "busy": prof.get("gpu_busy")}


def table(run: dict[str, Any]) -> list[str]:
    """The Markdown table of one real-size run: a row per model, part and dtype.

    >>> r = {"vendors": ["v"], "backends": ["eager", "v"], "rows": [{"model": "m", "part": "training", "dtype": "bf16",
    ...      "backends": {"eager": {"ms": 4.0}, "v": {"ms": 2.0, "compile_s": {"cold": 3.0}}}}]}
    >>> table(r)[2]
    '| m | training | bf16 | 4.00 / 2.00 | 2.00× | — / — | 3.0 | — | — / — | — |'
    """
    vendors, backends = run["vendors"], run["backends"]
    others = [b for b in backends if b not in vendors]
    compiled = [b for b in backends if b != "eager"]
    ratio_heads = [f"{v} × {b}" for v in vendors for b in others]
    head = (f"| model | part | dtype | ms ({' / '.join(backends)}) | {' | '.join(ratio_heads) or 'speed'} | peak GB "
            f"({' / '.join(backends)}) | cold s ({' / '.join(compiled)}) | warm s | extern mm share | rel. error vs eager ({' / '.join(vendors)}) |")
    lines = [head, "|---|---|---|---|" + "---:|" * max(1, len(ratio_heads)) + "---|---|---|---|---|"]
    for r in run["rows"]:
        if "not_run" in r:
            lines.append(f"| {r['model']} | not run: {r['not_run']} |")
            continue
        c = {b: _cells(r["backends"].get(b, {})) for b in backends}
        speed = [(_f(c[b]["ms"] / c[v]["ms"]) + "×") if c[b]["ms"] and c[v]["ms"] else "—" for v in vendors for b in others]
        err = [_f(r["backends"].get(v, {}).get("rel_second"), ".1e") for v in vendors]
        lines.append(f"| {r['model']} | {r['part']} | {r['dtype']} | " + " / ".join(_f(c[b]["ms"]) for b in backends)
                     + f" | {' | '.join(speed) or '—'} | " + " / ".join(_f(c[b]["peak"]) for b in backends)
                     + " | " + " / ".join(_f(c[b]["cold"], ".1f") for b in compiled) + " | "
                     + " / ".join(_f(c[b]["warm"], ".1f") for b in compiled) + " | "
                     + " / ".join(_f(c[b]["mm"], ".0%") for b in backends) + f" | {' / '.join(err)} |")
    return lines


def _problems(run: dict[str, Any]) -> list[str]:
    out = []
    for r in run["rows"]:
        for b, res in r.get("backends", {}).items():
            if res.get("raised"):
                out.append(f"- **{r['model']}** {r['part']} {r['dtype']}, {b}: {res['raised'][:300]}")
            for why in (res.get("coverage") or {}).get("fallback_reasons", []):
                out.append(f"- **{r['model']}** {r['part']} {r['dtype']}, {b}, partition fell back: {why[:300]}")
    return out


def render(runs: list[dict[str, Any]]) -> list[str]:
    """The real-size section of ``docs/bench_models.md``.

    >>> render([])[-1]
    'No run is recorded yet: `bench/bench_models.py --size real` on a GPU writes one (its `--help` lists the flags).'
    """
    out = ["## Real sizes (`--size real`)", "",
           "Written by `bench/bench_models.py --size real` from `docs/bench_models/real/*.json`: published sizes "
           "built from `transformers` configs with random weights (`bench/bench_models_real.py`); a process per "
           "model, each backend on a fresh copy of the model with fresh disk caches. ms: median of CUDA-event times "
           "of one call (inference under `no_grad`; training: zero_grad, forward, backward, AdamW); bf16 = "
           "`torch.autocast(bfloat16)`. Peak: `max_memory_allocated` over the timed calls (model, gradients and "
           "AdamW state included). Cold: the first call with empty disk caches (Inductor's later modes keep the "
           "kernels it compiled earlier in the process in memory); warm: the first call after a Dynamo reset. "
           "Extern mm share: GPU time in library matmul/convolution kernels over all GPU time (torch.profiler). "
           "Rel. error: the second call's loss (after one AdamW step) or output against eager at the same dtype.", "",
           "Models: " + "; ".join(f"`{s.name}` ({s.what}, {s.params / 1e6:.1f}M parameters)" for s in SPECS.values())
           + ". Dropout off, no KV cache returned; training computes the model's own loss from `labels`.", ""]
    if not runs:
        return out + ["No run is recorded yet: `bench/bench_models.py --size real` on a GPU writes one (its `--help` "
                      "lists the flags)."]
    for run in runs:
        out += [f"### {' and '.join(run['vendors']) or 'baselines'} on `{run['device']}` ({run['machine']}), "
                f"scale {run['scale']}", "",
                f"torch {run['torch']}, transformers {run['transformers']}, {run['when']}, {run['seconds']:.0f} s; "
                f"{run['settings']['iters']} timed calls after {run['settings']['warmup']} warm-up; TF32 "
                f"{'on' if run['settings']['tf32'] else 'off'}." + (f" Note: {run['note']}" if run.get("note") else ""), ""]
        out += table(run) + [""]
        problems = _problems(run)
        out += ["What did not run right:", ""] + (problems or ["- nothing"]) + [""]
    return out


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One run from several (commands split by model, part or dtype on one machine): rows in
    order, the union of backends in order of appearance, the seconds summed; where two runs hold
    the same model, part and dtype, the later one's backends extend and override the earlier's.

    >>> a = {"vendors": ["v"], "backends": ["eager", "v"], "seconds": 2.0, "note": "",
    ...      "rows": [{"model": "m", "part": "inference", "dtype": "bf16", "backends": {"v": {"ms": 1.0}}}]}
    >>> b = {**a, "backends": ["inductor", "v"], "rows": [{**a["rows"][0], "backends": {"inductor": {"ms": 2.0}}}]}
    >>> m = merge([a, b]); m["backends"], sorted(m["rows"][0]["backends"]), m["seconds"]
    (['eager', 'inductor', 'v'], ['inductor', 'v'], 4.0)
    """
    def union(key: str) -> list[str]:
        return list(dict.fromkeys(b for r in runs for b in r[key]))
    vendors = union("vendors")
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for run in runs:
        for r in run["rows"]:
            key = (r["model"], r.get("part", ""), r.get("dtype", ""))
            if key in rows and "not_run" not in r:
                rows[key] = {**rows[key], **r, "backends": {**rows[key].get("backends", {}), **r["backends"]}}
            elif key not in rows:
                rows[key] = r
    backends = [b for b in union("backends") if b not in vendors] + vendors
    notes = "; ".join(dict.fromkeys(r["note"] for r in runs if r.get("note")))
    return {**runs[0], "vendors": vendors, "backends": backends, "rows": list(rows.values()), "note": notes,
            "seconds": sum(r["seconds"] for r in runs)}


def load_runs(folder: Path = RUNS) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], prog="bench_models.py --size real")
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", default="torchvendor_cpu",
                   help="torchvendor backend(s), comma list; NAME:key=value+key=value sets options "
                        "(torchvendor_cuda:aot_partition=default+cuda_graphs=False); '' for baselines only")
    p.add_argument("--baseline", default="eager,inductor",
                   help=f"comma list of {', '.join(BASELINES)}, or 'none'")
    p.add_argument("--models", help=f"comma list of {', '.join(SPECS)} (default: all)")
    p.add_argument("--parts", default="inference,training")
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--scale", default="real", choices=("real", "tiny"), help="tiny: the plumbing at toy sizes")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--profile-calls", type=int, default=3, help="calls profiled for the kernel shares (0: none)")
    p.add_argument("--no-warm", action="store_true", help="skip the warm compile")
    p.add_argument("--tf32", action="store_true", help="TF32 matmuls for float32 (set_float32_matmul_precision('high'); off: torch's default, "
                   "under which convolutions already use TF32)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per model, part and dtype")
    p.add_argument("--gpus", type=int, default=1, help="children at once, each on its own GPU (CUDA_VISIBLE_DEVICES)")
    p.add_argument("--stop", type=float, help="start no model and end the running one after this many seconds")
    p.add_argument("--workdir", help="folder of the children's events and caches (default: a fresh temp folder)")
    p.add_argument("--name", help="the run JSON's stem")
    p.add_argument("--out", default=str(RUNS), help="folder of the run JSON")
    p.add_argument("--note", help="a sentence about the run's conditions")
    p.add_argument("--merge", nargs="+", metavar="JSON", help="join runs into --name in --out, then render the page")
    p.add_argument("--render", action="store_true", help="only rewrite docs/bench_models.md")
    p.add_argument("--size", default="real", help=argparse.SUPPRESS)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--events", help=argparse.SUPPRESS)
    p.add_argument("--backends", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    """``bench_models.py --size real`` (module docstring); returns the exit status."""
    args = parser().parse_args(argv)
    if args.merge:
        merged = merge([json.loads(Path(f).read_text()) for f in args.merge])
        merged["note"] = args.note or merged["note"]
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"{args.name or 'merged'}.json").write_text(json.dumps(merged, indent=1, default=str))
        args.render = Path(args.out).resolve() == RUNS.resolve()
        if not args.render:
            return 0
    if args.render:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_models import _write_markdown

        print(_write_markdown(), file=sys.stderr)
        return 0
    if args.child:
        _child(args)
        return 0
    run(args)
    if Path(args.out).resolve() == RUNS.resolve():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_models import _write_markdown

        print(_write_markdown(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
