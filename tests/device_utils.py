"""The device tests' helpers: the conformance suite's OpInfo runner and tensor helpers, re-exported
(``tests/`` is on ``sys.path`` under pytest; the code lives in the package so vendors run it too)."""
from __future__ import annotations

import functools

import torch

from torchvendor.sdk.conformance.opinfo import OpResult
from torchvendor.sdk.conformance.opinfo import (ALL_DTYPES, DEVICE, REPRESENTATIVE_OPS, dev,  # noqa: F401
                                                format_failure, make_cpu, opinfo_ops, run_opinfo_corpus,
                                                run_opinfo_corpus_isolated, run_opinfo_op, summarize)


@functools.lru_cache(maxsize=None)
def corpus_on_device(names: frozenset[str]) -> dict[str, OpResult]:
    """The float32 OpInfos ``names`` on the device through its fallback and native kernels, run
    once per session in a child process (``run_opinfo_corpus_isolated``): the device OpInfo tests
    and the stable-kernel tests' fallback-only baseline share one run (about 20 s)."""
    return run_opinfo_corpus_isolated(DEVICE, torch.float32, names=sorted(names), op_timeout=600)
