"""The ``torchvendor`` command line.

Example::

    $ torchvendor new nimbus --level loop      # a vendor package: runtime, kernels, backend, manifest, CI
    $ torchvendor tour                         # a tour of a device on the reference runtime
    $ torchvendor diagnose --name acme --runtime ./libacme_tv.so
    $ torchvendor config --cflags               # -I flags for an out-of-tree runtime library
    $ torchvendor conformance --backend torchvendor_cpu --device acme --profile minimal --report out/

A ``--backend module:Class`` is imported from the current folder as ``python -m`` would: the
command puts the working directory first on ``sys.path``, and the conformance workers inherit
that path, so a vendor package runs from its own checkout without an install or a PYTHONPATH.
"""
from __future__ import annotations

import argparse
import os
import sys


def _cwd_importable() -> None:
    """Put the working directory on ``sys.path`` as ``python -m`` does (a console script does not)."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``torchvendor`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["conformance"]:  # its own parser (and its own ``diff`` subcommand)
        from .conformance.cli import main as conformance_main

        _cwd_importable()
        return conformance_main(argv[1:])
    if argv[:1] == ["config"]:  # build flags for out-of-tree vendor libraries
        from .device.build_config import main as config_main

        return config_main(argv[1:])
    if argv[:1] == ["new"]:  # a vendor package (sdk/scaffold)
        from .scaffold.cli import main as new_main

        return new_main(argv[1:])
    parser = argparse.ArgumentParser(prog="torchvendor", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("conformance", help="run the conformance suite (see: torchvendor conformance --help)")
    sub.add_parser("config", help="build flags for vendor libraries (see: torchvendor config --help)")
    sub.add_parser("new", help="write a vendor package that builds and passes the suite (see: torchvendor new --help)")
    tour_p = sub.add_parser("tour", help="register a device (default: the reference simulator) and exercise it")
    tour_p.add_argument("--name", default="acme")
    tour_p.add_argument("--runtime", default=None)
    diag = sub.add_parser("diagnose", help="register a runtime library and print what is wired and what is missing")
    diag.add_argument("--name", default="acme", help="device name to register (default: acme)")
    diag.add_argument("--runtime", default=None, help="path of the vendor runtime library (default: the simulator)")
    args = parser.parse_args(argv)

    if args.command == "tour":
        from .device import tour

        return tour.main(["--name", args.name] + (["--runtime", args.runtime] if args.runtime else []))
    from .device.registry import register_device

    module = register_device(args.name, runtime=args.runtime)
    print(module.diagnose())
    return 0


if __name__ == "__main__":
    sys.exit(main())
