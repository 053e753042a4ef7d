"""Decomposition tables as values: which ATen ops reach an ATen-level backend whole.

A :class:`DecompositionTable` is an immutable value (entries, ops kept whole, and whether to go
on to ``prims``). Build one with :func:`core_aten`, :func:`prims` or :func:`custom`, combine
with ``|``, and hand it to ``capture(..., level="aten", decompositions=...)`` or to
:func:`torchvendor.ir.aten_ir.aten_ir_hook`.

How each table works in torch 2.13:

- ``core_aten()``: torch's core-ATen table (``torch._decomp.core_aten_decompositions``, ~940
  entries), applied by AOTAutograd while it traces, minus the entries
  ``compat.broken_core_aten_decompositions()`` lists as wrong in the running release (2.13:
  the CPU flash-attention decomposition, whose backward gradients are wrong).
- ``prims()``: core ATen first, then every graph AOTAutograd produces is retraced with
  ``make_fx`` under ``torch._prims.context.TorchRefsMode``: ops that have a ``torch._refs``
  reference or a registered decomposition run as it, down to ``prims.*`` (``prims.add``,
  ``prims.broadcast_in_dim``, ``prims.sum``...). Ops without one (``aten.mm``, ``aten.addmm``,
  convolution, random ops) stay ATen. torch has no stock "prims table"; this retrace is the route
  that works in 2.13 (notes §2.6).
- ``custom(base, keep=[...])``: ``base`` minus every overload of the kept ops, which then reach
  the graph whole (also through the prims retrace). Limitation: CompositeImplicitAutograd ops
  (``aten.linear``, ``aten.scaled_dot_product_attention``, ``aten.dropout``) are decomposed by
  the dispatcher before any table applies when capturing through ``torch.compile``; keeping them
  has no effect at that level and :func:`custom` warns. Ops with kernels of their own that core
  ATen decomposes (``aten.silu``, ``aten.hardswish``, ``aten.logsumexp``, ``aten.mv``...) are
  kept as asked; many vendor favourites (``aten.gelu``, ``aten.addmm``, ``aten._softmax``,
  ``aten.native_layer_norm``, ``aten.convolution``) are core ops that no table decomposes.

Example::

    >>> from torchvendor.ir import decompositions as D
    >>> import torch
    >>> torch.ops.aten.silu.default in D.core_aten()      # core ATen decomposes silu to sigmoid*x
    True
    >>> t = D.custom(keep=["aten.silu"])                  # ... this table keeps it whole
    >>> torch.ops.aten.silu.default in t, torch.ops.aten.hardswish.default in t
    (False, True)
    >>> (D.prims() | t).to_prims
    True
"""
from __future__ import annotations

import contextlib
import functools
import warnings
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

import torch

from . import compat

__all__ = ["DecompositionTable", "core_aten", "prims", "custom", "none"]

OpLike = Any  # OpOverload, OpOverloadPacket or an operator key such as "aten.gelu[.default]"


def _overloads(op: OpLike) -> list[compat.OpOverload]:
    if isinstance(op, str):
        from .fx_view import resolve_op

        op = resolve_op(op)
    if isinstance(op, compat.OpOverload):
        return [op]
    if isinstance(op, compat.OpOverloadPacket):
        return [getattr(op, name) for name in op.overloads()]
    raise TypeError(f"expected an ATen operator (OpOverload, OpOverloadPacket or a key such as "
                    f"'aten.gelu'), got {op!r} of type {type(op).__name__}")


@dataclass(frozen=True)
class DecompositionTable:
    """An immutable decomposition table.

    Attributes:
        name: a label for reports, e.g. ``"core_aten"`` or ``"core_aten-keep(gelu)"``.
        entries: ``OpOverload -> decomposition`` as torch registers them, kept ops removed.
        keep: overloads that must reach the graph whole (also through the prims retrace).
        to_prims: retrace the resulting graphs under ``TorchRefsMode`` down to ``prims.*``.
    """

    name: str
    entries: Mapping[compat.OpOverload, Callable[..., Any]]
    keep: frozenset = field(default_factory=frozenset)
    to_prims: bool = False

    def __post_init__(self) -> None:
        entries = {op: fn for op, fn in self.entries.items() if op not in self.keep}
        object.__setattr__(self, "entries", MappingProxyType(entries))

    def __contains__(self, op: object) -> bool:
        return op in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def __or__(self, other: "DecompositionTable") -> "DecompositionTable":
        """Union: entries of both (``other`` wins on conflicts), kept ops of both, prims if either."""
        if not isinstance(other, DecompositionTable):
            return NotImplemented
        return DecompositionTable(f"{self.name}|{other.name}", {**self.entries, **other.entries},
                                  self.keep | other.keep, self.to_prims or other.to_prims)

    def keeping(self, *ops: OpLike) -> "DecompositionTable":
        """This table with ``ops`` (every overload of a packet) kept whole."""
        return custom(base=self, keep=ops)

    def adding(self, *ops: OpLike) -> "DecompositionTable":
        """This table plus torch's registered decompositions for ``ops``."""
        return custom(base=self, add=ops)

    def as_dict(self) -> dict[compat.OpOverload, Callable[..., Any]]:
        """A fresh dict for ``aot_autograd(decompositions=...)``."""
        return dict(self.entries)

    def keeps(self, op: Any) -> bool:
        """Whether ``op`` (an OpOverload or packet) is kept whole."""
        if isinstance(op, compat.OpOverloadPacket):
            return any(o in self.keep for o in _overloads(op))
        return op in self.keep

    def __repr__(self) -> str:
        return (f"DecompositionTable({self.name!r}, {len(self.entries)} entries, keep={len(self.keep)} ops, "
                f"to_prims={self.to_prims})")


def none() -> DecompositionTable:
    """No table: AOTAutograd's own behaviour (only CompositeImplicitAutograd ops decompose)."""
    return DecompositionTable("none", {})


def core_aten() -> DecompositionTable:
    """torch's core-ATen decomposition table (the export default table in 2.13).

    >>> len(core_aten()) > 500
    True
    """
    return DecompositionTable("core_aten", _core_table())


@functools.lru_cache(maxsize=None)
def _core_table_cached() -> MappingProxyType:
    table = compat.core_aten_decomposition_table()
    for op in compat.broken_core_aten_decompositions():
        table.pop(op, None)
    return MappingProxyType(table)


def _core_table() -> dict:
    # torch materializes its table lazily (~0.2 s per call in 2.13); it is fixed per process.
    return dict(_core_table_cached())


def prims() -> DecompositionTable:
    """Core ATen, then a retrace under ``TorchRefsMode`` down to ``prims.*`` (module docstring)."""
    return DecompositionTable("prims", _core_table(), to_prims=True)


def custom(base: DecompositionTable | None = None, *, keep: Iterable[OpLike] = (),
           add: Iterable[OpLike] = (), name: str | None = None) -> DecompositionTable:
    """``base`` (default :func:`core_aten`) with ``keep`` ops kept whole and torch's registered
    decompositions for ``add`` ops added.

    >>> t = custom(keep=[torch.ops.aten.silu])
    >>> torch.ops.aten.silu.default in t.keep, torch.ops.aten.silu.default in t
    (True, False)
    """
    base = core_aten() if base is None else base
    kept = [o for op in keep for o in _overloads(op)]
    for op in kept:
        if compat.is_composite_implicit(op):
            warnings.warn(f"custom(keep=...): {op} is CompositeImplicitAutograd; the dispatcher decomposes "
                          f"it while torch.compile/AOTAutograd traces, before any decomposition table "
                          f"applies, so it cannot be kept at ATen level. Match its decomposition instead "
                          f"(e.g. permute+addmm for linear).", stacklevel=2)
    added = compat.registered_decompositions([o for op in add for o in _overloads(op)]) if add else {}
    label = name or base.name + (f"-keep({','.join(sorted({str(o.overloadpacket) for o in kept}))})" if kept else "") \
        + (f"+add({len(added)})" if added else "")
    return DecompositionTable(label, {**base.entries, **added}, base.keep | frozenset(kept), base.to_prims)


def resolve(decompositions: DecompositionTable | Mapping[Any, Any] | None) -> DecompositionTable:
    """Accept a table, a plain ``{OpOverload: fn}`` dict, or None (= :func:`core_aten`)."""
    if decompositions is None:
        return core_aten()
    if isinstance(decompositions, DecompositionTable):
        return decompositions
    if isinstance(decompositions, Mapping):
        return DecompositionTable("dict", dict(decompositions))
    raise TypeError(f"decompositions must be a DecompositionTable (see torchvendor.ir.decompositions), "
                    f"a dict {{OpOverload: fn}} or None, got {type(decompositions).__name__}")


def to_prims(gm: torch.fx.GraphModule, example_inputs: list[Any], table: DecompositionTable) -> torch.fx.GraphModule:
    """Retrace an ATen graph under ``TorchRefsMode`` down to ``prims.*``, keeping ``table.keep``.

    ``example_inputs`` are the graph's fake (possibly symbolic) inputs. Placeholder names and
    metadata are carried over so that callers can still match inputs by name.
    """
    def run(*args: Any) -> Any:
        return torch.fx.Interpreter(gm).run(*args)

    fake_mode = compat.detect_fake_mode(example_inputs)
    broken = set(compat.broken_core_aten_decompositions())

    def keep(op: Any) -> bool:
        return table.keeps(op) or op in broken

    with fake_mode if fake_mode is not None else contextlib.nullcontext(), compat.refs_mode(keep), \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated")  # raised inside torch._prims_common
        new = compat.make_fx(run, *example_inputs)
    old_ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
    new_ph = [n for n in new.graph.nodes if n.op == "placeholder"]
    for o, n in zip(old_ph, new_ph):
        n.name = n.target = o.name
        for key, value in o.meta.items():
            n.meta.setdefault(key, value)
    new.recompile()
    return new
