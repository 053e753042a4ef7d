"""AOTAutograd's boxed calling convention through the SDK (sdk/compile/aot_flow.py,
partition_call.py, loop_runner.py): a compiled graph takes AOTAutograd's argument list and
clears it, each partition gets its inputs in a list of its own, and the LOOP runner drops each
input after its last use, so a backward's saved activations are freed as it runs (Inductor's
compiled graphs do the same), not held to the end of the call."""
from __future__ import annotations

import weakref

import pytest
import torch

import torchvendor.reference_backends.cpu  # noqa: F401
from torchvendor.ir import capture, compat
from torchvendor.sdk import ProgramRunner, loop_kernels, reference_kernel
from torchvendor.sdk.compile import loop_runner
from torchvendor.sdk.compile.aot_flow import AotFlow


def test_make_boxed_func_keeps_a_boxed_callable():
    def run(args):
        args.clear()
    run._boxed_call = True
    assert compat.make_boxed_func(run) is run
    assert compat.make_boxed_func(lambda x: x + 1)([1]) == 2


def _watched(f):
    """A runner of ``f``'s loop program whose last kernel first records whether the tensor behind
    ``held["x"]`` (a weak reference the test sets) is already freed."""
    prog = capture(f, [torch.randn(16, 16)] * 2, level="loop").inference
    kernels = {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)}
    last = loop_kernels(prog)[-1].name
    seen, held = [], {}

    def watching(*args):
        seen.append(held["x"]() is None)
        return kernels[last](*args)

    return ProgramRunner(prog, {**kernels, last: watching}), seen, held


def test_runner_boxed_call_frees_an_input_before_it_returns(monkeypatch):
    """``x`` is read by the first kernel only: when the last kernel runs, the boxed call has
    dropped it (the list it got was its only holder); the positional call keeps it."""
    monkeypatch.setattr(loop_runner, "BOXED_MIN_BYTES", 0)
    f = lambda x, y: ((x.sin() @ y).cos() @ y).tanh()  # noqa: E731
    runner, seen, held = _watched(f)
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    want = f(x, y)
    held["x"] = weakref.ref(x)
    call = runner.boxed(x, y)
    assert call is not None
    runner(x, y)
    args = [x, y]
    del x
    out = call(args)
    assert args == [] and seen == [False, True]
    torch.testing.assert_close(out[0], want)


def _chain(x, ws):
    h = x
    for w in ws:
        h = torch.tanh(h @ w)
    return h.sum()


def _backward_peak(acme, boxed: bool, monkeypatch, tmp_path) -> tuple[int, list]:
    if not boxed:
        monkeypatch.setattr(AotFlow, "_boxed", lambda self, compiled: compiled)
    torch.manual_seed(0)
    x = torch.randn(512, 512).to("acme")
    ws = [(torch.randn(512, 512) / 23).to("acme").requires_grad_() for _ in range(8)]
    f = torch.compile(_chain, backend="torchvendor_cpu", options={"cache_dir": str(tmp_path)})
    for _ in range(2):
        f(x, ws).backward()
        for w in ws:
            w.grad = None
    loss = f(x, ws)  # the saved activations are live from here
    acme.synchronize()
    base = acme.memory_allocated()
    acme.reset_peak_memory_stats()
    loss.backward()
    acme.synchronize()
    return acme.max_memory_allocated() - base, [w.grad.cpu() for w in ws]


@pytest.mark.parametrize("boxed", [True, False])
def test_backward_frees_saved_activations_as_it_runs(acme, boxed, monkeypatch, tmp_path):
    """Eight 1 MiB tanh outputs are saved for the backward, which returns eight 1 MiB weight
    gradients. Held to its end, the saved tensors and the gradients add up (the backward's own
    allocations reach the gradients' 8 MiB); freed as it runs, each saved tensor leaves as a
    gradient comes, so the backward allocates well under that."""
    compat.dynamo_reset()
    peak, grads = _backward_peak(acme, boxed, monkeypatch, tmp_path)
    torch.manual_seed(0)
    x = torch.randn(512, 512)
    ws = [(torch.randn(512, 512) / 23).requires_grad_() for _ in range(8)]
    _chain(x, ws).backward()
    for got, w in zip(grads, ws):
        torch.testing.assert_close(got, w.grad, rtol=1e-3, atol=1e-4)
    grads_bytes = 8 * 512 * 512 * 4
    if boxed:
        assert peak < grads_bytes * 3 // 4, f"the backward allocated {peak / 2**20:.1f} MiB"
    else:  # the convention it replaces: what the bound above tells apart
        assert peak >= grads_bytes, f"the backward allocated {peak / 2**20:.1f} MiB"


def test_runner_boxed_call_takes_the_replay_and_frees_inputs_there(monkeypatch):
    """Where the C++ replay is built (``replay_available``), a boxed call of inputs of the first
    call's layout runs it, not the generated Python ``call_boxed``: the list is cleared and ``x``
    is gone by the last kernel, as in the Python call (a large partition on ``cuda`` runs this
    way on every call, forward and backward); another layout takes the Python call."""
    from torchvendor.sdk.compile.runner_replay import replay_available

    if not replay_available():
        pytest.skip("no C++ replay in this build")
    monkeypatch.setattr(loop_runner, "BOXED_MIN_BYTES", 0)
    f = lambda x, y: ((x.sin() @ y).cos() @ y).tanh()  # noqa: E731
    runner, seen, held = _watched(f)
    python = []
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    want = f(x, y)
    written = runner._written_call(runner._bind((x, y)))[0]
    python_boxed = written.boxed
    object.__setattr__(written, "boxed", lambda args: python.append(1) or python_boxed(args))
    call = runner.boxed(x, y)
    assert call is not None and call.native
    held["x"] = weakref.ref(x)
    args = [x, y]
    del x
    out = call(args)
    assert args == [] and seen == [True] and python == []
    torch.testing.assert_close(out[0], want)
    x2 = torch.randn(16, 16).t()   # another layout: the guard fails, the Python call runs it
    args = [x2, y]
    torch.testing.assert_close(call(args)[0], f(x2, y))
    assert args == [] and python == [1]


def test_a_compiled_step_on_the_device_runs_its_boxed_calls_in_the_replay(acme, monkeypatch, tmp_path):
    """Through torch.compile on ``acme`` (the runner acme, cpu and cuda share): after the first
    step both the forward's and the backward's partitions hold a boxed call that runs the C++
    replay (``native``), and later steps' gradients stay right."""
    from torchvendor.sdk.compile import partition_call
    from torchvendor.sdk.compile.runner_replay import replay_available

    if not replay_available():
        pytest.skip("no C++ replay in this build")
    made = []
    init = partition_call.PartitionCall.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(partition_call.PartitionCall, "__init__", spy)
    compat.dynamo_reset()
    _, grads = _backward_peak(acme, True, monkeypatch, tmp_path)
    boxed = [p for p in made if p.boxed]
    assert len(boxed) >= 2 and all(getattr(p._boxed_run, "native", False) for p in boxed), \
        [(p.record.name, p._boxed_run) for p in made]
    torch.manual_seed(0)
    x = torch.randn(512, 512)
    ws = [(torch.randn(512, 512) / 23).requires_grad_() for _ in range(8)]
    _chain(x, ws).backward()
    for got, w in zip(grads, ws):
        torch.testing.assert_close(got, w.grad, rtol=1e-3, atol=1e-4)
