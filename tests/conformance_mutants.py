"""A pytest plugin module for tests/test_conformance.py's subprocess: registers a broken backend
(it drops input mutations) so the conformance pytest plugin has something to catch."""
import torch

from torchvendor.sdk import Backend, register_backend


class DroppedMutation(Backend):
    name = "tv_conf_dropped_mutation"

    def compile(self, gm, example_inputs):
        for n in list(gm.graph.nodes):
            if n.op == "call_function" and n.target == torch.ops.aten.copy_.default:
                n.replace_all_uses_with(n.args[1])
                gm.graph.erase_node(n)
        gm.recompile()
        return gm


register_backend(DroppedMutation)
