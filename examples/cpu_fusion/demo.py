"""The IPEX-style story: a small CNN and an MLP compiled with fusions on ``cpu``; each matches
eager, and the report names the fusions.

    $ python examples/cpu_fusion/demo.py
    cnn fusions: {'conv_bn_relu->cpu_fusion.conv_bn_relu.default': 2}
    mlp fusions: {'linear_gelu->cpu_fusion.linear_gelu.default': 1}
"""
import torch

from torchvendor.sdk import last_report

import cpu_fusion  # noqa: F401  (registers "example_cpu_fusion")


def block(c_in: int, c_out: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 3, padding=1), torch.nn.BatchNorm2d(c_out), torch.nn.ReLU())


def main() -> None:
    cnn = torch.nn.Sequential(block(3, 8), block(8, 8), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
    for name, model, x in (("cnn", cnn, torch.randn(2, 3, 16, 16)), ("mlp", mlp, torch.randn(5, 16))):
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(model, backend="example_cpu_fusion")(x), model(x),
                                       rtol=1e-4, atol=1e-5)
        print(f"{name} fusions: {last_report().graphs[0].fusions}")


if __name__ == "__main__":
    main()
