"""Where the installed SDK's headers and CMake package live, for out-of-tree vendor builds.

A vendor's runtime library needs only ``torchvendor/runtime.h`` (plain C); a vendor's eager
kernel library adds ``torchvendor/kernel_api.h`` and PyTorch's stable-ABI headers. All of them
are installed in the wheel, so a vendor project builds against an installed torchvendor, never
against a checkout of it::

    $ cc -shared -fPIC $(torchvendor config --cflags) my_runtime.c -o libacme_tv.so
    $ cmake -S . -B build -Dtorchvendor_DIR=$(torchvendor config --cmake-dir)

``torchvendor config --cflags`` prints what a compiler needs (``--includes`` the folders one per
line), ``--cmake-dir`` the folder of ``torchvendorConfig.cmake``, ``--templates`` the runtime and
kernel templates a vendor copies to start.
"""
from __future__ import annotations

import argparse
import importlib.resources
import os
import sys

__all__ = ["include_dir", "cmake_dir", "templates_dir", "torch_include_dirs", "cflags", "main"]


def _installed(*parts: str) -> str:
    path = os.fspath(importlib.resources.files("torchvendor").joinpath(*parts))
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} is missing: this torchvendor was installed without its C headers. "
            "Reinstall it (pip install --no-build-isolation .) so the build installs them.")
    return path


def include_dir() -> str:
    """The folder that holds ``torchvendor/runtime.h`` (pass it as ``-I``).

    Example::

        >>> import os
        >>> os.path.isfile(os.path.join(include_dir(), "torchvendor", "runtime.h"))
        True
    """
    return _installed("include")


def cmake_dir() -> str:
    """The folder of ``torchvendorConfig.cmake``, for ``-Dtorchvendor_DIR=...``.

    Example::

        >>> os.path.isfile(os.path.join(cmake_dir(), "torchvendorConfig.cmake"))
        True
    """
    return _installed("share", "cmake", "torchvendor")


def templates_dir() -> str:
    """Starting points a vendor copies: ``runtime/`` (the reference runtime, sim_runtime.c, with
    its CMakeLists.txt) and ``kernels/`` (the eager-kernel template on the stable ABI).

    Example::

        >>> sorted(os.listdir(templates_dir()))
        ['kernels', 'runtime']
    """
    return _installed("share", "torchvendor", "templates")


def torch_include_dirs() -> list[str]:
    """The installed torch's header folders (for kernel libraries on the stable ABI).

    Example::

        >>> any(os.path.isdir(os.path.join(d, "torch", "csrc", "stable")) for d in torch_include_dirs())
        True
    """
    import torch.utils.cpp_extension as cpp  # torch only when asked for torch's headers

    return [cpp.include_paths()[0]]


def cflags(torch_headers: bool = False) -> list[str]:
    """Compiler flags: ``-I`` for the SDK's headers (and torch's, with ``torch_headers``).

    Example::

        >>> cflags()[0] == "-I" + include_dir()
        True
    """
    dirs = [include_dir()] + (torch_include_dirs() if torch_headers else [])
    return [f"-I{d}" for d in dirs]


def main(argv: list[str] | None = None) -> int:
    """``torchvendor config``: print build flags for out-of-tree vendor libraries."""
    parser = argparse.ArgumentParser(prog="torchvendor config", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--cflags", action="store_true", help="compiler flags (-I...)")
    group.add_argument("--includes", action="store_true", help="include folders, one per line")
    group.add_argument("--cmake-dir", action="store_true", help="folder of torchvendorConfig.cmake")
    group.add_argument("--templates", action="store_true",
                       help="folder of the runtime and kernel templates to copy")
    parser.add_argument("--torch", action="store_true",
                        help="also torch's headers (kernel libraries on the stable ABI)")
    args = parser.parse_args(argv)
    if args.cflags:
        print(" ".join(cflags(args.torch)))
    elif args.includes:
        print("\n".join([include_dir()] + (torch_include_dirs() if args.torch else [])))
    elif args.templates:
        print(templates_dir())
    else:
        print(cmake_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
