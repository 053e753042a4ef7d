"""Running a loop-IR program with a vendor's compiled kernels: the loop level's runtime.

A LOOP-level backend compiles one :class:`LoopKernel` at a time into a callable
``fn(*buffers, *sizes)``; :class:`ProgramRunner` runs the whole :class:`LoopProgram` with them:
it binds the size symbols from the inputs, allocates the program's buffers on the inputs'
device (views of their base where ``view_of`` says so, constants from the program), launches
the kernels in order and runs the extern kernels (matmul, convolution, ...) through ATen on the
device. For each binding of the size symbols it writes one straight-line Python function that
does all that (:mod:`.runner_source`, as Inductor writes its wrapper), so a call costs a few
microseconds plus the kernels.

A kernel's arguments are the buffers it reads, then those it only writes (``LoopKernel.buffers``),
as tensors whose ``data_ptr()`` is the buffer's first element — exactly the loop IR's memory
model (an index is an element offset from there) — followed by the values of the size symbols
it uses (``LoopKernel.size_vars``), as Python ints.

Example (kernels "compiled" to the reference interpreter, :func:`reference_kernel`)::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> prog = capture(lambda x: torch.softmax(x, -1), [torch.randn(4, 8)], level="loop").inference
    >>> runner = ProgramRunner(prog, {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)})
    >>> x = torch.randn(4, 8)
    >>> torch.allclose(runner(x)[0], torch.softmax(x, -1))
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from torchvendor.ir import compat
from torchvendor.ir.fx_view import resolve_op
from torchvendor.ir.loop_ir import Buffer, Kernel, LoopProgram, parse_expr
from torchvendor.ir.loop_ir.interpreter import write_value
from torchvendor.ir.loop_ir.schema import ExternKernel

from .loop_kernel import LoopKernel, kernel_symbols, loop_kernels
from .runner_replay import build_replay, input_guard
from .runner_source import Extern, Step, Written, write_call

__all__ = ["LoopKernel", "loop_kernels", "ProgramRunner", "kernel_symbols", "reference_kernel", "tensor_data_ptr_address",
           "BOXED_MIN_BYTES"]

#: the input bytes a call must free early (idle at its peak) to take the boxed call over the replay
BOXED_MIN_BYTES = 1 << 20


def reference_kernel(kernel: LoopKernel) -> Callable[..., None]:
    """A kernel "compiled" to the loop IR's reference interpreter, with the calling convention of
    a compiled kernel: what a vendor's ``compile`` returns, to check a runner or to stand in for a
    kernel the vendor's code generator cannot handle yet (slowly: the interpreter is exact, not fast).

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> (lk,) = loop_kernels(capture(lambda x: x * 3, [torch.ones(4)], level="loop").inference)
    >>> out = torch.empty(4); reference_kernel(lk)(torch.ones(4), out); out
    tensor([3., 3., 3., 3.])
    """
    from torchvendor.ir.loop_ir import run_kernel

    names = [b.name for b in kernel.buffers]
    n = len(names)

    def run(*args: Any) -> None:
        run_kernel(kernel.kernel, dict(zip(names, args[:n])), dict(zip(kernel.size_vars, args[n:])))

    return run


def tensor_data_ptr_address() -> int | None:
    """For a backend that calls its host kernels from C (the reference CPU backend's
    ``host_call.c``): the address of torch's C function ``void* (PyObject* tensor)`` giving a
    tensor's data pointer, the one Inductor's C++ kernel bindings use; for exact ``Tensor`` and
    ``Parameter`` objects only (call ``data_ptr()`` for others). None where a torch release lacks it.

    >>> address = tensor_data_ptr_address()
    >>> address is None or address > 0
    True
    """
    return compat.tensor_data_ptr_address()


def _in_layout(t: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """``t`` itself when it has the buffer's size, strides (where a dimension has more than one
    element) and dtype, else a copy that has them."""
    if t.dtype == dtype and t.shape == size and (t.stride() == stride or all(
            s == g for s, g, n in zip(stride, t.stride(), size) if n > 1)):
        return t
    out = torch.empty_strided(size, stride, dtype=dtype, device=t.device)
    out.copy_(t)
    return out


def _int(text: str, sizes: Mapping[str, int]) -> int:
    if text.lstrip("-").isdigit():
        return int(text)
    e = parse_expr(text)
    try:
        return int(e.subs({s: sizes[s.name] for s in e.free_symbols}))
    except KeyError as k:
        raise ValueError(f"size expression {text!r} uses the symbol {k} that no input binds") from None


def _ints(texts: Sequence[str], sizes: Mapping[str, int]) -> list[int]:
    return [_int(t, sizes) for t in texts]


_WRAPPER_ALLOCATORS = compat.wrapper_allocators()

#: ``(extern kernel, its ATen operator, device type) -> what runs it`` (``Backend.extern_kernel``)
ExternHook = Callable[[ExternKernel, Callable[..., Any], str], Callable[..., Any]]


@dataclass
class _Plan:
    """What one binding of the size symbols fixes: every buffer's layout, what to allocate, the
    views to make and the size arguments of each kernel."""

    layouts: dict[str, tuple[tuple[int, ...], tuple[int, ...], torch.dtype]]
    #: (name, size, stride, dtype, device or None for the program's device)
    allocs: list[tuple[str, tuple[int, ...], tuple[int, ...], torch.dtype, str | None]]
    constants: list[tuple[str, Any, tuple[int, ...], torch.dtype, str | None]]
    views: list[tuple[str, str, tuple[int, ...], tuple[int, ...], int]]
    #: base -> (name, size, stride, offset) of its views, for an extern's result: made once it is there
    late_views: dict[str, list[tuple[str, tuple[int, ...], tuple[int, ...], int]]]
    strides: list[tuple[int, ...] | None]  # per input: the strides the kernels were compiled for
    size_args: dict[int, tuple[int, ...]]  # step index -> the size arguments of that kernel


def _restrided(value: torch.Tensor, stride: tuple[int, ...], back: list | None) -> torch.Tensor:
    """Inductor compiled for the declared strides (AOTAutograd coerces e.g. tangents to them):
    an input with others (where a dimension has more than one element) runs on a copy with
    those strides, copied back at the end (``back``) if the program writes it."""
    if value.numel() <= 1 or all(s == g for s, g, n in zip(stride, value.stride(), value.shape) if n > 1):
        return value
    copy = torch.empty_strided(value.shape, stride, dtype=value.dtype, device=value.device)
    copy.copy_(value)
    if back is not None:
        back.append((value, copy))
    return copy


def _as_buffer(value: Any, size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> Any:
    """An extern's result that becomes its buffer: in the buffer's layout (else as it is)."""
    if not isinstance(value, torch.Tensor) or (value.dtype == dtype and value.stride() == stride and value.shape == size):
        return value
    return _in_layout(value, size, stride, dtype)


def _write(dst: Any, value: Any) -> Any:
    """An extern's result for a buffer that is already there: copied into it (its aliases must
    see it), unless it is that buffer; a non-tensor replaces it."""
    env = {"dst": dst}
    write_value(env, "dst", value)
    return env["dst"]


def _on_device(fn: Callable[..., Any], moved: tuple[int, ...], back: tuple[int, ...], device: torch.device,
               *args: Any) -> None:
    """``fn(*args)`` with the host tensors at ``moved`` replaced by device copies of the storage
    span they address (strides and offset kept), and those at ``back`` (written) copied back.
    Inductor lets a device kernel read a 0-d host tensor (its own wrapper passes it by value);
    a device cannot dereference host memory. Host tensors on one storage (a buffer and its views,
    which a kernel may write through one and read through another) share one device copy of it."""
    copies, spans = list(args), {}  # storage address -> (host bytes, device bytes)
    for i in moved:
        t = args[i]
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in spans:   # (a tensor the program declared on the host may come on the device: used as it is)
            host = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
            spans[key] = (host, host if t.device == device else host.to(device))
        copies[i] = spans[key][1].view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())
    fn(*copies)
    for key in {args[i].untyped_storage().data_ptr() for i in back}:
        host, dev = spans[key]
        if dev is not host:
            host.copy_(dev)


def _constant(value: Any, size: tuple[int, ...], dtype: torch.dtype, device: Any) -> torch.Tensor:
    return torch.tensor(value, dtype=dtype).reshape(size).to(device)


class ProgramRunner:
    """Runs one :class:`LoopProgram` with compiled kernels; call it with the program's inputs.

    Args:
        program: the loop program.
        compiled: kernel name -> callable ``fn(*buffers, *sizes)`` (see the module docstring).
        device: the device type the program runs on (default ``program.device``); its buffers are
            allocated on the device of the first tensor input of that type (a buffer the program
            declares on another device, e.g. a CPU scalar, on that device).
        extern: ``extern(extern_kernel, aten_op, device) -> callable`` gives what runs each extern
            kernel (``Backend.extern_kernel``); default: the ATen operator on the device.

    Everything that does not depend on the inputs' values is resolved once: extern operators
    at construction; layouts, allocations, storage reuse and size arguments once per binding of
    the size symbols (:class:`_Plan`), written into that binding's generated call
    (:meth:`source` shows it). A call then binds the size symbols (none: no work) and runs it.
    """

    def __init__(self, program: LoopProgram, compiled: Mapping[str, Callable[..., Any]],
                 device: str | None = None, extern: ExternHook | None = None) -> None:
        self.program = program
        self.device = device or program.device
        self._extern = extern
        kernels = loop_kernels(program)
        missing = [lk.name for lk in kernels if lk.name not in compiled]
        if missing:
            raise ValueError(f"ProgramRunner: no compiled callable for kernel(s) {missing} of program "
                             f"{program.name!r}")
        by_name = {lk.name: lk for lk in kernels}
        self._deferred = self._extern_results()
        #: per op: (kernel, its callable, buffer names, size symbols) or an :class:`Extern`
        self.steps: list[Step] = []
        for op in program.ops:
            if isinstance(op, Kernel):
                lk = by_name[op.name]
                self.steps.append((op, compiled[op.name], tuple(b.name for b in lk.buffers), lk.size_vars))
            else:
                self.steps.append(self._resolve_extern(op))
        self._scalar = {name: parse_expr(expr) for name, expr in program.scalar_inputs}
        self._inputs = [(name, program.buffer(name) if name not in self._scalar else None) for name in program.inputs]
        self._binders = self._size_binders()
        self._written = {n for op in program.ops for n in op.writes()}
        #: size binding -> the generated call (:class:`~.runner_source.Written`) and its plan
        self._calls: dict[tuple, tuple[Written, _Plan]] = {}
        self._fixed = self._function({}) if not self._binders else None  # no size symbol: one call

    def _extern_results(self) -> set[str]:
        """Outputs of extern kernels that become the result itself instead of a copy into a
        preallocated buffer (a matmul's output is often a partition's biggest tensor): those
        that nothing wrote before (nor a view of them), that are no view themselves; their views
        are made from the result once it is there (``_Plan.late_views``), as Inductor's wrapper
        takes ``reinterpret_tensor(buf4, ...)`` of an ``addmm``'s output. A ``getitem``'s output is
        its source (Inductor's wrapper writes ``buf1 = buf0[0]``), also when an op writes it
        later: a copy would lose that write's target (``linalg.eig``'s backward fills the
        diagonal of a ``diagonal`` view with ``copy_``; into a copy, the division after it met
        0/0). The result is checked against the buffer's layout at run time (the kernels were
        compiled for it)."""
        program, seen, deferred = self.program, set(self.program.inputs), set()
        base = {b.name: b.view_of for b in program.buffers if b.view_of is not None}
        for op in program.ops:
            if not isinstance(op, Kernel) and len(op.outputs) == 1:
                name = op.outputs[0]
                buf = program.buffer(name)
                if name not in seen and buf.view_of is None and buf.kind != "constant":
                    deferred.add(name)
            seen.update(op.writes())
            seen.update(base[n] for n in op.writes() if n in base)  # a write into a view is one into its base
        return deferred

    def _resolve_extern(self, ext: ExternKernel) -> Extern:
        """An extern kernel's operator, resolved once (``getitem`` is indexing: no operator)."""
        deferred = tuple(n in self._deferred for n in ext.outputs)
        if ext.op == "getitem":
            return Extern(ext, None, deferred)
        try:
            op = resolve_op(ext.op)
        except Exception as e:
            raise ValueError(f"extern kernel {ext.name}: cannot resolve {ext.op!r}: {e}") from None
        fn = self._extern(ext, op, self.device) if self._extern is not None else op
        schema = getattr(op, "_schema", None)
        aliases = schema is None or any(r.alias_info is not None for r in schema.returns)
        return Extern(ext, compat.direct_call(op) if fn is op else fn, deferred, aliases)  # ATen: its C++ operator

    # ---- sizes and allocation ------------------------------------------------------------------

    def _size_binders(self) -> list[tuple[int, int, str]]:
        """(input index, position in shape + strides or -1 for a scalar input, symbol) for every
        size symbol an input binds directly, first binding first."""
        binders, bound = [], set()
        for k, (name, buf) in enumerate(self._inputs):
            if buf is None:
                e = self._scalar[name]
                if e.is_Symbol and e.name not in bound:
                    binders.append((k, -1, e.name))
                    bound.add(e.name)
                continue
            for pos, text in enumerate((*buf.size, *buf.stride)):
                if not text.isdigit():
                    e = parse_expr(text)
                    if e.is_Symbol and e.name not in bound:
                        binders.append((k, pos, e.name))
                        bound.add(e.name)
        return binders

    def _bind(self, inputs: Sequence[Any]) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for k, pos, symbol in self._binders:
            value = inputs[k]
            if pos < 0:
                sizes[symbol] = int(value)
            elif isinstance(value, torch.Tensor):
                sizes[symbol] = int(value.shape[pos] if pos < value.dim() else value.stride()[pos - value.dim()])
        return sizes

    def _function(self, sizes: dict[str, int]) -> Callable[..., Any]:
        """The generated call for this binding of the size symbols (written on first use)."""
        return self._written_call(sizes)[0].function

    def _written_call(self, sizes: dict[str, int]) -> tuple[Written, _Plan]:
        key = tuple(sizes.values())  # the symbols are always bound in the same order
        got = self._calls.get(key)
        if got is None:
            plan = self._make_plan(sizes)
            got = self._calls[key] = (write_call(self.program, plan, sizes, self.steps, self._inputs, self._written,
                                                 self.device, self._helpers()), plan)
        return got

    def _helpers(self) -> dict[str, Any]:
        """The runtime functions the generated source names."""
        device = self.device

        def device_of(t: Any) -> torch.device:
            # a CPU scalar tensor or ATen's CPU bookkeeping (efficient attention's philox seed) may come first
            return t.device if isinstance(t, torch.Tensor) and t.device.type == device else torch.device(device)

        empty, view = _WRAPPER_ALLOCATORS
        return {"_empty": empty, "_view": view, "_empty_strided": torch.empty_strided, "_Tensor": torch.Tensor,
                "_restrided": _restrided, "_as_buffer": _as_buffer, "_write": _write, "_constant": _constant,
                "_device_of": device_of, "_on_device": _on_device}

    def _make_plan(self, sizes: dict[str, int]) -> _Plan:
        layouts, allocs, constants, views, late_views = {}, [], [], [], {}
        inputs = {name for name, buf in self._inputs if buf is not None}
        values = dict(self.program.constants)
        for b in self.program.buffers:  # bases come before their views in the table
            size, stride, dtype = tuple(_ints(b.size, sizes)), tuple(_ints(b.stride, sizes)), getattr(torch, b.dtype)
            layouts[b.name] = (size, stride, dtype)
            if b.view_of in self._deferred:
                late_views.setdefault(b.view_of, []).append((b.name, size, stride, _int(b.offset, sizes)))
            elif b.view_of is not None:
                views.append((b.name, b.view_of, size, stride, _int(b.offset, sizes)))
            elif b.kind == "constant":
                constants.append((b.name, values[b.name], size, dtype, self._elsewhere(b)))
            elif b.name not in inputs and b.name not in self._deferred:
                allocs.append((b.name, size, stride, dtype, self._elsewhere(b)))
        strides = [tuple(layouts[name][1]) if buf is not None else None for name, buf in self._inputs]
        size_args = {k: tuple(sizes[s] for s in step[3]) for k, step in enumerate(self.steps)
                     if not isinstance(step, Extern)}
        return _Plan(layouts, allocs, constants, views, late_views, strides, size_args)

    def _elsewhere(self, buffer: Buffer) -> str | None:
        """The device of a buffer the program declares off its own device type (else None)."""
        return buffer.device if buffer.device and torch.device(buffer.device).type != self.device else None

    # ---- running -------------------------------------------------------------------------------

    def __call__(self, *inputs: Any) -> list[Any]:
        if len(inputs) != len(self._inputs):
            raise ValueError(f"program {self.program.name!r} takes {len(self._inputs)} inputs "
                             f"({list(self.program.inputs)}), got {len(inputs)}")
        return (self._fixed or self._function(self._bind(inputs)))(*inputs)

    def source(self, *inputs: Any) -> str:
        """The Python source of the call that runs these inputs (:mod:`.runner_source`)."""
        return self._written_call(self._bind(inputs))[0].source

    def memory(self, *inputs: Any) -> dict[str, int]:
        """The storage the call for these inputs allocates, in bytes: ``naive`` if every buffer
        had its own for the whole call, ``planned`` the most live at once as the call drops
        buffers after their last use and hands dead storage to later buffers; ``buffers`` and
        ``allocations`` count them (extern results by their buffer's layout, inputs not
        counted); ``idle_inputs``: bytes of inputs nothing reads from that peak on, which the
        caller's references keep alive through it.

        >>> import torch
        >>> from torchvendor.ir import capture
        >>> f = lambda x: ((x.sin() @ x).cos() @ x).tanh()
        >>> prog = capture(f, [torch.randn(8, 8)], level="loop").inference
        >>> runner = ProgramRunner(prog, {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)})
        >>> m = runner.memory(torch.randn(8, 8))
        >>> m["planned"] < m["naive"]
        True
        """
        written = self._written_call(self._bind(inputs))[0]
        ops = written.ops
        return {"naive": written.naive_bytes, "planned": written.planned_bytes,
                "idle_inputs": written.idle_input_bytes,
                "buffers": sum(1 for op in ops if op[0] in ("alloc", "reuse")) + sum(len(op[4]) for op in ops
                                                                                 if op[0] == "call"),
                "allocations": sum(1 for op in ops if op[0] == "alloc") + sum(len(op[4]) for op in ops
                                                                             if op[0] == "call")}

    def boxed(self, *inputs: Any) -> Callable[[list], list] | None:
        """The call in AOTAutograd's boxed convention for inputs like these: ``run(args)`` takes
        the inputs from the list, clears it and drops each after its last use, so an input the
        caller handed over (a saved activation in a backward) is freed there, not at the call's
        end. Inputs laid out as these take the C++ replay (:meth:`replay`, ``run.native``), which
        drops them at the same points; others the generated Python call. None where that frees less than :data:`BOXED_MIN_BYTES` at the call's peak (the
        replay, which keeps its inputs, is faster there).

        >>> import torch
        >>> from torchvendor.ir import capture
        >>> prog = capture(lambda x, y: (x.sin() @ y).cos() @ y, [torch.randn(512, 512)] * 2, level="loop").inference
        >>> runner = ProgramRunner(prog, {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)})
        >>> x, y = torch.randn(512, 512), torch.randn(512, 512)
        >>> want = runner(x, y)[0]
        >>> args = [x, y]; out = runner.boxed(x, y)(args)
        >>> args, torch.allclose(out[0], want)
        ([], True)
        """
        if len(inputs) != len(self._inputs) or self._written_call(self._bind(inputs))[0].idle_input_bytes < BOXED_MIN_BYTES:
            return None
        fixed = self._written_call({})[0].boxed if not self._binders else None
        native = self.replay(*inputs)   # the C++ replay, which frees each input at its last use too

        def run(args: list) -> list:
            if native is not None:
                out = native.boxed(args)
                if out is not None:
                    return out
            return (fixed or self._written_call(self._bind(args))[0].boxed)(args)

        run.native = native is not None  # type: ignore[attr-defined]
        return run

    #: ``input_guard(values, fixed)``: a C++ check that a call's arguments are laid out as
    #: ``values`` (and at ``fixed``'s positions at those addresses), for a caller that caches
    #: calls by layout, as a CUDA graph's wrapper does (:func:`.runner_replay.input_guard`)
    input_guard = staticmethod(input_guard)

    def replay(self, *inputs: Any, form: int = 0) -> Callable[..., Any] | None:
        """The call for inputs laid out as these, without per-call Python (:mod:`.runner_replay`):
        ``replay(*inputs)`` returns the outputs (a list; ``form`` 1: a tuple, 2: the one output),
        or None where inputs do not have this layout. A program with size symbols replays the
        call written for these inputs' binding (the guard pins each input's sizes and each scalar
        input's value). None here where the program cannot be replayed.

        >>> import torch
        >>> from torchvendor.ir import capture
        >>> prog = capture(lambda x: x.sin() * 2, [torch.randn(8)], level="loop").inference
        >>> runner = ProgramRunner(prog, {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)})
        >>> x = torch.randn(8)
        >>> fast = runner.replay(x)
        >>> fast is None or torch.equal(fast(x)[0], runner(x)[0])
        True
        >>> fast is None or fast(torch.randn(9)) is None    # another layout: the Python call runs it
        True
        """
        if len(inputs) != len(self._inputs):
            return None
        written, plan = self._written_call(self._bind(inputs))
        return build_replay(written.ops, self.steps, self._inputs, plan, inputs, self.device, form, self._helpers())
