"""The whole-graph story: a model compiles whole; a function with a graph break and an op the
compiler cannot lower runs correctly anyway, and the counters say why it did not compile whole;
with ``strict=True`` the same function raises with that reason.

    $ python examples/whole_graph/demo.py
    mlp: {'graphs': 1, 'compiled_whole': 1, 'graph_breaks': 0, 'unsupported_ops': {}}
    break + sort: {'graphs': 3, 'compiled_whole': 2, 'graph_breaks': 1, 'unsupported_ops': {'aten.sort.default': 1}}
    strict: not compiled whole: 1 op(s) without a lowering: aten.sort.default x1
"""
import re
import warnings

import torch

from whole_graph import metrics


def broken(x: torch.Tensor) -> torch.Tensor:
    y = torch.relu(x) * 2
    print("", end="")  # a graph break
    return torch.sort(y).values + 1  # sort has no lowering


def main() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4), torch.nn.Softmax(-1))
    x = torch.randn(8, 16)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(mlp, backend="example_whole_graph")(x), mlp(x))
        print(f"mlp: {metrics()}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the uncompiled graph's warning: its reason is in the report
            torch.testing.assert_close(torch.compile(broken, backend="example_whole_graph")(x), broken(x))
        print(f"break + sort: {metrics()}")
        try:
            torch.compile(lambda x: torch.sort(x).values, backend="example_whole_graph", options={"strict": True})(x)
        except Exception as e:  # Dynamo wraps the backend's BackendError
            print("strict:", re.search(r"not compiled whole: [^\n]*?x\d+", str(e)).group(0))


if __name__ == "__main__":
    main()
