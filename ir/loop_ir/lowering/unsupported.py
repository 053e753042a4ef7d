"""What the loop IR cannot express: the one error the lowering raises for it.

    >>> issubclass(LoopIRUnsupported, NotImplementedError)
    True
"""
from __future__ import annotations

__all__ = ["LoopIRUnsupported"]


class LoopIRUnsupported(NotImplementedError):
    """Inductor produced something the loop IR cannot express (the message says what)."""
