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

import random
import zlib
from typing import Any, Callable, Iterator

import torch

__all__ = ["MODELS", "PROFILES", "FAMILIES", "graphs", "joint_graph", "packet", "random_profile"]


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


def _text(config_cls: str, model_cls: str, seq: int = 32, **config: Any):
    """A decoder/encoder text model of ``transformers`` from a tiny config (ids in, hidden states out)."""
    def make():
        import transformers as tf
        cfg = getattr(tf, config_cls)(**config)
        return _First(getattr(tf, model_cls)(cfg), ("input_ids",)), [torch.randint(0, 128, (2, seq))]
    return make


def _bart():
    import transformers as tf
    cfg = tf.BartConfig(vocab_size=128, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64)
    return (_First(tf.BartModel(cfg), ("input_ids", "decoder_input_ids")),
            [torch.randint(0, 128, (2, 16)), torch.randint(0, 128, (2, 8))])


def _convnext():
    import transformers as tf
    cfg = tf.ConvNextConfig(num_channels=3, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, patch_size=4,
                            image_size=32)
    return _First(tf.ConvNextModel(cfg), ("pixel_values",)), [torch.randn(2, 3, 32, 32)]


MODELS: dict[str, Callable[[], tuple[torch.nn.Module, list[torch.Tensor]]]] = {
    "bert": _bert, "gpt2": _gpt2, "llama": _llama, "t5": _t5, "vit": _vit, "resnet": _resnet,
    "opt": _text("OPTConfig", "OPTModel", vocab_size=128, hidden_size=64, num_hidden_layers=2, ffn_dim=128,
                 num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=64),
    "gpt_neox": _text("GPTNeoXConfig", "GPTNeoXModel", vocab_size=128, hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=128, max_position_embeddings=64),
    "qwen2": _text("Qwen2Config", "Qwen2Model", vocab_size=128, hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64),
    "phi": _text("PhiConfig", "PhiModel", vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, max_position_embeddings=64),
    "distilbert": _text("DistilBertConfig", "DistilBertModel", vocab_size=128, dim=64, n_layers=2, n_heads=4,
                        hidden_dim=128, max_position_embeddings=64),
    "albert": _text("AlbertConfig", "AlbertModel", vocab_size=128, embedding_size=32, hidden_size=64,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=64),
    "bart": _bart, "convnext": _convnext}


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


#: op families (by packet) that randomized profiles draw from; a packet in none is "other"
FAMILIES: dict[str, frozenset[str]] = {
    "matmul": frozenset("mm bmm addmm baddbmm convolution convolution_backward _scaled_dot_product_flash_attention "
                        "_scaled_dot_product_efficient_attention linear".split()),
    "pointwise": frozenset("""add sub mul div neg rsqrt sqrt exp tanh relu gelu silu sigmoid pow erf where eq ne lt
le gt ge clamp clamp_min clamp_max logical_not logical_and logical_or bitwise_and bitwise_not bitwise_or abs log
reciprocal maximum minimum masked_fill sign cos sin rsub hardtanh threshold_backward gelu_backward silu_backward
tanh_backward sigmoid_backward hardtanh_backward native_dropout native_dropout_backward _to_copy scalar_tensor full
full_like zeros zeros_like ones ones_like fill copy clone lift_fresh_copy mish""".split()),
    "views": frozenset("""view _unsafe_view reshape t transpose permute expand unsqueeze squeeze alias slice select split
split_with_sizes unbind as_strided detach chunk""".split()),
    "reductions": frozenset("""sum mean amax amin max min argmax var var_mean _softmax _log_softmax _softmax_backward_data
any all cumsum prod""".split()),
    "norm": frozenset("""native_layer_norm native_layer_norm_backward _native_batch_norm_legit_functional
native_batch_norm_backward _native_batch_norm_legit_no_training native_group_norm native_group_norm_backward""".split()),
    "gather": frozenset("""embedding embedding_dense_backward index index_select gather scatter scatter_add index_put
index_add slice_scatter select_scatter cat stack constant_pad_nd new_zeros arange iota""".split()),
}
_FAMILY_OF = {p: f for f, ps in FAMILIES.items() for p in ps}

#: the profile kinds :func:`random_profile` draws from, each a vendor of a different reach
PROFILE_KINDS = ("matmul-engine", "pointwise-only", "broad-holes", "no-views", "no-reductions", "no-norm-gather",
                 "matmul+pointwise-holes", "scattered-nodes", "float-only")


def _hole(seed: int, p: str, rate: float) -> bool:
    return zlib.crc32(f"{seed}:{p}".encode()) / 2 ** 32 < rate


def random_profile(seed: int) -> tuple[str, Callable[[str, Any], bool]]:
    """A deterministic random capability profile: ``(description, predicate(op_key, fx_node))``.
    The kind and its parameters are drawn from ``random.Random(seed)``; which packets (or, for
    ``scattered-nodes``, which nodes by name) are holes is a hash of the seed and the packet, so
    a profile means the same on every graph. ``float-only`` refuses nodes whose value is not
    floating point (int64 masks and indices, bool). ``getitem`` always follows its producer.

    >>> name, pred = random_profile(3)
    >>> name == random_profile(3)[0], pred("operator.getitem", None)
    (True, True)
    """
    rng = random.Random(seed)
    kind = rng.choice(PROFILE_KINDS)
    rate = rng.uniform(0.0, 0.3)
    views = rng.random() < 0.5
    fam = _FAMILY_OF.get
    banned = {"no-views": ("views",), "no-reductions": ("reductions", "norm"),
              "no-norm-gather": ("norm", "gather")}.get(kind, ())

    def pred(key: str, node: Any) -> bool:
        p = packet(key)
        if p == "getitem":
            return True
        f = fam(p, "other")
        if kind == "matmul-engine":
            return f == "matmul" or (f == "views" and views) or (f == "pointwise" and not _hole(seed, p, 0.3 + 2 * rate))
        if kind == "pointwise-only":
            return (f == "pointwise" or (f == "views" and views)) and not _hole(seed, p, rate / 2)
        if kind == "matmul+pointwise-holes":
            return f in ("matmul", "pointwise", "views") and not _hole(seed, p, rate)
        if kind == "scattered-nodes":
            return not _hole(seed, node.name, rate / 3)
        if kind == "float-only":
            val = node.meta.get("val")
            dtype = getattr(val, "dtype", None)
            return (dtype is None or dtype.is_floating_point) and not _hole(seed, p, rate / 3)
        if _hole(seed, p, rate if kind == "broad-holes" else rate / 3):
            return False
        return f not in banned

    return f"{kind} (seed {seed}, holes {rate:.2f}{', views' if views else ''})", pred

def graphs(models: Any = None, kinds: tuple[str, ...] = ("inference", "forward", "backward")
           ) -> Iterator[tuple[str, str, torch.fx.GraphModule]]:
    """Yield ``(model, kind, graph module)`` for each model and captured graph kind (seconds per
    model): ``inference``, AOTAutograd's training ``forward`` and ``backward``, and ``joint``
    (the joint forward+backward graph its partitioner splits).

    >>> sorted(MODELS)[:6]
    ['albert', 'bart', 'bert', 'convnext', 'distilbert', 'gpt2']
    """
    from torchvendor.ir import capture

    for name in models or MODELS:
        for training in (False, True):
            want = [k for k in kinds if (k == "inference") != training and k != "joint"]
            if not want:
                continue
            torch.manual_seed(0)
            model, inputs = MODELS[name]()
            model.train(training)
            program = capture(model, inputs, level="aten", training=training)
            for kind, gm in program.graphs().items():
                if kind in want:
                    yield name, kind, gm
        if "joint" in kinds:
            torch.manual_seed(0)
            model, inputs = MODELS[name]()
            yield name, "joint", joint_graph(model.train(True), inputs)


def joint_graph(model: torch.nn.Module, inputs: list[torch.Tensor]) -> torch.fx.GraphModule:
    """AOTAutograd's joint forward+backward ATen graph of ``model`` (the graph its partitioner
    receives), through the same Dynamo trace as :func:`torchvendor.ir.capture`."""
    from torchvendor.ir import compat
    from torchvendor.ir.decompositions import resolve
    from torchvendor.ir.torch_ir.capture import compile_and_record

    joints: list[torch.fx.GraphModule] = []
    default = compat.partitioner("default")

    def recording(joint: torch.fx.GraphModule, joint_inputs: Any, **kw: Any) -> Any:
        joints.append(joint)
        return default(joint, joint_inputs, **kw)

    def boxed(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return compat.make_boxed_func(gm.forward)

    backend = compat.aot_autograd_backend(fw_compiler=boxed, bw_compiler=boxed, partition_fn=recording,
                                          decompositions=resolve(None).as_dict())
    compile_and_record(model, inputs, backend, training=True)
    if len(joints) != 1:
        raise RuntimeError(f"expected one joint graph, AOTAutograd partitioned {len(joints)}")
    return joints[0]


if __name__ == "__main__":
    for name, kind, gm in graphs():
        print(f"{name:8} {kind:10} {len(gm.graph.nodes):6} nodes")
