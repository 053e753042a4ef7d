"""ATEN level, in the style of Torch-TensorRT: claim ops, keep partitions of at least three ops
(smaller ones run eagerly), and fuse matmul + bias + gelu into one vendor op before partitioning.

    $ python examples/aten_level_fusion.py
    fusions: {'acme.linear_gelu.default': 1}
    compiled: {'aten.permute.default': 3, 'acme.linear_gelu.default': 1, 'aten.addmm.default': 2, 'aten.relu.default': 1}
    eager: {'aten._softmax.default': 1, 'aten.mul.Tensor': 1}
"""
import torch

from torchvendor.sdk import Backend, last_report, register_backend
from torchvendor.sdk.fx_pattern import fx_rule


@torch.library.custom_op("acme::linear_gelu", mutates_args=())
def linear_gelu(bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(torch.addmm(bias, x, w))  # stands in for the vendor's fused kernel


@linear_gelu.register_fake
def _(bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[1])


class Acme(Backend):
    name = "example_aten_fusion"
    supported_ops = {"aten.mm", "aten.addmm", "aten.add", "aten.mul", "aten.relu", "aten.gelu", "aten.permute",
                     "acme.linear_gelu"}
    min_partition_size = 3  # Torch-TensorRT's min_block_size
    patterns = (fx_rule(lambda b, x, w: torch.nn.functional.gelu(torch.addmm(b, x, w)), "acme.linear_gelu.default", 3),)

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
    print(f"eager: {report.unsupported()}")


if __name__ == "__main__":
    main()
