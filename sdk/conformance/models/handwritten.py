"""Hand-written models of the suite: recurrent nets, a top-k mixture of experts and models whose
work depends on the data (a boolean mask, data-dependent routing), the kinds of graph a
``transformers`` config does not give.

    >>> m = MoETopK(); x = torch.randn(2, 8, 32)
    >>> tuple(m(x).shape)
    (2, 8, 32)
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["LSTMLanguageModel", "GRUTagger", "MoETopK", "MaskedPooling", "ArgmaxRouting"]


class LSTMLanguageModel(nn.Module):
    """Embedding, a two-layer LSTM, a tied output projection: an RNN-style language model."""

    def __init__(self, vocab: int = 256, dim: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, num_layers=2, batch_first=True)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(ids))
        return self.norm(out) @ self.embed.weight.t()


class GRUTagger(nn.Module):
    """A bidirectional GRU over features, a per-step classifier (sequence tagging)."""

    def __init__(self, dim: int = 24, hidden: int = 32, tags: int = 10) -> None:
        super().__init__()
        self.gru = nn.GRU(dim, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, tags)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return torch.log_softmax(self.head(out), -1)


class MoETopK(nn.Module):
    """A mixture-of-experts layer with top-k routing: softmax gates, ``topk``, per-expert masks
    and ``index_add`` of the weighted expert outputs (the dense-dispatch form MoE models trace to)."""

    def __init__(self, dim: int = 32, experts: int = 4, k: int = 2, hidden: int = 64) -> None:
        super().__init__()
        self.k = k
        self.gate = nn.Linear(dim, experts, bias=False)
        self.up = nn.ModuleList(nn.Linear(dim, hidden) for _ in range(experts))
        self.down = nn.ModuleList(nn.Linear(hidden, dim) for _ in range(experts))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        flat = self.norm(x).reshape(-1, d)
        weights, chosen = torch.softmax(self.gate(flat), -1).topk(self.k, -1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e, (up, down) in enumerate(zip(self.up, self.down)):
            w = (weights * (chosen == e)).sum(-1, keepdim=True)  # zero where expert e was not chosen
            out = out + w * down(torch.nn.functional.silu(up(flat)))
        return x + out.view(b, t, d)


class MaskedPooling(nn.Module):
    """Data-dependent shapes: keep the tokens whose score is positive (boolean indexing, a
    size known only at run time), pool them, and scatter a correction back with ``index_put``."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.score = nn.Linear(dim, 1)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        keep = self.score(flat).squeeze(-1) > 0
        kept = self.proj(flat[keep])
        pooled = kept.sum(0) / keep.sum().clamp_min(1)
        out = flat.clone()
        out[keep] = kept + pooled
        return out.view_as(x)


class ArgmaxRouting(nn.Module):
    """Hard routing: each token goes to the expert of its argmax logit (``gather`` of per-expert
    weights by a data-dependent index), as in switch-style layers without a capacity limit."""

    def __init__(self, dim: int = 32, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(dim, experts)
        self.weight = nn.Parameter(torch.randn(experts, dim, dim) / dim ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.router(x)
        choice = logits.argmax(-1)
        prob = torch.softmax(logits, -1).gather(-1, choice.unsqueeze(-1))
        w = self.weight[choice]  # (b, t, dim, dim): a gather by the routing index
        return x + prob * torch.einsum("btd,btde->bte", x, w)
