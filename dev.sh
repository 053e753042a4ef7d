#!/usr/bin/env bash
# One entry point for a fresh machine: sets up .venv (torch 2.13.0 CPU, the C++ build) and
# runs a job.   ./dev.sh demo [conformance args] | test [pytest args] | slow | bench | profiles | shell
# demo: the conformance suite's minimal profile, torchvendor_cpu on the simulated device "acme";
# the report lands in conformance-report/ (report.html, report.md, report.json).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.torchvendor-deps
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # torch first and pinned, so nothing later resolves a different (CUDA) build.
  .venv/bin/python -m pip install -q torch==2.13.0
  .venv/bin/python -m pip install -q "scikit-build-core>=0.10" pytest pytest-xdist hypothesis expecttest onnx onnxruntime onnxscript numpy sympy transformers rich
  touch "$stamp"
fi
# Incremental: a no-op rebuild takes a few seconds.
.venv/bin/python -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | grep -v "^$" || true
.venv/bin/python -c "import torchvendor._C" 
job=${1:-demo}; shift || true
case "$job" in
  demo)  exec .venv/bin/python -m torchvendor.sdk.cli conformance --backend torchvendor_cpu --device acme \
           --profile minimal --jobs 2 --manifest reference_backends/cpu/manifest.toml \
           --report conformance-report "$@" ;;
  # one pytest worker per core (files stay whole on one worker, so module fixtures run once)
  test)  exec .venv/bin/python -m pytest -n auto --dist loadfile "$@" ;;
  slow)  exec .venv/bin/python -m pytest -m slow "$@" ;;
  bench) exec .venv/bin/python bench/run_all.py "$@" ;;
  # every conformance profile on the reference path (acme; cuda and the GPU device where CUDA is
  # available), one after another; a table of counts and times; non-zero on any failure
  profiles) exec .venv/bin/python tests/profiles.py "$@" ;;
  shell) exec bash ;;
  *) echo "usage: ./dev.sh demo|test|slow|bench|profiles|shell" >&2; exit 2 ;;
esac
