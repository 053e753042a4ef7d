"""``Level.TORCH``: :class:`TorchBackend`, Dynamo's torch-IR graph partitioned as it is.

``compile(gm, example_inputs) -> callable`` receives one partition of Dynamo's graph (calls of
torch functions and methods: ``torch.relu``, ``operator.add``, ``method.view``), its example
inputs fake tensors. Autograd stays eager: the vendor's callable must be differentiable, and the
SDK checks that a partition whose inputs require grad returns outputs that do. There is no
decomposition and no Inductor fallback at this level.

Example::

    >>> import torch
    >>> from torchvendor.sdk import TorchBackend, register_backend, last_report
    >>> class Executors(TorchBackend):
    ...     name = "doc_torch_level"
    ...     supported_ops = {"torch.relu"}
    ...     def compile(self, gm, example_inputs):
    ...         return gm
    >>> _ = register_backend(Executors)
    >>> y = torch.compile(lambda x: torch.relu(x) + 1, backend="doc_torch_level")(torch.ones(2))
    >>> [sorted(p.ops) for p in last_report().partitions]
    [['torch.relu']]
"""
from __future__ import annotations

import time
from typing import Any, Callable, ClassVar

import torch.fx as fx

from .backend import Backend
from .levels import BackendDefinitionError, Level
from .report import CompileReport

__all__ = ["TorchBackend"]


class TorchBackend(Backend):
    """Subclass for ``Level.TORCH``: ``compile(gm, example_inputs)`` with Dynamo's graph's partitions."""

    level: ClassVar[Level] = Level.TORCH
    _checks_backward: ClassVar[bool] = True

    def _take_graph(self, gm: fx.GraphModule, example_inputs: list[Any], report: CompileReport) -> Callable[..., Any]:
        return self._compile_graph("torch", report, time.perf_counter(), gm, example_inputs)

    @classmethod
    def _check_definition(cls) -> None:
        super()._check_definition()
        if getattr(cls, "decompositions", None) is not None:
            raise BackendDefinitionError(f"{cls.__name__}.decompositions: the torch level is not decomposed; "
                                         f"decompositions apply to AtenBackend and OnnxBackend only")
