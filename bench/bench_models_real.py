"""The real-size tier of the model benchmark (``bench/bench_models.py --size real``): eight of the
suite's architectures at their published sizes, built from ``transformers`` configs written here
(random weights, nothing downloaded), at batch and sequence sizes users run; inference and a full
training step (forward, backward, AdamW), float32 and bfloat16 autocast; a torchvendor backend
beside eager and Inductor's modes in the same process.

    python bench/bench_models.py --size real --device cuda --backend torchvendor_cuda \\
        --models gpt2_124m --parts training --dtypes bf16 --baseline eager,inductor,inductor_cudagraphs
    .venv/bin/python bench/bench_models.py --size real --device cpu --backend torchvendor_cpu --scale tiny
    .venv/bin/python bench/bench_models.py --size real --smoke --dtypes bf16   # every model, tiny, in-process
    .venv/bin/python bench/bench_models.py --size real --merge run.json --beside "what else ran"  # JSON in, page out

A process per model, part and dtype (a *unit*: a crash or a poisoned CUDA context costs one),
cheapest first by :func:`estimate_s`, ``--per-gpu`` of them on each of ``--gpus`` GPUs (they
compile side by side and take turns for the timed calls: :func:`gpu_lock`); the run's JSON is
rewritten whenever a child reports a result, and ``--stop`` starts nothing that cannot end in
time and ends what still runs, so a run cut short keeps what it measured. In a unit, each
backend in turn gets a fresh copy of the model, fresh compile caches (cold), a first
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
import contextlib
import copy
import json
import math
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


#: Inductor's cold compile of one model (inference, training), in seconds on an H200 host: the
#: driver's cost estimate (:func:`estimate_s`), used only to order the work and to start nothing
#: that cannot end before ``--stop``. GPT-2 was measured (12 / 30-39 s); the rest are guesses from
#: the graphs' sizes (layers, an encoder-decoder's two stacks, the MoE's expert loop).
INDUCTOR_COLD_S: dict[str, tuple[float, float]] = {
    "llama_h2048_l4": (8.0, 20.0), "gpt2_124m": (12.0, 36.0), "bert_base": (12.0, 30.0), "vit_b16": (12.0, 30.0),
    "whisper_base": (16.0, 42.0), "t5_small": (18.0, 45.0), "resnet50": (20.0, 55.0), "mixtral_h1024": (25.0, 70.0),
}
#: a backend's cold compile as a multiple of Inductor's (ours: 1.4x on GPT-2's inference, 1.8x on
#: its training; max-autotune benchmarks every matmul's templates)
_COMPILE_FACTOR = {"eager": 0.05, "inductor": 1.0, "inductor_cudagraphs": 1.1, "inductor_max_autotune": 4.0,
                   "inductor_max_autotune_cudagraphs": 4.2}
_VENDOR_FACTOR = 1.8
_START_S = 25.0  # a child's imports, a fresh model per backend, warm-up and timed calls (GPT-2 training: 27 s)


def estimate_s(unit: tuple[str, str, str], backends: list[str], warm: bool | str = True) -> float:
    """The driver's guess of one unit's seconds (model, part, dtype) on a GPU host: every
    backend's cold compile (:data:`INDUCTOR_COLD_S` times its factor), a third more for a warm
    compile (``warm``: whether, or the ``--warm`` choice), plus a fixed start.

    >>> round(estimate_s(("gpt2_124m", "inference", "bf16"), ["eager", "inductor", "torchvendor_cuda"], warm=False), 1)
    59.2
    """
    base = INDUCTOR_COLD_S.get(unit[0], (20.0, 50.0))[unit[1] == "training"]
    factors = [_COMPILE_FACTOR.get(b, _VENDOR_FACTOR) for b in backends]
    compile_s = base * sum(factors)
    if isinstance(warm, str):
        warm = warm in ("all", unit[1])
    return _START_S + compile_s * (1.3 if warm else 1.0)


def order_units(units: list[tuple[str, str, str]], backends: list[str], warm: bool | str = True
                ) -> list[tuple[str, str, str]]:
    """Cheapest first (:func:`estimate_s`), so a run cut short has measured the most units; ties
    keep the given order.

    >>> order_units([("resnet50", "inference", "bf16"), ("llama_h2048_l4", "training", "bf16"),
    ...              ("llama_h2048_l4", "inference", "bf16")], ["eager", "inductor"])  # doctest: +NORMALIZE_WHITESPACE
    [('llama_h2048_l4', 'inference', 'bf16'), ('resnet50', 'inference', 'bf16'),
     ('llama_h2048_l4', 'training', 'bf16')]
    """
    return sorted(units, key=lambda u: estimate_s(u, backends, warm))


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


@contextlib.contextmanager
def gpu_lock() -> Iterator[float]:
    """Hold the GPU alone while timing: children that share a GPU (``--per-gpu`` > 1) compile
    side by side but take ``$TORCHVENDOR_BENCH_LOCK`` (a file lock) around their warm-up, timed
    and profiled calls. Yields the seconds spent waiting; without the variable, no lock.

    >>> with gpu_lock() as waited:
    ...     waited
    0.0
    """
    path = os.environ.get("TORCHVENDOR_BENCH_LOCK")
    if not path:
        yield 0.0
        return
    import fcntl

    t0 = time.perf_counter()
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield time.perf_counter() - t0
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _warm_choice(args: argparse.Namespace) -> str:
    return "none" if getattr(args, "no_warm", False) else getattr(args, "warm", "all")


def warm_part(args: argparse.Namespace, part: str) -> bool:
    """Whether ``part`` gets a warm compile (``--warm all|none|inference|training``; ``--no-warm``: none).

    >>> warm_part(argparse.Namespace(warm="inference", no_warm=False), "training")
    False
    """
    return _warm_choice(args) in ("all", part)


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
    with gpu_lock() as waited:
        res["lock_wait_s"] = waited
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
    if backend != "eager" and warm_part(a, case.part):
        del step
        dynamo_reset()
        step = case.stepper(model, _compile(model, backend))
        t0 = time.perf_counter()
        step()
        _sync(dev)
        res["compile_s"]["warm"] = time.perf_counter() - t0
    return res


def graph_stats() -> dict[str, int]:
    """How the reference CUDA backend's partitions fared with CUDA graphs so far in this process
    (``captured``: layouts replayed from a graph; see its ``graphs.stats``); empty without it.

    >>> isinstance(graph_stats(), dict)
    True
    """
    try:
        from torchvendor.reference_backends.cuda.graphs import stats
    except Exception:  # noqa: BLE001 - a build without the CUDA backend
        return {}
    return dict(stats)


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
    try:  # random init on the GPU is fast; the model is kept on the host so no backend's peak counts it
        base = spec.build(args.scale, device=args.device).to("cpu")
    except Exception:  # noqa: BLE001 - a model that cannot be built there is built on the host
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
                graphs = graph_stats()
                try:
                    res = _measure(case, base, backend)
                except Exception as e:  # noqa: BLE001 - a failing backend is data
                    res = {"raised": f"{type(e).__name__}: {e}"[:1500]}
                graphs = {k: v - graphs.get(k, 0) for k, v in graph_stats().items() if v - graphs.get(k, 0)}
                if graphs:
                    res["cuda_graphs"] = graphs
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


# ---- the smoke test: every model, tiny, on the CPU ---------------------------------------------

#: the largest relative error against eager (the second call's loss or output) a smoke run accepts
SMOKE_TOL = {"fp32": 1e-3, "bf16": 5e-2}


def smoke(models: list[str] | None = None, parts: tuple[str, ...] = PARTS, dtypes: tuple[str, ...] = DTYPES,
          backend: str = "torchvendor_cpu", device: str = "cpu", say: Callable[[str], None] = print) -> list[str]:
    """Each model at ``scale="tiny"`` through eager and ``backend`` in this process (one timed
    call, no profile, no warm compile): the problems found, empty where every part and dtype ran
    and matched eager within :data:`SMOKE_TOL`. Partitions that fell back are reported, not failed.

    >>> smoke(["resnet50"], parts=("inference",), dtypes=("fp32",), backend="eager", say=lambda line: None)
    []
    """
    args = argparse.Namespace(device=device, parts=",".join(parts), dtypes=",".join(dtypes), scale="tiny", iters=1,
                              warmup=0, profile_calls=0, warm="none", no_warm=True, backends=f"eager,{backend}",
                              workdir=tempfile.mkdtemp(prefix="bench_real_smoke_"))
    problems = []
    for name in models or list(SPECS):
        events: list[dict[str, Any]] = []
        t0 = time.perf_counter()
        try:
            run_model(name, args, events.append)
        except Exception as e:  # noqa: BLE001 - building the model or its inputs failed
            problems.append(f"{name}: {type(e).__name__}: {e}"[:500])
        for row in _assemble(name, events, None):
            res = row["backends"].get(backend, {})
            where = f"{name} {row['part']} {row['dtype']}"
            raised = [f"{b}: {r['raised'][:400]}" for b, r in row["backends"].items() if r.get("raised")]
            err, cov = res.get("rel_second"), (res.get("coverage") or {})
            if raised:
                problems += [f"{where}: {x}" for x in raised]
            elif err is None or err > SMOKE_TOL[row["dtype"]]:
                problems.append(f"{where}: {backend} differs from eager by {err} (tolerance {SMOKE_TOL[row['dtype']]})")
            say(f"{where}: {'FAIL' if raised or err is None or err > SMOKE_TOL[row['dtype']] else 'ok'}, rel. error "
                f"{_f(err, '.1e')}, coverage {_f(cov.get('coverage'), '.0%')}"
                + "".join(f"; fell back: {why[:200]}" for why in cov.get("fallback_reasons", [])))
        say(f"{name}: {time.perf_counter() - t0:.0f} s")
    return problems


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
    return cmd + ["--warm", _warm_choice(args)] + (["--tf32"] if args.tf32 else [])


@dataclass
class _Running:
    unit: tuple[str, str, str]
    proc: subprocess.Popen
    events: Path
    stderr: Path
    started: float
    gpu: int
    size: int = -1  #: the events file's size when the run's JSON was last written


def gpu_count(args: argparse.Namespace) -> int:
    """``--gpus``: a number, or ``auto`` (every GPU torch sees on ``cuda``, else 1).

    >>> gpu_count(argparse.Namespace(gpus="auto", device="cpu")), gpu_count(argparse.Namespace(gpus="2", device="cuda"))
    (1, 2)
    """
    if str(args.gpus) != "auto":
        return max(1, int(args.gpus))
    if args.device != "cuda":
        return 1
    import torch

    return max(1, torch.cuda.device_count())


def compile_threads(args: argparse.Namespace) -> int:
    """Inductor's compile workers per child when several run at once: the cores shared out.

    >>> compile_threads(argparse.Namespace(ngpus=2, per_gpu=2)) == max(1, (os.cpu_count() or 1) // 4)
    True
    """
    return max(1, (os.cpu_count() or 1) // (args.ngpus * args.per_gpu))


def _launch(unit: tuple[str, str, str], gpu: int, args: argparse.Namespace, backends: list[str]) -> _Running:
    """One model, part and dtype in a child process of its own session (so that ``--stop`` ends
    its compile workers too), on GPU ``gpu`` when there are several, holding that GPU's timing
    lock when children share it (:func:`gpu_lock`)."""
    stem = Path(args.workdir) / "-".join(unit)
    events, stderr = stem.with_suffix(".events.jsonl"), stem.with_suffix(".stderr.txt")
    events.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if args.ngpus > 1:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    if args.per_gpu > 1:
        env["TORCHVENDOR_BENCH_LOCK"] = str(Path(args.workdir) / f"gpu{gpu}.lock")
    if args.ngpus * args.per_gpu > 1:  # children at once share the cores: Inductor's compile pool too
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(compile_threads(args)))
    with open(stderr, "w") as err:
        proc = subprocess.Popen(_child_command(unit, args, events, backends), stdout=subprocess.DEVNULL, stderr=err,
                                cwd=ROOT, env=env, start_new_session=True)
    return _Running(unit, proc, events, stderr, time.time(), gpu)


def _kill(r: _Running) -> None:
    import signal

    try:
        os.killpg(r.proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        r.proc.kill()
    r.proc.wait()


def _events(r: _Running) -> list[dict[str, Any]]:
    parsed = []
    for line in (r.events.read_text().splitlines() if r.events.exists() else []):
        try:
            parsed.append(json.loads(line))
        except ValueError:
            continue  # cut short
    return parsed


def _collect(r: _Running, stopped: str | None, started: float) -> list[dict[str, Any]]:
    """The unit's rows from its events; a child that died (or was stopped, or is still running:
    ``stopped`` = ``"running"``) marks the backend it was in. Each row says where and when it ran."""
    parsed = _events(r)
    died = stopped
    if died is None and r.proc.returncode != 0:
        died = f"exit {r.proc.returncode}: {r.stderr.read_text()[-1200:] if r.stderr.exists() else ''}"
    if died is None and not any(e.get("done") for e in parsed):
        died = "no end event"
    if died == "running":
        rows = _assemble(r.unit[0], parsed, None)
        for row in rows:
            row["running"] = True
    else:
        rows = _assemble(r.unit[0], parsed, died)
    for row in rows:
        row.setdefault("part", r.unit[1])
        row.setdefault("dtype", r.unit[2])
        row.update(gpu=r.gpu, start_s=round(r.started - started, 1), seconds=round(time.time() - r.started, 1))
    return rows


def _tree() -> str | None:
    """The commit measured (``git describe``, ``-dirty`` for local changes), where git knows it."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _run_header(args: argparse.Namespace, vendors: list[str], backends: list[str], started: float) -> dict[str, Any]:
    import torch

    try:
        import transformers
        tv = transformers.__version__
    except ImportError:
        tv = "not installed"
    gpu = f", {args.ngpus} × {torch.cuda.get_device_name()}" if args.device == "cuda" and torch.cuda.is_available() else ""
    return {"size": "real", "scale": args.scale, "device": args.device, "vendors": vendors, "backends": backends,
            "machine": f"{platform.node()} {os.cpu_count()} cores{gpu}", "torch": torch.__version__,
            "transformers": tv, "tree": _tree(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "settings": {"iters": args.iters, "warmup": args.warmup, "profile_calls": args.profile_calls,
                         "tf32": bool(args.tf32), "warm": _warm_choice(args), "gpus": args.ngpus,
                         "per_gpu": args.per_gpu, "stop": args.stop, "timeout": args.timeout,
                         "inductor_compile_threads": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")
                         or (compile_threads(args) if args.ngpus * args.per_gpu > 1 else "default"),
                         "optimizer": "AdamW (fused on CUDA, foreach elsewhere), eager"},
            "note": args.note or "", "beside": getattr(args, "beside", None) or ""}


def _units(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """``--units`` (model:part:dtype, comma list) or ``--models`` × ``--parts`` × ``--dtypes``."""
    if getattr(args, "units", None):
        units = [tuple(u.split(":")) for u in args.units.split(",") if u]
        bad = [u for u in units if len(u) != 3 or u[1] not in PARTS or u[2] not in DTYPES]
        models = [u[0] for u in units]
    else:
        models = args.models.split(",") if args.models else list(SPECS)
        units = [(m, p, d) for m in models for p in args.parts.split(",") for d in args.dtypes.split(",")]
        bad = []
    bad += [m for m in models if m not in SPECS]
    if bad:
        raise SystemExit(f"unknown model(s) or units {bad}; models: {sorted(SPECS)}, parts {PARTS}, dtypes {DTYPES}")
    return units  # type: ignore[return-value]


def _say(args: argparse.Namespace, text: str) -> None:
    """A progress line on stderr and in ``--log``."""
    line = f"[real {time.strftime('%H:%M:%S', time.gmtime())}] {text}"
    print(line, file=sys.stderr, flush=True)
    if args.log:
        with open(args.log, "a") as f:
            f.write(line + "\n")


def _log_child(args: argparse.Namespace, r: _Running, rows: list[dict[str, Any]]) -> None:
    """The end of a child's stderr in ``--log``: more of it where something went wrong."""
    bad = any("not_run" in row or any("raised" in b for b in row["backends"].values()) for row in rows)
    text = r.stderr.read_text(errors="replace") if r.stderr.exists() else ""
    tail = text[-6000:] if bad else text[-600:]
    _say(args, f"{' '.join(r.unit)} on gpu {r.gpu}: {time.time() - r.started:.0f} s, "
               f"{'something failed' if bad else 'ok'}" + (f"; its stderr ends:\n{tail}" if tail.strip() else ""))


def skip_measured(units: list[tuple[str, str, str]], backends: list[str], files: list[str]
                  ) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """``units`` less those that a run in ``files`` measured with every one of ``backends``
    (a missing file skips nothing: a second command on a fresh machine runs them all), and
    those skipped.

    >>> skip_measured([("m", "inference", "bf16"), ("m", "training", "bf16")], ["v"], ["/nonexistent.json"])[1]
    []
    """
    measured = set()
    for f in files:
        if not Path(f).exists():
            continue
        for r in json.loads(Path(f).read_text()).get("rows", []):
            if all(r.get("backends", {}).get(b, {}).get("ms") for b in backends):
                measured.add((r["model"], r.get("part"), r.get("dtype")))
    return [u for u in units if u not in measured], [u for u in units if u in measured]


def _backends(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    vendors = [b for b in args.backend.split(",") if b]
    baselines = [] if args.baseline == "none" else args.baseline.split(",")
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise SystemExit(f"unknown baseline(s) {unknown}; choose from {sorted(BASELINES)}")
    return vendors, [*baselines, *vendors]  # ours last: a crash then costs no baseline its result


@dataclass
class _Driver:
    """The state of one run: units pending, running (per slot) and done; :meth:`write` saves it."""
    args: argparse.Namespace
    backends: list[str]
    header: dict[str, Any]
    pending: list[tuple[str, str, str]]
    path: Path
    started: float = field(default_factory=time.time)
    done: dict[tuple[str, str, str], list[dict[str, Any]]] = field(default_factory=dict)
    running: dict[int, _Running] = field(default_factory=dict)

    def write(self) -> dict[str, Any]:
        order = {u: i for i, u in enumerate(self.header["units"])}
        rows = [r for u in sorted(self.done, key=order.__getitem__) for r in self.done[u]]
        rows += [r for run in self.running.values() for r in _collect(run, "running", self.started)]
        record = {**self.header, "seconds": time.time() - self.started, "rows": rows}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(record, indent=1, default=str))
        os.replace(tmp, self.path)  # a run killed while writing keeps the previous JSON whole
        for run in self.running.values():
            run.size = run.events.stat().st_size if run.events.exists() else 0
        return record

    def finish(self, r: _Running, slot: int, stopped: str | None) -> None:
        if stopped:
            _kill(r)
        self.done[r.unit] = _collect(r, stopped, self.started)
        _log_child(self.args, r, self.done[r.unit])
        del self.running[slot]

    def not_run(self, unit: tuple[str, str, str], why: str) -> None:
        self.done[unit] = [{"model": unit[0], "what": SPECS[unit[0]].what, "part": unit[1], "dtype": unit[2],
                            "not_run": why, "backends": {}}]
        _say(self.args, f"{' '.join(unit)}: not run ({why})")

    def estimate(self, unit: tuple[str, str, str]) -> float:
        return estimate_s(unit, self.backends, _warm_choice(self.args))

    def tick(self) -> bool:
        """Start, stop and collect children once; whether anything changed that the JSON lacks."""
        a, now = self.args, time.time()
        left = (self.started + a.stop - now) if a.stop else float("inf")
        changed = False
        for unit in [u for u in self.pending if self.estimate(u) > left * a.fit]:
            self.pending.remove(unit)
            self.not_run(unit, "--stop reached" if left <= 0 else f"its estimate ({self.estimate(unit):.0f} s) "
                         f"is over the {left:.0f} s left before --stop")
            changed = True
        for slot in range(a.ngpus * a.per_gpu):
            if slot not in self.running and self.pending:
                unit = self.pending.pop(0)
                _say(a, f"{' '.join(unit)} on gpu {slot % a.ngpus} (slot {slot}, estimate "
                        f"{self.estimate(unit):.0f} s, {left:.0f} s left) ...")
                self.running[slot] = _launch(unit, slot % a.ngpus, a, self.backends)
        for slot, r in list(self.running.items()):
            over = left <= 0 or now - r.started > a.timeout
            if r.proc.poll() is not None or over:
                self.finish(r, slot, f"stopped after {now - r.started:.0f} s (--stop/--timeout)" if over and
                            r.proc.poll() is None else None)
                changed = True
            elif (r.events.stat().st_size if r.events.exists() else 0) != r.size:
                changed = True
        return changed


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Each model, part and dtype in its own child process, ``--per-gpu`` of them on each of
    ``--gpus`` GPUs at once, cheapest first (:func:`order_units`; ``--order given``: as listed);
    the run's JSON rewritten whenever a child reports a result, so a run killed from outside
    still leaves what it measured. ``--stop``: nothing starts that its estimate says cannot end
    in time (``--fit``), and what still runs then is ended and written."""
    import signal

    vendors, backends = _backends(args)
    args.ngpus, args.per_gpu = gpu_count(args), max(1, args.per_gpu)
    units = _units(args)
    if args.order == "cheap":
        units = order_units(units, backends, _warm_choice(args))
    units, skipped = skip_measured(units, backends, args.skip or [])
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bench_real_")
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.name or args.device + '_' + '_'.join(vendors or ['baselines'])}.json"
    started = time.time()
    header = {**_run_header(args, vendors, backends, started), "name": path.stem, "units": units,
              "skipped": skipped}
    d = _Driver(args, backends, header, list(units), path, started)

    def term(*_: Any) -> None:
        raise SystemExit(143)
    previous = signal.signal(signal.SIGTERM, term)
    try:
        d.write()
        while d.pending or d.running:
            if d.tick():
                d.write()
            time.sleep(0.2)
    finally:  # an outside SIGTERM or ^C: end the children, keep what they measured
        for slot, r in list(d.running.items()):
            d.finish(r, slot, "stopped: the driver was ended")
        for unit in d.pending:
            d.not_run(unit, "the driver was ended")
        d.pending = []
        record = d.write()
        signal.signal(signal.SIGTERM, previous)
    _say(args, f"wrote {path}")
    return record


# ---- the Markdown section -----------------------------------------------------------------------


def _f(v: Any, spec: str = ".2f") -> str:
    return "—" if v is None else f"{v:{spec}}"


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _reference(run: dict[str, Any]) -> str | None:
    """The baseline that peak memory and compile times are compared with: Inductor's default mode
    where the run has it, else its first compiled baseline."""
    compiled = [b for b in run["backends"] if b not in run["vendors"] and b != "eager"]
    return "inductor" if "inductor" in compiled else (compiled[0] if compiled else None)


def _ratios(rows: list[dict[str, Any]], vendor: str, other: str, key: Callable[[dict[str, Any]], Any],
            invert: bool = False) -> list[tuple[float, str]]:
    """(ratio, model) over the rows where both backends have a value: other / ours (a speed), or
    ours / other with ``invert`` (memory, compile time)."""
    out = []
    for r in rows:
        a, b = key(r["backends"].get(other, {})), key(r["backends"].get(vendor, {}))
        if a and b:
            out.append((b / a if invert else a / b, r["model"]))
    return out


def _stat(pairs: list[tuple[float, str]], worst: Callable[..., Any] = min) -> str:
    """``geomean (worst model's ratio model, n)`` of (ratio, model) pairs."""
    if not pairs:
        return "—"
    g, (w, model) = _geomean([p for p, _ in pairs]), worst(pairs)
    return f"{_f(g)}× (n={len(pairs)}; {'min' if worst is min else 'max'} {w:.2f}× {model})"


def summary(run: dict[str, Any]) -> list[str]:
    """The run's summary table: per vendor, part and dtype, its speed against each baseline
    (geomean of baseline ms / ours, the lowest model), its peak memory and cold and warm compile
    against :func:`_reference` (geomean of ours / theirs, the highest model), and how many of its
    models replayed CUDA graphs (compare those with the baselines' CUDA-graph modes).

    >>> r = {"vendors": ["v"], "backends": ["eager", "inductor", "v"], "rows": [{"model": "m", "part": "training",
    ...      "dtype": "bf16", "backends": {"eager": {"ms": 4.0}, "inductor": {"ms": 3.0, "peak_gb": 2.0},
    ...      "v": {"ms": 2.0, "peak_gb": 3.0}}}]}
    >>> summary(r)[2]
    '| v | training | bf16 | 1 | 2.00× (n=1; min 2.00× m) | 1.50× (n=1; min 1.50× m) | 1.50× (n=1; max 1.50× m) | — | — | 0 of 1 |'
    """
    vendors, ref = run["vendors"], _reference(run)
    others = [b for b in run["backends"] if b not in vendors]
    head = (f"| backend | part | dtype | models | " + " | ".join(f"speed × {b}" for b in others)
            + f" | peak GB ÷ {ref or '—'} | cold s ÷ {ref or '—'} | warm s ÷ {ref or '—'} | replayed CUDA graphs |")
    lines = [head, "|---|---|---|---:|" + "---|" * (len(others) + 4)]
    groups = dict.fromkeys((r["part"], r["dtype"]) for r in run["rows"] if "not_run" not in r)
    for v in vendors:
        for part, dtype in groups:
            rows = [r for r in run["rows"] if (r.get("part"), r.get("dtype")) == (part, dtype) and "not_run" not in r
                    and r["backends"].get(v, {}).get("ms")]
            if not rows:
                continue
            cells = [_stat(_ratios(rows, v, b, lambda x: x.get("ms"))) for b in others]
            for key in (lambda x: x.get("peak_gb"), lambda x: x.get("compile_s", {}).get("cold"),
                        lambda x: x.get("compile_s", {}).get("warm")):
                cells.append(_stat(_ratios(rows, v, ref, key, invert=True), max) if ref else "—")
            graphed = sum(1 for r in rows if (r["backends"][v].get("cuda_graphs") or {}).get("captured"))
            lines.append(f"| {v} | {part} | {dtype} | {len(rows)} | " + " | ".join(cells) + f" | {graphed} of {len(rows)} |")
    return lines


def _compile_key(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda x: (x.get("compile_s") or {}).get(key)


#: Issue 35's bar for the tier, target by target: (what, baseline, part or None for both, the
#: value compared, whether the ratio is ours ÷ theirs (memory, compile) rather than theirs ÷ ours
#: (speed), how the rows are summed up ("geomean", "min" or "max" over them), the limit)
BAR: list[tuple[str, str, str | None, Callable[[dict[str, Any]], Any], bool, str, float]] = [
    ("inference: speed ≥ 1.0× inductor (geomean)", "inductor", "inference", lambda x: x.get("ms"), False, "geomean", 1.0),
    ("inference: no model below 0.9× inductor", "inductor", "inference", lambda x: x.get("ms"), False, "min", 0.9),
    ("training: speed ≥ 1.0× inductor (geomean)", "inductor", "training", lambda x: x.get("ms"), False, "geomean", 1.0),
    ("training: no model below 0.9× inductor", "inductor", "training", lambda x: x.get("ms"), False, "min", 0.9),
    ("none slower than eager", "eager", None, lambda x: x.get("ms"), False, "min", 1.0),
    ("≥ 0.95× inductor_max_autotune (geomean)", "inductor_max_autotune", None, lambda x: x.get("ms"), False,
     "geomean", 0.95),
    ("peak ≤ 1.05× inductor on every model", "inductor", None, lambda x: x.get("peak_gb"), True, "max", 1.05),
    ("cold compile ≤ 1.0× inductor on every model", "inductor", None, _compile_key("cold"), True, "max", 1.0),
    ("warm compile ≤ 1.5× inductor on every model", "inductor", None, _compile_key("warm"), True, "max", 1.5),
]


def _unmeasured(run: dict[str, Any], rows: list[dict[str, Any]], what: str, base: str, part: str | None) -> str:
    """Why a target has no pair of values in this run."""
    if base not in run["backends"]:
        return f"no {base} in this run"
    if not rows:
        return f"no {part} row measured" if part else "no row measured"
    if what.startswith("warm") and (run.get("settings") or {}).get("warm") == "none":
        return "--warm none: no warm compile"
    return "no value on both sides"


def targets(run: dict[str, Any]) -> list[str]:
    """Issue 35's bar (:data:`BAR`) for each vendor of the run, target by target: **met** or
    **not met** on the rows both ran (with how many of the tier's models those are: a geomean
    over fewer than all of them is partial), or **not measured** and why.

    >>> r = {"vendors": ["v"], "backends": ["eager", "inductor", "v"], "rows": [{"model": "m", "part": "training",
    ...      "dtype": "bf16", "backends": {"eager": {"ms": 4.0}, "inductor": {"ms": 3.0}, "v": {"ms": 2.0}}}]}
    >>> targets(r)[0], targets(r)[2]  # doctest: +NORMALIZE_WHITESPACE
    ('- v, inference: speed ≥ 1.0× inductor (geomean): **not measured** (no inference row measured)',
     '- v, training: speed ≥ 1.0× inductor (geomean): **met** (1.50×; 1 of 8 models: m)')
    """
    out = []
    rows = [r for r in run["rows"] if "not_run" not in r]
    for v in run["vendors"]:
        for what, base, part, key, invert, agg, limit in BAR:
            sel = [r for r in rows if part is None or r.get("part") == part]
            pairs = _ratios(sel, v, base, key, invert)
            if not pairs:
                out.append(f"- {v}, {what}: **not measured** ({_unmeasured(run, sel, what, base, part)})")
                continue
            values = [p for p, _ in pairs]
            got = {"geomean": _geomean, "min": min, "max": max}[agg](values)
            ok = got <= limit if agg == "max" else got >= limit
            worst = (max if agg == "max" else min)(pairs)[1]
            models = list(dict.fromkeys(m for _, m in pairs))
            shown = f"{got:.2f}×" + ("" if agg == "geomean" or len(pairs) == 1 else f" {worst}")
            out.append(f"- {v}, {what}: **{'met' if ok else 'not met'}** ({shown}; {len(models)} of {len(SPECS)} "
                       f"models: {', '.join(models)})")
    return out


def where_when(run: dict[str, Any]) -> list[str]:
    """One line per unit: the GPU it ran on, when it started in the run, how long it took, and
    whether it was ended early (``--stop``/``--timeout``) or still running when the JSON was written.

    >>> where_when({"rows": [{"model": "m", "part": "training", "dtype": "bf16", "gpu": 1, "start_s": 3.0,
    ...             "seconds": 40.0, "backends": {}}]})
    ['- m training bf16: GPU 1, from +3 s, 40 s']
    """
    out = []
    for r in run["rows"]:
        if "gpu" not in r:
            continue
        stopped = [b for b, res in r["backends"].items() if "stopped" in str(res.get("raised", ""))]
        out.append(f"- {r['model']} {r.get('part', '')} {r.get('dtype', '')}: " + (f"run {r['run']}, " if r.get("run") else "")
                   + f"GPU {r['gpu']}, from +{r['start_s']:.0f} s, "
                   f"{r['seconds']:.0f} s" + (" (still running when written)" if r.get("running") else "")
                   + (f" (ended in {', '.join(stopped)})" if stopped else ""))
    return out


def _newest(runs: list[dict[str, Any]], unit: tuple[str, str, str]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The newest run (``runs`` newest first) whose first vendor has a time for ``unit``, and its row."""
    for run in runs:
        v = (run.get("vendors") or [None])[0]
        for r in run["rows"]:
            if (r["model"], r.get("part"), r.get("dtype")) == unit and r.get("backends", {}).get(v, {}).get("ms"):
                return run, r
    return None


def standing(runs: list[dict[str, Any]]) -> list[str]:
    """Where the tier stands over every run: per model and unit, the newest run that measured it
    (ours over Inductor's default mode: speed, peak; that run's start and tree), else **not
    measured**; then which models no run has measured.

    >>> run = {"vendors": ["v"], "when": "2026-11-29 00:54 UTC", "tree": "abc", "rows": [{"model": "gpt2_124m",
    ...        "part": "training", "dtype": "bf16", "backends": {"inductor": {"ms": 2.0, "peak_gb": 1.0},
    ...        "v": {"ms": 4.0, "peak_gb": 1.0}}}]}
    >>> standing([run])[2].split(" | ")[2]
    'speed 0.50×, peak 1.00× (11-29 00:54, abc)'
    """
    cols = [(p, d) for d in ("bf16", "fp32") for p in PARTS]
    lines = ["| model | " + " | ".join(f"{p} {d}" for p, d in cols) + " |", "|---|" + "---|" * len(cols)]
    measured = []
    for name in SPECS:
        cells = []
        for part, dtype in cols:
            found = _newest(runs, (name, part, dtype))
            if not found:
                cells.append("**not measured**")
                continue
            run, row = found
            ours, ind = row["backends"][run["vendors"][0]], row["backends"].get("inductor", {})
            ratio = [f"{k} {_f(a / b if a and b else None)}×" for k, a, b in
                     (("speed", ind.get("ms"), ours["ms"]), ("peak", ours.get("peak_gb"), ind.get("peak_gb")))]
            cells.append(f"{', '.join(ratio)} ({run['when'][5:16]}, {run.get('tree') or 'tree not recorded'})")
            measured.append(name)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    seen = list(dict.fromkeys(measured))
    missing = [n for n in SPECS if n not in seen]
    return lines + ["", f"Measured in some run: {len(seen)} of {len(SPECS)} models ({', '.join(seen) or 'none'}). "
                    f"**Not measured in any run: {len(missing)} of {len(SPECS)}** ({', '.join(missing) or 'none'}); "
                    "the bar is for the whole tier, so every verdict below is on the models its run measured only."]


#: The next GPU session's commands for the tier (run from the repository root after the build,
#: on one or two H200; each stops itself within its --stop): A measures bf16 cheapest first, B
#: picks up what A did not reach (--skip: A's JSON on the machine, or in the tree once merged).
NEXT_COMMANDS = [
    ("A (bf16, every model, inference and training; about 230 s)",
     "mkdir -p $OUT/realbench && python bench/bench_models.py --size real --device cuda --backend torchvendor_cuda \\\n"
     "  --baseline eager,inductor --dtypes bf16 --gpus auto --per-gpu 3 --warm none --iters 10 --warmup 3 \\\n"
     "  --stop 225 --name h200_real_bf16_a --out $OUT/realbench --log $OUT/realbench/log_a.txt"),
    ("B (what A did not reach; about 230 s)",
     "mkdir -p $OUT/realbench && python bench/bench_models.py --size real --device cuda --backend torchvendor_cuda \\\n"
     "  --baseline eager,inductor --dtypes bf16 --gpus auto --per-gpu 3 --warm none --iters 10 --warmup 3 \\\n"
     "  --stop 225 --name h200_real_bf16_b --out $OUT/realbench --log $OUT/realbench/log_b.txt \\\n"
     "  --skip $OUT/realbench/h200_real_bf16_a.json docs/bench_models/real/h200_real_bf16_a.json"),
    ("then, here: both into one run and the page (name what ran beside them)",
     ".venv/bin/python bench/bench_models.py --size real --merge /work/.device/N/realbench/h200_real_bf16_a.json \\\n"
     "  /work/.device/N/realbench/h200_real_bf16_b.json --name h200_real_bf16 --beside \"...\""),
]


def next_commands() -> list[str]:
    """The page's list of :data:`NEXT_COMMANDS`, and what comes after them."""
    out = ["The commands that measure the rest of the tier, ready for the next GPU session:", ""]
    for what, cmd in NEXT_COMMANDS:
        out += [f"{what}:", "", "```bash", cmd, "```", ""]
    return out + ["After those: the same two with `--dtypes fp32` (names `h200_real_fp32_a`/`_b`), then "
                  "`--baseline eager,inductor,inductor_max_autotune --warm all` for the max-autotune and "
                  "warm-compile targets (about twice the time per unit: `estimate_s`).", ""]


def _cells(res: dict[str, Any]) -> dict[str, Any]:
    prof = res.get("profile") or {}
    return {"ms": res.get("ms"), "peak": res.get("peak_gb"), "cold": res.get("compile_s", {}).get("cold"),
            "warm": res.get("compile_s", {}).get("warm"), "mm": prof.get("extern_mm"), "busy": prof.get("gpu_busy")}


def table(run: dict[str, Any]) -> list[str]:
    """The Markdown table of one real-size run: a row per model, part and dtype.

    >>> r = {"vendors": ["v"], "backends": ["eager", "v"], "rows": [{"model": "m", "part": "training", "dtype": "bf16",
    ...      "backends": {"eager": {"ms": 4.0}, "v": {"ms": 2.0, "compile_s": {"cold": 3.0}}}}]}
    >>> table(r)[2]
    '| m | training | bf16 | 4.00 / 2.00 | 2.00× | — / — | — | 3.0 | — | — / — | — |'
    """
    vendors, backends = run["vendors"], run["backends"]
    others = [b for b in backends if b not in vendors]
    compiled = [b for b in backends if b != "eager"]
    ratio_heads = [f"{v} × {b}" for v in vendors for b in others]
    ref = _reference(run)
    head = (f"| model | part | dtype | ms ({' / '.join(backends)}) | {' | '.join(ratio_heads) or 'speed'} | peak GB "
            f"({' / '.join(backends)}) | peak ÷ {ref or '—'} ({' / '.join(vendors)}) | cold s ({' / '.join(compiled)}) | warm s "
            f"| extern mm share | rel. error vs eager ({' / '.join(vendors)}) |")
    lines = [head, "|---|---|---|---|" + "---:|" * max(1, len(ratio_heads)) + "---|---:|---|---|---|---|"]
    for r in run["rows"]:
        if "not_run" in r:
            lines.append(f"| {r['model']} | {r.get('part', '')} | {r.get('dtype', '')} | not run: {r['not_run']} |")
            continue
        c = {b: _cells(r["backends"].get(b, {})) for b in backends}
        speed = [(_f(c[b]["ms"] / c[v]["ms"]) + "×") if c[b]["ms"] and c[v]["ms"] else "—" for v in vendors for b in others]
        err = [_f(r["backends"].get(v, {}).get("rel_second"), ".1e") for v in vendors]
        peak = [_f(c[v]["peak"] / c[ref]["peak"]) + "×" if ref and c[v]["peak"] and c[ref]["peak"] else "—" for v in vendors]
        graphed = any((r["backends"].get(v, {}).get("cuda_graphs") or {}).get("captured") for v in vendors)
        lines.append(f"| {r['model']} | {r['part']}{' (graphs)' if graphed else ''} | {r['dtype']} | "
                     + " / ".join(_f(c[b]["ms"]) for b in backends)
                     + f" | {' | '.join(speed) or '—'} | " + " / ".join(_f(c[b]["peak"]) for b in backends)
                     + f" | {' / '.join(peak)} | " + " / ".join(_f(c[b]["cold"], ".1f") for b in compiled) + " | "
                     + " / ".join(_f(c[b]["warm"], ".1f") for b in compiled) + " | "
                     + " / ".join(_f(c[b]["mm"], ".0%") for b in backends) + f" | {' / '.join(err)} |")
    return lines


def _one_line(text: str, limit: int = 300) -> str:
    """An error for a Markdown list item: its lines joined, cut at ``limit`` characters."""
    return " ".join(text.split())[:limit]


def _problems(run: dict[str, Any]) -> list[str]:
    out = []
    for r in run["rows"]:
        for b, res in r.get("backends", {}).items():
            where = f"- **{r['model']}** {r.get('part', '')} {r.get('dtype', '')}, {b}"
            if res.get("raised"):
                out.append(f"{where}: {_one_line(res['raised'])}")
            for why in (res.get("coverage") or {}).get("fallback_reasons", []):
                out.append(f"{where}, partition fell back: {_one_line(why)}")
    return out


def render(runs: list[dict[str, Any]]) -> list[str]:
    """The real-size section of ``docs/bench_models.md``.

    >>> any(x.startswith("No run is recorded yet") for x in render([])), "```bash" in render([])
    (True, True)
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
           "Each run's summary: per backend, part and dtype, the geomean of its speed against each baseline "
           "(baseline ms ÷ ours, over the models both ran; the lowest model named) and of its peak memory and cold "
           "and warm compile over Inductor's default mode (ours ÷ Inductor; the highest model named); a row marked "
           "\"(graphs)\" is one where ours replayed CUDA graphs, to be read against the baselines' CUDA-graph modes. "
           "A process per model, part and dtype (a *unit*), cheapest first by an estimate of its compile time; "
           "with several children per GPU they compile side by side and take turns (a file lock) for the warm-up, "
           "timed and profiled calls. `--smoke` runs every model at a tiny size through `torchvendor_cpu` against "
           "eager on the CPU first.", "",
           "Models: " + "; ".join(f"`{s.name}` ({s.what}, {s.params / 1e6:.1f}M parameters)" for s in SPECS.values())
           + ". Dropout off, no KV cache returned; training computes the model's own loss from `labels`.", ""]
    if not runs:
        return out + ["No run is recorded yet: `bench/bench_models.py --size real` on a GPU writes one (its `--help` "
                      "lists the flags).", ""] + next_commands()
    out += ["### Where the tier stands", "", f"{len(runs)} run(s) recorded, newest first below. Per model and unit, "
            "the newest run that measured it: ours over Inductor's default mode (speed: Inductor ms ÷ ours; peak: "
            "ours ÷ Inductor's), with that run's start and tree.", ""] + standing(runs) + [""] + next_commands()
    for run in runs:
        out += _heading(run) + summary(run) + [""]
        out += ["Issue 35's bar on this run (met / not met on the models it measured; not measured, and why):", ""]
        out += targets(run) + [""]
        out += table(run) + [""]
        where = where_when(run)
        if where:
            out += [f"Where and when ({_placement(run)}):", ""] + where + [""]
        problems = _problems(run)
        out += ["What did not run right:", ""] + (problems or ["- nothing"]) + [""]
    return out


def _heading(run: dict[str, Any]) -> list[str]:
    """A run's heading and its conditions (a key an older or foreign JSON lacks reads "?")."""
    st, get = run.get("settings") or {}, lambda k: run.get(k) or "?"
    return [f"### {get('when')}: {' and '.join(run['vendors']) or 'baselines'} on `{get('device')}` "
            f"({get('machine')}), scale {get('scale')}", "",
            f"Tree `{run.get('tree') or 'not recorded'}`; beside it on the host: {run.get('beside') or 'not recorded'}. "
            f"torch {get('torch')}, transformers {get('transformers')}, {run.get('seconds') or 0:.0f} s; "
            f"{st.get('iters', '?')} timed calls after {st.get('warmup', '?')} warm-up; TF32 "
            f"{'on' if st.get('tf32') else 'off'}; warm compile: {st.get('warm', 'all')}."
            + (f" Note: {run['note']}" if run.get("note") else ""), ""]


def _placement(run: dict[str, Any]) -> str:
    st = run.get("settings") or {}
    return (f"{st.get('gpus', 1)} GPU(s), {st.get('per_gpu', 1)} child(ren) per GPU taking turns for the timed calls"
            f", Inductor compile threads {st.get('inductor_compile_threads', 'default')}"
            f"; --stop {st.get('stop')}, --timeout {st.get('timeout')} s per unit; tree {run.get('tree') or 'unknown'}")


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
            if len(runs) > 1:  # where_when's "which command"
                r = {**r, "run": r.get("run") or run.get("name") or run.get("when")}
            key = (r["model"], r.get("part", ""), r.get("dtype", ""))
            if key in rows and "not_run" not in r:
                rows[key] = {**rows[key], **r, "backends": {**rows[key].get("backends", {}), **r["backends"]}}
            elif key not in rows:
                rows[key] = r
    backends = [b for b in union("backends") if b not in vendors] + vendors
    def joined(key: str) -> str:
        return "; ".join(dict.fromkeys(str(r[key]) for r in runs if r.get(key)))
    return {**runs[0], "vendors": vendors, "backends": backends, "rows": list(rows.values()), "note": joined("note"),
            "tree": joined("tree") or None, "beside": joined("beside"), "seconds": sum(r.get("seconds") or 0 for r in runs)}


def merged_name(first: str, run: dict[str, Any]) -> str:
    """``--merge`` without ``--name``: the first file's stem and the run's start, so a later run of
    the same command never overwrites an earlier one.

    >>> merged_name("/x/runnerpath/gpt2.json", {"when": "2026-11-29 02:10 UTC"})
    'gpt2_20261129_0210'
    """
    digits = re.sub(r"\D", "", run.get("when", ""))
    return f"{Path(first).stem}_{digits[:8]}_{digits[8:12]}"


def load_runs(folder: Path = RUNS) -> list[dict[str, Any]]:
    """The runs in ``folder``, newest first (by when they started)."""
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    return sorted(runs, key=lambda r: r.get("when", ""), reverse=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], prog="bench_models.py --size real")
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", default="torchvendor_cpu",
                   help="torchvendor backend(s), comma list; NAME:key=value+key=value sets options "
                        "(torchvendor_cuda:aot_partition=default+cuda_graphs=False); '' for baselines only")
    p.add_argument("--baseline", default="eager,inductor",
                   help=f"comma list of {', '.join(BASELINES)}, or 'none'")
    p.add_argument("--models", help=f"comma list of {', '.join(SPECS)} (default: all)")
    p.add_argument("--units", help="model:part:dtype, a comma list, instead of --models × --parts × --dtypes "
                   "(with --order given: run in this order)")
    p.add_argument("--parts", default="inference,training")
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--scale", default="real", choices=("real", "tiny"), help="tiny: the plumbing at toy sizes")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--profile-calls", type=int, default=3, help="calls profiled for the kernel shares (0: none)")
    p.add_argument("--warm", default="all", choices=("all", "none", "inference", "training"),
                   help="the parts that get a warm compile (a Dynamo reset, disk caches kept, the first call again)")
    p.add_argument("--no-warm", action="store_true", help="the same as --warm none")
    p.add_argument("--tf32", action="store_true", help="TF32 matmuls for float32 (set_float32_matmul_precision('high'); off: torch's default, "
                   "under which convolutions already use TF32)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per model, part and dtype (its budget: "
                   "then the child is ended and what it measured kept)")
    p.add_argument("--gpus", default="1", help="GPUs to spread the children over (CUDA_VISIBLE_DEVICES), or 'auto'")
    p.add_argument("--per-gpu", type=int, default=1, help="children at once on each GPU: they compile side by side "
                   "and take turns for the timed calls (a file lock)")
    p.add_argument("--order", default="cheap", choices=("cheap", "given"),
                   help="cheap: the units by their estimated seconds, cheapest first; given: models x parts x dtypes")
    p.add_argument("--stop", type=float, help="seconds after which the run ends: nothing starts whose estimate "
                   "does not fit (--fit), the children still running are ended, the JSON is written")
    p.add_argument("--fit", type=float, default=1.5, help="start a unit while its estimate is at most this many "
                   "times the seconds left before --stop")
    p.add_argument("--skip", nargs="+", metavar="JSON", help="leave out the units these runs measured with every "
                   "backend of this one (files that do not exist are ignored)")
    p.add_argument("--log", help="a file for the progress lines and the end of each child's stderr")
    p.add_argument("--smoke", action="store_true", help="every model at a tiny size on the CPU with "
                   "torchvendor_cpu beside eager, in this process, inference and training, bf16 and fp32; "
                   "exits 1 where one raises or differs from eager (before spending GPU time)")
    p.add_argument("--workdir", help="folder of the children's events and caches (default: a fresh temp folder)")
    p.add_argument("--name", help="the run JSON's stem")
    p.add_argument("--out", default=str(RUNS), help="folder of the run JSON")
    p.add_argument("--note", help="a sentence about the run's conditions")
    p.add_argument("--beside", help="what else ran on the host meanwhile (another GPU's job, nothing); with --merge: "
                   "sets it on the merged run")
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
        merged["beside"] = args.beside or merged["beside"]
        merged["name"] = args.name or merged_name(args.merge[0], merged)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"{merged['name']}.json").write_text(json.dumps(merged, indent=1, default=str))
        print(f"wrote {Path(args.out) / merged['name']}.json", file=sys.stderr)
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
    if args.smoke:
        problems = smoke(args.models.split(",") if args.models else None, tuple(args.parts.split(",")),
                         tuple(args.dtypes.split(",")), args.backend if "," not in args.backend else "torchvendor_cpu")
        print("\n".join(["smoke: problems:", *problems] if problems else ["smoke: every model ran and matched eager"]))
        return 1 if problems else 0
    run(args)
    if Path(args.out).resolve() == RUNS.resolve():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_models import _write_markdown

        print(_write_markdown(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
