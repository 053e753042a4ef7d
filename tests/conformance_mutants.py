"""Broken backends for tests/test_conformance.py that must live in an importable module (the
conformance pytest plugin's subprocess loads it with ``-p conformance_mutants``):

- ``tv_conf_dropped_mutation`` drops input mutations;
- ``tv_conf_fused_wrong_epilogue`` fuses matmul + bias + ReLU into one op, as vendors do, whose
  epilogue is wrong (ReLU before the bias add). Each must be caught by the suite."""
import torch

from torchvendor.sdk import AtenBackend, register_backend
from torchvendor.sdk.compile.fx_pattern import fx_rule


class DroppedMutation(AtenBackend):
    name = "tv_conf_dropped_mutation"

    def compile(self, gm, example_inputs):
        for n in list(gm.graph.nodes):
            if n.op == "call_function" and n.target == torch.ops.aten.copy_.default:
                n.replace_all_uses_with(n.args[1])
                gm.graph.erase_node(n)
        gm.recompile()
        return gm


register_backend(DroppedMutation)


@torch.library.custom_op("tv_conf::linear_relu", mutates_args=())
def linear_relu(bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The vendor's 'fused kernel', with the bug: the ReLU epilogue runs before the bias add."""
    return torch.relu(torch.mm(x, w)) + bias


@linear_relu.register_fake
def _(bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[1])


class FusedWrongEpilogue(AtenBackend):
    name = "tv_conf_fused_wrong_epilogue"
    patterns = (fx_rule(lambda b, x, w: torch.relu(torch.addmm(b, x, w)), "tv_conf.linear_relu.default", 3),)

    def compile(self, gm, example_inputs):
        return gm


register_backend(FusedWrongEpilogue)
