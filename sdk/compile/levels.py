"""The IR levels a backend may consume, and what differs between them: one object per level.

:class:`Backend` asks its level's :class:`LevelRules` (``LEVELS[backend.level]``) everything that
depends on the level — how a Dynamo graph reaches the partitions, the decomposition table, what
a class must (not) declare, whether a graph can be taken at all, how one partition is compiled —
so a new level is a new :class:`LevelRules` subclass and one entry in ``LEVELS``, with no
branches in the backend template.

Example::

    >>> from torchvendor.sdk.compile.backend import LEVELS
    >>> sorted(level.value for level in LEVELS), LEVELS[Level.TORCH].through_aot
    (['aten', 'loop', 'onnx', 'torch'], False)
"""
from __future__ import annotations

import enum
from typing import Any, Callable, Sequence

import torch.fx as fx

from torchvendor.ir import decompositions as _decomp

__all__ = ["Level", "LevelRules", "TorchLevel", "AtenLevel", "BackendError", "BackendDefinitionError",
           "BackendFallbackWarning"]


class Level(str, enum.Enum):
    """The IR level a backend consumes."""

    TORCH = "torch"  #: Dynamo's torch-IR graph; autograd stays eager
    ATEN = "aten"    #: AOTAutograd's ATen/prims graphs (forward, backward, inference)
    LOOP = "loop"    #: Inductor's loop IR, one program per partition
    ONNX = "onnx"    #: ATen partitions exported as ``onnx.ModelProto`` (sdk/compile/onnx_level.py)


class BackendError(RuntimeError):
    """A vendor compile or run failed in strict mode, or a backend was used wrongly."""


class BackendDefinitionError(TypeError):
    """A :class:`Backend` subclass declares something the SDK cannot use (named in the message)."""


class BackendFallbackWarning(UserWarning):
    """A partition the vendor claimed falls back to eager after a vendor error (warned once)."""


class LevelRules:
    """What one IR level decides for every backend at that level (the defaults are ATen's)."""

    level: Level
    #: Dynamo's graph goes through AOTAutograd (decomposition, forward/backward/inference
    #: graphs, the warm-compile cache, the Inductor fallback); False: partitions of Dynamo's graph
    through_aot: bool = True
    #: check that a partition that takes inputs requiring grad returns outputs that do (the
    #: vendor's callable must be differentiable: autograd stays eager)
    checks_backward: bool = False

    def check_definition(self, cls: type) -> None:
        """Raise :class:`BackendDefinitionError` if ``cls`` declares what this level cannot use."""
        if cls.decompositions is not None:
            raise BackendDefinitionError(f"{cls.__name__}.decompositions applies to Level.ATEN and Level.ONNX only "
                                         f"(the loop level uses Inductor's table, the torch level is not "
                                         f"decomposed)")

    def decompositions(self, backend: Any) -> Any:
        """The resolved decomposition table AOTAutograd applies for ``backend``."""
        return _decomp.resolve(backend.decompositions)

    def refuses(self, backend: Any, device: str) -> str | None:
        """Why ``backend`` cannot take a graph whose inputs are on ``device`` (None: it can)."""
        return None

    def support_rule(self, rule: Any) -> Any:
        """The rule the partitioner applies: the backend's own, narrowed to what the level can express."""
        return rule

    def compile_partition(self, backend: Any, sub: fx.GraphModule, examples: Sequence[Any], kind: str,
                          device: str, name: str = "", graph: Any = None) -> Callable[..., Any]:
        """The callable that runs one partition (``kind``: inference, forward, backward, torch;
        ``name``: the partition's, ``graph``: the graph's report)."""
        return backend.compile(sub, examples)


class TorchLevel(LevelRules):
    """``Level.TORCH``: Dynamo's graph, partitioned as it is; autograd stays eager."""

    level = Level.TORCH
    through_aot = False
    checks_backward = True


class AtenLevel(LevelRules):
    """``Level.ATEN``: AOTAutograd's graphs, decomposed with the backend's table."""

    level = Level.ATEN

    def check_definition(self, cls: type) -> None:
        pass
