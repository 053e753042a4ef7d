"""A vendor builds its runtime and kernel library from a folder outside the checkout, exactly as
docs/runtime.md ("Building out of tree") says, against the installed torchvendor; then
registers the runtime, loads the kernels and runs them."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "runtime.md"


def doc_commands() -> str:
    text = DOC.read_text()
    m = re.search(r"<!-- out-of-tree build -->\s*```bash\n(.*?)```", text, re.S)
    assert m, "docs/runtime.md lost its out-of-tree build commands"
    return m.group(1)


def doc_python() -> str:
    text = DOC.read_text()
    m = re.search(r"tests/test_device_out_of_tree.py runs it\) -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/runtime.md lost its out-of-tree Python block"
    return m.group(1)


def build_as_documented(folder: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("cmake") is None:
        pytest.skip("no cmake")
    bin_dir = os.path.dirname(sys.executable)  # the venv's `torchvendor` console script
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
    return subprocess.run(["bash", "-euo", "pipefail", "-c", doc_commands()], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def vendor_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("acme_vendor")
    assert ROOT not in folder.parents
    proc = build_as_documented(folder)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return folder


def test_config_points_at_installed_headers() -> None:
    from torchvendor.sdk import cmake_dir, include_dir
    from torchvendor.sdk.device.build_config import main

    assert (Path(include_dir()) / "torchvendor" / "kernel_api.h").is_file()
    assert (Path(cmake_dir()) / "torchvendorConfig.cmake").is_file()
    # The installed copy (site-packages), not the checkout's csrc/include.
    assert "site-packages" in Path(include_dir()).parts and (ROOT / "csrc") not in Path(include_dir()).parents
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "torchvendor"), "config",
                          "--cflags"], capture_output=True, text=True, check=True).stdout.split()
    assert out == [f"-I{include_dir()}"]
    with pytest.raises(SystemExit):
        main([])  # one of --cflags/--includes/--cmake-dir/--templates is required


def test_runtime_and_kernels_built_out_of_tree_run(vendor_folder: Path) -> None:
    runtime = vendor_folder / "build" / "runtime" / "libacme_tv.so"
    kernels = vendor_folder / "build" / "kernels" / "libacme_kernels.so"
    assert runtime.is_file() and kernels.is_file()
    # The runtime library needs no torch (it links only libc, pthread, libdl).
    dynamic = subprocess.run(["readelf", "-d", str(runtime)], capture_output=True, text=True).stdout
    needed = [line.split("[")[-1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert needed and not [n for n in needed if "torch" in n or "c10" in n], needed  # not the hex
    script = doc_python() + "\nprint('native', sorted(torch.acme.native_counts()))\n"
    proc = subprocess.run([sys.executable, "-c", script], cwd=vendor_folder, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runtime 'torchvendor-sim" in proc.stdout and str(runtime) in proc.stdout
    natives = proc.stdout.strip().splitlines()[-1]
    for op in ("add.Tensor", "mul.Tensor", "relu", "sum.dim_IntList"):
        assert op in natives, natives
