"""TORCH level, in the style of Thunder's executors: claim torch ops one by one, each with an
implementation; everything else runs eagerly between the claimed partitions.

    $ python examples/torch_level_executors.py
    claimed: {'torch.relu': 1, 'torch.nn.functional.gelu': 1, 'operator.add': 1}; eager: {'method.sin': 1}
"""
import operator

import torch

from torchvendor.sdk import TorchBackend, last_report, op_key, register_backend

# The vendor's executor: op key -> implementation (here torch itself stands in for vendor kernels).
IMPLEMENTATIONS = {
    "torch.relu": torch.relu,
    "torch.nn.functional.gelu": lambda x, approximate="none": torch.nn.functional.gelu(x, approximate=approximate),
    "operator.add": operator.add,
}


class Executors(TorchBackend):
    name = "example_executors"
    supported_ops = set(IMPLEMENTATIONS)

    def compile(self, gm, example_inputs):
        for node in gm.graph.nodes:  # every call in a partition is one the executor claimed
            if node.op == "call_function":
                node.target = IMPLEMENTATIONS[op_key(node.target)]
        gm.recompile()
        return gm


register_backend(Executors)


def main() -> None:
    f = torch.compile(lambda x: torch.nn.functional.gelu(torch.relu(x)).sin() + x, backend="example_executors")
    x = torch.randn(16, requires_grad=True)
    y = f(x)
    torch.testing.assert_close(y, torch.nn.functional.gelu(torch.relu(x)).sin() + x)
    y.sum().backward()  # the torch level keeps eager autograd: the implementations are differentiable
    report = last_report()
    print(f"claimed: {report.claimed_ops()}; eager: {report.unsupported()}")


if __name__ == "__main__":
    main()
