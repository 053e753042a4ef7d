"""A corpus of real ATen graphs: tiny `transformers` models with random weights, built offline.

Each model is built from a `transformers` config (never downloaded: random weights, tiny sizes)
and captured with :func:`torchvendor.ir.capture` at ATen level, for inference and for training
(AOTAutograd's forward and backward graphs). Every node carries ``meta["val"]``, so value sizes
are known. Used by ``bench/corpus_partition.py``; run this file to list the corpus::

    .venv/bin/python bench/corpus.py

Capability profiles (``PROFILES``) are op-key predicates standing for vendors of different
reach; see ``docs/bench_partition.md``.
"""
from __future__ import annotations

import zlib
from typing import Any, Callable, Iterator

import torch

__all__ = ["MODELS", "PROFILES", "graphs", "packet"]


class _First(torch.nn.Module):
    """Wrap a `transformers` model: positional tensors in, the first output tensor out."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, args)))[0]


def _bert():
    import transformers as tf
    cfg = tf.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=64)
    return _First(tf.BertModel(cfg), ("input_ids",)), [torch.randint(0, 128, (2, 32))]


def _gpt2():
    import transformers as tf
    cfg = tf.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0)
    return _First(tf.GPT2Model(cfg), ("input_ids",)), [torch.randint(0, 128, (2, 32))]


def _llama():
    import transformers as tf
    cfg = tf.LlamaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64)
    return _First(tf.LlamaModel(cfg), ("input_ids",)), [torch.randint(0, 128, (2, 32))]


def _t5():
    import transformers as tf
    cfg = tf.T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                      num_heads=4, decoder_start_token_id=0)
    return (_First(tf.T5Model(cfg), ("input_ids", "decoder_input_ids")),
            [torch.randint(0, 128, (2, 16)), torch.randint(0, 128, (2, 8))])


def _vit():
    import transformers as tf
    cfg = tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128)
    return _First(tf.ViTModel(cfg), ("pixel_values",)), [torch.randn(2, 3, 32, 32)]


def _resnet():
    import transformers as tf
    cfg = tf.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32, 64, 64], depths=[1, 1, 1, 1],
                          layer_type="basic")
    return _First(tf.ResNetModel(cfg), ("pixel_values",)), [torch.randn(2, 3, 32, 32)]


MODELS: dict[str, Callable[[], tuple[torch.nn.Module, list[torch.Tensor]]]] = {
    "bert": _bert, "gpt2": _gpt2, "llama": _llama, "t5": _t5, "vit": _vit, "resnet": _resnet}


def packet(key: str) -> str:
    """The op packet of an op key.

    >>> packet("aten.mm.default"), packet("operator.getitem"), PROFILES["gemm+pointwise"]("aten.mm.default")
    ('mm', 'getitem', True)
    """
    parts = key.split(".")
    return parts[1] if len(parts) > 1 else key


_GEMM_POINTWISE = frozenset("""mm bmm addmm baddbmm add sub mul div neg rsqrt sqrt exp tanh relu gelu silu
sigmoid pow erf view _unsafe_view reshape t transpose permute expand unsqueeze squeeze clone alias
threshold_backward gelu_backward silu_backward tanh_backward sigmoid_backward getitem""".split())
_NORM_GATHER = frozenset("""native_layer_norm native_layer_norm_backward embedding embedding_dense_backward
index index_select gather scatter scatter_add index_put index_add _native_batch_norm_legit_functional
native_batch_norm_backward _native_batch_norm_legit_no_training""".split())
_REDUCTIONS = frozenset("""sum mean amax amin max min argmax var var_mean _softmax _log_softmax
_softmax_backward_data native_layer_norm native_layer_norm_backward any all cumsum""".split())


def _hashed(key: str) -> bool:
    p = packet(key)
    return p == "getitem" or zlib.crc32(p.encode()) % 5 != 0


#: profile name -> op-key predicate (True: the vendor supports the op)
PROFILES: dict[str, Callable[[str], bool]] = {
    "gemm+pointwise": lambda key: packet(key) in _GEMM_POINTWISE,
    "no-norm/gather": lambda key: packet(key) not in _NORM_GATHER,
    "no-reductions": lambda key: packet(key) not in _REDUCTIONS,
    "hash-20%": _hashed,
}


def graphs(models: Any = None, kinds: tuple[str, ...] = ("inference", "forward", "backward")
           ) -> Iterator[tuple[str, str, torch.fx.GraphModule]]:
    """Yield ``(model, kind, graph module)`` for each model and captured graph kind (seconds per model).

    >>> sorted(MODELS)
    ['bert', 'gpt2', 'llama', 'resnet', 't5', 'vit']
    """
    from torchvendor.ir import capture

    for name in models or MODELS:
        torch.manual_seed(0)
        model, inputs = MODELS[name]()
        for training in (False, True):
            want = [k for k in kinds if (k == "inference") != training]
            if not want:
                continue
            model.train(training)
            program = capture(model, inputs, level="aten", training=training)
            for kind, gm in program.graphs().items():
                if kind in want:
                    yield name, kind, gm


if __name__ == "__main__":
    for name, kind, gm in graphs():
        print(f"{name:8} {kind:10} {len(gm.graph.nodes):6} nodes")
