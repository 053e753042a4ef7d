"""The device tests' helpers: the conformance suite's OpInfo runner and tensor helpers, re-exported
(``tests/`` is on ``sys.path`` under pytest; the code lives in the package so vendors run it too)."""
from torchvendor.sdk.conformance.opinfo import (ALL_DTYPES, DEVICE, REPRESENTATIVE_OPS, dev,  # noqa: F401
                                                format_failure, make_cpu, opinfo_ops, run_opinfo_corpus,
                                                run_opinfo_corpus_isolated, run_opinfo_op, summarize)
