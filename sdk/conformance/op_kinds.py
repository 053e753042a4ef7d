"""Which operators move data: views, tuple access and size arithmetic do not, and are left out of
fallback accounting and vendor coverage (a view left outside a claimed region costs nothing in
eager, so it is never a ``fallback``).

    >>> is_compute("aten.mm.default"), is_compute("aten.transpose.int"), is_compute("operator.mul")
    (True, False, False)
"""
from __future__ import annotations

__all__ = ["is_compute", "NO_COMPUTE"]

#: ops that move no data (views, tuple access, size queries, asserts)
NO_COMPUTE = frozenset({
    "getitem", "view", "_unsafe_view", "reshape", "expand", "permute", "t", "transpose", "unsqueeze", "squeeze",
    "alias", "detach", "slice", "select", "as_strided", "split", "split_with_sizes", "unbind", "sym_size",
    "sym_numel", "sym_stride", "sym_storage_offset", "_assert_scalar", "sym_constrain_range",
    "_assert_tensor_metadata", "lift_fresh_copy", "view_as_real", "view_as_complex", "unfold", "narrow",
    "diagonal", "movedim", "expand_as", "view_as", "_reshape_alias", "squeeze_copy", "_assert_async"})


def _op_name(key: str) -> str:
    parts = key.split(".")
    return parts[1] if len(parts) > 1 and parts[0] in ("aten", "prims") else parts[-1]


def is_compute(key: str) -> bool:
    """Whether an op key counts as compute: not a view or size query, and not Python's scalar
    arithmetic on sizes (``operator.mul`` of SymInts runs on the host for every backend)."""
    return not key.startswith("operator.") and _op_name(key) not in NO_COMPUTE
