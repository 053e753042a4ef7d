"""IPEX-style: a backend on the ``cpu`` device itself that rewrites the patterns Intel's extension
fuses into fused CPU kernels: linear + GELU (one GEMM with the bias, GELU on its output) and
convolution + batch norm + ReLU (the batch norm folded into the convolution's weights). Everything
else runs as ATen on the CPU, so the backend claims every op.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

from torchvendor.sdk import AtenBackend, fused_op, register_backend
from torchvendor.sdk.compile import patterns as stock


@fused_op("cpu_fusion::linear_gelu")
def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    return F.gelu(x @ w + b, approximate=approximate)  # the reference: what the fused kernel computes


@linear_gelu.register_kernel("cpu")
def _(x, w, b, *, approximate="none"):
    out = torch.addmm(b, x.reshape(-1, x.shape[-1]), w)
    return F.gelu(out, approximate=approximate).reshape(*x.shape[:-1], w.shape[-1])


@fused_op("cpu_fusion::conv_bn_relu")
def conv_bn_relu(x: torch.Tensor, w: torch.Tensor, bn_w: torch.Tensor, bn_b: torch.Tensor, mean: torch.Tensor,
                 var: torch.Tensor, bias: Optional[torch.Tensor] = None, *, eps: float, stride: list[int],
                 padding: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    y = torch.convolution(x, w, bias, stride, padding, dilation, False, [0] * len(stride), groups)
    return torch.relu(F.batch_norm(y, mean, var, bn_w, bn_b, False, 0.0, eps))


@conv_bn_relu.register_kernel("cpu")
def _(x, w, bn_w, bn_b, mean, var, bias=None, *, eps, stride, padding, dilation, groups):
    scale = bn_w * torch.rsqrt(var + eps)  # batch norm folded into the weights: one convolution
    shift = bn_b + ((bias if bias is not None else 0) - mean) * scale
    w = w * scale.reshape(-1, *[1] * (w.dim() - 1))
    return torch.convolution(x, w, shift, stride, padding, dilation, False, [0] * len(stride), groups).relu_()


class CpuFusion(AtenBackend):
    name = "example_cpu_fusion"
    device = "cpu"
    patterns = [*stock.rules("linear_gelu", linear_gelu.key), *stock.rules("conv_bn_relu", conv_bn_relu.key)]

    def compile(self, gm: Any, example_inputs: list[Any]) -> Any:
        return gm  # the fused ops run their kernels above; every other op runs as ATen on the CPU


dynamo_backend = register_backend(CpuFusion)
