"""Every ``>>>`` example in the package runs (doctest), module by module.

A module whose examples need something this machine may lack is listed in ``NEEDS`` with the
reason; nothing of ours is skipped for being broken.
"""
from __future__ import annotations

import doctest
import importlib
import pkgutil
import warnings

import pytest

import torchvendor

#: module -> why its examples are not run here
NEEDS: dict[str, str] = {
}


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(torchvendor.__path__, "torchvendor."):
        if info.name.startswith("torchvendor._C"):
            continue
        names.append(info.name)
    return sorted(names)


MODULES = _modules()


@pytest.mark.parametrize("name", MODULES)
def test_module_examples_run(name):
    if name in NEEDS:
        pytest.skip(NEEDS[name])
    module = importlib.import_module(name)
    failures: list[str] = []
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for test in finder.find(module, name, globs={**vars(module)}):
            # Kept, not cleared: Dynamo's guards delete their entries from the example's globals
            # when the compiled code dies, and would hit a KeyError in a cleared dict.
            runner.run(test, out=lambda s: failures.append(s), clear_globs=False)
    assert runner.failures == 0, "".join(failures)

