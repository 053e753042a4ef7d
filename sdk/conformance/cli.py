"""``torchvendor conformance``: run the suite and write the report; ``torchvendor conformance diff``.

    $ torchvendor conformance --backend torchvendor_cpu --device acme --profile minimal --report out/
    $ torchvendor conformance --runtime ./libacme_tv.so --device acme --profile device --report out/
    $ torchvendor conformance --device acme --kernels build/libacme_kernels.so --profile device --report out/
    $ torchvendor conformance diff out-old/ out/
"""
from __future__ import annotations

import argparse
import sys

from .core import PROFILES, ConformanceError, Target, load_manifest
from .report import diff, summary_table, to_dict, write_reports
from .runner import run_suite

__all__ = ["main"]


def _parse_option(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--option expects KEY=VALUE, got {text!r}")
    for cast in (int, float):
        try:
            return key, cast(value)
        except ValueError:
            pass
    return key, {"true": True, "false": False}.get(value.lower(), value)


def _diff(args: list[str]) -> int:
    """``diff OLD NEW``: every status change; exit 1 when something regressed, 2 on bad input."""
    if len(args) != 2:
        print("usage: torchvendor conformance diff OLD NEW (report directories or report.json files)")
        return 2
    try:
        d = diff(args[0], args[1])
    except ConformanceError as e:
        print(f"torchvendor conformance diff: {e}")
        return 2
    print(f"{len(d.regressions)} regression(s) ({len(d.lost_native)} lost native), {len(d.fixes)} fix(es), "
          f"{len(d.coverage)} coverage change(s)")
    if d.transitions:
        print("transitions: " + ", ".join(f"{a} -> {b}: {n}" for (a, b), n in sorted(d.transitions.items())))
    for what, lines in (("REGRESSION", d.regressions), ("fixed     ", d.fixes), ("coverage  ", d.coverage)):
        for line in lines:
            print(f"  {what} {line}")
    return 1 if d.regressions else 0


def main(argv: list[str] | None = None) -> int:
    """Run the conformance CLI; returns the exit status (1 when a case failed).

    >>> main(["--device", "cpu", "--backend", "no_such_backend", "--report", "/tmp/tv-doc"])
    torchvendor conformance: unknown compile backend 'no_such_backend'; known: ...
    2
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["diff"]:
        return _diff(argv[1:])
    p = argparse.ArgumentParser(prog="torchvendor conformance", description=__doc__.splitlines()[0])
    p.add_argument("--backend", help="torch.compile backend name, or module:Class of a torchvendor Backend")
    p.add_argument("--device", default="cpu", help="device to test: cpu, cuda or a torchvendor device name")
    p.add_argument("--runtime", help="vendor runtime library to bring the device up from (default: simulator)")
    p.add_argument("--profile", default="minimal", choices=sorted(PROFILES))
    p.add_argument("--seed", type=int, default=None,
                   help="the sample of the ci profile (default: the week's number; the report records it)")
    p.add_argument("--report", default="conformance-report", help="report directory (default: conformance-report)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--manifest", help="vendor manifest (TOML): claimed areas, ops, dtypes, expected failures")
    p.add_argument("--option", action="append", default=[], type=_parse_option, help="backend option KEY=VALUE")
    p.add_argument("--kernels", action="append", default=[], metavar="LIB",
                   help="a vendor kernel library to load in every worker (repeatable; also the manifest's 'kernels')")
    p.add_argument("--only", action="append", default=[], help="run only case ids matching this glob")
    p.add_argument("--resume", action="store_true", help="keep the finished cases of an interrupted run")
    p.add_argument("--timeout", type=float, help="seconds per case (default: 120, models 600)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    try:
        manifest = load_manifest(args.manifest) if args.manifest else None
        kernels = (*(manifest.kernels if manifest else ()), *args.kernels)
        target = Target(device=args.device, backend=args.backend, runtime=args.runtime, options=tuple(args.option),
                        kernels=tuple(dict.fromkeys(kernels)))
        run = run_suite(target, args.profile, args.report, jobs=args.jobs, manifest=manifest, only=args.only,
                        resume=args.resume, progress=not args.no_progress, timeout=args.timeout, seed=args.seed)
    except ConformanceError as e:
        print(f"torchvendor conformance: {e}")
        return 2
    paths = write_reports(run)
    doc = to_dict(run)
    print(summary_table(doc))
    if run.interrupted:
        print("interrupted: finished cases are kept; run again with --resume to go on")
    print(f"report: {paths['html']} (also report.json, report.md)")
    return 1 if doc["summary"]["fail"] else 0
