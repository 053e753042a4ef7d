"""Running the suite: worker processes, per-case timeouts, crash isolation, resume, progress.

Cases run in ``jobs`` worker processes (each sets the target up itself: PrivateUse1 is renamed
once per process). A case that crashes its worker or runs past its timeout is recorded as that
case's failure ("worker crashed" / "timeout after N s"), the worker is replaced, and the run goes
on. Every finished case is appended to ``journal.jsonl`` in the report directory at once, so an
interrupted run (Ctrl-C) keeps what finished and ``resume=True`` skips it next time.

    >>> import tempfile
    >>> from torchvendor.sdk.conformance.core import Target
    >>> run = run_suite(Target(device="cpu", backend="eager"), "minimal", tempfile.mkdtemp(), jobs=1,
    ...                 only=["compile/mutation"], progress=False)
    >>> [(r.id, r.status) for r in run.results]
    [('compile/mutation', 'pass')]
"""
from __future__ import annotations

import contextlib
import fnmatch
import json
import multiprocessing as mp
import itertools
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Iterator, Sequence

from .core import SEED_ENV, Case, ConformanceError, Manifest, Result, Target, cases_for, run_case, run_seed
from .runtime_order import explain
from .worker_log import capture_stderr, case_marker, crash_reason, read_log

#: numbers the workers' stderr files of a run
_WORKER_IDS = itertools.count()

__all__ = ["run_suite", "SuiteRun"]


@dataclass
class SuiteRun:
    """What a run produced: the target, profile, results in case order, and timing."""

    target: Target
    profile: str
    results: list[Result]
    seconds: float
    report_dir: str
    interrupted: bool = False
    manifest: str = ""
    environment: dict[str, Any] = field(default_factory=dict)
    #: the seed of a sampled profile (ci): the same seed runs the same cases
    seed: int | None = None


def _worker(conn: Connection, target: Target, profile: str, manifest: Manifest | None,
            areas: list[str] | None = None, threads: int | None = None, log: str | None = None) -> None:
    import warnings

    if log:
        capture_stderr(log)  # a crash leaves its signal, stack and the runtime's messages there

    if threads:
        # The workers share the cores: with torch's default (one intra-op thread per core) each
        # one's parallel CPU kernels, its own and the device fallback's, wait on threads the
        # other workers hold, and eager references timed 150x slow (a 0.2 ms MLP at 31 ms).
        import torch

        torch.set_num_threads(threads)
    warnings.simplefilter("ignore")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    try:
        target.setup()
        cases = {c.id: c for c in cases_for(target, profile, manifest, areas=areas)}
    except Exception as e:  # noqa: BLE001
        conn.send(("setup_error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", None))
    while True:
        case_id = conn.recv()
        if case_id is None:
            return
        case_marker(case_id)
        conn.send(("result", run_case(cases[case_id], target, manifest).to_dict()))


@contextlib.contextmanager
def _without_main_script() -> Iterator[None]:
    """Start workers without re-running the caller's ``__main__`` script: ``spawn`` imports it in
    every child, which re-runs a script that calls the suite at top level (a doc block, a
    notebook) without a ``__name__`` guard. Workers need nothing from it: they rebuild the cases
    from the target, and a backend must be importable (``module:Class``) or registered on import."""
    main = sys.modules.get("__main__")
    saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if main is not None and hasattr(main, k)}
    try:
        for k in saved:
            setattr(main, k, None) if k == "__spec__" else delattr(main, k)
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


class _Worker:
    def __init__(self, ctx: Any, target: Target, profile: str, manifest: Manifest | None,
                 areas: list[str] | None, threads: int | None, logs: Path | None = None) -> None:
        self.conn, child = ctx.Pipe()
        self.log = None
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            self.log = str(logs / f"worker-{next(_WORKER_IDS)}.stderr")
        # Not a daemon: a daemon may not start processes, and the distributed cases start two.
        self.proc = ctx.Process(target=_worker, args=(child, target, profile, manifest, areas, threads, self.log),
                                daemon=False)
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if spec is not None and spec.name.split(".")[0] == __name__.split(".")[0]:
            self.proc.start()  # this package's CLI: its module is safe to import
        else:
            with _without_main_script():
                self.proc.start()
        child.close()
        self.case: Any = None
        self.started = 0.0
        self.ready = False

    def reason(self, what: str, exitcode: int | None) -> str:
        """Why its case failed: ``what``, the signal, the vendor frame and the stderr tail."""
        return crash_reason(exitcode, read_log(self.log) if self.log else "", what)

    def dump_stacks(self) -> None:
        """Ask faulthandler for every thread's stack (a case that runs past its time: where it is)."""
        if self.log and self.proc.is_alive() and hasattr(signal, "SIGUSR1"):
            os.kill(self.proc.pid, signal.SIGUSR1)
            time.sleep(1.0)

    def stop(self, grace: float = 0.0) -> None:
        """End the worker: let it leave on its own for ``grace`` seconds, then kill it."""
        if grace:
            self.proc.join(grace)
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)


def _journal(path: Path) -> dict[str, Result]:
    done: dict[str, Result] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                d = json.loads(line)
                done[d["id"]] = Result(**d)
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by an interruption
    return done


def _writable(report: Path) -> Path:
    try:
        report.mkdir(parents=True, exist_ok=True)
        probe = report / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConformanceError(f"the report directory {report} is not writable ({e}); pass --report DIR") from e
    return report


class _Pool:
    """Worker processes handing out case ids; a crash or a timeout is recorded and the worker replaced."""

    def __init__(self, target: Target, profile: str, manifest: Manifest | None, jobs: int,
                 cases: Sequence[Case], record: Any, timeout: float | None, logs: Path | None = None) -> None:
        # workers build only the areas of the cases to run (``only`` may leave out the ops area,
        # whose cases import torch's OpInfo database)
        # the cores this process may use (taskset, a container's cpuset), split evenly
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = max(1, cores // max(1, jobs)) if jobs > 1 else None
        self.args = (mp.get_context("spawn"), target, profile, manifest, sorted({c.area for c in cases}), threads,
                     logs)
        self.workers = [_Worker(*self.args) for _ in range(max(1, jobs))]
        self.record = record
        self.timeouts = {c.id: timeout or c.timeout for c in cases}
        self.area_of = {c.id: c.area for c in cases}

    def run(self, queue: list[str]) -> None:
        while queue or any(w.case for w in self.workers):
            for w in self.workers:
                if w.ready and w.case is None and queue:
                    w.case, w.started = queue.pop(0), time.perf_counter()
                    w.conn.send(w.case)
            ready = wait([w.conn for w in self.workers] + [w.proc.sentinel for w in self.workers], timeout=1.0)
            for i, w in enumerate(self.workers):
                if w.conn in ready or w.proc.sentinel in ready:
                    self._receive(i, w)
                elif w.case is not None and time.perf_counter() - w.started > self.timeouts[w.case]:
                    w.dump_stacks()
                    self._fail_and_replace(i, w, w.reason(f"timeout after {self.timeouts[w.case]:.0f} s; where "
                                                          f"it was", None))

    def _receive(self, i: int, w: _Worker) -> None:
        try:
            kind, payload = w.conn.recv() if w.conn.poll() else ("dead", None)
        except (EOFError, OSError):
            kind, payload = "dead", None
        if kind == "ready":
            w.ready = True
        elif kind == "result":
            self.record(Result(**payload))
            w.case = None
        elif kind == "setup_error":
            raise ConformanceError(f"a worker could not set the target up: {payload}")
        elif not w.proc.is_alive():
            w.proc.join(1)
            self._fail_and_replace(i, w, w.reason(f"the worker process crashed while running {w.case}",
                                                  w.proc.exitcode))

    def _fail_and_replace(self, i: int, w: _Worker, reason: str) -> None:
        if w.case is not None:
            self.record(Result(w.case, self.area_of[w.case], "fail", reason, time.perf_counter() - w.started))
        w.stop()
        self.workers[i] = _Worker(*self.args)

    def close(self) -> None:
        for w in self.workers:
            try:
                w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            w.stop(grace=10.0)


def _areas_of(only: Sequence[str]) -> list[str] | None:
    """The areas the case-id globs ``only`` can match (ids are ``<area>/...``), or None for all:
    a glob whose first segment is a wildcard may match any area.

    >>> _areas_of(["compile/mutation", "ops/exp/*"]), _areas_of(["*mutation"]), _areas_of([])
    (['compile', 'ops'], None, None)
    """
    if not only:
        return None
    heads = [pattern.split("/", 1)[0] if "/" in pattern else "*" for pattern in only]
    if any(c in head for head in heads for c in "*?["):
        return None
    return sorted(set(heads))


def run_suite(target: Target, profile: str, report_dir: str | os.PathLike[str], *, jobs: int = 1,
              manifest: Manifest | None = None, only: Sequence[str] = (), resume: bool = False,
              progress: bool = True, timeout: float | None = None, seed: int | None = None) -> SuiteRun:
    """Run ``profile`` against ``target`` in ``jobs`` worker processes; results also go to
    ``report_dir/journal.jsonl`` as they finish. ``only``: case-id globs to run; ``timeout``:
    seconds per case (default: each case's own, 120 s for most); ``seed``: the sample of a
    sampled profile (``ci``; default :func:`~.core.run_seed`)."""
    report = _writable(Path(report_dir))
    seed = run_seed() if seed is None else seed
    os.environ[SEED_ENV] = str(seed)  # the workers build the same sample
    target.setup()  # fail fast, in this process, with a clear error
    cases = cases_for(target, profile, manifest, areas=_areas_of(only))
    if only:
        cases = [c for c in cases if any(fnmatch.fnmatchcase(c.id, p) for p in only)]
    journal_path = report / "journal.jsonl"
    results = _journal(journal_path) if resume else {}
    if not resume and journal_path.exists():
        journal_path.unlink()
    # costly cases first (a stable sort: case order otherwise), so no worker idles at the end while
    # another finishes a long case; results are reported in case order whatever the run order
    queue = [c.id for c in sorted(cases, key=lambda c: -c.cost) if c.id not in results]
    start = time.perf_counter()
    bar = _Progress(len(cases), len(results), enabled=progress)
    interrupted, pool = False, None
    try:
        with open(journal_path, "a") as journal:
            def record(r: Result) -> None:
                results[r.id] = r
                journal.write(json.dumps(r.to_dict()) + "\n")
                journal.flush()
                bar.advance(r)

            pool = _Pool(target, profile, manifest, min(jobs, len(queue) or 1), cases, record, timeout,
                         report / "workers")
            pool.run(queue)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if pool is not None:
            pool.close()
        bar.close()
    ordered = explain([results[c.id] for c in cases if c.id in results])  # root cause first
    return SuiteRun(target, profile, ordered, time.perf_counter() - start, str(report), interrupted,
                    manifest.path if manifest else "", seed=seed if profile == "ci" else None)


class _Progress:
    """A rich progress bar (or nothing when disabled or rich is missing)."""

    def __init__(self, total: int, done: int, enabled: bool) -> None:
        self.bar = None
        if not enabled:
            return
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            return
        self.bar = Progress(TextColumn("[bold]conformance"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.description}"), transient=False)
        self.bar.start()
        self.task = self.bar.add_task("", total=total, completed=done)

    def advance(self, r: Result) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=f"{r.status:<8} {r.id}"[:70])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
