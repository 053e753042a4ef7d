"""``torchvendor new NAME --level LEVEL``: write a complete out-of-tree vendor package.

What it writes (``NAME`` = ``nimbus``)::

    nimbus/
      README.md, pyproject.toml, manifest.toml, CMakeLists.txt, .gitignore, .ci/run
      runtime/    nimbus_runtime.c, nimbus_collectives.{c,h}, CMakeLists.txt  (the simulator, renamed)
      kernels/    kernels.cpp, device_kernels.c, kernels_abi.h, CMakeLists.txt (the stable-ABI template)
      nimbus_torch/  __init__.py (register()), __main__.py (smoke test), backend.py (the level's backend)
      tests/      test_conformance.py (the suite through the pytest plugin)

As generated it builds and passes the conformance suite's CI profile with no edit (``.ci/run``).

    >>> import tempfile, os
    >>> out = new("nimbus", "aten", os.path.join(tempfile.mkdtemp(), "nimbus"))
    >>> sorted(p.name for p in out.iterdir())[:6]
    ['.ci', '.gitignore', 'CMakeLists.txt', 'README.md', 'kernels', 'manifest.toml']
"""
from __future__ import annotations

import importlib.resources
import os
import stat
from pathlib import Path

from .names import ScaffoldError, VendorNames, fill
from .native import kernel_files, runtime_files

__all__ = ["new", "LEVELS", "ci_profile"]

#: the levels a package can be generated at -> the level class a backend subclasses
LEVELS = {"torch": "TorchBackend", "aten": "AtenBackend", "loop": "LoopBackend", "onnx": "OnnxBackend"}

#: generated file -> its template (sdk/scaffold/templates/)
_FILES = {
    "README.md": "README.md.tmpl", "pyproject.toml": "pyproject.toml.tmpl", "manifest.toml": "manifest.toml.tmpl",
    "CMakeLists.txt": "CMakeLists.txt.tmpl", ".gitignore": "gitignore.tmpl", ".ci/run": "ci_run.tmpl",
    "{package}/__init__.py": "package_init.py.tmpl", "{package}/__main__.py": "package_main.py.tmpl",
    "{package}/backend.py": "backend_{level}.py.tmpl", "tests/test_conformance.py": "test_conformance.py.tmpl",
}


def ci_profile() -> str:
    """The conformance profile a generated CI runs: ``ci`` where the suite has it, else ``minimal``.

    >>> ci_profile() in ("ci", "minimal")
    True
    """
    from torchvendor.sdk.conformance.core import PROFILES

    return "ci" if "ci" in PROFILES else "minimal"


def _level_class(level: str) -> tuple[str, list[str], str]:
    """(base class, names to import, level line) of a backend at ``level``: the level's own class
    where the SDK has it, else ``Backend`` with ``level = Level.X``."""
    import torchvendor.sdk as sdk

    extra = ["CStyleRenderer", "LoopKernel", "get_function", "launch", "load_module"] if level == "loop" else []
    if LEVELS[level] in sdk.__all__:
        return LEVELS[level], [LEVELS[level], *extra], ""
    return "Backend", ["Backend", "Level", *extra], f"\n    level = Level.{level.upper()}"


def _values(names: VendorNames, level: str) -> dict[str, str]:
    base, imports, level_line = _level_class(level)
    return {**names.substitutions(), "level": level.upper(), "profile": ci_profile(), "base": base,
            "imports": ", ".join(sorted([*imports, "register_backend"])), "level_line": level_line}


def new(name: str, level: str, directory: str | os.PathLike[str] | None = None) -> Path:
    """Write the vendor package ``name`` at ``level`` into ``directory`` (default ``./name``),
    which must not exist or be empty; returns its path.

    Raises:
        ScaffoldError: a bad name or level, or a folder that is not empty.
    """
    if level not in LEVELS:
        raise ScaffoldError(f"unknown level {level!r}; choose one of {sorted(LEVELS)}")
    names = VendorNames.of(name)
    out = Path(directory if directory is not None else name).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ScaffoldError(f"{out} exists and is not an empty folder; pass --dir to write elsewhere")
    from torchvendor.sdk.device.build_config import templates_dir

    values = _values(names, level)
    templates = importlib.resources.files(__package__).joinpath("templates")
    for target, template in _FILES.items():
        path = out / target.format(package=names.package)
        text = templates.joinpath(template.format(level=level)).read_text()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fill(text, values, template))
    run = out / ".ci" / "run"
    run.chmod(run.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    runtime_files(templates_dir(), out, names)
    kernel_files(templates_dir(), out, names)
    return out
