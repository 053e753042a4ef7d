"""``compat.dynamo``: Dynamo's cache entries and guards, its backend registry, counters and
tracing context, on the installed release."""
from __future__ import annotations

import pytest
import torch

from torchvendor.ir import capture, compat, torch_ir_hook


def test_cache_entry_guards_branch(monkeypatch: pytest.MonkeyPatch) -> None:
    """2.13 exposes guards on cache entries (``_debug_get_cache_entry_list``); without it the
    summary comes from the tracing context and says so."""
    assert compat.has_cache_entry_guards()
    prog = capture(lambda x: x + 1, [torch.randn(2)], "torch")
    assert any(g.startswith("TENSOR_MATCH") for g in prog.guards)
    monkeypatch.setattr(compat, "guard_lines", lambda code: None)  # our shim, not torch
    prog = capture(lambda x: x + 2, [torch.randn(2)], "torch")
    assert "not exposed by torch" in prog.guards[0] and len(prog.guards) > 1


def test_backend_accepts_compile_options() -> None:
    """torch.compile passes ``options=``/``mode=`` to a backend only when the user sets them."""
    seen = []
    f = torch.compile(lambda x: x * 3, backend=torch_ir_hook(lambda gm, ex: seen.append(gm)), options={"k": 1})
    torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 3.0))
    assert len(seen) == 1


def test_capture_compiles_its_own_entry_frame() -> None:
    """torch 2.11's torch.compile runs a function whose source file inspect cannot find inside
    a shared wrapper frame (``torch._dynamo.external_utils.wrap_inline``), so every capture's
    cache entries piled up on one code object and the 9th capture hit the recompile limit;
    2.13 wraps only non-functions. torch_ir registers each entry function's source with
    linecache, so all releases compile the entry's own code object."""
    import inspect

    import torch._dynamo

    from torchvendor.ir.torch_ir.capture import _entry_function

    entry = _entry_function(lambda x: x * 2, 1)
    assert inspect.getsourcefile(entry) is not None

    def f(x):
        return x.relu() + 1

    for _ in range(torch._dynamo.config.recompile_limit + 2):
        prog = capture(f, [torch.randn(3)], "torch")
        assert prog.guards and "not exposed" not in prog.guards[0]


def test_guard_lines_of_a_compiled_function() -> None:
    def f(x):
        return x * 2

    torch.compile(f, backend="eager")(torch.ones(2))
    lines = compat.guard_lines(f.__code__)
    assert lines and any(line.startswith("TENSOR_MATCH") for line in lines)
    assert compat.tracing_guard_lines() == []  # outside a backend: no tracing context
    compat.dynamo_reset()
    assert compat.guard_lines(f.__code__) == []


def test_backend_registry_states_and_registration() -> None:
    assert compat.dynamo_backend_state("inductor") == "loaded"
    assert compat.dynamo_backend_state("tv_no_such_backend") is None
    assert "eager" in compat.dynamo_backend_names() and "inductor" in compat.dynamo_backend_names()

    def tv_compat_probe(gm, example_inputs, **kwargs):
        return gm.forward

    if compat.dynamo_registered_backend("tv_compat_probe") is None:
        compat.dynamo_register_backend(tv_compat_probe, "tv_compat_probe")
    assert compat.dynamo_backend_state("tv_compat_probe") == "loaded"
    assert compat.dynamo_registered_backend("tv_compat_probe").__name__ == "tv_compat_probe"
    before = compat.dynamo_counters()["stats"]["unique_graphs"]
    torch.compile(lambda x: x - 1, backend="tv_compat_probe")(torch.ones(2))
    assert compat.dynamo_counters()["stats"]["unique_graphs"] == before + 1


def test_outside_tracing_context_hides_the_context() -> None:
    seen = []

    def backend(gm, example_inputs):
        seen.append(bool(compat.tracing_guard_lines()))
        with compat.outside_tracing_context():
            seen.append(bool(compat.tracing_guard_lines()))
        return gm.forward

    torch.compile(lambda x: x + 3, backend=backend)(torch.ones(2))
    assert seen == [True, False]


def test_wrapper_allocators_match_the_public_calls() -> None:
    """Inductor's wrapper helpers allocate and view exactly as ``empty_strided``/``as_strided``."""
    empty, view = compat.wrapper_allocators()
    x = empty((4, 3), (1, 4), torch.float64)
    assert (x.shape, x.stride(), x.dtype, x.device.type) == ((4, 3), (1, 4), torch.float64, "cpu")
    base = torch.arange(24.0)[2:]
    v = view(base, (2, 5), (5, 1), 3)
    torch.testing.assert_close(v, base.as_strided((2, 5), (5, 1), base.storage_offset() + 3))
    assert v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


def test_tensor_data_ptr_address_reads_a_tensors_data_pointer() -> None:
    """Called through ctypes as Inductor's kernel bindings call it, the C helper gives the same
    pointer as ``data_ptr()`` (the first element, storage offset included)."""
    import ctypes

    address = compat.tensor_data_ptr_address()
    if address is None:
        pytest.skip("this torch release has no _torchinductor_pyobject_tensor_data_ptr")
    data_ptr = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(address)
    x = torch.arange(10.0)[3:]
    assert data_ptr(x) == x.data_ptr()
    assert data_ptr(torch.nn.Parameter(x)) == x.data_ptr()
