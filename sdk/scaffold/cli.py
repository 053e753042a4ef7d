"""``torchvendor new NAME --level torch|aten|loop|onnx [--dir DIR]``.

    >>> main(["Bad-Name", "--level", "aten", "--dir", "/tmp/unused"])
    torchvendor new: device name must be a lowercase Python identifier such as 'acme', got 'Bad-Name': ...
    2
"""
from __future__ import annotations

import argparse

from .generate import LEVELS, new
from .names import ScaffoldError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Write the package; print where it is and the next command. Exit status 2 on a bad request."""
    p = argparse.ArgumentParser(prog="torchvendor new", description="write a vendor package: runtime, kernels, "
                                "a torch.compile backend, manifest, CI; it builds and passes the conformance suite")
    p.add_argument("name", help="the device and backend name: a lowercase identifier, e.g. nimbus")
    p.add_argument("--level", required=True, choices=sorted(LEVELS), help="the IR level the backend takes")
    p.add_argument("--dir", default=None, help="where to write it (default: ./NAME; must not exist or be empty)")
    args = p.parse_args(argv)
    try:
        out = new(args.name, args.level, args.dir)
    except ScaffoldError as e:
        print(f"torchvendor new: {e}")
        return 2
    print(f"wrote {out}\nnext: {out / '.ci' / 'run'}   (build, smoke test, conformance suite; README.md)")
    return 0
