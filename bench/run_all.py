"""Run every benchmark in bench/ in turn; each writes its table to docs/bench_*.md.

Usage: ``.venv/bin/python bench/run_all.py [--quick]`` (``--quick`` is passed to the benchmarks
that take it: smaller graphs, fewer repetitions).
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        start = time.perf_counter()
        print(f"== {script.name}", flush=True)
        rc = subprocess.call([sys.executable, str(script), *argv])
        print(f"== {script.name}: rc={rc} in {time.perf_counter() - start:.1f} s", flush=True)
        if rc:
            failed.append(script.name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
