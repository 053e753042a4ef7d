"""Decomposition tables (``torch._decomp``) and the ``torch._refs`` mode
(``torch._prims.context.TorchRefsMode``), with the release differences they carry.

    >>> len(core_aten_decomposition_table()) > 100
    True
"""
from __future__ import annotations

import contextlib as _contextlib
import inspect as _inspect
from typing import Any as _Any, Callable as _Callable, Iterator as _Iterator, Sequence as _Sequence

import torch

from .dispatch import OpOverload, OpOverloadPacket
from .version import TORCH_VERSION

__all__ = ["core_aten_decomposition_table", "broken_core_aten_decompositions", "registered_decompositions",
           "REFS_MODE_PACKET_MAPPING_BROKEN", "refs_mode"]


def core_aten_decomposition_table() -> dict:
    """The core-ATen decomposition table as a plain ``dict`` (2.13 returns a lazily
    materialized ``CustomDecompTable``, a ``dict`` subclass; older releases a plain dict)."""
    from torch._decomp import core_aten_decompositions

    table = core_aten_decompositions()
    return dict(table.items())


def broken_core_aten_decompositions() -> list[OpOverload]:
    """Entries of torch's core-ATen table known to give wrong results in the running release;
    :func:`torchvendor.ir.decompositions.core_aten` leaves them out.

    - 2.11 to 2.14: ``aten._scaled_dot_product_flash_attention_for_cpu`` decomposes to math
      whose second output is the attention weights, while the backward stays the fused
      ``..._for_cpu_backward`` kernel, which reads it as logsumexp: gradients are wrong by O(1)
      under ``aot_autograd(decompositions=core_aten_decompositions())``. tests/test_compat_decompositions.py
      reproduces it and fails once a release fixes it.
    """
    aten = torch.ops.aten
    return [aten._scaled_dot_product_flash_attention_for_cpu.default] if TORCH_VERSION >= (2, 11) else []


def registered_decompositions(ops: _Sequence[_Any]) -> dict:
    """torch's registered (post-autograd) decompositions for ``ops`` (packets expand to overloads)."""
    from torch._decomp import get_decompositions

    return dict(get_decompositions(list(ops)))


#: Whether this release's TorchRefsMode maps a packet call (``aten.where(c, a, b)``) to the
#: ``.default`` overload's decomposition (which then fails to bind): 2.13 and 2.14 do, 2.11 maps
#: it right (2.12 is not checked here). :func:`refs_mode` guards against it on every release
#: (the check is a no-op where torch is right); tests/test_compat_decompositions.py checks this flag against
#: torch, so it notices when a release fixes it.
REFS_MODE_PACKET_MAPPING_BROKEN: bool = TORCH_VERSION >= (2, 13)


@_contextlib.contextmanager
def refs_mode(keep: _Callable[[_Any], bool]) -> _Iterator[None]:
    """``torch._prims.context.TorchRefsMode``: torch and ATen calls run as their ``torch._refs`` /
    decompositions, down to ``prims.*``; ops for which ``keep(op)`` is true run whole."""
    from torch._prims.context import TorchRefsMode

    def should_fallback(*a: _Any) -> bool:
        # 2.13 calls should_fallback_fn(mode, orig_func, ref, args, kwargs); take them positionally.
        orig, ref, args, kwargs = a[1], a[2], a[3], a[4]
        if keep(orig):
            return True
        if isinstance(orig, OpOverloadPacket):
            # 2.13 maps a packet call to its ``.default`` overload's decomposition even when the
            # arguments are another overload's (aten.where(c, a, b) -> _where_default(c)): run
            # such calls whole instead of failing.
            try:
                _inspect.signature(ref).bind(*args, **(kwargs or {}))
            except TypeError:
                return True
            except ValueError:
                pass
        return False

    with TorchRefsMode(should_fallback_fn=should_fallback):
        yield
