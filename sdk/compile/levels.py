"""The IR levels a backend may consume, and the errors of the backend template.

One class per level, each in its level's module, each a subclass of the level-agnostic
:class:`~torchvendor.sdk.compile.backend.Backend` that owns its level's hooks and its part of the
flow: :class:`~.torch_level.TorchBackend`, :class:`~.aten_level.AtenBackend`,
:class:`~.loop_level.LoopBackend`, :class:`~.onnx_level.OnnxBackend`. A vendor subclasses one of
them; the template (``backend.py``) names no level, so a new level is a new class in a new
module (a test checks that ``backend.py`` names no ``Level`` member).

Example::

    >>> from torchvendor.sdk import LoopBackend, TorchBackend
    >>> LoopBackend.level is Level.LOOP, TorchBackend.level.value
    (True, 'torch')
"""
from __future__ import annotations

import enum

__all__ = ["Level", "BackendError", "BackendDefinitionError", "BackendFallbackWarning"]


class Level(str, enum.Enum):
    """The IR level a backend consumes (set by the level class a backend subclasses)."""

    TORCH = "torch"  #: Dynamo's torch-IR graph; autograd stays eager (``TorchBackend``)
    ATEN = "aten"    #: AOTAutograd's ATen/prims graphs: forward, backward, inference (``AtenBackend``)
    LOOP = "loop"    #: Inductor's loop IR, one program per partition (``LoopBackend``)
    ONNX = "onnx"    #: ATen partitions exported as ``onnx.ModelProto`` (``OnnxBackend``)
    TRITON = "triton"  #: Inductor's Triton kernels for the vendor's device and Triton target (``TritonBackend``)


class BackendError(RuntimeError):
    """A vendor compile or run failed in strict mode, or a backend was used wrongly."""


class BackendDefinitionError(TypeError):
    """A :class:`Backend` subclass declares something the SDK cannot use (named in the message)."""


class BackendFallbackWarning(UserWarning):
    """A partition the vendor claimed falls back to eager after a vendor error (warned once)."""
