"""What a worker process leaves behind when it dies: its stderr in a file of its own (the vendor's
runtime prints there, and :mod:`faulthandler` writes the Python stack there on a fatal signal or
when the runner asks before ending a case that ran past its time), and the reason a crashed or
hung case gets from it: the signal by name, the last frame in the vendor's code, the last lines
of stderr the case wrote.

    >>> log = ('== case compile/mutation\\nnimbus: queue 3 wedged\\nFatal Python error: Segmentation fault\\n\\n'
    ...        'Current thread 0x01 (most recent call first):\\n'
    ...        '  File "/opt/nimbus/nimbus_backend.py", line 40 in launch\\n'
    ...        '  File "/usr/lib/python3.11/threading.py", line 9 in run\\n')
    >>> print(crash_reason(-11, log, "the worker process crashed"))
    the worker process crashed: killed by SIGSEGV (signal 11)
      in the vendor's code: /opt/nimbus/nimbus_backend.py:40, in launch
      innermost frames: nimbus_backend.py:40 launch; threading.py:9 run
      the last lines of its stderr:
        nimbus: queue 3 wedged
"""
from __future__ import annotations

import faulthandler
import os
import re
import signal
import sys
from pathlib import Path

from .reasons import is_vendor_file

__all__ = ["capture_stderr", "case_marker", "crash_reason", "read_log", "TAIL_LINES"]

#: how many of the case's last stderr lines a reason quotes
TAIL_LINES = 12
_MARK = "== case "
#: the first line of a faulthandler dump
_DUMP = ("Fatal Python error", "Current thread", "Thread 0x", "Stack (most recent call first)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>.+)$')


def capture_stderr(path: str | os.PathLike[str]) -> None:
    """In a worker: send file descriptor 2 (Python's and native code's stderr alike) to ``path``,
    and have faulthandler dump every thread's stack there on a fatal signal or on SIGUSR1."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def case_marker(case_id: str) -> None:
    """Mark the start of a case in the worker's stderr (a reason quotes only that case's lines)."""
    print(f"{_MARK}{case_id}", file=sys.stderr, flush=True)


def _signal_name(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name} (signal {-code})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def _frames(lines: list[str]) -> list[re.Match]:
    """faulthandler's frames, most recent call first: the crashing thread's before the others'."""
    current: list[re.Match] = []
    other: list[re.Match] = []
    into = other
    for line in lines:
        if line.startswith("Current thread"):
            into = current
        elif line.startswith("Thread "):
            into = other
        elif (m := _FRAME.match(line)) is not None:
            into.append(m)
    return current + other


def crash_reason(exitcode: int | None, log: str, what: str) -> str:
    """``what`` (e.g. "the worker process crashed"), the signal by name, the innermost vendor frame
    faulthandler printed, and the last stderr lines of the case that was running."""
    lines = log.splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith(_MARK)), default=-1)
    mine = [line for line in lines[start + 1:] if line.strip()]
    text = what if exitcode is None else f"{what}: {_signal_name(exitcode)}"
    cut = next((i for i, line in enumerate(mine) if line.startswith(_DUMP)), len(mine))
    own, dump = mine[:cut], mine[cut:]  # what the case wrote, then faulthandler's stacks
    frames = _frames(dump)
    vendor = next((m for m in frames if is_vendor_file(m["file"])), None)
    if vendor is not None:
        text += f"\n  in the vendor's code: {vendor['file']}:{vendor['line']}, in {vendor['fn'].strip()}"
    if frames:
        text += "\n  innermost frames: " + "; ".join(f"{Path(m['file']).name}:{m['line']} {m['fn'].strip()}"
                                                  for m in frames[:4])
    if own:
        text += "\n  the last lines of its stderr:\n" + "\n".join(f"    {line.rstrip()}" for line in own[-TAIL_LINES:])
    else:
        text += "\n  (the case wrote nothing to stderr)"
    return text


def read_log(path: str | os.PathLike[str]) -> str:
    """The worker's stderr so far ("" when there is none)."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""
