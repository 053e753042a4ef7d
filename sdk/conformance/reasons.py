"""The reason a case failed, whole: the exception's type and full message (a numeric mismatch keeps
torch's "Greatest absolute difference: ... at index (...) (up to ... allowed)" lines), and the last
frame in the vendor's code, i.e. not in torch, not in the SDK, not in Python's standard library.

    >>> def vendor_kernel():
    ...     raise ValueError("bad tile size 0")
    >>> try:
    ...     vendor_kernel()
    ... except ValueError as e:
    ...     print(describe_exception(e).splitlines()[0])
    ValueError: bad tile size 0
"""
from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from functools import cache

__all__ = ["describe_exception", "vendor_frame", "is_vendor_file"]


#: the SDK's own packages; everything else in the installed package (the reference backends,
#: which are vendor code to copy) is judged like any vendor's code
SDK_PACKAGES = ("sdk", "ir", "partitioner", "pattern_matcher")


@cache
def _not_vendor_roots() -> tuple[str, ...]:
    """Directories whose frames are not the vendor's: torch, the SDK's packages and the standard
    library."""
    import torchvendor

    package = os.path.dirname(os.path.abspath(torchvendor.__file__))
    roots = [os.path.join(package, "__init__.py"), sysconfig.get_paths()["stdlib"] + os.sep]
    # an editable install links the subpackages in from the source tree: their real places too
    for d in SDK_PACKAGES:
        roots += [os.path.join(package, d) + os.sep, os.path.realpath(os.path.join(package, d)) + os.sep]
    torch = sys.modules.get("torch")  # never imported here: the runtime area runs without it
    if torch is not None:
        roots.append(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
    return tuple(roots)


def is_vendor_file(filename: str) -> bool:
    """Whether code in ``filename`` is the vendor's: not torch's, not the SDK's, not Python's."""
    return _is_vendor(filename)


def _is_vendor(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    paths = (os.path.abspath(filename), os.path.realpath(filename))
    return not any(p.startswith(_not_vendor_roots()) for p in paths)


def vendor_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the vendor's code in ``exc``'s traceback or in those of its causes."""
    seen: set[int] = set()
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in reversed(chain):  # the original exception first
        frames = [f for f in traceback.extract_tb(e.__traceback__) if _is_vendor(f.filename)]
        if frames:
            return frames[-1]
    return None


def describe_exception(exc: BaseException) -> str:
    """``Type: the whole message`` and, when there is one, the vendor frame it came from."""
    text = f"{type(exc).__name__}: {exc}".rstrip()
    frame = vendor_frame(exc)
    if frame is not None:
        text += f"\n  in the vendor's code: {frame.filename}:{frame.lineno}, in {frame.name}"
        if frame.line:
            text += f": {frame.line.strip()}"
    return text
