"""The backend template: registration, levels, fallback, strict mode, fault injection, reports."""
from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
import types
import warnings

import pytest
import torch

from torchvendor.ir import compat
from torchvendor.sdk import (AtenBackend, BackendDefinitionError, BackendError, BackendFallbackWarning, LoopBackend,
                             TorchBackend, get_backend, last_report, register_backend)


_FRESH = itertools.count()


def _fresh(fn):
    """A copy of ``fn`` with its own code object: its own Dynamo cache entry, so tests never share
    compiled code or hit the recompile limit."""
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{next(_FRESH)}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


class PassThrough(AtenBackend):
    """Claims a few ops and runs the partition's graph as is."""

    name = "tv_test_passthrough"
    supported_ops = {"aten.relu", "aten.mul", "aten.add", "aten.addmm", "aten.mm", "aten.sigmoid"}
    default_options = {"flavour": "plain"}
    compiled: list = []

    def compile(self, gm, example_inputs):
        type(self).compiled.append(gm)
        return gm


register_backend(PassThrough)


def test_aten_partitions_and_report():
    f = torch.compile(_fresh(lambda x: torch.relu(x).sin() * 2), backend="tv_test_passthrough")
    x = torch.randn(8)
    with torch.no_grad():
        torch.testing.assert_close(f(x), torch.relu(x).sin() * 2)
    rep = last_report()
    assert rep.backend == "tv_test_passthrough"
    (graph,) = rep.graphs
    assert graph.kind == "inference"
    assert [p.ops for p in graph.partitions] == [{"aten.relu.default": 1}, {"aten.mul.Tensor": 1}]
    assert graph.unsupported == {"aten.sin.default": 1}
    assert {"capture_and_decomposition", "partitioning", "vendor_compile"} <= set(graph.stage_times)
    assert '"aten.sin.default": 1' in rep.to_json()
    assert "eager        aten.sin.default x1" in str(rep)


def test_training_forward_and_backward_graphs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ref.load_state_dict(model.state_dict())
    x = torch.randn(3, 4)
    torch.compile(model, backend="tv_test_passthrough")(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert [g.kind for g in last_report().graphs] == ["forward", "backward"]


def test_options_select_one_backend_object_per_option_set():
    a = get_backend("tv_test_passthrough", flavour="spicy")
    assert a is get_backend(PassThrough, flavour="spicy")
    assert a is not get_backend(PassThrough)
    with pytest.raises(BackendError, match=r"unknown option\(s\) \['colour'\].*flavour"):
        get_backend(PassThrough, colour=1)


def test_no_recompile_across_models_with_the_same_options():
    counters = compat.dynamo_counters()
    before = counters["stats"]["unique_graphs"]
    for _ in range(2):
        m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
        torch.compile(m, backend="tv_test_passthrough", options={"flavour": "x"})(torch.randn(2, 3))
    assert counters["stats"]["unique_graphs"] - before == 1


def test_dynamic_shapes_run_other_sizes():
    f = torch.compile(_fresh(lambda x: torch.relu(x) * 3), backend="tv_test_passthrough", dynamic=True)
    with torch.no_grad():
        for n in (3, 5, 9):
            x = torch.randn(n, 2)
            torch.testing.assert_close(f(x), torch.relu(x) * 3)


def test_torch_level_partitions():
    class Torchy(TorchBackend):
        name = "tv_test_torch_level"
        supported_ops = {"torch.relu", "operator.mul"}

        def compile(self, gm, example_inputs):
            return gm

    register_backend(Torchy)
    x = torch.randn(5, requires_grad=True)
    f = torch.compile(_fresh(lambda x: (torch.relu(x) * 2).cos()), backend="tv_test_torch_level")
    y = f(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, -(torch.relu(x) * 2).sin() * 2 * (x > 0))
    (graph,) = last_report().graphs
    assert graph.kind == "torch" and graph.partitions[0].status == "compiled"


# ---- registration errors ------------------------------------------------------------------------------

def test_bad_definitions_are_named():
    class NoCompile(AtenBackend):
        name = "tv_test_nocompile"

    with pytest.raises(BackendDefinitionError, match="must implement compile"):
        register_backend(NoCompile)

    class BadName(AtenBackend):
        name = "has space"

        def compile(self, gm, ex):
            return gm

    with pytest.raises(BackendDefinitionError, match="Python identifier"):
        register_backend(BadName)

    class Taken(AtenBackend):
        name = "inductor"

        def compile(self, gm, ex):
            return gm

    with pytest.raises(BackendDefinitionError, match="already has a backend named 'inductor'"):
        register_backend(Taken)

    class Clash(PassThrough):
        pass

    with pytest.raises(BackendDefinitionError, match="already registered by"):
        register_backend(Clash)
    with pytest.raises(BackendError, match="no torchvendor backend named 'nope'"):
        get_backend("nope")
    with pytest.raises(BackendDefinitionError, match="subclass of torchvendor.sdk.Backend"):
        register_backend(object)  # type: ignore[arg-type]


# ---- fault injection ------------------------------------------------------------------------------------

class Faulty(AtenBackend):
    """Compiles ``aten.mul`` partitions into a callable with an injected fault."""

    name = "tv_test_faulty"
    supported_ops = {"aten.mul"}
    default_options = {"fault": "none"}

    def compile(self, gm, example_inputs):
        fault = self.options["fault"]
        if fault == "compile":
            raise RuntimeError("vendor compiler crashed")

        def run(*args):
            out = gm(*args)
            if fault == "run":
                raise RuntimeError("kernel launch failed")
            if fault == "shape":
                return out[..., :1]
            if fault == "dtype":
                return out.double()
            return out
        return run


register_backend(Faulty)


@pytest.mark.parametrize("fault,message", [
    ("compile", "compile of partition fused_0 \\(aten.mul.Tensor\\) failed: RuntimeError: vendor compiler crashed"),
    ("run", "run of partition fused_0 \\(aten.mul.Tensor\\) failed: RuntimeError: kernel launch failed"),
    ("shape", "output 0 has shape \\(4, 1\\), expected \\(4, 3\\)"),
    ("dtype", "output 0 has dtype torch.float64, expected torch.float32"),
])
def test_vendor_faults_fall_back_with_one_warning(fault, message):
    fn = _fresh(lambda x: (x * 2).sin())
    f = torch.compile(fn, backend="tv_test_faulty", options={"fault": fault})
    x = torch.randn(4, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            for _ in range(3):
                torch.testing.assert_close(f(x), (x * 2).sin())
    ours = [w for w in caught if issubclass(w.category, BackendFallbackWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert __import__("re").search(message, str(ours[0].message))
    (part,) = last_report().graphs[0].partitions
    assert part.status == "fallback" and part.reason


@pytest.mark.parametrize("fault", ["compile", "run", "shape"])
def test_strict_mode_raises_naming_partition_and_op(fault):
    f = torch.compile(_fresh(lambda x: (x * 2).sin()), backend="tv_test_faulty",
                      options={"fault": fault, "strict": True})
    with pytest.raises(Exception, match="partition fused_0 \\(aten.mul.Tensor\\)") as info:
        with torch.no_grad():
            f(torch.randn(4, 3))
    assert "strict=True" in str(info.value)


# ---- a device backend: tensors move to the device and back, device fallback is visible ---------------

def test_device_backend_moves_tensors_and_reports_device_fallback(acme):
    class OnAcme(AtenBackend):
        name = "tv_test_on_acme"
        device = "acme"
        supported_ops = {"aten.mul", "aten.sigmoid"}

        def compile(self, gm, example_inputs):
            def run(*args):
                assert all(a.device.type == "acme" for a in args if isinstance(a, torch.Tensor))
                return gm(*args)
            return run

    register_backend(OnAcme)
    f = torch.compile(_fresh(lambda x: torch.sigmoid(x * 2).cos()), backend="tv_test_on_acme")
    x = torch.randn(6)
    with torch.no_grad():
        y = f(x)
    assert y.device.type == "cpu"
    torch.testing.assert_close(y, torch.sigmoid(x * 2).cos())
    (part,) = last_report().graphs[0].partitions
    # The simulator has no native mul/sigmoid: the claimed ops ran through its CPU fallback.
    assert part.status == "compiled" and part.device_fallback == {"mul.out": 1, "sigmoid.out": 1}
    assert "ran through the device's CPU fallback" in str(last_report())


# ---- the artifact cache -------------------------------------------------------------------------------

def test_cache_rebuilds_a_corrupt_entry(tmp_path):
    be = PassThrough(cache_dir=str(tmp_path))
    calls = []

    def build(path):
        calls.append(path)
        open(path, "w").write("artifact")

    p = be.cache.get_or_build("key", build, ".bin")
    open(p, "w").write("garbage")
    with pytest.warns(RuntimeWarning, match="corrupt"):
        p2 = be.cache.get_or_build("key", build, ".bin")
    assert p2 == p and open(p).read() == "artifact" and len(calls) == 2
    assert be.cache.stats == {"hit": 0, "built": 2, "rebuilt": 1}


def test_cache_keys_include_options_and_version(tmp_path):
    a = PassThrough(cache_dir=str(tmp_path)).cache.path_for("k")
    b = PassThrough(cache_dir=str(tmp_path), flavour="other").cache.path_for("k")
    assert a != b


def test_two_processes_fill_the_cache_at_once(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        from torchvendor.sdk.compile.cache import ArtifactCache
        c = ArtifactCache({str(tmp_path)!r}, namespace="race")
        def build(path):
            with open(path, "w") as f:
                for i in range(2000):
                    f.write("x" * 100)
                    if i % 500 == 0:
                        time.sleep(0.01)
        for k in range(20):
            p = c.get_or_build(f"key{{k}}", build, ".txt")
            assert open(p).read() == "x" * 200000, p
        print("ok")
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == b"ok", err.decode()
    files = sorted(x.name for x in tmp_path.rglob("*") if x.is_file())
    assert len(files) == 40 and not [f for f in files if f.endswith(".tmp")]


# ---- discovery through the torch_dynamo_backends entry point ----------------------------------------

def test_entry_point_makes_the_backend_available_without_an_import(tmp_path):
    pkg = tmp_path / "acme_ep_backend.py"
    pkg.write_text(textwrap.dedent("""
        from torchvendor.sdk import AtenBackend, register_backend
        class AcmeEP(AtenBackend):
            name = "acme_ep"
            supported_ops = {"aten.cos"}
            def compile(self, gm, example_inputs):
                return gm
        dynamo_backend = register_backend(AcmeEP)
    """))
    dist = tmp_path / "acme_ep_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-ep-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[torch_dynamo_backends]\nacme_ep = acme_ep_backend:dynamo_backend\n")
    script = textwrap.dedent("""
        import sys, torch
        assert "acme_ep_backend" not in sys.modules
        f = torch.compile(lambda x: x.cos() + 1, backend="acme_ep")
        with torch.no_grad():
            y = f(torch.zeros(3))
        from torchvendor.sdk import last_report
        print(y.tolist(), [p.ops for p in last_report().partitions])
    """)
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[2.0, 2.0, 2.0] [{'aten.cos.default': 1}]"


def test_inductor_fallback_on_request():
    def f(x, w):
        return (torch.sin(x) @ w).relu().cos() + 1

    c = torch.compile(_fresh(f), backend="tv_test_passthrough", options={"fallback": "inductor"})
    x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
    y = c(x, w)
    torch.testing.assert_close(y, f(x, w))
    y.sum().backward()
    g, w.grad = w.grad, None
    f(x, w).sum().backward()
    torch.testing.assert_close(g, w.grad)
    rep = last_report()
    assert [g.fallback for g in rep.graphs] == ["inductor", "inductor"]
    assert "inductor     aten.sin.default x1" in str(rep)
    with pytest.raises(BackendError, match="fallback='tvm'"):
        get_backend(PassThrough, fallback="tvm")


# ---- the loop level ------------------------------------------------------------------------------------

class LoopInterp(LoopBackend):
    name = "tv_test_loop"
    seen: list = []

    def compile(self, kernel):
        from torchvendor.sdk import reference_kernel

        type(self).seen.append(kernel)
        return reference_kernel(kernel)


register_backend(LoopInterp)


def test_loop_level_training_dynamic_and_warm_cache(tmp_path):
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    ref = __import__("copy").deepcopy(m)
    c = torch.compile(m, backend="tv_test_loop", options={"cache_dir": str(tmp_path)})
    x = torch.randn(5, 8)
    c(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    kinds = [g.kind for g in last_report().graphs]
    assert kinds == ["forward", "backward"] and all(p.status == "compiled" for p in last_report().partitions)
    # every kernel went through the vendor's compile (min_cut partitioning fuses the pointwise
    # ops of this model into its reductions, so which kinds remain is Inductor's choice)
    assert "reduction" in {k.kernel.kind for k in LoopInterp.seen}
    # The lowered programs were cached: a second compile of the same graphs hits the cache.
    be = get_backend(LoopInterp, cache_dir=str(tmp_path))
    built = be.cache.stats["built"]
    compat.dynamo_reset()
    torch.compile(m, backend="tv_test_loop", options={"cache_dir": str(tmp_path)})(x).sum().backward()
    assert be.cache.stats["built"] == built and be.cache.stats["hit"] >= 2
    f = torch.compile(_fresh(lambda x: torch.softmax(x * 2, -1).sum(0)), backend="tv_test_loop", dynamic=True)
    for n in (3, 7):
        x = torch.randn(n, 6)
        torch.testing.assert_close(f(x), torch.softmax(x * 2, -1).sum(0))


def test_loop_level_kernel_compile_error_names_the_kernel():
    class Broken(LoopBackend):
        name = "tv_test_loop_broken"

        def compile(self, kernel):
            if kernel.kernel.kind == "reduction":
                raise NotImplementedError("no reductions yet")
            from torchvendor.sdk import reference_kernel

            return reference_kernel(kernel)

    register_backend(Broken)
    f = torch.compile(_fresh(lambda x: x.sin().sum(-1)), backend="tv_test_loop_broken")
    with pytest.warns(BackendFallbackWarning, match=r"kernel loop_kernel0 \(.*reduction.*\): NotImplementedError: "
                                                    r"no reductions yet"):
        torch.testing.assert_close(f(torch.ones(3, 256)), torch.ones(3, 256).sin().sum(-1))
