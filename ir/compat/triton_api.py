"""Triton (``triton``) and Inductor's Triton code generation (``torch._inductor.codegen.triton``,
``torch._inductor.runtime.triton_heuristics``): everything the Triton level needs.

Inductor generates one Python module per Triton kernel; its wrapper defines each kernel with
``async_compile.triton(name, source, device_str=...)`` and launches it with
``kernel.run(*args, stream=...)``, through Triton's own driver. For a torchvendor device the
wrapper (:func:`triton_wrapper_class`) defines each kernel with :func:`kernel_runtime` instead:
:class:`TritonRuntimeKernel` hands the source to the vendor's hook, compiles each of Inductor's
configurations with ``triton.compile`` for the vendor's target (:class:`KernelBinary`), and
launches the binary through the functions a :class:`TritonHooks` gives it (the device's runtime
table). Triton is imported lazily; without it :func:`triton_unavailable` says why.

    >>> triton_unavailable("no-such-target") is not None
    True
"""
from __future__ import annotations

import atexit as _atexit
import contextlib as _contextlib
import dataclasses as _dataclasses
import json as _json
import os as _os
import struct as _struct
import tempfile as _tempfile
import warnings as _warnings
from typing import Any as _Any, Callable as _Callable, Iterator as _Iterator, Sequence as _Sequence

__all__ = ["triton_unavailable", "triton_version", "TritonHooks", "KernelBinary", "TritonRuntimeKernel",
           "kernel_runtime", "register_kernel_runtime", "scoped_triton_backend", "triton_wrapper_class",
           "pack_format", "launch_codes", "finish_builds", "start_build_workers", "native_launch_enabled",
           "cuda_sleep"]


def triton_version() -> str | None:
    """The installed Triton's version, or None when Triton cannot be imported.

    >>> triton_version() is None or triton_version()[0].isdigit()
    True
    """
    try:
        import triton
    except Exception:  # noqa: BLE001 - any import failure means no Triton
        return None
    return str(triton.__version__)


def triton_unavailable(target: str) -> str | None:
    """Why Triton cannot compile for ``target`` (a ``GPUTarget`` backend name such as ``"cuda"``):
    Triton missing, or no installed ``triton.backends`` entry whose compiler accepts the
    target; None when it can.

    >>> "Triton" in triton_unavailable("no-such-target")
    True
    """
    if triton_version() is None:
        return "Triton is not installed (pip install triton, or the vendor's Triton wheel)"
    import triton.backends as tb
    from triton.backends.compiler import GPUTarget

    for backend in tb.backends.values():
        try:
            if backend.compiler.supports_target(GPUTarget(target, 0, 32)):
                return None
        except Exception:  # noqa: BLE001 - a backend that cannot answer does not claim it
            continue
    return (f"no installed Triton backend compiles for target {target!r} (triton.backends entries: "
            f"{sorted(tb.backends)})")


@_dataclasses.dataclass
class TritonHooks:
    """What a kernel needs from the SDK level: the target, the vendor's hooks and the runtime.

    ``load(image, device_index, function_name) -> function handle`` and ``launch(function, grid,
    block, args, pointer_offsets, stream, shared_memory_bytes)`` (``torch.<device>.launch``; the
    stream None: the current one) are the runtime table's module load, get function and launch;
    ``extern(name, fn) -> fn`` may replace one of Inductor's extern kernels (matmul, convolution);
    ``build(key, make) -> KernelBinary`` caches a compiled binary by content key;
    ``native(function, codes, block, shared_memory_bytes, scratch_bytes, keep) -> launch`` (or
    None) makes a launcher in C++ (``torchvendor._C.TritonLaunch``: ``launch(gx, gy, gz,
    *values)``, values packed by ``codes``, see :func:`launch_codes`) that replaces the Python
    packing; ``alloc(torch.empty_strided) -> empty_strided`` (or None) replaces the wrapper's
    allocation call (``torchvendor._C.EmptyStrided``); ``workers`` builds that many configurations at once (build worker processes; 1: one at
    a time, in this process).
    """

    target: str
    arch: _Any
    warp_size: int
    binary_format: str
    source: _Callable[[str, str], str]
    ir: _Callable[[str, str], "str | None"]
    load: _Callable[[bytes, int, str], _Any]
    launch: _Callable[..., None]
    extern: _Callable[[str, _Any], _Any] = lambda name, fn: fn
    build: _Callable[[str, _Callable[[], "KernelBinary"]], "KernelBinary"] = lambda key, make: make()
    options: dict = _dataclasses.field(default_factory=dict)
    native: "_Callable[..., _Callable[..., None]] | None" = None
    workers: int = 1
    alloc: "_Callable[[_Callable[..., _Any]], _Callable[..., _Any]] | None" = None


@_dataclasses.dataclass
class KernelBinary:
    """One compiled configuration of a kernel: the image the runtime loads and what a launch needs."""

    image: bytes
    name: str                 #: the function's name in the image
    num_warps: int
    warp_size: int
    shared: int               #: dynamic shared memory, bytes
    scratch: tuple            #: (global scratch size, align) or () when the kernel takes none
    profile_scratch: tuple    #: (size, align) or () when the kernel takes none
    ttir: str = ""

    def encode(self) -> bytes:
        head = {k: v for k, v in _dataclasses.asdict(self).items() if k != "image"}
        text = _json.dumps(head).encode()
        return _struct.pack("<Q", len(text)) + text + self.image

    @classmethod
    def decode(cls, data: bytes) -> "KernelBinary":
        (n,) = _struct.unpack_from("<Q", data)
        head = _json.loads(data[8:8 + n])
        head["scratch"], head["profile_scratch"] = tuple(head["scratch"]), tuple(head["profile_scratch"])
        return cls(image=data[8 + n:], **head)


_RUNTIMES: dict[str, TritonHooks] = {}


def register_kernel_runtime(key: str, hooks: TritonHooks) -> None:
    """Make ``hooks`` the runtime of the generated wrappers that name ``key``."""
    _RUNTIMES[key] = hooks


class _Runtime:
    """What a generated wrapper holds as ``_tv_triton``: its kernels' loader and extern kernels."""

    def __init__(self, key: str) -> None:
        self.key = key

    def hooks(self) -> TritonHooks:
        if self.key not in _RUNTIMES:
            raise RuntimeError(f"no Triton runtime {self.key!r} is registered in this process (the backend that "
                               f"generated this code registers it when it compiles)")
        return _RUNTIMES[self.key]

    def kernel(self, name: str, source: str, device_str: str = "") -> "TritonRuntimeKernel":
        return TritonRuntimeKernel(name, source, self.hooks())

    def extern_kernels(self, namespace: _Any) -> _Any:
        return _Externs(namespace, self.hooks())

    def empty_strided(self) -> _Any:
        """The wrapper's ``empty_strided``: the hooks' fast one for the device, or torch's."""
        import torch

        alloc = self.hooks().alloc
        return torch.empty_strided if alloc is None or not native_launch_enabled() else alloc(torch.empty_strided)


class _Externs:
    def __init__(self, namespace: _Any, hooks: TritonHooks) -> None:
        self._namespace, self._hooks = namespace, hooks

    def __getattr__(self, name: str) -> _Any:
        fn = self._hooks.extern(name, getattr(self._namespace, name))
        setattr(self, name, fn)
        return fn


def kernel_runtime(key: str) -> _Runtime:
    """The runtime of wrappers generated for backend ``key`` (generated code calls this)."""
    return _Runtime(key)


# ---- one kernel -------------------------------------------------------------------------------

#: struct codes of Triton's scalar argument types (pointers are "Q" in a struct format, "p" in
#: :func:`launch_codes`; bfloat16 is "H" to struct, its bits, and "E" to the C++ launcher)
_SCALARS = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u1": "B", "u8": "B", "u16": "H",
            "u32": "I", "u64": "Q", "fp32": "f", "f32": "f", "fp64": "d", "fp16": "e", "bf16": "H"}


def pack_format(types: _Sequence[str]) -> tuple[str, tuple[int, ...]]:
    """(struct format, offsets of the pointers) of a packed argument buffer for Triton argument
    types (``"*fp32"``, ``"i32"``...), each at its natural C alignment.

    >>> pack_format(["*fp32", "i32", "*i64", "i32"])
    ('<QixxxxQi', (0, 16))
    """
    fmt, offset, pointers = "<", 0, []
    for ty in types:
        code = "Q" if ty.startswith("*") else _SCALARS[ty]
        size = _struct.calcsize("<" + code)
        pad = -offset % size
        fmt += "x" * pad + code
        offset += pad
        if code == "Q" and ty.startswith("*"):
            pointers.append(offset)
        offset += size
    return fmt, tuple(pointers)


def launch_codes(types: _Sequence[str], scratch: bool = False, profile_scratch: bool = False) -> str:
    """The argument codes of a C++ launcher (``torchvendor._C.TritonLaunch``) for Triton argument
    types: ``p`` a pointer, the struct letter of a scalar (``E`` for bfloat16), then ``s`` for
    the global scratch (allocated per launch) and ``z`` for the profile scratch (NULL).

    >>> launch_codes(["*fp32", "i32", "bf16", "fp32"], scratch=True, profile_scratch=True)
    'piEfsz'
    """
    codes = "".join("p" if ty.startswith("*") else ("E" if ty == "bf16" else _SCALARS[ty]) for ty in types)
    return codes + "s" * scratch + "z" * profile_scratch


def _config_key(cfg: _Any) -> str:
    """A stable description of a ``triton.Config`` (its ``repr`` is the object's address, which
    another config may have later): block sizes, warps, stages and the rest of its fields."""
    return repr(sorted((k, v) for k, v in vars(cfg).items() if not callable(v)))


def _bf16(value: float) -> int:
    return _struct.unpack("<I", _struct.pack("<f", value))[0] >> 16


_POOL: list = []            # [the build workers' pool, or None where it cannot start], made on first use
_PENDING: list = []         # kernels whose builds were started and not yet collected


def _build_pool(workers: int) -> _Any:
    """Inductor's compile-worker pool (``SubprocPool``: a fresh interpreter that forks
    ``workers`` processes) for ``triton.compile``, or None for ``workers`` <= 1 or where it cannot
    start. Processes, not threads: Triton's front end parses Python, whose AST constructor is not
    safe to run on two threads at once before Python 3.13."""
    if workers <= 1:
        return None
    if not _POOL:
        try:
            from torch._inductor.compile_worker.subproc_pool import SubprocPool

            pool = SubprocPool(workers)
            _atexit.register(pool.shutdown)
        except Exception as e:  # noqa: BLE001 - builds then run in this process, one at a time
            _warnings.warn(f"torchvendor: the Triton build workers did not start ({type(e).__name__}: {e}); "
                           f"building kernels in this process", RuntimeWarning, stacklevel=2)
            pool = None
        _POOL.append(pool)
    return _POOL[0]


def start_build_workers(workers: int) -> None:
    """Start the build workers now (they start in the background; a compile calls this before
    lowering, so that they are up by the time its kernels are defined).

    >>> start_build_workers(1)
    """
    _build_pool(workers)


def finish_builds(strict: bool = True) -> None:
    """Wait for every kernel defined since the last call and make its launchers: the SDK calls it
    inside the compile that defined them. ``strict``: the first failed build raises (else a failed
    kernel raises when run).

    >>> finish_builds()
    """
    failed: Exception | None = None
    while _PENDING:  # all of them, so that no build outlives the compile
        try:
            _PENDING.pop(0)._ready()
        except Exception as e:  # noqa: BLE001 - the first is raised below
            failed = failed or e
    if strict and failed is not None:
        raise failed


class _Miss(Exception):
    """The binary cache has no entry (raised by the probe that must not build)."""


def _miss() -> KernelBinary:
    raise _Miss


#: the compiled kernel's metadata a KernelBinary is made from
_METADATA = ("name", "num_warps", "warp_size", "shared", "num_ctas", "global_scratch_size", "global_scratch_align",
             "profile_scratch_size", "profile_scratch_align")


def _compiled_parts(binary: _Any, binary_format: str) -> tuple[dict, dict]:
    """(the asm a KernelBinary needs, plus ``"formats"``: every asm key; the metadata fields) of
    a ``triton.compile`` result, as plain values (a build worker returns them)."""
    asm = {k: binary.asm[k] for k in (binary_format, "ttir") if k in binary.asm}
    asm["formats"] = sorted(binary.asm)
    md = binary.metadata
    return asm, {k: getattr(md, k) for k in _METADATA if hasattr(md, k)}


def _build_job(source: str, name: str, signature: dict, constants: dict, attrs: _Any, options: dict,
               target: tuple, binary_format: str) -> tuple[dict, dict]:
    """One configuration's ``triton.compile`` in a build worker: the kernel's module loaded from
    its source as in the compiling process, then built for ``target`` (backend, arch, warp size)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(_load_source(source), name).fn
    binary = triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget(*target), options=options)
    return _compiled_parts(binary, binary_format)


class TritonRuntimeKernel:
    """One Inductor Triton kernel, compiled for the hooks' target and launched through them;
    the generated wrapper calls ``run(*args, stream=...)`` as on Inductor's own kernels. A
    configuration not in the binary cache is built by a build worker (``hooks.workers`` > 1) while
    the compile goes on, else at once; with several configurations, the first call times each on
    the device and keeps the fastest, which then serves ``run`` itself."""

    def __init__(self, name: str, source: str, hooks: TritonHooks) -> None:
        self.name, self.hooks = name, hooks
        self.source = hooks.source(name, source)
        # Inductor's module selects Triton's active driver; launches here are the runtime's
        self._module_source = self.source.replace("triton_helpers.set_driver_to_gpu()", "pass")
        self.autotuner = getattr(_load_source(self._module_source), name)
        self._builds = [self._start(cfg) for cfg in self.autotuner.configs]
        self.launchers: list = []
        self._chosen: _Any = None
        _PENDING.append(self)

    def run(self, *args: _Any, stream: _Any = None, **_: _Any) -> None:
        self._ready()
        launcher = self._chosen if self._chosen is not None else self._autotune(args)
        launcher(*args)

    def _ready(self) -> None:
        if self._builds:  # a failed build raises here again at each call
            self.launchers = [self._launcher(cfg, *finish()) for cfg, finish in zip(self.autotuner.configs,
                                                                                     self._builds)]
            self._builds = []
            if len(self.launchers) == 1:
                self._choose(self.launchers[0])

    def _choose(self, launcher: _Callable[..., None]) -> _Callable[..., None]:
        self._chosen = self.run = launcher  # the wrapper's kernel.run(...) is then the launcher itself
        return launcher

    # ---- compile ----
    def _start(self, cfg: _Any) -> _Callable[[], tuple[KernelBinary, dict]]:
        """Start building one configuration; returns what finishes it: (binary, compile meta)."""
        at, hooks = self.autotuner, self.hooks
        meta = at._create_compile_meta(cfg)
        # Inductor's own options (warps, stages, debug, no overflow sanitizer: Triton's default
        # checks every index computation when debug is on); device-specific ones it adds only
        # for its built-in devices
        make = getattr(at, "_create_compile_options", None)
        options = make(cfg, meta) if make is not None else {
            **{k: meta[k] for k in ("num_warps", "num_stages", "debug") if k in meta}, "sanitize_overflow": False}
        options.update(hooks.options)
        key = _json.dumps([self.source, _config_key(cfg), hooks.target, repr(hooks.arch),
                           hooks.warp_size, sorted(options.items(), key=str), triton_version()], default=str)
        pool = _build_pool(hooks.workers)
        if pool is None:
            kb = hooks.build(key, lambda: self._compile(meta, options))
            return lambda: (kb, meta)
        try:
            kb = hooks.build(key, _miss)
            return lambda: (kb, meta)
        except _Miss:
            pass
        try:
            job = pool.submit(_build_job, self._module_source, self.name, meta["signature"], meta["constants"],
                              meta["configs"][0], options, (hooks.target, hooks.arch, hooks.warp_size),
                              hooks.binary_format)
        except Exception:  # noqa: BLE001 - e.g. a value that does not pickle: build here
            kb = hooks.build(key, lambda: self._compile(meta, options))
            return lambda: (kb, meta)

        def built() -> KernelBinary:
            try:
                asm, md = job.result()
            except Exception as e:  # noqa: BLE001 - a worker's trouble: build here, as without workers
                _warnings.warn(f"torchvendor: a Triton build worker failed on {self.name} ({type(e).__name__}: "
                               f"{str(e)[-300:]}); building it in this process", RuntimeWarning, stacklevel=2)
                return self._compile(meta, options)
            return self._kernel_binary(asm, md, options)

        return lambda: (hooks.build(key, built), meta)

    def _compile(self, meta: dict, options: dict) -> KernelBinary:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        target = GPUTarget(self.hooks.target, self.hooks.arch, self.hooks.warp_size)
        src = ASTSource(self.autotuner.fn, meta["signature"], meta["constants"], meta["configs"][0])
        binary = triton.compile(src, target=target, options=options)
        return self._kernel_binary(*_compiled_parts(binary, self.hooks.binary_format), options)

    def _kernel_binary(self, asm: dict, md: dict, options: dict) -> KernelBinary:
        """The KernelBinary of one build, after the vendor's ``kernel_ir`` hook (a rewrite is
        rebuilt here, from the TTIR)."""
        ttir = asm.get("ttir", "")
        rewritten = self.hooks.ir(self.name, ttir)
        if rewritten is not None and rewritten != ttir:
            import triton
            from triton.backends.compiler import GPUTarget

            with _tempfile.TemporaryDirectory() as tmp:
                path = _os.path.join(tmp, f"{self.name}.ttir")
                with open(path, "w") as f:
                    f.write(rewritten)
                target = GPUTarget(self.hooks.target, self.hooks.arch, self.hooks.warp_size)
                asm, md = _compiled_parts(triton.compile(path, target=target, options=options),
                                          self.hooks.binary_format)
            ttir = rewritten
        if self.hooks.binary_format not in asm:
            raise RuntimeError(f"Triton's {self.hooks.target!r} compiler produced {asm['formats']}, not the "
                               f"binary format {self.hooks.binary_format!r} the runtime loads")
        image = asm[self.hooks.binary_format]
        scratch = (md["global_scratch_size"], md.get("global_scratch_align", 1)) \
            if "global_scratch_size" in md else ()
        profile = (md["profile_scratch_size"], md.get("profile_scratch_align", 1)) \
            if "profile_scratch_size" in md else ()
        if md.get("num_ctas", 1) != 1:
            raise RuntimeError(f"kernel {self.name}: num_ctas={md['num_ctas']} (clusters) is not launched here")
        return KernelBinary(image if isinstance(image, bytes) else image.encode(), md["name"], md["num_warps"],
                            md.get("warp_size", self.hooks.warp_size), md["shared"], scratch, profile, ttir)

    def _launcher(self, cfg: _Any, kb: KernelBinary, meta: dict) -> _Callable[..., None]:
        """``launcher(*args, stream=None)``: Inductor's grid from the arguments, then ``go(gx, gy,
        gz, *values)`` with the non-constexpr arguments as passed (tensors, ints, floats)."""
        from torch._inductor.runtime.triton_heuristics import GridExpr

        at = self.autotuner
        names = list(at.fn.arg_names)
        declared = {names[i] for i in _constexpr_indices(at.fn)}
        implicit = ({"num_warps", "num_stages"} | declared) & set(meta["constants"])
        def_args = [a for a in names if a not in implicit] + list(at.inductor_meta.get("extra_launcher_args", ()))
        packed = [a for a in names if meta["signature"].get(a, "constexpr") != "constexpr"]
        grid = GridExpr.from_meta(at.inductor_meta, cfg)
        lines = [f"def launcher({', '.join([*def_args, 'stream=None', '**_'])}):",
                 *[f"    {line}" for line in grid.prefix],
                 f"    go({grid.x_grid}, {grid.y_grid}, {grid.z_grid}{''.join(', ' + a for a in packed)})"]
        types = [meta["signature"][a] for a in packed]
        codes = launch_codes(types, bool(kb.scratch), bool(kb.profile_scratch))  # an unknown type fails here
        scope: dict[str, _Any] = {}
        scope["go"] = _Go(self, kb, types, codes, meta, scope)
        exec("\n".join(lines), scope)  # noqa: S102 - Inductor builds its launchers the same way
        launcher = scope["launcher"]
        launcher.config, launcher.binary = cfg, kb
        return launcher

    # ---- autotune ----
    def _autotune(self, args: _Sequence[_Any]) -> _Callable[..., None]:
        import torch

        # what a launch changes (written in place, or accumulated into by atomics): each trial
        # runs on copies (Inductor's decorator moved these lists from its metadata to the object)
        at = self.autotuner
        mutated = {*getattr(at, "mutated_arg_names", ()), *getattr(at, "reset_to_zero_arg_names", ())}
        names = list(at.fn.arg_names)
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        if device is None:
            return self._choose(self.launchers[0])
        times = []
        for launcher in self.launchers:
            trial = [a.clone() if isinstance(a, torch.Tensor) and name in mutated else a
                     for name, a in zip(names, args)]
            times.append(_time_launch(launcher, trial, device))
        return self._choose(self.launchers[min(range(len(times)), key=times.__getitem__)])


def native_launch_enabled() -> bool:
    """Whether launchers use the C++ launcher a runtime offers (``TORCHVENDOR_TRITON_NATIVE=0``:
    never, every launch packs its arguments in Python).

    >>> isinstance(native_launch_enabled(), bool)
    True
    """
    return _os.environ.get("TORCHVENDOR_TRITON_NATIVE", "1") != "0"


class _Go:
    """A launcher's first ``go``: loads the function, then puts in the launcher's scope what
    launches it from then on: the hooks' C++ launcher, or :class:`_PyLaunch`."""

    def __init__(self, kernel: TritonRuntimeKernel, kb: KernelBinary, types: list[str], codes: str, meta: dict,
                 scope: dict) -> None:
        self.kernel, self.kb, self.types, self.codes, self.scope = kernel, kb, types, codes, scope
        self.device = int(getattr(meta.get("device"), "index", None) or 0)

    def __call__(self, *grid_and_values: _Any) -> None:
        kb, hooks = self.kb, self.kernel.hooks
        function = hooks.load(kb.image, self.device, kb.name)
        block = (kb.num_warps * kb.warp_size, 1, 1)
        scratch = kb.scratch[0] if kb.scratch else 0
        go: _Callable[..., None]
        if hooks.native is not None and native_launch_enabled():
            go = hooks.native(function, self.codes, list(block), kb.shared, scratch, None)
        else:
            go = _PyLaunch(hooks.launch, function, block, kb, self.types)
        self.scope["go"] = go
        go(*grid_and_values)


class _PyLaunch:
    """Packs one configuration's arguments with ``struct`` and launches through ``hooks.launch``."""

    def __init__(self, launch: _Callable[..., None], function: _Any, block: tuple, kb: KernelBinary,
                 types: list[str]) -> None:
        self.launch, self.function, self.block, self.kb = launch, function, block, kb
        extra = bool(kb.scratch) + bool(kb.profile_scratch)
        self.fmt, self.pointers = pack_format([*types, *["*i8"] * extra])
        self.convert = [_converter(ty) for ty in types]
        self.extra = (0,) * extra

    def __call__(self, gx: int, gy: int, gz: int, *values: _Any) -> None:
        if gx <= 0 or gy <= 0 or gz <= 0:
            return
        extra, keep = self.extra, None
        if self.kb.scratch and self.kb.scratch[0] > 0:
            keep = _scratch(self.kb.scratch[0] * gx * gy * gz)
            extra = (keep.data_ptr(), *extra[1:])
        packed = [f(v) for f, v in zip(self.convert, values)]
        self.launch(self.function, (gx, gy, gz), self.block, _struct.pack(self.fmt, *packed, *extra), self.pointers,
                    None, self.kb.shared)


def _converter(ty: str) -> _Callable[[_Any], _Any]:
    if ty.startswith("*"):  # Inductor passes a tensor (or None, or an address)
        return lambda v: v.data_ptr() if hasattr(v, "data_ptr") else int(v or 0)
    if ty == "bf16":
        return _bf16
    if ty.startswith(("fp", "f3")):
        return float
    return int


def _scratch(nbytes: int) -> _Any:
    import torch

    return torch.empty(nbytes, dtype=torch.int8, device=torch._C._get_privateuse1_backend_name())


def _constexpr_indices(fn: _Any) -> list[int]:
    """Indices of the ``tl.constexpr`` parameters of a ``triton.jit`` function."""
    found = getattr(fn, "constexprs", None)
    if found is None:  # pragma: no cover - releases whose JITFunction names them otherwise
        from torch._inductor.runtime.triton_helpers import get_constexprs

        found = get_constexprs(fn)
    return list(found)


def _time_launch(launcher: _Callable[..., None], args: _Sequence[_Any], device: _Any, reps: int = 10) -> float:
    import torch

    launcher(*args)  # warm: module load, first-launch costs
    start, end = torch.Event(device=device, enable_timing=True), torch.Event(device=device, enable_timing=True)
    start.record()
    for _ in range(reps):
        launcher(*args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def cuda_sleep(cycles: int) -> None:
    """Keep the current ``cuda`` stream busy for about ``cycles`` GPU clock cycles
    (``torch.cuda._sleep``): work enqueued behind it then runs back to back, so timing events
    around that work measure the device's time alone (the bench's host/device split).

    >>> callable(cuda_sleep)
    True
    """
    import torch

    torch.cuda._sleep(int(cycles))


def _load_source(source: str) -> _Any:
    from torch._inductor.codecache import PyCodeCache

    return PyCodeCache.load(source)


# ---- registration with Inductor ---------------------------------------------------------------

def triton_wrapper_class(key: str) -> type:
    """Inductor's Python wrapper, with each Triton kernel defined through :func:`kernel_runtime`
    (``key``) and its extern kernels through the runtime's ``extern`` hook."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    class TritonRuntimeWrapper(PythonWrapperCodegen):
        @classmethod
        def create(cls, is_subgraph: bool, subgraph_name: _Any, parent_wrapper: _Any,
                   partition_signatures: _Any = None) -> _Any:
            if is_subgraph:  # a subgraph's kernels are defined by its parent: this class
                return PythonWrapperCodegen.create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures)
            return cls()

        def write_header(self) -> None:
            super().write_header()
            self.imports.writeline("from torchvendor.ir.compat.triton_api import kernel_runtime as _tv_kernel_runtime")
            self.header.writeline(f"_tv_triton = _tv_kernel_runtime({key!r})")
            self.header.writeline("extern_kernels = _tv_triton.extern_kernels(extern_kernels)")
            self.header.writeline("empty_strided = _tv_triton.empty_strided()")

        def define_kernel(self, kernel_name: str, kernel_body: str, metadata: _Any = None, gpu: bool = True,
                          cpp_definition: _Any = None) -> None:
            if kernel_body.lstrip().startswith("async_compile.triton("):
                kernel_body = kernel_body.replace("async_compile.triton(", "_tv_triton.kernel(", 1)
            super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)

    TritonRuntimeWrapper.__qualname__ = TritonRuntimeWrapper.__name__ = "TritonRuntimeWrapper"
    return TritonRuntimeWrapper


@_contextlib.contextmanager
def scoped_triton_backend(device: str, key: str, custom_pass: _Any, properties: _Any) -> _Iterator[None]:
    """Inside the block Inductor generates Triton kernels for ``device`` (its ``TritonScheduling``)
    with :func:`triton_wrapper_class` (``key``), and sees the device through a Dynamo
    ``DeviceInterface`` answering from ``properties`` (what ``torch.<device>`` reports, plus
    ``warp_size``); what was registered before is put back after."""
    from torch._inductor.codegen.triton import TritonScheduling
    from torch._inductor.runtime.hints import DeviceProperties

    from .inductor_api import ensure_device_hooks, inductor, scoped_inductor_backend

    ensure_device_hooks(device)
    di = inductor().device_interface
    saved = di.device_interfaces.get(device)
    di.register_interface_for_device(device, _gpu_like_interface(device, properties, saved))
    DeviceProperties.create.cache_clear()
    try:
        with _target_driver(_RUNTIMES[key]), \
                scoped_inductor_backend(device, TritonScheduling, triton_wrapper_class(key), custom_pass):
            yield
    finally:
        if saved is not None:
            di.device_interfaces[device] = saved
        else:
            di.device_interfaces.pop(device, None)
        DeviceProperties.create.cache_clear()


@_contextlib.contextmanager
def _target_driver(hooks: TritonHooks) -> _Iterator[None]:
    """Triton's active driver, inside the block, answers with the vendor's target: Inductor's
    code generation asks it for the target whose backend hash keys each kernel
    (``torch.utils._triton.triton_backend``). Kernels are launched by the runtime table, never
    by a Triton driver, so this also serves a machine where no Triton driver is active."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    class TargetDriver:
        @staticmethod
        def get_current_target() -> _Any:
            return GPUTarget(hooks.target, hooks.arch, hooks.warp_size)

        @staticmethod
        def get_current_device() -> int:
            return 0

        @staticmethod
        def get_current_stream(device: _Any = None) -> int:
            return 0

    from torch.utils import _triton

    cached = (_triton.triton_backend, _triton.triton_hash_with_backend)  # keyed by the active target
    previous = driver._active
    driver._active = TargetDriver()
    for fn in cached:
        fn.cache_clear()
    try:
        yield
    finally:
        driver._active = previous
        for fn in cached:
            fn.cache_clear()


def _gpu_like_interface(device: str, properties: _Any, base: _Any) -> type:
    """A DeviceInterface for ``device`` reporting ``properties`` (for Inductor's Triton heuristics)."""
    from .inductor_api import inductor

    parent = base if base is not None else inductor().DeviceInterface  # ensure_device_hooks registered one
    cc = int(properties.major) * 10 + int(properties.minor)

    class _Worker(parent.Worker):  # type: ignore[misc, name-defined]
        @staticmethod
        def get_device_properties(index: _Any = None) -> _Any:
            return properties

    class TritonDeviceInterface(parent):  # type: ignore[misc, valid-type]
        Worker = _Worker

        @staticmethod
        def get_device_properties(device: _Any = None) -> _Any:
            return properties

        @staticmethod
        def get_compute_capability(device: _Any = None) -> int:
            return cc

    return TritonDeviceInterface
