"""``compat.fx``: FX's private books behind the fast node edits, lazily compiled GraphModules,
pytree and ``make_fx``, on the installed release."""
from __future__ import annotations

import torch

from torchvendor.ir import compat


def test_fast_edits_match_create_and_erase_node() -> None:
    assert compat.HAS_FX_FAST_EDITS, "fx.Graph moved its private books: fx_insert_node takes the slow path"
    g = torch.fx.Graph()
    x = g.placeholder("x")
    out = g.output(x)
    n = compat.fx_insert_node(g, "call_function", torch.relu, (x,), {}, out)
    m = compat.fx_insert_node(g, "call_function", torch.relu, (n,), {}, out)
    out.args = (m,)
    assert [v.name for v in g.nodes] == ["x", "relu", "relu_1", "output"]
    assert g.find_nodes(op="call_function", target=torch.relu) == [n, m] and g._len == 4
    g.lint()
    out.args = (n,)
    compat.fx_erase_node(g, m)
    assert g._len == 3 and not n.users.keys() - {out}
    g.lint()
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    torch.testing.assert_close(gm(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 2.0]))


def test_lazy_graph_module_and_pytree() -> None:
    assert issubclass(compat.LazyGraphModule, torch.fx.GraphModule)
    leaves, spec = compat.tree_flatten({"a": [1, 2], "b": (3,)})
    assert leaves == [1, 2, 3]
    assert compat.tree_unflatten([4, 5, 6], spec) == {"a": [4, 5], "b": (6,)}


def test_make_fx_traces_aten() -> None:
    gm = compat.make_fx(lambda x: torch.relu(x) + 1, torch.ones(2))
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.aten.relu.default, torch.ops.aten.add.Tensor]
