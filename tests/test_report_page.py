"""The report a vendor acts on: whole reasons (a wrong answer's greatest difference, index and
tolerance; an exception's type and the vendor's frame), the HTML page opening on its failures in
headless Chromium, and a kernel library dropped between two runs showing as "lost native" in
``diff``."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from device_utils import kernel_template
import torch

from torchvendor.sdk import AtenBackend, register_backend
from torchvendor.sdk.conformance.core import Target, cases_for, run_case
from torchvendor.sdk.conformance.report import FAILURE_BG, write_reports
from torchvendor.sdk.conformance.runner import run_suite

ROOT = Path(__file__).resolve().parents[1]


class OffByOnePercent(AtenBackend):
    """A backend whose every output is 1 % too large."""

    name = "tv_report_off_by_one_percent"

    def compile(self, gm, example_inputs):
        def run(*args):
            out = gm(*args)
            return type(out)(o * 1.01 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in out) \
                if isinstance(out, (list, tuple)) else out * 1.01
        return run


def _vendor_tile_size(n: int) -> int:
    raise ValueError(f"vendor compiler: no tile size for {n} elements")


class Crashing(AtenBackend):
    """A backend whose compiler raises in its own helper."""

    name = "tv_report_crashing"

    def compile(self, gm, example_inputs):
        _vendor_tile_size(example_inputs[0].numel())
        return gm


register_backend(OffByOnePercent)
register_backend(Crashing)


def _case(target: Target, case_id: str):
    return run_case({c.id: c for c in cases_for(target, "minimal", areas=["ops"])}[case_id], target)


def test_a_wrong_answer_keeps_the_greatest_difference_where_and_the_tolerance():
    result = _case(Target(device="cpu", backend=OffByOnePercent.name), "ops/exp/float32/compiled")
    assert result.status == "fail"
    assert re.search(r"Greatest absolute difference: [\d.e+-]+ at index \(.*\) \(up to [\d.e+-]+ allowed\)",
                     result.reason), result.reason
    assert "Greatest relative difference" in result.reason and "Mismatched elements" in result.reason


def test_an_exception_names_its_type_and_the_vendors_frame():
    target = Target(device="cpu", backend=Crashing.name, options=(("strict", True),))
    result = _case(target, "ops/exp/float32/compiled")
    assert result.status == "fail"
    assert "no tile size for" in result.reason
    frame = re.search(r"in the vendor's code: (.+):(\d+), in (\w+)", result.reason)
    assert frame and frame.group(1).endswith("test_report_page.py") and frame.group(3) == "_vendor_tile_size", \
        result.reason


def _png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of RGB(A) pixels of an 8-bit non-interlaced PNG (Chromium's)."""
    data = path.read_bytes()
    pos, chunks, head = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + n
    width, height, depth, color = head[:4]
    assert depth == 8 and color in (2, 6), head
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(b"".join(chunks)), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a, b = line[i - bpp] if i >= bpp else 0, prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_html_report_opens_on_its_failures_in_headless_chromium(tmp_path):
    run = run_suite(Target(device="cpu", backend="test_report_page:OffByOnePercent"), "minimal", tmp_path, progress=False,
                    only=["ops/exp/float32/compiled", "ops/mul/float32/compiled", "compile/*"])
    assert any(r.status == "fail" for r in run.results)
    html = write_reports(run)["html"]
    browser = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*browser, "--dump-dom", f"file://{html}"], capture_output=True, text=True, timeout=120)
    headings = re.findall(r"<h2>(.*?)</h2>", dom.stdout)
    assert headings and headings[0].startswith("Failures ("), headings
    assert "Greatest absolute difference" in dom.stdout.split("</section>")[0]
    shot = tmp_path / "first_screen.png"
    out = subprocess.run([*browser, f"--screenshot={shot}", "--window-size=1200,900", f"file://{html}"],
                         capture_output=True, text=True, timeout=120)
    assert shot.exists(), out.stderr[-2000:]
    width, bpp, rows = _png_pixels(shot)
    bg = bytes.fromhex(FAILURE_BG.lstrip("#"))
    tinted = sum(1 for row in rows for x in range(width) if row[x * bpp:x * bpp + 3] == bg)
    assert tinted > 0.1 * width * len(rows), f"the failures do not fill the first screen ({tinted} px)"


@pytest.fixture(scope="module")
def kernel_library() -> Path:
    return kernel_template()


def _conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchvendor.sdk.cli", "conformance", *args], capture_output=True,
                          text=True, timeout=600)


def test_a_kernel_library_dropped_between_two_runs_is_lost_native_in_diff(kernel_library, tmp_path):
    common = ["--device", "acme", "--profile", "device", "--no-progress", "--only", "ops/mul/float32/eager",
              "--only", "ops/add/float32/eager", "--only", "ops/exp/float32/eager"]
    with_kernels = _conformance(*common, "--kernels", str(kernel_library), "--report", str(tmp_path / "old"))
    assert with_kernels.returncode == 0, with_kernels.stdout[-3000:] + with_kernels.stderr[-3000:]
    without = _conformance(*common, "--report", str(tmp_path / "new"))
    assert without.returncode == 0, without.stdout[-3000:]
    old = {c["id"]: c["status"] for c in json.loads((tmp_path / "old" / "report.json").read_text())["cases"]}
    lost = sorted(k for k, v in old.items() if v == "pass")
    assert "ops/mul/float32/eager" in lost
    d = _conformance("diff", str(tmp_path / "old"), str(tmp_path / "new"))
    assert d.returncode == 1 and f"({len(lost)} lost native)" in d.stdout, d.stdout
    for case in lost:
        assert re.search(rf"REGRESSION {re.escape(case)}: pass -> fallback \(lost native: .*\)", d.stdout), d.stdout
    back = _conformance("diff", str(tmp_path / "new"), str(tmp_path / "old"))
    assert back.returncode == 0 and "fallback -> pass (now native" in back.stdout
    new_doc = json.loads((tmp_path / "new" / "report.json").read_text())
    assert new_doc["rates"]["total"]["native_rate"] < new_doc["rates"]["total"]["pass_rate"]
    assert new_doc["implement_next"][0]["to_host_bytes"] > 0 and new_doc["implement_next"][0]["seconds"] > 0
