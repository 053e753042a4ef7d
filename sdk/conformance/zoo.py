"""A model zoo for checking and benchmarking backends: real architectures, random weights, offline.

Each entry builds a model and example inputs deterministically from a seed; nothing is
downloaded (the Hugging Face models are built from tiny configs with random weights). Sizes are
small so a CPU machine runs the whole zoo in seconds per model; ``size="bench"`` builds larger
inputs for benchmarks.

=================  ==========================================================  ==========
name               what                                                          tier
=================  ==========================================================  ==========
``mlp``            Linear-GELU-Linear-ReLU-Linear                                fast
``cnn``            conv + batch norm + ReLU blocks, pooling, a linear head        fast
``resnet18``       ResNet-18 (``transformers.ResNetModel``, basic blocks)        slow
``encoder``        ``nn.TransformerEncoderLayer`` (self-attention, layer norm)   fast
``gpt_block``      a GPT-style decoder block (causal SDPA, pre-norm, GELU MLP)   fast
``lstm``           a two-layer ``nn.LSTM`` with a linear head                     fast
``embedding_bag``  ``nn.EmbeddingBag`` (mean) into an MLP                         fast
``bert``           BERT (``transformers``), 2 layers                              slow
``gpt2``           GPT-2 LM head, 2 layers                                        slow
``llama``          Llama causal LM (RMSNorm, rotary, SwiGLU), 2 layers            slow
``t5``             T5 encoder-decoder (tied embeddings), 2+2 layers               slow
``vit``            ViT, 2 layers                                                  slow
=================  ==========================================================  ==========

Example::

    >>> import torch
    >>> model, inputs = build("mlp")
    >>> loss(model(*inputs)).shape
    torch.Size([])
    >>> "bert" in names() and "bert" not in names(tier="fast")
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

__all__ = ["ZooEntry", "names", "build", "loss", "leaves", "ENTRIES"]


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model: ``make(size)`` returns ``(model, example_inputs)``; ``tier`` is fast or slow."""

    name: str
    make: Callable[[str], tuple[nn.Module, tuple[Any, ...]]]
    tier: str = "fast"
    description: str = ""


def _mlp(size: str) -> tuple[nn.Module, tuple]:
    batch = 512 if size == "bench" else 8
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    return model, (torch.randn(batch, 64),)


def _cnn(size: str) -> tuple[nn.Module, tuple]:
    def block(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    model = nn.Sequential(block(3, 16), block(16, 16), nn.MaxPool2d(2), block(16, 32), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(32, 10))
    batch, hw = (32, 32) if size == "bench" else (4, 16)
    return model, (torch.randn(batch, 3, hw, hw),)


def _resnet18(size: str) -> tuple[nn.Module, tuple]:
    from transformers import ResNetConfig, ResNetModel

    config = ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2],
                          layer_type="basic")
    batch, hw = (8, 112) if size == "bench" else (2, 64)
    return ResNetModel(config), (torch.randn(batch, 3, hw, hw),)


def _encoder(size: str) -> tuple[nn.Module, tuple]:
    model = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
    batch, seq = (32, 128) if size == "bench" else (2, 16)
    return model, (torch.randn(batch, seq, 64),)


class GPTBlock(nn.Module):
    """Pre-norm decoder block: causal multi-head attention (SDPA) and a GELU MLP, with residuals."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


def _gpt_block(size: str) -> tuple[nn.Module, tuple]:
    batch, seq = (16, 128) if size == "bench" else (2, 16)
    return GPTBlock(), (torch.randn(batch, seq, 64),)


class LSTMHead(nn.Module):
    """A two-layer LSTM over a sequence, a linear head on the last step."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(32, 64, num_layers=2, batch_first=True)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def _lstm(size: str) -> tuple[nn.Module, tuple]:
    batch, seq = (64, 32) if size == "bench" else (4, 8)
    return LSTMHead(), (torch.randn(batch, seq, 32),)


class BagModel(nn.Module):
    """Mean-pooled embedding bags (offsets form) into a small MLP, as in recommendation models."""

    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(1000, 32, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.bag(ids, offsets))


def _embedding_bag(size: str) -> tuple[nn.Module, tuple]:
    bags = 256 if size == "bench" else 8
    ids = torch.randint(0, 1000, (bags * 4,))
    return BagModel(), (ids, torch.arange(0, bags * 4, 4))


def _hf_text(config_cls: str, model_cls: str, **config: Any) -> Callable[[str], tuple[nn.Module, tuple]]:
    def make(size: str) -> tuple[nn.Module, tuple]:
        import transformers

        cfg = getattr(transformers, config_cls)(**config)
        for knob in _DROPOUT_KNOBS:  # deterministic training steps: no functional dropout either
            if hasattr(cfg, knob):
                setattr(cfg, knob, 0.0)
        model = getattr(transformers, model_cls)(cfg)
        batch, seq = (8, 64) if size == "bench" else (2, 8)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq))
        if getattr(cfg, "is_encoder_decoder", False):
            return model, (ids, None, ids)  # input_ids, attention_mask, decoder_input_ids
        return model, (ids,)
    return make


def _vit(size: str) -> tuple[nn.Module, tuple]:
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                    image_size=32, patch_size=8)
    batch = 16 if size == "bench" else 2
    return ViTModel(cfg), (torch.randn(batch, 3, 32, 32),)


_DROPOUT_KNOBS = ("dropout_rate", "hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop",
                  "attn_pdrop", "attention_dropout", "hidden_dropout", "classifier_dropout")
_SMALL = dict(num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=512)

ENTRIES: dict[str, ZooEntry] = {e.name: e for e in [
    ZooEntry("mlp", _mlp, "fast", "Linear-GELU-Linear-ReLU-Linear"),
    ZooEntry("cnn", _cnn, "fast", "conv + batch norm + ReLU blocks, pooling, linear head"),
    ZooEntry("resnet18", _resnet18, "slow", "ResNet-18 (transformers.ResNetModel)"),
    ZooEntry("encoder", _encoder, "fast", "nn.TransformerEncoderLayer"),
    ZooEntry("gpt_block", _gpt_block, "fast", "GPT-style decoder block (causal SDPA)"),
    ZooEntry("lstm", _lstm, "fast", "two-layer LSTM + linear head"),
    ZooEntry("embedding_bag", _embedding_bag, "fast", "EmbeddingBag (mean) + MLP"),
    ZooEntry("bert", _hf_text("BertConfig", "BertModel", hidden_size=64, max_position_embeddings=64, **_SMALL),
             "slow", "BERT, 2 layers"),
    ZooEntry("gpt2", _hf_text("GPT2Config", "GPT2LMHeadModel", n_embd=64, n_layer=2, n_head=4, n_positions=64,
                              vocab_size=512, bos_token_id=0, eos_token_id=0), "slow", "GPT-2 LM head, 2 layers"),
    ZooEntry("llama", _hf_text("LlamaConfig", "LlamaForCausalLM", hidden_size=64, num_key_value_heads=2,
                               max_position_embeddings=64, **_SMALL), "slow", "Llama causal LM, 2 layers"),
    ZooEntry("t5", _hf_text("T5Config", "T5ForConditionalGeneration", d_model=64, d_ff=128, d_kv=16, num_layers=2,
                            num_decoder_layers=2, num_heads=4, vocab_size=512), "slow", "T5, 2+2 layers"),
    ZooEntry("vit", _vit, "slow", "ViT, 2 layers"),
]}


def names(tier: str | None = None) -> list[str]:
    """Zoo model names, optionally of one tier (``"fast"`` or ``"slow"``).

    >>> names(tier="fast")[:3]
    ['mlp', 'cnn', 'encoder']
    """
    if tier not in (None, "fast", "slow"):
        raise ValueError(f"unknown tier {tier!r}; use 'fast', 'slow' or None")
    return [n for n, e in ENTRIES.items() if tier is None or e.tier == tier]


def build(name: str, *, seed: int = 0, size: str = "test") -> tuple[nn.Module, tuple[Any, ...]]:
    """``(model, example_inputs)`` for zoo model ``name``, deterministic for a seed; ``size`` is
    ``"test"`` (small) or ``"bench"``. The model is in train mode with dropout disabled where
    the architecture has a knob for it.

    >>> m, (x,) = build("cnn"); tuple(m(x).shape)
    (4, 10)
    """
    if name not in ENTRIES:
        raise ValueError(f"unknown zoo model {name!r}; choose one of {names()}")
    if size not in ("test", "bench"):
        raise ValueError(f"unknown size {size!r}; use 'test' or 'bench'")
    torch.manual_seed(seed)
    model, inputs = ENTRIES[name].make(size)
    for module in model.modules():  # deterministic training steps: no dropout
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model, inputs


def leaves(output: Any) -> list[torch.Tensor]:
    """The tensors of any model output (tensors, tuples, lists, dicts, Hugging Face ``ModelOutput``).

    >>> [t.shape for t in leaves((torch.ones(2), {"a": torch.zeros(3), "b": None}))]
    [torch.Size([2]), torch.Size([3])]
    """
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, dict):
        return [t for v in output.values() for t in leaves(v)]
    if isinstance(output, (tuple, list)):
        return [t for v in output for t in leaves(v)]
    return []


def loss(output: Any) -> torch.Tensor:
    """A scalar from any model output: the sum of the mean squares of its floating-point tensors,
    for a training step (every output element gets a gradient, unlike a plain mean after a
    normalization).

    >>> loss((torch.ones(2), {"a": torch.full((3,), 2.0)}))
    tensor(5.)
    """
    parts = [t.float().pow(2).mean() for t in leaves(output) if t.is_floating_point()]
    if not parts:
        raise ValueError("the model output has no floating-point tensor to make a loss from")
    return torch.stack(parts).sum()
