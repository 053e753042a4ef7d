"""One class per level: the template names no level, each level class owns its hooks, the LOOP
level's transforms and build barrier, and the compile report's two kinds of "outside"."""
from __future__ import annotations

import ast
import itertools
import re
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from torchvendor.sdk import (AtenBackend, Backend, BackendDefinitionError, BackendError, BackendFallbackWarning,
                             CompiledProgram, Level, LoopBackend, OnnxBackend, TorchBackend, TritonBackend, get_backend,
                             last_report, loop_kernels, reference_kernel, register_backend)
from torchvendor.sdk.compile import report as report_module

COMPILE = Path(__file__).resolve().parents[1] / "sdk" / "compile"
_FRESH = itertools.count()


def _fresh(fn):
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{next(_FRESH)}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


# ---- the template names no level ------------------------------------------------------------------

def test_backend_py_names_no_level():
    """issue 36: ``backend.py`` is level-agnostic: no ``Level.X``, no import of a level's module."""
    tree = ast.parse((COMPILE / "backend.py").read_text())
    uses = [f"line {n.lineno}: Level.{n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "Level"]
    assert not uses, "backend.py names a level: " + ", ".join(uses)
    level_modules = {"torch_level", "aten_level", "loop_level", "onnx_level", "aot_flow"}
    imports = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module in level_modules]
    assert not imports, f"backend.py imports a level's module: {imports}"


def test_each_level_class_owns_its_hooks():
    for hook in ("lowering_options", "lowering_config", "compile_program", "finish", "transforms", "extern_kernel",
                 "program_runner", "onnx_patterns", "onnx_opset", "decompositions"):
        assert not hasattr(Backend, hook), f"Backend.{hook}: a level's hook on the template"
    assert {LoopBackend.level, OnnxBackend.level, AtenBackend.level, TorchBackend.level, TritonBackend.level} == set(Level)
    assert LoopBackend.transforms == () and OnnxBackend.onnx_opset is None and AtenBackend.decompositions is None


@pytest.mark.parametrize("level_line", ["", "level = Level.LOOP"])
def test_a_plain_backend_subclass_is_refused_naming_the_level_classes(level_line):
    namespace = {"Backend": Backend, "Level": Level}
    exec(f"class Plain(Backend):\n    name = 'tv_test_plain'\n    {level_line or 'pass'}\n"
         "    def compile(self, gm, example_inputs):\n        return gm\n", namespace)
    with pytest.raises(BackendDefinitionError, match="TorchBackend, AtenBackend, LoopBackend, OnnxBackend") as e:
        register_backend(namespace["Plain"])
    assert ("subclass that level's class" in str(e.value)) == bool(level_line)


def test_the_level_is_set_by_the_level_class():
    class Mixed(OnnxBackend):
        name = "tv_test_mixed_level"
        level = Level.LOOP

        def compile(self, model, example_inputs):
            return None

    with pytest.raises(BackendDefinitionError, match="level is set by the one level class"):
        register_backend(Mixed)


def test_loop_level_needs_compile_or_compile_program():
    class Nothing(LoopBackend):
        name = "tv_test_loop_nothing"

    class ProgramOnly(LoopBackend):
        name = "tv_test_loop_program_only"

        def compile_program(self, program):
            return CompiledProgram(program, {lk.name: reference_kernel(lk) for lk in loop_kernels(program)})

    with pytest.raises(BackendDefinitionError, match="must implement compile"):
        register_backend(Nothing)
    register_backend(ProgramOnly)


# ---- LoopBackend.transforms, validated after each -------------------------------------------------

def _merge_all(program):
    """Every kernel of the program one kernel (a toy transform; extern-free programs only)."""
    kernels = program.kernels
    if len(kernels) < 2:
        return program
    merged = replace(kernels[0], nests=tuple(n for k in kernels for n in k.nests), group=())
    return replace(program, ops=(merged,))


def _drop_buffers(program):
    return replace(program, buffers=())


class Transformed(LoopBackend):
    name = "tv_test_loop_transforms"
    calls: list = []

    def compile(self, kernel):
        type(self).calls.append(("compile", kernel.name, len(kernel.kernel.nests)))
        return reference_kernel(kernel)

    def finish(self, compiled):
        type(self).calls.append(("finish", sorted(compiled.kernels)))
        return compiled

    def program_runner(self, runner, program):
        type(self).calls.append(("program_runner", len(program.kernels)))
        return runner


def _recording(name, calls):
    def transform(program):
        calls.append((name, len(program.kernels)))
        return _merge_all(program)
    transform.__qualname__ = name
    return transform


def test_transforms_run_in_order_before_compile_then_finish_then_runner(tmp_path):
    calls: list = []

    class Ordered(Transformed):
        name = "tv_test_loop_transforms_order"
        transforms = (_recording("first", calls), _recording("second", calls))

    Ordered.calls = calls
    register_backend(Ordered)
    f = torch.compile(_fresh(lambda x: (x - x.mean()).sin()), backend=Ordered.name,
                      options={"cache_dir": str(tmp_path)})
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(f(x), (x - x.mean()).sin())
    assert calls[0] == ("first", 2) and calls[1] == ("second", 1)  # the second sees the first's result
    assert calls[2:] == [("compile", "loop_kernel0", 2), ("finish", ["loop_kernel0"]), ("program_runner", 1)]


def test_an_invalid_transform_result_is_named(tmp_path):
    class Breaking(Transformed):
        name = "tv_test_loop_transforms_break"
        transforms = (_merge_all, _drop_buffers)

    register_backend(Breaking)
    fn = _fresh(lambda x: x.sin() * 2)
    with pytest.raises(Exception, match="_drop_buffers"):
        with torch.no_grad():
            torch.compile(fn, backend=Breaking.name, options={"cache_dir": str(tmp_path), "strict": True})(
                torch.randn(8))
    with pytest.warns(BackendFallbackWarning, match="after loop-IR transform _drop_buffers"):
        with torch.no_grad():
            y = torch.compile(_fresh(lambda x: x.sin() * 2), backend=Breaking.name,
                              options={"cache_dir": str(tmp_path)})(torch.ones(8))
    torch.testing.assert_close(y, torch.ones(8).sin() * 2)
    assert [p.status for p in last_report().partitions] == ["fallback"]


def test_the_program_compile_program_returns_is_validated(tmp_path):
    class BadRewrite(LoopBackend):
        name = "tv_test_loop_bad_rewrite"

        def compile_program(self, program):
            return CompiledProgram(_drop_buffers(program), {lk.name: reference_kernel(lk) for lk in loop_kernels(program)})

    register_backend(BadRewrite)
    with pytest.warns(BackendFallbackWarning, match="BadRewrite.compile_program returned"):
        with torch.no_grad():
            torch.compile(_fresh(lambda x: x.cos() + 1), backend=BadRewrite.name,
                          options={"cache_dir": str(tmp_path)})(torch.ones(8))


# ---- the build barrier ----------------------------------------------------------------------------

class _Pending:
    """What a backend's compile hands out while its kernel is still being built (not callable)."""

    def __init__(self, kernel):
        self.kernel = kernel


def test_finish_is_the_build_barrier(tmp_path):
    class Deferred(LoopBackend):
        name = "tv_test_loop_deferred"

        def compile(self, kernel):
            return _Pending(kernel)

        def finish(self, compiled):
            return CompiledProgram(compiled.program, {k: reference_kernel(p.kernel) for k, p in compiled.kernels.items()})

    class Forgetful(Deferred):
        name = "tv_test_loop_forgetful"

        def finish(self, compiled):
            return compiled

    register_backend(Deferred)
    register_backend(Forgetful)
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(_fresh(lambda x: torch.softmax(x, -1)), backend=Deferred.name,
                                                 options={"cache_dir": str(tmp_path)})(x), torch.softmax(x, -1))
        assert [p.status for p in last_report().partitions] == ["compiled"]
        with pytest.warns(BackendFallbackWarning, match=r"not callable after finish\(\)"):
            torch.compile(_fresh(lambda x: torch.softmax(x, -1)), backend=Forgetful.name,
                          options={"cache_dir": str(tmp_path)})(x)


# ---- each thing computed once --------------------------------------------------------------------

def test_loop_kernels_of_one_program_are_computed_once(monkeypatch):
    from torchvendor.ir import capture
    from torchvendor.sdk.compile import loop_kernel

    prog = capture(lambda x: (x - x.mean()).sin(), [torch.randn(4, 8)], level="loop").inference
    counted = []
    real = loop_kernel.kernel_symbols
    monkeypatch.setattr(loop_kernel, "kernel_symbols", lambda *a: counted.append(1) or real(*a))
    first, second = loop_kernels(prog), loop_kernels(prog)
    assert first == second and len(counted) == len(prog.kernels)


def test_a_cached_library_is_hashed_once_on_a_hit(tmp_path, monkeypatch):
    import torchvendor.reference_backends.cpu  # noqa: F401
    from torchvendor.sdk.compile import cache

    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.compile(_fresh(lambda x: torch.softmax(x, -1)), backend="torchvendor_cpu",
                      options={"cache_dir": str(tmp_path)})(x)
    hashed = []
    real = cache._file_digest
    monkeypatch.setattr(cache, "_file_digest", lambda p: hashed.append(Path(p).suffix) or real(p))
    with torch.no_grad():
        torch.compile(_fresh(lambda x: torch.softmax(x, -1)), backend="torchvendor_cpu",
                      options={"cache_dir": str(tmp_path)})(x)
    assert hashed.count(".so") == 1  # softmax: one kernel after the CPU backend's merge


# ---- the compile report: not claimed, or claimed and left outside ---------------------------------

class ClaimsAll(AtenBackend):
    name = "tv_test_claims_all"
    min_partition_size = 2

    def compile(self, gm, example_inputs):
        return gm


class AllButSin(AtenBackend):
    name = "tv_test_all_but_sin"

    def supports(self, node):
        return "sin" not in str(node.target) or "no sin kernel"

    def compile(self, gm, example_inputs):
        return gm


register_backend(ClaimsAll)
register_backend(AllButSin)


def test_claimed_ops_left_outside_are_not_reported_as_not_claimed():
    with torch.no_grad():
        torch.compile(_fresh(lambda x: x.t()), backend=ClaimsAll.name)(torch.randn(2, 4))
    rep = last_report()
    assert rep.unsupported() == {}
    assert rep.left_outside() == {"aten.permute.default": {"in a partition of 1 compute node(s), below "
                                                           "min_size=2": 1}}
    first = str(rep).splitlines()[0]
    assert "0 op(s) not claimed; 1 claimed op(s) left outside" in first
    assert "aten.permute.default x1  claimed, left outside by the partitioner [in a partition" in str(rep)
    assert rep.to_dict()["graphs"][0]["left_outside"] == rep.left_outside()


def test_a_view_at_a_partition_edge_is_left_outside_not_unclaimed():
    def f(x):
        y = x * 2
        return y, y.t().sin()

    x = torch.randn(2, 4)
    with torch.no_grad():
        out = torch.compile(_fresh(f), backend=AllButSin.name)(x)
    torch.testing.assert_close(out[1], (x * 2).t().sin())
    rep = last_report()
    assert rep.unsupported() == {"aten.sin.default": 1}
    assert rep.graphs[0].reasons == {"aten.sin.default": ["no sin kernel"]}
    (why,) = rep.left_outside()["aten.permute.default"]
    assert "partition's edge" in why
    text = str(rep)
    assert "aten.sin.default x1  not claimed [no sin kernel]" in text
    assert "aten.permute.default x1  claimed, left outside by the partitioner" in text


def test_report_stage_names_are_the_keys_the_flow_writes():
    written = set()
    for path in COMPILE.glob("*.py"):
        written |= set(re.findall(r"(?:times|stage_times)\[\"(\w+)\"\]", path.read_text()))
    assert written == set(report_module.STAGES)


def test_refused_graphs_report_eager_and_every_op_unclaimed(acme):
    class OnlyAcme(LoopBackend):
        name = "tv_test_loop_only_acme"
        device = "acme"

        def compile(self, kernel):
            return reference_kernel(kernel)

    register_backend(OnlyAcme)
    with torch.no_grad():
        torch.compile(_fresh(lambda x: x.sin()), backend=OnlyAcme.name)(torch.ones(3))
    (graph,) = last_report().graphs
    assert graph.unsupported == {"aten.sin.default": 1} and graph.fallback == "eager"
    assert "generates code for acme only" in graph.reasons["aten.sin.default"][0]


def test_get_backend_refuses_a_plain_backend():
    class Plain(Backend):
        name = "tv_test_plain_get"

    with pytest.raises(BackendDefinitionError, match="subclasses Backend directly"):
        get_backend(Plain)
    with pytest.raises(BackendError):
        get_backend("tv_test_no_such_backend")
