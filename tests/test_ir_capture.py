"""Capture every corpus program at torch and ATen level, print it, run it through the reference
interpreter and compare with eager PyTorch (``torch.testing.assert_close`` defaults, i.e. OpInfo
tolerances, unless the case overrides them); trainable programs also compare ``run_backward``
with eager autograd; dynamic programs also run on other sizes without recapture."""
from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from ir_corpus import CORPUS, SEED, Case, by_name
from torchvendor.ir import aten_ir_hook, capture, compat, decompositions as D, torch_ir_hook
from torchvendor.ir.program import Program, default_grad_outputs, flatten_inputs, flatten_outputs


def clone_inputs(inputs: list[Any]) -> list[Any]:
    leaves, spec = compat.tree_flatten(list(inputs))
    out = [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x for x in leaves]
    return compat.tree_unflatten(out, spec)


def _detach(xs: list[Any]) -> list[Any]:
    return [x.detach() if isinstance(x, torch.Tensor) else x for x in xs]


def eager_grads(fn: Any, inputs: list[Any], grad_outputs: list[Any] | None = None) -> tuple[dict[str, torch.Tensor], list]:
    torch.manual_seed(SEED)
    outs = flatten_outputs(fn(*inputs))
    gouts = grad_outputs if grad_outputs is not None else default_grad_outputs(outs)
    pairs = [(o, g) for o, g in zip(outs, gouts) if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
    leaves = [(f"input{i}", x) for i, x in enumerate(flatten_inputs(inputs))
              if isinstance(x, torch.Tensor) and x.requires_grad]
    if isinstance(fn, torch.nn.Module):
        leaves += [(n, p) for n, p in fn.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad([o for o, _ in pairs], [t for _, t in leaves], [g for _, g in pairs], allow_unused=True)
    return {k: g for (k, _), g in zip(leaves, grads) if g is not None}, gouts


def check_forward(case: Case, level: str, prog: Program, fn: Any, ref_fn: Any, inputs: list[Any]) -> None:
    a, b = clone_inputs(inputs), clone_inputs(inputs)
    torch.manual_seed(SEED)
    expected = _detach(flatten_outputs(ref_fn(*a)))
    torch.manual_seed(SEED)
    got = _detach(prog.run(*b))
    assert len(got) == len(expected), f"{case.name}: {len(got)} outputs, eager has {len(expected)}"
    if case.rng and level not in case.rng_exact:
        for g, e in zip(got, expected):
            assert (g.shape, g.dtype) == (e.shape, e.dtype)
        case.check(b, got)
    else:
        torch.testing.assert_close(got, expected, **case.tolerances)
    if case.mutates:
        torch.testing.assert_close(_detach(flatten_inputs(b)), _detach(flatten_inputs(a)), **case.tolerances)
        if isinstance(fn, torch.nn.Module):
            torch.testing.assert_close(dict(fn.named_buffers()), dict(ref_fn.named_buffers()), **case.tolerances)


def check_backward(case: Case, level: str, prog: Program, ref_fn: Any, inputs: list[Any]) -> None:
    a, b = clone_inputs(inputs), clone_inputs(inputs)
    expected, gouts = eager_grads(ref_fn, a)
    torch.manual_seed(SEED)
    got = prog.run_backward(*b, grad_outputs=gouts)
    assert sorted(got) == sorted(expected), f"{case.name}: gradient keys {sorted(got)} != eager {sorted(expected)}"
    if case.rng and level not in case.rng_exact:
        for k in expected:
            assert got[k].shape == expected[k].shape
    else:
        torch.testing.assert_close(got, expected, **case.tolerances)


def check_case(case: Case, level: str, *, expect: bool = True, **capture_kwargs: Any) -> Program:
    fn = case.make()
    prog = capture(fn, case.inputs(), level, training=case.trainable, dynamic=case.dynamic, **capture_kwargs)
    assert prog.level == level
    text = str(prog)
    assert text.strip()
    for needle in case.expect.get(level, ()) if expect else ():
        assert needle in text, f"{case.name}: {needle!r} not in the printed {level} program:\n{text}"
    # Capture ran fn once (a module's buffers moved on); the reference starts from the same state.
    ref_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    for inputs in [case.inputs()] + ([case.inputs2()] if case.dynamic else []):
        check_forward(case, level, prog, fn, ref_fn, inputs)
        if case.trainable:
            check_backward(case, level, prog, ref_fn, inputs)
    return prog


# The default run covers every category of the corpus (pointwise, broadcasting, scalars,
# reductions, softmax, norms with buffer mutation, matmul, attention, convolution, embedding,
# scatter/index_put, views, input mutation, pytree outputs, random ops, dynamic shapes, training);
# `-m slow` runs every case at both levels.
FAST = {"pointwise_chain", "broadcast_add", "python_scalar_arg", "argmax", "var_mean", "softmax",
        "batch_norm_train", "linear_relu", "sdpa", "conv1d_relu", "embedding_tied", "scatter_add",
        "index_put_accumulate", "views", "inplace_input", "inplace_view", "where", "dict_output",
        "rand_add", "dropout", "dynamic_softmax", "dynamic_cat_views"}
assert FAST <= {c.name for c in CORPUS}


def _corpus_params(fast: bool) -> list[Any]:
    return [pytest.param(c, id=c.name) for c in CORPUS if (c.name in FAST) == fast]


@pytest.mark.parametrize("level", ["torch", "aten"])
@pytest.mark.parametrize("case", _corpus_params(fast=True))
def test_corpus(case: Case, level: str) -> None:
    check_case(case, level)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["torch", "aten"])
@pytest.mark.parametrize("case", _corpus_params(fast=False))
def test_corpus_rest(case: Case, level: str) -> None:
    check_case(case, level)


# A representative subset through the prims retrace (the full cross product is slow).
PRIMS_CASES = ["pointwise_chain", "layer_norm", "dynamic_softmax"]


@pytest.mark.parametrize("name", PRIMS_CASES)
def test_corpus_prims(name: str) -> None:
    prog = check_case(by_name(name), "aten", expect=False, decompositions=D.prims())
    assert "torch.ops.prims." in str(prog)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CORPUS if c.name not in PRIMS_CASES], ids=lambda c: c.name)
def test_corpus_prims_all(case: Case) -> None:
    check_case(case, "aten", expect=False, decompositions=D.prims())


# ---- API behaviour --------------------------------------------------------------------------------

def test_torch_program_parts() -> None:
    case = by_name("mlp")
    prog = capture(case.make(), case.inputs(), "torch")
    assert sorted(prog.parameters().values()) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert [s.kind for s in prog.slots].count("input") == 1
    assert all(compat.is_fake(f) for f in prog.fake_inputs)
    assert not any(compat.is_fake(x) for x in prog.example_inputs)
    assert any(g.startswith("TENSOR_MATCH") for g in prog.guards)
    assert "guards (" in str(prog)


def test_dynamic_symbols() -> None:
    case = by_name("dynamic_softmax")
    for level in ("torch", "aten"):
        prog = capture(case.make(), case.inputs(), level, dynamic=True)
        assert any(s.kind == "symint" for s in prog.slots), prog.slots
        with pytest.raises(ValueError, match="rank"):
            prog.run(torch.randn(3))


def test_static_shape_error_names_dynamic() -> None:
    prog = capture(lambda x: x + 1, [torch.randn(2, 3)], "aten")
    with pytest.raises(ValueError, match="dynamic=True"):
        prog.run(torch.randn(4, 3))


def test_errors() -> None:
    with pytest.raises(ValueError, match="unknown IR level"):
        capture(lambda x: x, [torch.ones(1)], "hlo")
    with pytest.raises(ValueError, match="torch IR is not decomposed"):
        capture(lambda x: x + 1, [torch.ones(1)], "torch", decompositions=D.core_aten())
    with pytest.raises(ValueError, match="no output requires grad"):
        capture(lambda x: x * 2, [torch.ones(2)], "aten", training=True)
    with pytest.raises(RuntimeError, match="training=False"):
        capture(lambda x: x * 2, [torch.ones(2)], "torch").run_backward(torch.ones(2))


def test_capture_does_not_mutate_example_inputs() -> None:
    x = torch.zeros(3)
    capture(lambda t: t.add_(1), [x], "aten")
    assert bool((x == 0).all())


def test_many_captures_of_one_function_never_hit_the_recompile_limit() -> None:
    def f(x):
        return x.cos() + 1

    for i in range(12):  # more than Dynamo's recompile_limit (8)
        prog = capture(f, [torch.randn(i + 2)], "torch")
        assert prog.run(torch.zeros(i + 2))[0].eq(2).all()


def test_custom_keep_and_composite_warning() -> None:
    def f(x):
        return torch.nn.functional.silu(x) * 2

    x = [torch.randn(4)]
    assert "aten.silu" not in str(capture(f, x, "aten"))
    prog = capture(f, x, "aten", decompositions=D.custom(keep=["aten.silu"]))
    assert "aten.silu.default" in str(prog)
    prog = capture(f, x, "aten", decompositions=D.prims().keeping("aten.silu"))
    assert "aten.silu.default" in str(prog) and "prims.mul" in str(prog)
    torch.testing.assert_close(prog.run(*x), [f(*x)])
    with pytest.warns(UserWarning, match="CompositeImplicitAutograd"):
        D.custom(keep=["aten.linear"])


def test_table_values_combine() -> None:
    a = D.custom(keep=["aten.silu"])
    b = D.none().adding("aten.silu", "aten.hardswish")
    both = a | b
    assert torch.ops.aten.silu.default in both.keep and torch.ops.aten.silu.default not in both
    assert torch.ops.aten.hardswish.default in both
    assert len(D.none()) == 0 and not D.core_aten().to_prims and D.prims().to_prims
    with pytest.raises(TypeError, match="DecompositionTable"):
        capture(lambda x: x, [torch.ones(1)], "aten", decompositions=["aten.silu"])


def test_hooks_as_plain_dynamo_backends() -> None:
    seen: dict[str, Any] = {}
    f = torch.compile(lambda x: torch.tanh(x) * 3, backend=torch_ir_hook(lambda gm, ex: seen.setdefault("torch", gm)))
    torch.testing.assert_close(f(torch.ones(2)), torch.tanh(torch.ones(2)) * 3)
    be = aten_ir_hook(fw=lambda gm, ex: seen.setdefault("fw", gm), bw=lambda gm, ex: seen.setdefault("bw", gm))
    x = torch.randn(3, requires_grad=True)
    torch.compile(lambda t: (t.sin() * 2).sum(), backend=be)(x).backward()
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())
    assert set(seen) == {"torch", "fw", "bw"}
    assert "aten.sin" in seen["fw"].code and "aten.cos" in seen["bw"].code


def test_aten_program_views_the_torch_program() -> None:
    case = by_name("linear_relu")
    prog = capture(case.make(), case.inputs(), "aten", training=True)
    assert prog.torch_program.level == "torch"
    assert set(prog.graphs()) == {"forward", "backward"}
    assert "backward graph:" in str(prog) and "saved" in str(prog)


@pytest.mark.parametrize("name", ["mlp", "batch_norm_train", "slicing", "dynamic_softmax", "index_put_accumulate"])
def test_json_roundtrip(name: str) -> None:
    """Every graph of a program survives JSON and runs to the same values."""
    import json

    from torchvendor.ir.fx_graph import graph_from_json, run_graph

    case = by_name(name)
    for level in ("torch", "aten"):
        prog = capture(case.make(), case.inputs(), level, training=case.trainable, dynamic=case.dynamic)
        text = prog.to_json()
        assert isinstance(text, str)
        data = json.loads(text)
        assert (data["format"], data["version"], data["level"]) == ("torchvendor.program", 1, level)
        graphs = {"graph": prog.graph_module} if level == "torch" else prog.graphs()
        main = "graph" if level == "torch" else ("forward" if case.trainable else "inference")
        args = prog._binder.bind(flatten_inputs(case.inputs()))
        restored = graph_from_json(data["graph"] if level == "torch" else data["graphs"][main])
        with torch.no_grad():
            want = run_graph(graphs[main], [a.clone() if isinstance(a, torch.Tensor) else a for a in args])
            got = run_graph(restored, [a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        torch.testing.assert_close(got, want, **case.tolerances)
        assert [s["kind"] for s in data["slots"]] == [s.kind for s in prog.slots]


def _check_program_roundtrip(case: Case, level: str) -> None:
    """``from_json(to_json())`` gives a program of the same class that prints the same inputs,
    runs to the same outputs and, for training captures, the same gradients."""
    fn = case.make()
    prog = capture(fn, case.inputs(), level, training=case.trainable, dynamic=case.dynamic)
    module = fn if isinstance(fn, torch.nn.Module) else None
    back = type(prog).from_json(prog.to_json(), module=module)
    assert type(back) is type(prog) and (back.level, back.training, back.dynamic) == (level, prog.training, prog.dynamic)
    assert str(back).split("\n")[:len(prog.slots) + 2] == str(prog).split("\n")[:len(prog.slots) + 2]
    assert back.to_json() == prog.to_json()
    for inputs in [case.inputs()] + ([case.inputs2()] if case.dynamic else []):
        torch.manual_seed(SEED)
        want = _detach(prog.run(*clone_inputs(inputs)))
        torch.manual_seed(SEED)
        torch.testing.assert_close(_detach(back.run(*clone_inputs(inputs))), want, **case.tolerances)
        if case.trainable:
            torch.testing.assert_close(back.run_backward(*clone_inputs(inputs)),
                                       prog.run_backward(*clone_inputs(inputs)), **case.tolerances)


@pytest.mark.parametrize("level", ["torch", "aten", "loop"])
@pytest.mark.parametrize("name", ["mlp", "dynamic_softmax", "index_put_accumulate", "dict_output"])
def test_program_json_roundtrip(name: str, level: str) -> None:
    _check_program_roundtrip(by_name(name), level)


def test_program_json_errors() -> None:
    import json

    from torchvendor.ir.aten_ir import AtenProgram
    from torchvendor.ir.torch_ir import TorchProgram

    lin = torch.nn.Linear(3, 2)
    text = capture(lin, [torch.randn(4, 3)], "aten").to_json()
    assert isinstance(Program.from_json(text, module=lin), AtenProgram)
    data = json.loads(text)
    with pytest.raises(ValueError, match="version 99 is not supported by this reader \\(it reads version 1\\)"):
        Program.from_json(json.dumps({**data, "version": 99}))
    with pytest.raises(ValueError, match="this is a aten-level program \\(AtenProgram\\); TorchProgram.from_json reads torch"):
        TorchProgram.from_json(text)
    with pytest.raises(ValueError, match="not a torchvendor program"):
        Program.from_json(json.dumps({"nodes": []}))
    with pytest.raises(ValueError, match="unknown IR level 'tensor'"):
        Program.from_json(json.dumps({**data, "level": "tensor"}))
    # parameters are referenced by name: running without the module says what to pass
    with pytest.raises(ValueError, match="parameter weight of its module, but no module was given: pass module="):
        Program.from_json(text).run(torch.randn(4, 3))
    with pytest.raises(ValueError, match="the module has no parameter 'weight'"):
        Program.from_json(text, module=torch.nn.ReLU()).run(torch.randn(4, 3))


class _T5LikeTied(torch.nn.Module):
    """T5's tying: the encoder's embedding module *is* the shared one, so ``shared.weight`` and
    ``encoder.embed_tokens.weight`` are one parameter; ``named_parameters()`` names it once."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = torch.nn.Embedding(10, 4)
        self.encoder = torch.nn.Module()
        self.encoder.embed_tokens = self.shared
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.encoder.embed_tokens(ids)).tanh().sum() + self.shared(ids).mean()


@pytest.mark.parametrize("level", ["torch", "aten", "loop"])
def test_tied_parameter_gradient_keyed_as_named_parameters(level: str) -> None:
    torch.manual_seed(SEED)
    model = _T5LikeTied()
    ids = torch.tensor([[1, 2, 3], [4, 5, 1]])
    names = [n for n, _ in model.named_parameters()]
    assert "encoder.embed_tokens.weight" not in names and "shared.weight" in names
    grads = capture(model, [ids], level, training=True).run_backward(ids)
    assert sorted(grads) == sorted(names)
    model.zero_grad()
    model(ids).backward()
    torch.testing.assert_close(grads, {n: p.grad for n, p in model.named_parameters()}, rtol=1e-4, atol=1e-5)


_closed_over = torch.nn.Linear(3, 2)  # a global the function below reads, as scripts often do


@pytest.mark.parametrize("level", ["torch", "aten", "loop"])
def test_training_capture_of_a_function_closing_over_a_module(level: str) -> None:
    """As torch.compile(f) trains the parameters of a module f closes over, capture(f,
    training=True) captures their gradients, keyed by variable name and parameter name."""
    torch.manual_seed(SEED)
    head = torch.nn.Linear(2, 1)

    def f(x: torch.Tensor) -> torch.Tensor:
        return head(torch.relu(_closed_over(x))).sum()

    x = torch.randn(4, 3)
    prog = capture(f, [x], level, training=True)
    grads = prog.run_backward(x)
    assert sorted(grads) == ["_closed_over.bias", "_closed_over.weight", "head.bias", "head.weight"]
    for m in (head, _closed_over):
        m.zero_grad()
    torch.compile(f, backend="eager")(x).backward()
    want = {f"{var}.{n}": p.grad for var, m in (("head", head), ("_closed_over", _closed_over))
            for n, p in m.named_parameters()}
    torch.testing.assert_close(grads, want)


def test_loop_level_delegates() -> None:
    prog = capture(lambda x: x.relu() + 1, [torch.randn(8)], "loop")
    assert prog.level == "loop"
