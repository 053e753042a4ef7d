#!/usr/bin/env bash
# One entry point for a fresh machine: sets up .venv (torch 2.13.0 CPU, the C++ build) and
# runs a job.   ./dev.sh demo [conformance args] | test [pytest args] | slow | bench | profiles | shell
#               | new NAME --level LEVEL [--dir DIR] | release-check VERSION
# demo: the conformance suite's minimal profile, torchvendor_cpu on the simulated device "acme";
# the report lands in conformance-report/ (report.html, report.md, report.json).
# shell: a shell with .venv/bin first on PATH (the `torchvendor` command, python, pytest); the same
# as `source .venv/bin/activate`. new: `torchvendor new`, a vendor package (README: bring-up).
# release-check VERSION: proves a torch release (docs/releases.md). torch==VERSION in a venv of its
# own (.release/torch-VERSION/venv, or $RELEASE_VENV), torchvendor built against it in its own
# build folder, then tests/release_check.py: the default tier, the minimal and inference
# profiles, and the vendor binaries (runtime and kernel templates) built once, under .venv's
# torch with TORCH_TARGET 2.11, loaded unchanged; its row goes into docs/releases.md.
set -euo pipefail
CALLER_DIR=$PWD  # `new` writes the package relative to where it was called from
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
DEPS=("scikit-build-core>=0.10" pytest pytest-xdist hypothesis expecttest onnx onnxruntime onnxscript numpy sympy transformers rich)
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.torchvendor-deps
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # torch first and pinned, so nothing later resolves a different (CUDA) build.
  .venv/bin/python -m pip install -q torch==2.13.0
  .venv/bin/python -m pip install -q "${DEPS[@]}"
  touch "$stamp"
fi
# Incremental: a no-op rebuild takes a few seconds.
.venv/bin/python -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | grep -v "^$" || true
.venv/bin/python -c "import torchvendor._C" 
# The vendor binaries release-check loads on every release: built once, kept in .release/binaries.
vendor_binaries() {
  local dir=.release/binaries cfg=.venv/bin/torchvendor
  [ -f $dir/build/kernels/libacme_kernels.so ] && [ -f $dir/build/runtime/libacme_tv.so ] && return
  rm -rf $dir && mkdir -p $dir
  cp -r "$($cfg config --templates)/runtime" $dir/acme_runtime
  cp -r "$($cfg config --templates)/kernels" $dir/acme_kernels
  cmake -S $dir/acme_runtime -B $dir/build/runtime -Dtorchvendor_DIR="$($cfg config --cmake-dir)" >/dev/null
  cmake --build $dir/build/runtime >/dev/null
  cmake -S $dir/acme_kernels -B $dir/build/kernels -Dtorchvendor_DIR="$($cfg config --cmake-dir)" \
        -DTORCH_TARGET=2.11 >/dev/null
  cmake --build $dir/build/kernels >/dev/null
  .venv/bin/python -c "import torch; print('built with torch', torch.__version__, 'TORCH_TARGET 2.11')" \
    > $dir/BUILT_WITH
}

release_check() {
  local ver=${1:?usage: ./dev.sh release-check VERSION  (a torch release, e.g. 2.15.0)}
  local dir=.release/torch-$ver
  local venv=${RELEASE_VENV:-$dir/venv}
  vendor_binaries
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  if ! "$venv/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$ver')" 2>/dev/null; then
    # exactly this release; where the machine's pip configuration caps torch below it (a
    # constraints file), that configuration is left out for this one install
    "$venv/bin/python" -m pip install -q "torch==$ver" 2>/dev/null \
      || PIP_CONFIG_FILE=/dev/null "$venv/bin/python" -m pip install -q "torch==$ver"
  fi
  "$venv/bin/python" -m pip install -q "${DEPS[@]}"
  "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps -Cbuild-dir="$dir/build" -e . 2>&1 \
    | grep -v "^$" || true
  "$venv/bin/python" tests/release_check.py --out "$dir/results" --docs docs/releases.md \
    --runtime .release/binaries/build/runtime/libacme_tv.so \
    --kernels .release/binaries/build/kernels/libacme_kernels.so
}

job=${1:-demo}; shift || true
export PATH="$PWD/.venv/bin:$PATH"  # the `torchvendor` command for every job (and for `shell`)
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
  new)   tv=$PWD/.venv/bin/torchvendor; cd "$CALLER_DIR"; exec "$tv" new "$@" ;;
  release-check) release_check "$@" ;;
  *) echo "usage: ./dev.sh demo|test|slow|bench|profiles|shell|new NAME --level LEVEL|release-check VERSION" >&2; exit 2 ;;
esac
