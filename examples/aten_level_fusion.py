"""ATEN level, in the style of Torch-TensorRT: claim ops, keep partitions of at least three ops
(smaller ones run eagerly), and fuse matmul + bias + gelu into one vendor op before partitioning,
with the stock pattern (2-D and N-d, static and dynamic shapes) and a declared fused op.

    $ python examples/aten_level_fusion.py
    fusions: {'linear_gelu->acme.linear_gelu.default': 1}
    compiled: {'aten.permute.default': 3, 'acme.linear_gelu.default': 1, 'aten.addmm.default': 2, 'aten.relu.default': 1}
    not claimed (eager): {'aten._softmax.default': 1}
    claimed, left outside (eager): {'aten.mul.Tensor': {'in a partition of 1 compute node(s), below min_size=3': 1}}
"""
import torch

from torchvendor.sdk import AtenBackend, fused_op, last_report, register_backend
from torchvendor.sdk.compile import patterns as stock


@fused_op("acme::linear_gelu")  # a torch.library op; its fake impl and autograd come from this reference
def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w + b, approximate=approximate)  # stands in for the vendor's kernel


class Acme(AtenBackend):
    name = "example_aten_fusion"
    supported_ops = {"aten.mm", "aten.addmm", "aten.add", "aten.mul", "aten.relu", "aten.gelu", "aten.permute",
                     linear_gelu.key}
    min_partition_size = 3  # Torch-TensorRT's min_block_size
    patterns = stock.rules("linear_gelu", linear_gelu.key)

    def compile(self, gm, example_inputs):
        return gm  # a real vendor builds an engine from gm.graph here


register_backend(Acme)


def main() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 4), torch.nn.Softmax(-1))
    model = lambda x: mlp(x) * 2  # noqa: E731  (the lone mul after the softmax is below the minimum size)
    x = torch.randn(5, 16)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="example_aten_fusion")(x), model(x))
    report = last_report()
    print(f"fusions: {report.graphs[0].fusions}")
    print(f"compiled: {report.claimed_ops()}")
    print(f"not claimed (eager): {report.unsupported()}")
    print(f"claimed, left outside (eager): {report.left_outside()}")


if __name__ == "__main__":
    main()
