"""Dynamo (``torch._dynamo``, ``torch._guards``): its caches and guards, its backend registry
(``torch._dynamo.register_backend`` is documented but lives in a private module, and the
registry's two dicts have no public reader), its counters and tracing context. Dynamo is
imported inside the functions: importing this module stays cheap.

    >>> "inductor" in dynamo_backend_names()
    True
"""
from __future__ import annotations

from typing import Any as _Any, Callable as _Callable

import torch

__all__ = ["lookup_backend", "has_cache_entry_guards", "guard_lines", "tracing_guard_lines", "dynamo_reset", "dynamo_backend_state",
           "dynamo_registered_backend", "dynamo_register_backend", "dynamo_counters", "dynamo_backend_names",
           "outside_tracing_context", "wrapper_allocators", "tensor_data_ptr_address"]


def _cache_entry_lister() -> _Callable[[_Any], list] | None:
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    except ImportError:
        return None
    return _debug_get_cache_entry_list


def has_cache_entry_guards() -> bool:
    """Whether Dynamo exposes a frame's compiled cache entries, each with its ``guard_manager``
    (``torch._dynamo.eval_frame._debug_get_cache_entry_list``, 2.13). When missing, guard
    summaries come from the tracing context instead, and say so. A function, not a flag, so
    that importing compat does not import Dynamo."""
    return _cache_entry_lister() is not None


def guard_lines(code: _Any) -> list[str] | None:
    """The guards Dynamo installed on ``code``'s compiled entries, one ``KIND: expression`` line
    each (source comments dropped); None when this release does not expose cache entries."""
    lister = _cache_entry_lister()
    if lister is None:
        return None
    lines: list[str] = []
    for entry in lister(code):
        manager = getattr(entry, "guard_manager", None)
        if manager is None:
            return None
        for raw in str(manager).splitlines():
            text = raw.lstrip("| +-").strip()
            if not text or text.startswith(("TREE_GUARD_MANAGER", "RootGuardManager", "GuardManager", "DictGuardManager")):
                continue
            lines.append(text.split("  # ")[0].rstrip())
    return lines


def tracing_guard_lines() -> list[str]:
    """Fallback guard summary from the active tracing context (inside a Dynamo backend)."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    if ctx is None:
        return []
    out = []
    for g in ctx.guards_context.dynamo_guards:
        out.append(f"{getattr(g, 'create_fn_name', lambda: '?')()}: {g.name or g.source}")
    return sorted(out)


def dynamo_reset() -> None:
    """Clear Dynamo's compiled-code caches (``torch.compiler.reset``). Benchmarks only."""
    torch.compiler.reset()


def dynamo_backend_state(name: str) -> str | None:
    """``"loaded"`` (a compiler function is registered), ``"entry_point"`` (a
    ``torch_dynamo_backends`` entry point names it, not loaded yet) or None.

    >>> dynamo_backend_state("inductor"), dynamo_backend_state("no_such_backend")
    ('loaded', None)
    """
    from torch._dynamo.backends import registry

    registry._lazy_import()
    if name in registry._COMPILER_FNS:
        return "loaded"
    if name in registry._BACKENDS:
        return "entry_point"
    return None


def dynamo_registered_backend(name: str) -> _Callable[..., _Any] | None:
    """The compiler function registered under ``name`` (None if none is loaded)."""
    from torch._dynamo.backends import registry

    return registry._COMPILER_FNS.get(name)


def dynamo_register_backend(fn: _Callable[..., _Any], name: str) -> None:
    """Register ``fn`` as the Dynamo backend ``name`` (``torch._dynamo.register_backend``)."""
    import torch._dynamo

    torch._dynamo.register_backend(compiler_fn=fn, name=name)


def dynamo_counters() -> _Any:
    """Dynamo's event counters (``torch._dynamo.utils.counters``), e.g. ``["stats"]["unique_graphs"]``."""
    from torch._dynamo.utils import counters

    return counters


def lookup_backend(name: str) -> _Any:
    """The compiler function Dynamo registers as ``torch.compile(backend=name)``
    (``torch._dynamo.lookup_backend``), to call on a graph directly.

    >>> callable(lookup_backend("eager"))
    True
    """
    import torch._dynamo

    return torch._dynamo.lookup_backend(name)


def dynamo_backend_names() -> list[str]:
    """Every ``torch.compile`` backend name Dynamo knows, debug and experimental ones included
    (``relu_compile_error_TESTING_ONLY`` and friends are the suite's negative controls).

    >>> "inductor" in dynamo_backend_names()
    True
    """
    import torch._dynamo

    return list(torch._dynamo.list_backends(exclude_tags=()))


def outside_tracing_context() -> _Any:
    """A context manager hiding the current ``TracingContext``: for compiling several subgraphs
    of one AOTAutograd graph with Inductor (``compile_fx_inner`` records one graph's output
    strides in the context and asserts it does so once).

    >>> with outside_tracing_context():
    ...     pass
    """
    from torch._guards import tracing

    return tracing(None)


def wrapper_allocators() -> tuple[_Callable[..., torch.Tensor], _Callable[..., torch.Tensor]]:
    """``(empty_strided_cpu(size, stride, dtype), reinterpret(base, size, stride, offset))``: the C++
    helpers Inductor's generated wrappers allocate and view with (``torch._C._dynamo.guards``),
    about half the cost of ``torch.empty_strided`` and ``Tensor.as_strided`` per call (no Python
    argument parsing); ``offset`` counts from ``base``'s own storage offset. The public calls
    where a release lacks them.

    >>> empty, view = wrapper_allocators()
    >>> x = empty((2, 3), (3, 1), torch.float32)
    >>> view(x, (3,), (1,), 3).shape
    torch.Size([3])
    """
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    empty = getattr(guards, "_empty_strided_cpu", None)
    view = getattr(guards, "_reinterpret_tensor", None)
    if empty is None:
        def empty(size: _Any, stride: _Any, dtype: torch.dtype) -> torch.Tensor:
            return torch.empty_strided(size, stride, dtype=dtype)
    if view is None:
        def view(base: torch.Tensor, size: _Any, stride: _Any, offset: int) -> torch.Tensor:
            return base.as_strided(size, stride, base.storage_offset() + offset)
    return empty, view


def tensor_data_ptr_address() -> int | None:
    """The address of torch's C function ``void* (PyObject* tensor)`` that Inductor's C++ kernel
    bindings read a tensor's data pointer with (``torch._C._dynamo.guards``): for exact
    ``Tensor``/``Parameter`` objects only (anything else makes it throw a C++ exception). None
    where a release lacks it (then call ``data_ptr()``).

    >>> address = tensor_data_ptr_address()
    >>> address is None or address > 0
    True
    """
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    address = getattr(guards, "_torchinductor_pyobject_tensor_data_ptr", None)
    return int(address) if isinstance(address, int) and address > 0 else None
