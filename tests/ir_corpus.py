"""The shared IR test corpus: small programs, as data, that every IR level must capture and run.

Import it as ``from ir_corpus import CORPUS`` (``tests/`` is on ``sys.path`` under pytest's
rootdir-based imports; ``tests/`` has no ``__init__.py``). Each :class:`Case` says:

- ``make()``: a fresh function or ``nn.Module`` (modules are built under a fixed seed);
- ``inputs()``: fresh example inputs (a list of positional arguments, built from a fixed seed;
  trainable cases give floating inputs ``requires_grad=True`` where gradients are wanted);
- ``inputs2()``: for ``dynamic`` cases, inputs with other sizes, run without recapture;
- ``trainable``: compare the backward too (``run_backward`` against eager autograd);
- ``rtol``/``atol``: tolerance overrides for ``torch.testing.assert_close`` (None = its
  defaults, which are OpInfo's per-dtype tolerances);
- ``expect``: per level, substrings the printed program must contain (key ops);
- ``rng`` and ``rng_exact``: random programs. Seed semantics: before the eager call and before
  ``run`` the test calls ``torch.manual_seed(SEED)``. Levels listed in ``rng_exact`` preserve
  the order and kind of RNG calls (torch IR calls the same torch functions eagerly), so values
  must match exactly; at the other levels a decomposition may draw differently (ATen's
  ``native_dropout`` decomposes to ``rand + lt`` while eager CPU dropout calls ``bernoulli_``),
  so only shape/dtype and ``check(inputs, outputs)`` (a statistical property) are compared;
- ``mutates``: the program mutates its inputs or buffers in place; the test compares the
  inputs/buffers after the call as well as the outputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["Case", "CORPUS", "SEED", "by_name"]

SEED = 1234


@dataclass(frozen=True)
class Case:
    """One corpus program (see the module docstring)."""

    name: str
    make: Callable[[], Any]
    inputs: Callable[[], list[Any]]
    trainable: bool = False
    dynamic: bool = False
    inputs2: Callable[[], list[Any]] | None = None
    rtol: float | None = None
    atol: float | None = None
    expect: dict[str, tuple[str, ...]] = field(default_factory=dict)
    rng: bool = False
    rng_exact: tuple[str, ...] = ()
    check: Callable[[list[Any], list[Any]], None] | None = None
    mutates: bool = False
    tags: tuple[str, ...] = ()

    @property
    def tolerances(self) -> dict[str, float]:
        """Keyword arguments for ``torch.testing.assert_close`` (empty: OpInfo defaults)."""
        return {} if self.rtol is None else {"rtol": self.rtol, "atol": self.atol}

    def __repr__(self) -> str:
        return f"Case({self.name})"


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(SEED + seed)


def randn(*shape: int, grad: bool = False, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A seeded standard-normal tensor (``grad``: requires_grad)."""
    return torch.randn(*shape, generator=_gen(seed), dtype=dtype).requires_grad_(grad)


def randint(high: int, *shape: int, seed: int = 0) -> torch.Tensor:
    """A seeded int64 tensor in ``[0, high)``."""
    return torch.randint(high, shape, generator=_gen(seed))


def _module(factory: Callable[[], nn.Module], train: bool = True) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        torch.manual_seed(SEED)
        m = factory()
        return m.train(train)
    return make


def _fn(f: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    return lambda: f


# ---- programs -----------------------------------------------------------------------------------

def pointwise_chain(x, y):
    return ((x * 2 + y).sin() * (x - y).exp()).tanh()


def unary_mix(x):
    return torch.sigmoid(x) + x.abs().sqrt() - torch.log1p(x.abs()) + torch.rsqrt(x * x + 1)


def broadcast_add(x, y):
    return x + y  # [4, 1, 5] + [3, 1] -> [4, 3, 5]


def broadcast_scalar(x, y, s):
    return x * y[None] + s  # s is a 0-d tensor


def clamp_hardtanh(x):
    return F.hardtanh(x, -0.5, 0.5) + x.clamp(min=-1.0, max=2.0)


def python_scalar_arg(x, alpha: float):
    return x * alpha + alpha


def sum_keepdim(x):
    return x.sum(dim=1, keepdim=True) * x


def amax_amin(x):
    return x.amax(dim=-1) - x.amin(dim=0).sum()


def argmax_fn(x):
    return x.argmax(dim=1), x.max(dim=0).values


def var_mean_fn(x):
    var, mean = torch.var_mean(x, dim=1, correction=1)
    return var, mean


def mean_std(x):
    return (x - x.mean(dim=0)) / (x.std(dim=0) + 1e-5)


def softmax_fn(x):
    return torch.softmax(x, dim=-1)


def log_softmax_fn(x):
    return F.log_softmax(x, dim=1)


def cumsum_fn(x):
    return torch.cumsum(x, dim=1)


def matmul_bias_gelu(x, w, b):
    return F.gelu(x @ w + b)


def bmm_fn(a, b, c):
    return torch.baddbmm(c, a, b).relu()


def conv1d_relu(x, w, b):
    return F.relu(F.conv1d(x, w, b, padding=1))


def pools(x):
    return F.max_pool2d(x, 2) + F.avg_pool2d(x, 2)


def gather_fn(x, idx):
    return torch.gather(x, 1, idx)


def scatter_fn(x, idx, src):
    return x.scatter(1, idx, src)


def scatter_add_fn(x, idx, src):
    return x.scatter_add(0, idx, src)


def index_put_fn(x, idx, v):
    return x.index_put((idx,), v, accumulate=True)


def index_select_fn(x, idx):
    return x[idx] * 2 + torch.index_select(x, 1, idx)


def views_fn(x):
    y = x.reshape(4, 6).permute(1, 0).contiguous().view(2, 3, 4)
    return y.transpose(1, 2).flatten(1) + 1


def slicing_fn(x):
    return x[1:, ::2] * x.narrow(1, 0, 3)[:-1] + x.select(0, 0)[:3]


def inplace_input(x, y):
    x.add_(y)
    x.mul_(2)
    return x.sum()


def inplace_view(x):
    x[:, 0].mul_(3)
    return x * 1


def cat_fn(x, y):
    return torch.cat([x, y, x * 2], dim=0)


def stack_fn(x, y):
    return torch.stack([x, y], dim=1).sum(dim=-1)


def chunk_fn(x):
    a, b, c = x.chunk(3, dim=1)
    return a * b, c


def where_fn(x, y):
    return torch.where(x > y, x, y * 2)


def masked_fill_fn(x, m):
    return x.masked_fill(m, -1.0).softmax(-1)


def mask_logic(x):
    m = (x > 0) & ~(x > 1)
    return x * m + m.float() - (x.abs() < 0.5).float()


def type_promotion(x, i):
    return (x + i).to(torch.float64) * 2


def expand_sum(x):
    return x.expand(3, 4, 5).sum(dim=(0, 2))


def dict_output(x):
    return {"double": x * 2, "pair": (x.sum(), x.max())}


def rand_add(x):
    return x + torch.rand_like(x)


def dropout_fn(x):
    return F.dropout(x, p=0.5, training=True)


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def _check_rand_add(inputs: list[Any], outputs: list[Any]) -> None:
    noise = outputs[0] - inputs[0]
    assert bool(((noise >= 0) & (noise <= 1)).all()), "rand_like noise outside [0, 1]"


def _check_dropout(inputs: list[Any], outputs: list[Any]) -> None:
    x, y = inputs[0].detach(), outputs[0].detach()
    kept = y != 0
    torch.testing.assert_close(y[kept], (x * 2)[kept])
    frac = kept.float().mean().item()
    assert 0.3 < frac < 0.7, f"dropout kept {frac:.2f} of values, expected about 0.5"


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x))).mean(dim=(2, 3))


class TiedEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.norm = nn.LayerNorm(6)

    def forward(self, idx):
        return self.norm(self.emb(idx)) @ self.emb.weight.t()


class Block(nn.Module):
    """A transformer-ish block: layer norm, attention by hand, MLP, residuals."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(8), nn.LayerNorm(8)
        self.qkv, self.proj = nn.Linear(8, 24), nn.Linear(8, 8)
        self.mlp = MLP_8()

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, dim=-1)
        x = x + self.proj(att @ v)
        return x + self.mlp(self.ln2(x))


class MLP_8(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(F.silu(self.fc1(x)))


E = dict  # expect= shorthand

CORPUS: list[Case] = [
    # pointwise and broadcasting
    Case("pointwise_chain", _fn(pointwise_chain), lambda: [randn(4, 5, grad=True), randn(4, 5, seed=1, grad=True)],
         trainable=True, expect=E(torch=("sin", "exp", "tanh"), aten=("aten.sin", "aten.exp", "aten.tanh"))),
    Case("unary_mix", _fn(unary_mix), lambda: [randn(3, 7, grad=True)], trainable=True,
         expect=E(torch=("sigmoid", "log1p"), aten=("aten.sigmoid", "aten.log1p", "aten.rsqrt"))),
    Case("broadcast_add", _fn(broadcast_add), lambda: [randn(4, 1, 5, grad=True), randn(3, 1, seed=1, grad=True)],
         trainable=True, expect=E(aten=("aten.add.Tensor",))),
    Case("broadcast_scalar", _fn(broadcast_scalar), lambda: [randn(2, 3), randn(3, seed=1), torch.tensor(0.5)],
         expect=E(aten=("aten.mul.Tensor",))),
    Case("clamp_hardtanh", _fn(clamp_hardtanh), lambda: [randn(5, 5, grad=True)], trainable=True,
         expect=E(torch=("hardtanh", "clamp"), aten=("aten.clamp",))),
    Case("python_scalar_arg", _fn(python_scalar_arg), lambda: [randn(4), 0.25], expect=E(aten=("aten.mul",))),
    # reductions
    Case("sum_keepdim", _fn(sum_keepdim), lambda: [randn(3, 4, grad=True)], trainable=True,
         expect=E(torch=("sum",), aten=("aten.sum.dim_IntList",))),
    Case("amax_amin", _fn(amax_amin), lambda: [randn(4, 6, grad=True)], trainable=True,
         expect=E(torch=("amax", "amin"), aten=("aten.amax", "aten.amin"))),
    Case("argmax", _fn(argmax_fn), lambda: [randn(5, 7)], expect=E(torch=("argmax",), aten=("aten.argmax",))),
    Case("var_mean", _fn(var_mean_fn), lambda: [randn(4, 9, grad=True)], trainable=True,
         expect=E(torch=("var_mean",), aten=("aten.var_mean",))),
    Case("mean_std", _fn(mean_std), lambda: [randn(6, 3, grad=True)], trainable=True, rtol=1e-4, atol=1e-5,
         expect=E(torch=("std",), aten=("aten.sqrt",))),
    Case("cumsum", _fn(cumsum_fn), lambda: [randn(3, 8, grad=True)], trainable=True, expect=E(aten=("aten.cumsum",))),
    # softmax family
    Case("softmax", _fn(softmax_fn), lambda: [randn(4, 10, grad=True)], trainable=True,
         expect=E(torch=("softmax",), aten=("aten._softmax",))),
    Case("log_softmax", _fn(log_softmax_fn), lambda: [randn(4, 10, grad=True)], trainable=True,
         expect=E(torch=("log_softmax",), aten=("aten._log_softmax",))),
    Case("masked_softmax", _fn(masked_fill_fn), lambda: [randn(3, 6, grad=True), randn(3, 6, seed=2) > 0.5],
         trainable=True, expect=E(torch=("masked_fill",), aten=("aten.where",))),
    # normalization
    Case("layer_norm", _module(lambda: nn.LayerNorm(8)), lambda: [randn(4, 8, grad=True)], trainable=True,
         rtol=1e-4, atol=1e-5, expect=E(torch=("layer_norm",), aten=("aten.native_layer_norm",))),
    Case("group_norm", _module(lambda: nn.GroupNorm(2, 4)), lambda: [randn(2, 4, 3, 3, grad=True)], trainable=True,
         rtol=1e-4, atol=1e-5, expect=E(torch=("group_norm",), aten=("aten.native_group_norm",))),
    Case("batch_norm_train", _module(lambda: nn.BatchNorm1d(5)), lambda: [randn(6, 5, grad=True)], trainable=True,
         rtol=1e-4, atol=1e-5, mutates=True, expect=E(torch=("batch_norm",), aten=("aten._native_batch_norm_legit",))),
    Case("batch_norm_eval", _module(lambda: nn.BatchNorm1d(5), train=False), lambda: [randn(6, 5)],
         rtol=1e-4, atol=1e-5, expect=E(torch=("batch_norm",), aten=("aten._native_batch_norm_legit_no_training",))),
    # matmul family
    Case("linear_relu", _module(lambda: nn.Sequential(nn.Linear(6, 5), nn.ReLU())), lambda: [randn(3, 6, grad=True)],
         trainable=True, expect=E(torch=("linear", "relu"), aten=("aten.addmm", "aten.relu"))),
    Case("matmul_bias_gelu", _fn(matmul_bias_gelu),
         lambda: [randn(4, 5, grad=True), randn(5, 3, seed=1, grad=True), randn(3, seed=2, grad=True)],
         trainable=True, expect=E(torch=("gelu", "matmul"), aten=("aten.mm", "aten.gelu"))),
    Case("mlp", _module(MLP), lambda: [randn(5, 8)], trainable=True, rtol=1e-4, atol=1e-5,
         expect=E(torch=("linear", "gelu"), aten=("aten.addmm", "aten.gelu"))),
    Case("baddbmm_relu", _fn(bmm_fn), lambda: [randn(2, 3, 4, grad=True), randn(2, 4, 5, seed=1, grad=True),
                                               randn(2, 3, 5, seed=2)],
         trainable=True, expect=E(torch=("baddbmm",), aten=("aten.bmm",))),
    Case("sdpa", _fn(sdpa), lambda: [randn(1, 2, 5, 8, grad=True), randn(1, 2, 5, 8, seed=1, grad=True),
                                     randn(1, 2, 5, 8, seed=2, grad=True)],
         trainable=True, rtol=1e-4, atol=1e-5, expect=E(torch=("scaled_dot_product_attention",),
                                                       aten=("aten._scaled_dot_product_flash_attention_for_cpu",))),
    Case("transformer_block", _module(Block), lambda: [randn(2, 5, 8, grad=True)], trainable=True, rtol=1e-4, atol=1e-5,
         expect=E(torch=("layer_norm", "softmax", "silu"), aten=("aten.native_layer_norm", "aten._softmax"))),
    # convolution and pooling
    Case("conv_bn_relu", _module(ConvNet), lambda: [randn(2, 3, 6, 6, grad=True)], trainable=True, rtol=1e-4,
         atol=1e-5, mutates=True, expect=E(torch=("conv2d",), aten=("aten.convolution",))),
    Case("conv1d_relu", _fn(conv1d_relu), lambda: [randn(2, 3, 9, grad=True), randn(4, 3, 3, seed=1, grad=True),
                                                   randn(4, seed=2, grad=True)],
         trainable=True, rtol=1e-4, atol=1e-5, expect=E(torch=("conv1d",), aten=("aten.convolution",))),
    Case("pools", _fn(pools), lambda: [randn(2, 3, 6, 6, grad=True)], trainable=True,
         expect=E(torch=("max_pool2d", "avg_pool2d"), aten=("aten.max_pool2d_with_indices", "aten.avg_pool2d"))),
    # embedding, gather/scatter, indexing
    Case("embedding_tied", _module(TiedEmbedding), lambda: [randint(10, 2, 3)], trainable=True, rtol=1e-4, atol=1e-5,
         expect=E(torch=("embedding",), aten=("aten.embedding",))),
    Case("gather", _fn(gather_fn), lambda: [randn(4, 6, grad=True), randint(6, 4, 3)], trainable=True,
         expect=E(torch=("gather",), aten=("aten.gather",))),
    Case("scatter", _fn(scatter_fn), lambda: [randn(3, 5), randint(5, 3, 2), randn(3, 2, seed=1)],
         expect=E(torch=("scatter",), aten=("aten.scatter",))),
    Case("scatter_add", _fn(scatter_add_fn), lambda: [randn(4, 3, grad=True), randint(4, 5, 3), randn(5, 3, seed=1, grad=True)],
         trainable=True, expect=E(torch=("scatter_add",), aten=("aten.scatter_add",))),
    Case("index_put_accumulate", _fn(index_put_fn), lambda: [randn(5, 3, grad=True), randint(5, 4), randn(4, 3, seed=1)],
         trainable=True, expect=E(torch=("index_put",), aten=("aten.index_put",))),
    Case("index_select", _fn(index_select_fn), lambda: [randn(4, 4, grad=True), randint(4, 4)], trainable=True,
         expect=E(aten=("aten.index", "aten.index_select"))),
    # views and mutation
    Case("views", _fn(views_fn), lambda: [randn(2, 3, 4, grad=True)], trainable=True,
         expect=E(torch=("permute", "transpose"), aten=("aten.permute", "aten.view"))),
    Case("slicing", _fn(slicing_fn), lambda: [randn(4, 6, grad=True)], trainable=True,
         expect=E(torch=("narrow", "select"), aten=("aten.slice", "aten.select"))),
    Case("inplace_input", _fn(inplace_input), lambda: [randn(3, 4), randn(3, 4, seed=1)], mutates=True,
         expect=E(torch=("add_", "mul_"), aten=("aten.copy_",))),
    Case("inplace_view", _fn(inplace_view), lambda: [randn(3, 4)], mutates=True,
         expect=E(torch=("mul_",), aten=("aten.copy_",))),
    # concatenation and splitting
    Case("cat", _fn(cat_fn), lambda: [randn(2, 3, grad=True), randn(1, 3, seed=1, grad=True)], trainable=True,
         expect=E(torch=("cat",), aten=("aten.cat",))),
    Case("stack", _fn(stack_fn), lambda: [randn(3, 4, grad=True), randn(3, 4, seed=1, grad=True)], trainable=True,
         expect=E(torch=("stack",), aten=("aten.cat",))),
    Case("chunk", _fn(chunk_fn), lambda: [randn(2, 6, grad=True)], trainable=True,
         expect=E(torch=("chunk",), aten=("aten.split",))),
    # where and masking
    Case("where", _fn(where_fn), lambda: [randn(4, 4, grad=True), randn(4, 4, seed=1, grad=True)], trainable=True,
         expect=E(torch=("where",), aten=("aten.where", "aten.gt"))),
    Case("mask_logic", _fn(mask_logic), lambda: [randn(5, 5, grad=True)], trainable=True,
         expect=E(aten=("aten.bitwise_and", "aten.bitwise_not"))),
    # dtypes, expansion, output structure
    Case("type_promotion", _fn(type_promotion), lambda: [randn(3, 3), randint(5, 3, 3)],
         expect=E(aten=("aten._to_copy",))),
    Case("expand_sum", _fn(expand_sum), lambda: [randn(4, 1, grad=True)], trainable=True, expect=E(aten=("aten.expand",))),
    Case("dict_output", _fn(dict_output), lambda: [randn(3, 4, grad=True)], trainable=True, expect=E(aten=("aten.max",))),
    # random ops
    Case("rand_add", _fn(rand_add), lambda: [randn(64, 8)], rng=True, rng_exact=("torch",), check=_check_rand_add,
         expect=E(torch=("rand_like",), aten=("aten.rand",))),
    Case("dropout", _fn(dropout_fn), lambda: [randn(32, 32, grad=True)], trainable=True, rng=True, rng_exact=("torch",),
         check=_check_dropout, expect=E(torch=("dropout",))),
    # dynamic shapes
    Case("dynamic_pointwise_sum", _fn(sum_keepdim), lambda: [randn(3, 4, grad=True)], trainable=True, dynamic=True,
         inputs2=lambda: [randn(7, 5, seed=3, grad=True)], expect=E(aten=("aten.sum",))),
    Case("dynamic_softmax", _fn(softmax_fn), lambda: [randn(4, 10, grad=True)], trainable=True, dynamic=True,
         inputs2=lambda: [randn(9, 13, seed=3, grad=True)], expect=E(aten=("aten._softmax",))),
    Case("dynamic_mlp", _module(MLP), lambda: [randn(5, 8)], trainable=True, dynamic=True, rtol=1e-4, atol=1e-5,
         inputs2=lambda: [randn(11, 8, seed=3)], expect=E(aten=("aten.addmm",))),
    Case("dynamic_cat_views", _fn(lambda x, y: torch.cat([x, y], 0).reshape(-1).relu()),
         lambda: [randn(3, 4), randn(2, 4, seed=1)], dynamic=True, inputs2=lambda: [randn(6, 4, seed=2), randn(5, 4, seed=3)],
         expect=E(aten=("aten.cat", "aten.view"))),
    Case("dynamic_layer_norm", _module(lambda: nn.LayerNorm(6)), lambda: [randn(2, 3, 6, grad=True)], trainable=True,
         dynamic=True, rtol=1e-4, atol=1e-5, inputs2=lambda: [randn(5, 7, 6, seed=4, grad=True)],
         expect=E(aten=("aten.native_layer_norm",))),
]

assert len({c.name for c in CORPUS}) == len(CORPUS), "duplicate corpus names"


def by_name(name: str) -> Case:
    """The corpus case called ``name``."""
    for case in CORPUS:
        if case.name == name:
            return case
    raise KeyError(f"no corpus case {name!r}; known: {[c.name for c in CORPUS]}")
