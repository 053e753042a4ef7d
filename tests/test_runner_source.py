"""The generated straight-line call of ProgramRunner (sdk/compile/runner_source.py): its source
for small programs (allocation at first use, ``del`` after last use, storage reuse), and that
what it runs matches eager, also with views, extern results and dynamic shapes."""
from __future__ import annotations

import re

import torch

from torchvendor.ir.loop_ir import Kernel, capture_loop
from torchvendor.sdk import ProgramRunner, loop_kernels, reference_kernel


def _runner(fn, inputs, **kw):
    with torch.no_grad():
        prog = capture_loop(fn, inputs, **kw).inference
    return prog, ProgramRunner(prog, {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)})


def _chain(x, w):
    # three matmuls with pointwise kernels between them: intermediates die one after another
    a = (x @ w).relu()
    b = (a @ w).sin()
    c = (b @ w).cos()
    return c * 2


def test_buffers_are_locals_made_at_first_use_and_dropped_after_last_use():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    prog, runner = _runner(_chain, [x, w])
    torch.testing.assert_close(runner(x, w)[0], _chain(x, w))
    source = runner.source(x, w)
    lines = source.splitlines()
    assert lines[0] == "def call(arg0_1, arg1_1):" and lines[-1].startswith("    return [")
    assert "env" not in source and "for " not in source  # straight-line: no loop over steps
    calls = [i for i, line in enumerate(lines) if re.search(r"\b_extern\d+\(|^    _kernel\d+\(", line)]
    assert len(calls) == len(prog.ops)
    (out,) = [o.name for o in prog.outputs]
    for op in prog.ops:  # each intermediate is dropped right after the last operation that touches it
        for name in op.writes():
            if name == out:
                continue
            touched = [i for i, line in enumerate(lines) if re.search(rf"\b{name}\b", line) and "del " not in line]
            dropped = [i for i, line in enumerate(lines) if re.search(rf"del .*\b{name}\b", line)]
            assert dropped and dropped[0] > max(touched), (name, source)
    assert not re.search(rf"del .*\b{out}\b", source)  # never the output


def test_a_dead_buffer_of_the_same_size_is_reused():
    """Pointwise kernels between matmuls write same-sized intermediates: the later ones take
    over the storage of dead ones instead of allocating."""
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    _, runner = _runner(_chain, [x, w])
    source = runner.source(x, w)
    reused = re.findall(r"(\w+) = (\w+); del \2  # reuse", source)  # the same layout: the tensor itself
    assert reused, source
    allocated = re.findall(r"(\w+) = _empty\(", source)
    for new, old in reused:
        assert new not in allocated
    for _ in range(3):  # reused storage: the result is still right on every call
        torch.testing.assert_close(runner(x, w)[0], _chain(x, w))


def test_outputs_and_inputs_are_never_donors():
    def f(x):
        a = x.sin()
        b = a.cos()  # a dies here, but a is returned
        return a, b * 3

    x = torch.randn(16)
    _, runner = _runner(f, [x])
    source = runner.source(x)
    assert "del arg0_1" not in source
    got = runner(x)
    for g, want in zip(got, f(x)):
        torch.testing.assert_close(g, want)
    assert got[0].data_ptr() != got[1].data_ptr()


def test_each_binding_of_the_size_symbols_gets_its_own_source():
    def f(x):
        return (x.softmax(-1) * 2).sum(0)

    x = torch.randn(6, 8)
    prog, runner = _runner(f, [x], dynamic=True)
    assert prog.size_vars
    scalars = dict(prog.scalar_inputs)
    (tensor,) = [n for n in prog.inputs if n not in scalars]

    def args(t):  # what Dynamo passes: the size symbols, then the tensor
        symbols = dict(zip(prog.buffer(tensor).size, t.shape))
        return [symbols[scalars[n]] if n in scalars else t for n in prog.inputs]

    small, large = torch.randn(3, 8), torch.randn(5, 16)
    for t in (small, large, small):
        torch.testing.assert_close(runner(*args(t))[0], f(t))
    a, b = runner.source(*args(small)), runner.source(*args(large))
    assert a != b and "16" in b and "16" not in a.split("\n", 1)[1]
    assert len(runner._calls) == 2  # written once per binding


def test_a_view_of_an_extern_result_is_made_from_it_and_reads_its_values():
    def g(x, w):
        y = x @ w
        return y.view(4, 2, 8).transpose(0, 1) * 2, y.view(2, 2, 2, 8)

    x, w = torch.randn(4, 8), torch.randn(8, 16)
    prog, runner = _runner(g, [x, w])
    (mm,) = [op for op in prog.ops if not isinstance(op, Kernel)]
    source = runner.source(x, w)
    assert re.search(rf"{mm.outputs[0]} = _as_buffer\(_extern0\(", source)
    assert f"_view({mm.outputs[0]}, " in source
    for got, want in zip(runner(x, w), g(x, w)):
        torch.testing.assert_close(got, want)


# ---- memory plan and the C++ replay (sdk/compile/runner_replay.py, csrc/device/replay.cpp) ----


def _late_reader(x, w):
    # `a` stays live to the end while same-sized intermediates come and go: storage reuse that
    # ignored its last use would hand `a`'s storage to one of them and change the result
    a = x.sin()
    b = (a @ w).cos()
    c = (b @ w).tanh()
    d = (c @ w).relu()
    return d * 3 + a


def _uses_after(ops, k, name, roots):
    """Whether an operation after index ``k`` touches ``name``'s storage (through any view)."""
    tree = {n for n, r in roots.items() if r == name} | {name}
    for op in ops[k + 1:]:
        names = op[2] if op[0] == "kernel" else op[2] + op[3] if op[0] == "call" else ()
        if tree & set(names):
            return True
    return False


def test_memory_plan_peaks_below_naive_and_never_reuses_a_live_buffer():
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    prog, runner = _runner(_late_reader, [x, w])
    want = _late_reader(x, w)
    torch.testing.assert_close(runner(x, w)[0], want)
    memory = runner.memory(x, w)
    assert memory["planned"] < memory["naive"], memory
    assert memory["allocations"] < memory["buffers"], memory  # some buffers took over dead storage
    written, _ = runner._written_call({})
    ops = written.ops
    roots = {op[1]: op[2] for op in ops if op[0] == "view"}
    reused = [(k, op[2]) for k, op in enumerate(ops) if op[0] == "reuse"]
    assert reused, ops
    for k, donor in reused:  # liveness recomputed here from the operations themselves
        assert not _uses_after(ops, k, donor, roots), (donor, ops)
    a = prog.ops[0].writes()[0]  # `a`: written by the first kernel, read by the last
    assert a not in {donor for _, donor in reused}
    fast = runner.replay(x, w)
    if fast is not None:
        torch.testing.assert_close(fast(x, w)[0], want)


def test_replay_runs_what_the_python_call_runs_and_declines_other_layouts():
    def f(x, w):
        a = (x @ w).relu()
        return (a @ w).sin() * 2, a.t(), x.sum()

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    _, runner = _runner(f, [x, w])
    fast = runner.replay(x, w)
    if fast is None:
        import pytest

        pytest.skip("this build of torchvendor._C has no Replay")
    for _ in range(3):
        got = fast(x, w)
        assert isinstance(got, list) and len(got) == 3
        for g, want, py in zip(got, f(x, w), runner(x, w)):
            torch.testing.assert_close(g, want)
            assert g.shape == py.shape and g.stride() == py.stride()
    assert fast(torch.randn(4, 8).t().contiguous().t(), w) is None      # other strides
    assert fast(torch.randn(4, 9), w) is None                            # other sizes
    assert fast(x.double(), w) is None                                   # other dtype
    assert fast(x, w, x) is None                                          # other arity

    class Sub(torch.Tensor):
        pass

    assert fast(x.as_subclass(Sub), w) is None                           # not a plain tensor
    tuple_form = runner.replay(x, w, form=1)
    assert isinstance(tuple_form(x, w), tuple)


def test_a_program_with_size_symbols_replays_the_binding_it_was_made_for():
    x = torch.randn(6, 8)
    prog, runner = _runner(lambda t, n: t.softmax(-1) * n, [x, 6], dynamic=True)
    assert prog.size_vars and prog.scalar_inputs
    scalars = dict(prog.scalar_inputs)
    (tensor,) = [b for b in prog.buffers if b.name in prog.inputs]

    def args(t, n=6):  # Dynamo's inputs: the tensor's sizes as symbols, the tensor, n
        bound = dict(zip(tensor.size, t.shape))
        return [bound.get(scalars[name], n) if name in scalars else t for name in prog.inputs]

    fast = runner.replay(*args(x))
    if fast is None:
        import pytest

        pytest.skip("this build of torchvendor._C has no Replay")
    torch.testing.assert_close(fast(*args(x))[0], x.softmax(-1) * 6)
    assert fast(*args(torch.randn(5, 8), 5)) is None      # another binding: the Python call runs it
    assert fast(*args(x, 7)) is None                       # another value of a scalar input
    assert fast(*args(x, 6.0)) is None                     # not an int
    other = runner.replay(*args(torch.randn(5, 8), 5))
    y = torch.randn(5, 8)
    torch.testing.assert_close(other(*args(y, 5))[0], y.softmax(-1) * 5)


def _partition_calls(monkeypatch):
    from torchvendor.sdk.compile import partition_call

    made = []
    init = partition_call.PartitionCall.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(partition_call.PartitionCall, "__init__", spy)
    return made


def _replayed_model(device, monkeypatch):
    import torchvendor.reference_backends.cpu  # noqa: F401 - registers torchvendor_cpu

    made = _partition_calls(monkeypatch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU()).to(device)
    compiled = torch.compile(model, backend="torchvendor_cpu", options={"strict": True})
    x = torch.randn(4, 16, device=device)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x).cpu(), model(x).cpu(), rtol=1e-4, atol=1e-5)
        assert made and all(p._replay is not None for p in made), [p._replay for p in made]
        assert all(p.record.calls == 3 for p in made)
        other = torch.randn(16, 4, device=device).t()  # another layout: the Python call runs it
        torch.testing.assert_close(compiled(other).cpu(), model(other).cpu(), rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


def test_compiled_partitions_replay_on_cpu(monkeypatch):
    _replayed_model("cpu", monkeypatch)


def test_compiled_partitions_replay_through_the_runtime_table(acme, monkeypatch):
    _replayed_model("acme", monkeypatch)


def test_constants_and_host_scalars_replay(acme, monkeypatch):
    """A program with a constant (made from the host on each call) and a device program reading
    a 0-d host tensor (its kernel runs on a device copy) replay too, and match eager."""
    import torchvendor.reference_backends.cpu  # noqa: F401

    made = _partition_calls(monkeypatch)

    def f(x, s):
        return (x * torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)).sin() * s

    compiled = torch.compile(f, backend="torchvendor_cpu", options={"strict": True})
    for device in ("cpu", "acme"):
        x, s = torch.randn(4, device=device), torch.tensor(2.5)
        with torch.no_grad():
            for _ in range(3):
                torch.testing.assert_close(compiled(x, s).cpu(), f(x, s).cpu())
    assert len(made) == 2 and all(p._replay is not None and p.record.calls == 3 for p in made)
    torch._dynamo.reset()


def test_host_buffers_on_one_storage_share_one_device_copy(acme):
    """A device kernel that writes a host buffer through one view and reads it through another
    (BEiT's relative position index: a CPU table built in the graph, fused with device work) runs
    on one device copy of their storage, copied back once; separate copies read stale values."""
    from torchvendor.sdk.compile.loop_runner import _on_device

    def kernel(base, view, out):  # writes through the view, then reads the base
        view.fill_(7)
        out.copy_(base.sum())

    base = torch.zeros(4, dtype=torch.long)
    out = torch.zeros((), dtype=torch.long, device="acme")
    _on_device(kernel, (0, 1), (1,), torch.device("acme"), base, base[2:], out)
    assert out.item() == 14 and base.tolist() == [0, 0, 7, 7]
