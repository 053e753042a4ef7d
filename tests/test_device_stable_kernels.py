"""Eager kernels on PyTorch's stable ABI: the template library (examples/stable_kernels) built
once with TORCH_TARGET 2.11, loaded for the device in fresh processes (loading changes which
kernel serves an operator, so never in the test session itself), checked op by op against
the CPU, and every bad library refused with nothing left registered."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from device_utils import REPRESENTATIVE_OPS, corpus_on_device

CMAKE = shutil.which("cmake")

# Bad libraries, each a tiny kernel library built like the template.
BAD_SOURCES = {
    "nonexistent": """
        Tensor k(Tensor a) { return a; }
        STABLE_TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { TV_IMPL(m, aten, "no_such_op_tv", &k); }
    """,
    "wrong_shape": """
        #include <torch/csrc/stable/ops.h>
        // relu that returns a tensor of the wrong size (the first row only)
        Tensor k(Tensor a) { Tensor c = torch::stable::clone(a); return torch::stable::narrow(c, 0, 0, 1); }
        STABLE_TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { TV_IMPL(m, aten, "relu", &k); }
    """,
}
# Kernel API 1.1 (empty_strided, current_stream) probed from inside a kernel: aten::fmax on the
# device checks the entries' errors, then returns a tensor made by empty_strided.
PROBE_SOURCE = """
    #include <torch/csrc/inductor/aoti_torch/c/shim.h>
    #include <string>
    #define EXPECT(cond, what) if (!(cond)) throw std::runtime_error(std::string("probe: ") + what)
    Tensor k(Tensor a, Tensor b) {
      const tv_kernel_api& api = tv::api();
      EXPECT(api.abi_minor >= 1 && TV_KERNEL_API_HAS(&api, empty_strided) &&
             TV_KERNEL_API_HAS(&api, current_stream), "no minor-1 entries");
      const int32_t dev = a.get_device_index(), f32 = aoti_torch_dtype_float32();
      const int64_t n = a.numel(), one = 1, minus = -1;
      void* h = nullptr;
      tv_stream s = nullptr, t = nullptr;
      EXPECT(api.empty_strided(1, &n, &one, f32, 99, &h) == TV_ERROR_INVALID_DEVICE, "device 99");
      EXPECT(std::string(api.last_error_message()).find("out of range") != std::string::npos,
             std::string("message: ") + api.last_error_message());
      EXPECT(api.empty_strided(1, &n, &one, -5, dev, &h) == TV_ERROR_INVALID_VALUE, "dtype -5");
      EXPECT(api.empty_strided(1, &minus, &one, f32, dev, &h) == TV_ERROR_INVALID_VALUE, "size -1");
      EXPECT(api.empty_strided(1, &n, &one, f32, dev, nullptr) == TV_ERROR_INVALID_VALUE, "NULL");
      EXPECT(h == nullptr, "a failed call returned a tensor");
      EXPECT(api.current_stream(99, &s) == TV_ERROR_INVALID_DEVICE, "stream of device 99");
      EXPECT(api.current_stream(dev, &s) == TV_SUCCESS, "current_stream");
      const auto id = torch::stable::accelerator::getCurrentStream(dev).id();
      EXPECT(api.native_stream(dev, id, &t) == TV_SUCCESS && s == t, "not the current stream");
      EXPECT(api.empty_strided(1, &n, &one, f32, dev, &h) == TV_SUCCESS, "empty_strided");
      return Tensor(static_cast<AtenTensorHandle>(h));
    }
    STABLE_TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { TV_IMPL(m, aten, "fmax", &k); }
"""
BAD_HEADER = """
#include <torchvendor/stable_kernels.h>
#include <torch/csrc/stable/tensor.h>
using torch::stable::Tensor;
TV_KERNEL_LIBRARY(TV_KERNELS_TORCH_TARGET);
TV_KERNELS_INIT()
"""


def _configure_and_build(src: Path, build: Path, *defines: str) -> None:
    from torchvendor.sdk import cmake_dir

    subprocess.run([CMAKE, "-S", str(src), "-B", str(build), f"-Dtorchvendor_DIR={cmake_dir()}",
                    *defines], check=True, capture_output=True, text=True, timeout=600)
    proc = subprocess.run([CMAKE, "--build", str(build)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:]


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, str]:
    if CMAKE is None:
        pytest.skip("no cmake")
    from torchvendor.sdk.device.build_config import templates_dir

    root = tmp_path_factory.mktemp("stable_kernels")
    shutil.copytree(os.path.join(templates_dir(), "kernels"), root / "template")
    _configure_and_build(root / "template", root / "build", "-DTORCH_TARGET=2.11")
    bad = root / "bad"
    bad.mkdir()
    cmake = ["cmake_minimum_required(VERSION 3.21)", "project(bad LANGUAGES CXX)",
             "find_package(torchvendor REQUIRED CONFIG)"]
    for name, body in BAD_SOURCES.items():
        (bad / f"{name}.cpp").write_text(BAD_HEADER + textwrap.dedent(body))
        cmake.append(f"torchvendor_add_kernel_library({name} TORCH_TARGET 2.11 SOURCES {name}.cpp)")
    (bad / "probe.cpp").write_text(BAD_HEADER + textwrap.dedent(PROBE_SOURCE))
    cmake.append("torchvendor_add_kernel_library(probe TORCH_TARGET 2.11 SOURCES probe.cpp)")
    # Marked as built for a torch newer than any installed one.
    (bad / "newer.cpp").write_text(BAD_HEADER.replace("TV_KERNELS_TORCH_TARGET", '"2.99"'))
    cmake.append("torchvendor_add_kernel_library(newer TORCH_TARGET 2.11 SOURCES newer.cpp)")
    (bad / "CMakeLists.txt").write_text("\n".join(cmake) + "\n")
    _configure_and_build(bad, root / "bad_build")
    out = {name: str(root / "bad_build" / f"lib{name}.so")
           for name in [*BAD_SOURCES, "newer", "probe"]}
    out["template"] = str(root / "build" / "libacme_kernels.so")
    # A second copy of the template: the same operators from another library.
    copy = root / "copy"
    copy.mkdir()
    for f in ("libacme_kernels.so", "libacme_device_kernels.so"):
        shutil.copy(root / "build" / f, copy / f)
    out["copy"] = str(copy / "libacme_kernels.so")
    return out


def run(code: str, **paths: str) -> str:
    prelude = "import torch, warnings\nfrom torchvendor.sdk import *\nacme = register_device('acme')\n"
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code).format(**paths)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_template_kernels_match_cpu(libs) -> None:
    out = run("""
        lib = load_kernel_library({template!r})
        print(lib.operators)
        torch.manual_seed(0)
        cases = [
            lambda d: torch.randn(4, 3).to(d) + torch.randn(3).to(d),            # broadcast
            lambda d: torch.randn(4, 1).to(d) * torch.randn(1, 5).to(d),
            lambda d: torch.arange(6, dtype=torch.int32).to(d) * torch.randn(6).to(d),  # promotion
            lambda d: torch.arange(6).to(d) * 2.5,                                 # wrapped float
            lambda d: torch.arange(6, dtype=torch.uint8).to(d) + torch.tensor(7).to(d),  # 0-dim
            lambda d: torch.ones(3, dtype=torch.bool).to(d) * torch.zeros(3, dtype=torch.bool).to(d),
            lambda d: torch.add(torch.randn(5).to(d), torch.randn(5).to(d), alpha=2.5),
            lambda d: torch.randn(5).half().to(d) + torch.randn(5).half().to(d),
            lambda d: torch.randn(3, 4).to(d).t() * 3,                             # strided
            lambda d: torch.relu(torch.randn(4, 4).to(d)),
            lambda d: torch.relu(torch.arange(-3, 3).to(d)),
            lambda d: torch.mm(torch.randn(3, 4).to(d), torch.randn(4, 2).to(d)),
            lambda d: torch.mm(torch.randn(4, 3).double().to(d).t(), torch.randn(4, 2).double().to(d)),
            lambda d: torch.randn(3, 4, 5).to(d).sum(),
            lambda d: torch.randn(3, 4, 5).to(d).sum(dim=(0, 2), keepdim=True),
            lambda d: torch.arange(12, dtype=torch.int32).reshape(3, 4).to(d).sum(1),
            lambda d: torch.randn(3, 4).to(d).sum(-1, dtype=torch.float64),
        ]
        for i, case in enumerate(cases):
            torch.manual_seed(i); want = case("cpu")
            torch.manual_seed(i); got = case("acme")
            assert got.device.type == "acme", i
            assert got.dtype == want.dtype and got.shape == want.shape, (i, got.dtype, want.dtype)
            assert torch.allclose(got.cpu().double(), want.double(), rtol=1e-3, atol=1e-3), i
        print("fallback", acme.fallback_counts())
        print("native", acme.native_counts())
        try:
            torch.add(torch.arange(3).to("acme"), torch.arange(3).to("acme"), alpha=0.5)
        except RuntimeError as e:
            print("alpha:", e)
        """, template=libs["template"])
    lines = out.splitlines()
    assert "aten::mul.Tensor" in lines[0] and "torchvendor::add.Tensor" in lines[0]
    fallback = next(l for l in lines if l.startswith("fallback"))
    for op in ("add", "mul", "relu", "mm", "sum"):
        assert f"'{op}" not in fallback, fallback  # none of them fell back
    native = next(l for l in lines if l.startswith("native"))
    for op in ("add.Tensor", "mul.Tensor", "relu", "mm", "sum", "sum.dim_IntList"):
        assert f"'{op}'" in native, native
    assert "argument alpha must not be a floating point number" in lines[-1]


def _release_check(python: str, library: str) -> dict:
    """``stable_abi_release_check.py`` under ``python``: its JSON report (torch version, the
    OpInfo comparison of each template operator on the device, native and fallback ops)."""
    import json

    check = str(Path(__file__).with_name("stable_abi_release_check.py"))
    proc = subprocess.run([python, check, library], capture_output=True, text=True, timeout=900, cwd="/")
    assert proc.returncode == 0, (python, proc.stdout[-2000:], proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def this_release(libs) -> dict:
    """The release check under this interpreter, run once: the OpInfo comparison of every
    template kernel (one child process instead of two)."""
    return _release_check(sys.executable, libs["template"])


def test_each_template_kernel_passes_its_opinfo_comparison(this_release) -> None:
    assert this_release["check"] == "opinfo", this_release["check"]  # op_db imports on this torch
    results = this_release["results"]
    assert set(results) == {"add", "mul", "nn.functional.relu", "mm", "sum"}
    for name, result in results.items():
        status, counts = result.split()
        passed, samples = map(int, counts.split("/"))
        assert status == "pass" and 0 < passed == samples, (name, result)


def test_checked_mode_catches_a_wrong_output(libs) -> None:
    out = run("""
        load_kernel_library({bad!r})
        x = torch.randn(3, 2, device="acme")
        print(tuple(torch.relu(x).shape))            # unchecked: the wrong shape goes through
        with checked_mode():
            try:
                torch.relu(x)
            except RuntimeError as e:
                print("checked:", e)
        """, bad=libs["wrong_shape"])
    unchecked, checked = out.strip().splitlines()[-2:]
    assert unchecked == "(1, 2)"
    assert "checked mode: the acme kernel for aten::relu returned a wrong output" in checked
    assert "has shape [1, 2]" in checked and "meta kernel says shape [3, 2]" in checked


def test_bad_libraries_are_refused_with_nothing_registered(libs) -> None:
    out = run("""
        def regs():
            return set(torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"))
        before = regs()
        for name, path in [("newer", {newer!r}), ("nonexistent", {nonexistent!r}),
                           ("notalib", torch.__file__)]:
            try:
                load_kernel_library(path)
            except KernelLibraryError as e:
                print(name, "|", e)
            assert regs() == before, name
        load_kernel_library({template!r})
        try:
            load_kernel_library({copy!r})
        except KernelLibraryError as e:
            print("duplicate |", e)
        x = torch.randn(3, device="acme")
        print("still works", torch.allclose((x * x).cpu(), x.cpu() * x.cpu()))
        """, **libs)
    got = dict(line.split(" | ", 1) for line in out.strip().splitlines() if " | " in line)
    assert "built for torch 2.99" in got["newer"] and "newer than the running torch" in got["newer"]
    assert "Nothing was registered" in got["newer"]
    assert "aten::no_such_op_tv, which torch" in got["nonexistent"] and "does not define" in got["nonexistent"]
    assert "is not a torchvendor kernel library" in got["notalib"]
    assert "already served" in got["duplicate"] and "aten::mul.Tensor" in got["duplicate"]
    assert "Nothing it registered stays registered" in got["duplicate"]
    assert out.strip().splitlines()[-1] == "still works True"


def _other_torch_pythons() -> list[str]:
    """Interpreters with another torch release and a torchvendor built for it (the device layer
    is rebuilt per release; the kernel library is not): TORCHVENDOR_OTHER_TORCH_PYTHONS
    (os.pathsep-separated) and the usual side venvs of this project's machines."""
    listed = [p for p in os.environ.get("TORCHVENDOR_OTHER_TORCH_PYTHONS", "").split(os.pathsep) if p]
    found = []
    for py in listed + ["/work/venv214/bin/python", "/tmp/venv214/bin/python"]:
        if py in found or not os.path.exists(py):
            continue
        probe = subprocess.run([py, "-c", "import torchvendor._C"], capture_output=True, cwd="/")
        if probe.returncode == 0:
            found.append(py)
    return found


def test_one_binary_loads_on_every_supported_release(libs, this_release) -> None:
    # The template was built once, against this torch's headers, with TORCH_TARGET 2.11; the very
    # same file must load and pass its OpInfo comparisons under each torch release available.
    import torch

    seen = {}
    for report in [this_release] + [_release_check(py, libs["template"]) for py in _other_torch_pythons()]:
        assert report["fallback_ops"] == [] and "mul.Tensor" in report["native_ops"], report
        assert all(v.startswith("pass") for v in report["results"].values()), report
        seen[report["torch"]] = report["results"]
    assert torch.__version__ in seen
    if len(seen) == 1:
        pytest.skip(f"only torch {torch.__version__} here (passed); set TORCHVENDOR_OTHER_TORCH_PYTHONS "
                    "to interpreters of other releases with torchvendor installed")


CORPUS = """
    import json
    from torchvendor.sdk.conformance.opinfo import REPRESENTATIVE_OPS, run_opinfo_corpus
    load_kernel_library({template!r})
    warnings.simplefilter("ignore")
    results = run_opinfo_corpus("acme", torch.float32, names=REPRESENTATIVE_OPS)
    print(json.dumps({{k: r.status for k, r in results.items()}}))
"""


def test_representative_corpus_passes_as_before_with_the_template(libs) -> None:
    # The template's kernels replace the fallback for add/mul/relu/mm/sum everywhere (also
    # inside composite operators): every OpInfo of the representative float32 subset that
    # passes through the fallback alone must still pass.
    import json

    # "before" is the device OpInfo tests' run of the same subset (shared within a session)
    before = {k: r.status for k, r in corpus_on_device(frozenset(REPRESENTATIVE_OPS)).items()}
    after = json.loads(run(CORPUS, template=libs["template"]).strip().splitlines()[-1])
    assert set(before) == set(after) and len(after) > 40
    lost = sorted(k for k, v in before.items() if v == "pass" and after[k] != "pass")
    assert not lost, f"passed through the fallback, fail with the template kernels: {lost}"


def test_guards_streams_out_inplace_and_views_with_the_template(libs) -> None:
    out = run("""
        load_kernel_library({template!r})
        a_c, b_c = torch.randn(4, 3), torch.randn(4, 3)
        a, b = a_c.to("acme:1"), b_c.to("acme:1")      # not the current device (0)
        assert torch.acme.current_device() == 0
        r = a * b
        print("guard", r.device, torch.allclose(r.cpu(), a_c * b_c))
        s = torch.acme.Stream(device=1)
        with torch.acme.stream(s):                     # launched on the side stream
            r2 = torch.relu(a.t())                     # a view input
        s.synchronize()
        print("stream+view", torch.allclose(r2.cpu(), torch.relu(a_c.t())))
        o = torch.empty(4, 3, device="acme:1")
        torch.mul(a, b, out=o)                         # out=: mul.out reaches the fallback
        print("out", torch.allclose(o.cpu(), a_c * b_c))
        x = a.clone(); x.mul_(b)                       # in place: mul_.Tensor
        print("inplace", torch.allclose(x.cpu(), a_c * b_c), x.device)
        v = a.view(12)[2:8]
        print("view", torch.allclose((v * 2).cpu(), a_c.view(12)[2:8] * 2))
        """, template=libs["template"])
    lines = out.strip().splitlines()
    assert lines[-5:] == ["guard acme:1 True", "stream+view True", "out True",
                          "inplace True acme:1", "view True"], out


def test_kernel_api_minor_1_entries(libs) -> None:
    out = run("""
        load_kernel_library({probe!r})
        a = torch.randn(5, device="acme:1")
        s = torch.acme.Stream(device=1)
        before = torch.acme.memory_allocated(1)
        with torch.acme.stream(s):                   # current_stream must follow torch's
            r = torch.fmax(a, a)
        print("probe", r.device, r.shape, r.dtype, r.is_contiguous(),
              torch.acme.memory_allocated(1) > before)
        """, probe=libs["probe"])
    assert out.strip().splitlines()[-1] == "probe acme:1 torch.Size([5]) torch.float32 True True", out


def test_template_orders_after_queued_work(libs) -> None:
    # A launch on a busy stream must queue behind its work (the simulator runs it in place only
    # when the stream is idle), and a read waits for it.
    out = run("""
        import importlib.resources, os, struct
        load_kernel_library({template!r})
        path = os.fspath(importlib.resources.files("torchvendor") / "lib" / "libtorchvendor_sim_kernels.so")
        mod = torch.acme.load_module(path, device=0)
        sleep, fill = (torch.acme.get_function(mod, n) for n in ("tv_sleep_ms", "tv_fill_f32"))
        x = torch.zeros(16, device="acme")
        for stream in (None, torch.acme.Stream()):
            with torch.acme.stream(stream or torch.acme.current_stream()):
                torch.acme.launch(sleep, (1,), (1,), struct.pack("<q", 30))
                torch.acme.launch(fill, (1,), (1,), struct.pack("<qQf4x", 16, x.data_ptr(), 3.0),
                                  pointer_offsets=(8,))
                y = (x * x + x).relu()               # three template kernels behind the fill
                busy = not torch.acme.current_stream().query()
            print("ordered", busy, torch.equal(y.cpu(), torch.full((16,), 12.0)))
            x.zero_()
        """, template=libs["template"])
    assert out.strip().splitlines()[-2:] == ["ordered True True"] * 2, out


def test_template_hands_what_it_does_not_handle_to_the_fallback(libs) -> None:
    # Kernel API minor 2 (tv::fallback): complex dtypes, a CPU `self` in add, operands on two
    # devices and arguments the CPU kernel refuses go to the device's counted CPU fallback, so the
    # answer (or the error, worded by the CPU kernel) is the device's without the library.
    out = run("""
        load_kernel_library({template!r})
        from torchvendor.sdk.device.kernels import native_counts, reset_native_counts
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        c = torch.randn(3, 4, dtype=torch.complex64)
        x = torch.randn(3, 4)
        cases = [
            lambda d: c.to(d) + c.to(d),
            lambda d: torch.add(c.to(d), c.to(d), alpha=2),
            lambda d: c.to(d) * 2,
            lambda d: torch.mm(c.to(d), c.t().to(d)),
            lambda d: c.to(d).sum(),
            lambda d: c.to(d).sum(dim=1),
            lambda d: x.to(d).sum(dim=1, dtype=torch.complex64),
            lambda d: torch.tensor(2.5) + x.to(d),                       # a CPU `self`
            lambda d: torch.tensor(2.5 + 1j) * x.to(d),                  # a complex CPU scalar
        ]
        torch.acme.reset_fallback_counts(); reset_native_counts()
        for i, case in enumerate(cases):
            want, got = case("cpu"), case("acme")
            assert got.device.type == "acme" and got.dtype == want.dtype, (i, got.device, got.dtype)
            torch.testing.assert_close(got.cpu(), want, msg=lambda m: f"case {{i}}: {{m}}")
        print("fallback", sorted(torch.acme.fallback_counts()))
        print("native", sorted(native_counts()))
        errors = [
            lambda d: torch.relu(torch.ones(3, dtype=torch.bool).to(d)),
            lambda d: torch.mm(x.to(d), x.to(d)),
            lambda d: torch.mm(x.to(d), x.t().double().to(d)),
            lambda d: x.to(d).sum(dim=(0, 0)),
            lambda d: x.to(d).sum(dim=5),
        ]
        for i, case in enumerate(errors):
            try:
                case("cpu")
            except Exception as e:
                want = str(e).splitlines()[0]
            try:
                case("acme")
                print("no error", i)
            except Exception as e:
                print("same error" if want in str(e) else f"other error {{i}}: {{e}} (cpu: {{want}})")
        """, template=libs["template"])
    lines = out.strip().splitlines()
    fallback = next(l for l in lines if l.startswith("fallback"))
    for op in ("add.Tensor", "mul.Tensor", "mm", "sum", "sum.dim_IntList"):
        assert f"'{op}'" in fallback, fallback
    native = next(l for l in lines if l.startswith("native"))
    assert "'mm'" not in native and "'sum'" not in native, native  # fallbacks count as fallbacks
    assert lines[-5:] == ["same error"] * 5, out
