"""The suite's models: ``transformers`` architectures built from their config classes at small
sizes (random weights, offline: ``AutoConfig.for_model`` + ``AutoModel.from_config``, nothing is
downloaded) and hand-written ones (:mod:`.handwritten`), in the manner of PyTorch's Dynamo
benchmark harness (``benchmarks/dynamo/huggingface.py``) whose Hugging Face list is the anchor.

Each :class:`ModelSpec` builds the model and two input sets: ``variant=0`` and a second shape
(``variant=1``: a longer sequence, or a larger batch where the architecture fixes the sequence
or image size), which makes Dynamo recompile with dynamic shapes. The ``fast`` tier is a subset
a CPU runs in a couple of minutes.

    >>> spec = SPECS["llama"]
    >>> model, inputs = spec.build(0)
    >>> sorted(inputs)
    ['input_ids']
    >>> len(names()) >= 40 and set(names("fast")) <= set(names())
    True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from . import handwritten

__all__ = ["ModelSpec", "SPECS", "names", "FAMILIES"]

FAMILIES = ("decoder", "encoder", "encoder-decoder", "speech", "vision", "multimodal", "state-space",
            "recurrent", "mixture-of-experts", "data-dependent")

_DROPOUT = ("dropout", "dropout_rate", "hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop",
            "embd_pdrop", "attn_pdrop", "attention_dropout", "hidden_dropout", "activation_dropout",
            "classifier_dropout", "layerdrop", "encoder_layerdrop", "decoder_layerdrop", "feat_proj_dropout",
            "final_dropout", "mask_time_prob", "mask_feature_prob", "embedding_dropout", "resid_dropout",
            "drop_path_rate", "ffn_dropout", "summary_last_dropout", "router_jitter_noise", "hidden_dropout_rate")
#: small sizes shared by the text models (one hidden size: kernels repeat across models)
_TEXT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=256,
             max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2)
_SEQ2SEQ = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=256, max_position_embeddings=64, pad_token_id=1,
                bos_token_id=0, eos_token_id=2, decoder_start_token_id=0)
_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
            patch_size=8)
_WAV = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16, 16),
            conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
            vocab_size=32, pad_token_id=0)


@dataclass(frozen=True)
class ModelSpec:
    """One model: ``make()`` builds it, ``inputs(model, variant, generator)`` its keyword inputs."""

    name: str
    family: str
    make: Callable[[], nn.Module] = field(repr=False)
    inputs: Callable[[nn.Module, int, torch.Generator], dict[str, Any]] = field(repr=False)
    what: str = ""
    fast: bool = False

    def build(self, variant: int = 0, seed: int = 0) -> tuple[nn.Module, dict[str, Any]]:
        """``(model, inputs)`` for input ``variant`` 0 or 1, deterministic for a seed; dropout off."""
        torch.manual_seed(seed)
        model = self.make()
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = 0.0
        return model, self.make_inputs(model, variant, seed)

    def make_inputs(self, model: nn.Module, variant: int, seed: int = 0) -> dict[str, Any]:
        if variant not in (0, 1):
            raise ValueError(f"input variant must be 0 or 1, got {variant!r}")
        return self.inputs(model, variant, torch.Generator().manual_seed(seed + 17 * variant))


def _hf(model_type: str, base: dict[str, Any], *, drop: tuple[str, ...] = (), auto: str = "AutoModel",
        **overrides: Any) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import transformers

        kwargs = {k: v for k, v in {**base, **overrides}.items() if k not in drop}
        config = transformers.AutoConfig.for_model(model_type, **kwargs)
        for sub in [config, *(getattr(config, s, None) for s in ("text_config", "vision_config"))]:
            for knob in _DROPOUT:
                if sub is not None and isinstance(getattr(sub, knob, None), float):
                    setattr(sub, knob, 0.0)
            if sub is not None and hasattr(sub, "use_cache"):
                sub.use_cache = False
        cls = getattr(transformers, auto)
        return cls.from_config(config) if auto.startswith("Auto") else cls(config)
    return make


def _vocab(model: nn.Module) -> int:
    config = model.config
    return getattr(getattr(config, "text_config", None), "vocab_size", None) or config.vocab_size


def _ids(model: nn.Module, batch: int, seq: int, g: torch.Generator) -> torch.Tensor:
    return torch.randint(3, _vocab(model), (batch, seq), generator=g)


def _text(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
    return {"input_ids": _ids(model, 2, (8, 12)[v], g)}


def _text16(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:  # block-wise attention
    return {"input_ids": _ids(model, (2, 3)[v], 16, g)}


def _seq2seq(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
    return {"input_ids": _ids(model, 2, (8, 12)[v], g), "decoder_input_ids": _ids(model, 2, (6, 9)[v], g)}


def _image(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
    return {"pixel_values": torch.randn((2, 3)[v], 3, 32, 32, generator=g)}


def _audio(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
    return {"input_values": torch.randn(2, (800, 1200)[v], generator=g)}


def _whisper(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
    b = (2, 3)[v]
    return {"input_features": torch.randn(b, 16, 32, generator=g), "decoder_input_ids": _ids(model, b, 6, g)}


def _speech2text(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
    return {"input_features": torch.randn(2, (32, 48)[v], 16, generator=g), "decoder_input_ids": _ids(model, 2, 6, g)}


def _image_text(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
    b = (2, 3)[v]
    return {"input_ids": _ids(model, b, 8, g), "pixel_values": torch.randn(b, 3, 32, 32, generator=g)}


def _layout(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
    ids = _ids(model, 2, (8, 12)[v], g)
    corners = torch.randint(0, 500, (*ids.shape, 2), generator=g)
    return {"input_ids": ids, "bbox": torch.cat([corners, corners + 100], -1)}


def _patchtst(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
    return {"past_values": torch.randn((2, 3)[v], 32, 3, generator=g)}


def _hidden(dim: int) -> Callable[[nn.Module, int, torch.Generator], dict[str, Any]]:
    def inputs(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
        return {"x": torch.randn(2, (8, 12)[v], dim, generator=g)}
    return inputs


def _hand_ids(model: nn.Module, v: int, g: torch.Generator) -> dict[str, Any]:
    return {"ids": torch.randint(0, 256, (2, (8, 12)[v]), generator=g)}


def _spec(name: str, family: str, make: Callable[[], nn.Module], inputs: Callable[..., dict[str, Any]], what: str,
          fast: bool = False) -> ModelSpec:
    return ModelSpec(name, family, make, inputs, what, fast)


_T, _S = _TEXT, _SEQ2SEQ
_SPECS: list[ModelSpec] = [
    # decoder LMs: RoPE variants, GQA, sliding windows, ALiBi, parallel attention, learned positions
    _spec("gpt2", "decoder", _hf("gpt2", _T, auto="AutoModelForCausalLM"), _text, "GPT-2 LM head, learned positions",
          fast=True),
    _spec("llama", "decoder", _hf("llama", _T, num_key_value_heads=2), _text, "Llama: RoPE, GQA 4/2, SwiGLU, RMSNorm",
          fast=True),
    _spec("mistral", "decoder", _hf("mistral", _T, num_key_value_heads=2, sliding_window=4), _text,
          "Mistral: sliding-window attention (4), GQA"),
    _spec("qwen3", "decoder", _hf("qwen3", _T, num_key_value_heads=2, head_dim=8), _text, "Qwen3: q/k RMSNorm, GQA"),
    _spec("gemma2", "decoder", _hf("gemma2", _T, num_key_value_heads=2, head_dim=8, sliding_window=4), _text,
          "Gemma 2: logit soft-capping, alternating sliding/global layers"),
    _spec("phi", "decoder", _hf("phi", _T, partial_rotary_factor=0.5), _text, "Phi: partial rotary, parallel block"),
    _spec("gpt_neox", "decoder", _hf("gpt_neox", _T, rotary_pct=0.25), _text,
          "GPT-NeoX: parallel attention, rotary on 25% of dims"),
    _spec("bloom", "decoder", _hf("bloom", _T, n_head=4), _text, "BLOOM: ALiBi position bias"),
    _spec("falcon", "decoder", _hf("falcon", _T, new_decoder_architecture=False, multi_query=True), _text,
          "Falcon: multi-query attention, parallel block, rotary"),
    _spec("opt", "decoder", _hf("opt", _T, ffn_dim=64, word_embed_proj_dim=32), _text,
          "OPT: learned positions with an offset"),
    _spec("gptj", "decoder", _hf("gptj", _T, n_embd=32, n_layer=2, n_head=4, rotary_dim=4), _text,
          "GPT-J: interleaved rotary, parallel block"),
    _spec("gpt_neo", "decoder", _hf("gpt_neo", _T, num_layers=2, num_heads=4, window_size=4,
                                    attention_types=[[["global", "local"], 1]]), _text,
          "GPT-Neo: alternating global and local attention"),
    # (batched_mm: the experts as gathered weights and bmm; grouped_mm, the CPU default, has no float64 truth)
    _spec("mixtral", "mixture-of-experts", _hf("mixtral", _T, num_key_value_heads=2, num_local_experts=4,
                                               num_experts_per_tok=2, experts_implementation="batched_mm"), _text,
          "Mixtral: top-2 of 4 experts, GQA"),
    _spec("olmoe", "mixture-of-experts", _hf("olmoe", _T, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                           experts_implementation="batched_mm"), _text,
          "OLMoE: top-2 of 4 experts, q/k norm"),
    # encoders and their position schemes
    _spec("bert", "encoder", _hf("bert", _T), _text, "BERT: absolute positions, post-norm", fast=True),
    _spec("albert", "encoder", _hf("albert", _T, embedding_size=16), _text,
          "ALBERT: factorized embedding, one shared layer"),
    _spec("distilbert", "encoder", _hf("distilbert", _T, dim=32, n_layers=2, n_heads=4, hidden_dim=64), _text,
          "DistilBERT"),
    _spec("electra", "encoder", _hf("electra", _T, embedding_size=16), _text, "ELECTRA: embedding projection"),
    _spec("deberta_v2", "encoder", _hf("deberta-v2", _T, position_buckets=8, relative_attention=True,
                                       pos_att_type=["p2c", "c2p"]), _text,
          "DeBERTa-v2: disentangled relative attention (gather by log buckets)"),
    _spec("convbert", "encoder", _hf("convbert", _T, embedding_size=32, head_ratio=2, conv_kernel_size=3), _text,
          "ConvBERT: span-based dynamic convolution heads"),
    _spec("mobilebert", "encoder", _hf("mobilebert", _T, embedding_size=16, intra_bottleneck_size=16,
                                       num_feedforward_networks=2, true_hidden_size=16), _text,
          "MobileBERT: bottlenecks, NoNorm"),
    _spec("funnel", "encoder", _hf("funnel", _T, block_sizes=[1, 1], block_repeats=[1, 1], d_model=32, n_head=4,
                                   d_head=8, d_inner=64, auto="FunnelModel",
                                   drop=("num_hidden_layers", "hidden_size", "intermediate_size")), _text16,
          "Funnel: pooled sequence, relative attention"),
    _spec("fnet", "encoder", _hf("fnet", _T), _text, "FNet: Fourier token mixing (FFT)"),
    _spec("longformer", "encoder", _hf("longformer", _T, attention_window=4), _text16,
          "Longformer: sliding-window + global attention"),
    _spec("big_bird", "encoder", _hf("big_bird", _T, attention_type="original_full"), _text,
          "BigBird (full attention at this length)"),
    _spec("esm", "encoder", _hf("esm", _T, position_embedding_type="rotary", mask_token_id=4), _text,
          "ESM: rotary encoder"),
    _spec("mpnet", "encoder", _hf("mpnet", _T), _text, "MPNet: relative position bias buckets"),
    _spec("xlnet", "encoder", _hf("xlnet", _T, d_model=32, n_layer=2, n_head=4, d_inner=64,
                                  drop=("max_position_embeddings",)), _text,
          "XLNet: two-stream relative attention"),
    # encoder-decoders
    _spec("t5", "encoder-decoder", _hf("t5", _S, d_ff=64, d_kv=8, num_layers=2, num_heads=4,
                                       relative_attention_num_buckets=8), _seq2seq,
          "T5: relative position buckets, RMSNorm", fast=True),
    _spec("bart", "encoder-decoder", _hf("bart", _S), _seq2seq, "BART: learned positions"),
    _spec("pegasus", "encoder-decoder", _hf("pegasus", _S), _seq2seq, "Pegasus: sinusoidal positions, pre-norm"),
    _spec("m2m_100", "encoder-decoder", _hf("m2m_100", _S), _seq2seq, "M2M-100: sinusoidal positions from ids"),
    _spec("switch_transformers", "mixture-of-experts",
          _hf("switch_transformers", _S, d_ff=64, d_kv=8, num_layers=2, num_decoder_layers=2, num_heads=4,
              num_experts=4, expert_capacity=8, num_sparse_encoder_layers=1, num_sparse_decoder_layers=1,
              relative_attention_num_buckets=8), _seq2seq, "Switch Transformer: top-1 routing with capacity"),
    # speech
    _spec("wav2vec2", "speech", _hf("wav2vec2", _WAV), _audio, "wav2vec 2.0: conv feature encoder, conv positions"),
    _spec("wavlm", "speech", _hf("wavlm", _WAV, num_buckets=16, max_bucket_distance=32), _audio,
          "WavLM: gated relative position bias"),
    _spec("whisper", "speech", _hf("whisper", _S, num_mel_bins=16, max_source_positions=16, max_target_positions=32,
                                   drop=("max_position_embeddings",)), _whisper, "Whisper: log-mel conv stem, enc-dec"),
    _spec("speech_to_text", "speech", _hf("speech_to_text", _S, input_feat_per_channel=16, conv_channels=32,
                                          max_source_positions=64, max_target_positions=32), _speech2text,
          "Speech2Text: conv subsampler, sinusoidal positions"),
    # vision
    _spec("vit", "vision", _hf("vit", _VIT), _image, "ViT: patch embedding, CLS token", fast=True),
    _spec("beit", "vision", _hf("beit", _VIT, use_relative_position_bias=True), _image,
          "BEiT: relative position bias table"),
    _spec("dinov2", "vision", _hf("dinov2", _VIT), _image, "DINOv2: layer scale, interpolated positions"),
    _spec("swin", "vision", _hf("swin", {}, image_size=32, patch_size=2, embed_dim=16, depths=[1, 1],
                                num_heads=[2, 4], window_size=4), _image, "Swin: shifted-window attention"),
    _spec("convnext", "vision", _hf("convnext", {}, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2), _image,
          "ConvNeXt: depthwise 7x7, layer norm"),
    _spec("resnet", "vision", _hf("resnet", {}, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                  layer_type="bottleneck"), _image, "ResNet: bottleneck blocks, batch norm",
          fast=True),
    _spec("mobilenet_v2", "vision", _hf("mobilenet_v2", {}, depth_multiplier=0.25, image_size=32), _image,
          "MobileNetV2: inverted residuals, depthwise conv"),
    _spec("efficientnet", "vision", _hf("efficientnet", {}, width_coefficient=0.25, depth_coefficient=0.25,
                                        image_size=32, hidden_dim=320), _image,
          "EfficientNet: depthwise conv, squeeze-excitation"),
    _spec("segformer", "vision", _hf("segformer", {}, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                     hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                                     num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32), _image,
          "SegFormer: efficient (reduced-key) attention, Mix-FFN"),
    # multimodal
    _spec("clip", "multimodal", _hf("clip", {}, projection_dim=16, text_config=dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=256,
        max_position_embeddings=16), vision_config=dict(_VIT)), _image_text, "CLIP: text and vision towers"),
    _spec("vilt", "multimodal", _hf("vilt", _VIT, vocab_size=256, max_position_embeddings=16), _image_text,
          "ViLT: one transformer over text and patches"),
    _spec("layoutlm", "multimodal", _hf("layoutlm", _T), _layout, "LayoutLM: text with 2-D box embeddings"),
    # state space and recurrent
    _spec("mamba", "state-space", _hf("mamba", _T, state_size=8, expand=2, conv_kernel=4), _text,
          "Mamba: selective scan (sequential reference path)"),
    _spec("mamba2", "state-space", _hf("mamba2", _T, num_heads=4, head_dim=16, expand=2, n_groups=1, state_size=8,
                                       chunk_size=4), _text, "Mamba-2: chunked state-space duality"),
    _spec("rwkv", "state-space", _hf("rwkv", _T, attention_hidden_size=32, context_length=64), _text,
          "RWKV: linear-attention recurrence"),
    _spec("patchtst", "encoder", _hf("patchtst", {}, num_input_channels=3, context_length=32, patch_length=8,
                                     patch_stride=8, d_model=32, num_hidden_layers=2, num_attention_heads=4,
                                     ffn_dim=64), _patchtst, "PatchTST: time-series patches, channel-independent"),
    _spec("lstm_lm", "recurrent", handwritten.LSTMLanguageModel, _hand_ids, "two-layer LSTM language model",
          fast=True),
    _spec("gru_tagger", "recurrent", handwritten.GRUTagger, _hidden(24), "bidirectional GRU tagger"),
    _spec("moe_topk", "mixture-of-experts", handwritten.MoETopK, _hidden(32), "top-2 of 4 experts, softmax gates",
          fast=True),
    _spec("masked_pooling", "data-dependent", handwritten.MaskedPooling, _hidden(32),
          "boolean-mask selection (size known at run time), index_put"),
    _spec("argmax_routing", "data-dependent", handwritten.ArgmaxRouting, _hidden(32),
          "hard argmax routing, gather of per-expert weights"),
]
SPECS: dict[str, ModelSpec] = {s.name: s for s in _SPECS}


def names(tier: str | None = None, family: str | None = None) -> list[str]:
    """Model names: all, the ``"fast"`` tier, or one family.

    >>> names("fast")[:2]
    ['gpt2', 'llama']
    """
    if tier not in (None, "fast", "full"):
        raise ValueError(f"unknown tier {tier!r}; use 'fast', 'full' or None")
    if family is not None and family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {FAMILIES}")
    return [s.name for s in _SPECS if (tier != "fast" or s.fast) and (family is None or s.family == family)]
