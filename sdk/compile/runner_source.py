"""The straight-line Python that runs one loop program for one binding of its size symbols.

:class:`~torchvendor.sdk.compile.loop_runner.ProgramRunner` writes, for each binding of the size
symbols, a function ``call(*inputs)`` in the manner of Inductor's generated wrapper: buffers are
locals, each allocated (or made a view) just before the first operation that touches it and
dropped with ``del`` after the last one, sizes are literals, each kernel and extern kernel is one
call of a name bound in the function's globals. A small model's partition runs dozens of
operations per call: interpreting them (a dict of buffers, a loop over steps, argument getters)
cost more than the generated Python does.

Example (the source for ``x.sin() * 2`` on 8 elements)::

    >>> import torch
    >>> from torchvendor.ir import capture
    >>> from torchvendor.sdk.compile.loop_runner import ProgramRunner, loop_kernels, reference_kernel
    >>> prog = capture(lambda x: x.sin() * 2, [torch.randn(8)], level="loop").inference
    >>> runner = ProgramRunner(prog, {lk.name: reference_kernel(lk) for lk in loop_kernels(prog)})
    >>> print(runner.source(torch.randn(8)))
    def call(arg0_1):
        if isinstance(arg0_1, _Tensor) and arg0_1.stride() != (1,): arg0_1 = _restrided(arg0_1, (1,), None)
        buf0 = _empty((8,), (1,), _dtype0)
        _kernel0(arg0_1, buf0)
        return [buf0]
"""
from __future__ import annotations

import keyword
import linecache
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from torchvendor.ir.loop_ir import BufferRef, Kernel, LoopProgram, SizeExpr
from torchvendor.ir.loop_ir.interpreter import eval_index
from torchvendor.ir.loop_ir.schema import ExternKernel, TorchValue

__all__ = ["Extern", "Step", "Written", "write_call"]


@dataclass(frozen=True)
class Extern:
    """An extern kernel as the runner resolved it: what runs it (None for ``getitem``: indexing)."""

    op: ExternKernel
    fn: Callable[..., Any] | None
    #: per output: whether the result itself becomes the buffer (else it is copied into it)
    deferred: tuple[bool, ...]
    #: whether a result may share storage with an argument (a view op, ``getitem``, an unknown schema)
    aliases: bool = True


#: one operation of the program: a kernel (its callable, argument buffers, size symbols) or an extern
Step = tuple[Kernel, Callable[..., Any], tuple[str, ...], tuple[str, ...]] | Extern


@dataclass
class _Writer:
    """Collects the function's lines and the objects its globals bind."""

    names: dict[str, str] = field(default_factory=dict)
    scope: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    #: names bound before the first operation: inputs, constants and views of them
    early: set[str] = field(default_factory=set)
    #: the same call as operations on named buffers, for the runner's C++ replay (:mod:`.runner_replay`)
    ops: list[tuple] = field(default_factory=list)

    def op(self, *operation: Any) -> None:
        self.ops.append(operation)

    def local(self, name: str) -> str:
        """A program name as a Python local (kept where it is one and cannot clash with a global)."""
        got = self.names.get(name)
        if got is None:
            ok = name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")
            got = self.names[name] = name if ok else f"v{len(self.names)}_"
        return got

    def constant(self, value: Any, stem: str = "c") -> str:
        """A literal for ints, bools and None; else a global bound to ``value``."""
        if value is None or isinstance(value, bool) or type(value) is int:
            return repr(value)
        for key, held in self.scope.items():
            if held is value and key.startswith(f"_{stem}"):
                return key
        key = f"_{stem}{sum(k.startswith(f'_{stem}') for k in self.scope)}"
        self.scope[key] = value
        return key

    def emit(self, line: str) -> None:
        self.lines.append("    " + line)


@dataclass(frozen=True)
class Written:
    """What :func:`write_call` wrote for one binding of the size symbols."""

    source: str
    function: Callable[..., Any]
    #: the same call as operations on named buffers (``("alloc", name, size, stride, dtype,
    #: device)``, ``("view", name, base, size, stride, offset)``, ``("reuse", name, donor, size,
    #: stride, dtype)``, ``("drop", names)``, ``("kernel", step index, names, size arguments)``,
    #: ``("call", fn, names read, names bound, those of them with new storage)``, ``("constant",
    #: name, value, size, dtype, device)``, ``("on_device", step index, names, size arguments,
    #: positions moved, positions copied back)``, ``("return", outputs)``) for
    #: :mod:`.runner_replay`; ``("release", names)``: inputs (and views of them) the boxed call
    #: drops there, after their last use (a positional call's caller still holds them)
    ops: tuple[tuple, ...]
    #: bytes of storage the call allocates: every buffer its own (``naive``), and at most
    #: live at once with buffers dropped after their last use and storage reused (``planned``)
    naive_bytes: int = 0
    planned_bytes: int = 0
    #: bytes of inputs nothing reads from the planned peak on (:func:`_idle_inputs`)
    idle_input_bytes: int = 0
    #: the same call in AOTAutograd's boxed convention, ``call_boxed(args)``: it takes the inputs
    #: from the list, clears it and drops each input after its last use (the caller handed them over)
    boxed: Callable[..., Any] | None = None


def write_call(program: LoopProgram, plan: Any, sizes: Mapping[str, int], steps: Sequence[Step],
               inputs: Sequence[tuple[str, Any]], written: set[str], device: str,
               helpers: Mapping[str, Any]) -> Written:
    """The program's ``call`` for one binding ``sizes`` and its ``plan``
    (:class:`~torchvendor.sdk.compile.loop_runner._Plan`); ``steps`` has one entry per
    ``program.ops``; ``helpers`` are the runtime functions the source names (``_empty``,
    ``_view``, ...)."""
    w = _Writer(scope=dict(helpers))
    args = [w.local(name) for name, _ in inputs]
    roots, first, last = _liveness(program, plan, steps)
    _prologue(w, plan, inputs, written, device)
    made: set[str] = set()
    outputs = {o.name if isinstance(o, BufferRef) else o for o in program.outputs if isinstance(o, (BufferRef, str))}
    keep = outputs | {name for name, _ in inputs} | {r for n, r in roots.items() if n in outputs}
    if not planned():  # every buffer its own storage for the whole call
        keep |= set(last) | set(first)
    reuse = _reuse(plan, steps, roots, first, last, keep)
    donors = set(reuse.values())  # dropped where their storage is taken over instead
    # a device kernel never gets a host pointer: host buffers (AdamW's 0-d step counters) run on device copies
    host = {b.name for b in program.buffers if device != "cpu" and (b.device or "").split(":")[0] == "cpu"}
    # the boxed call (``call_boxed(args)``, which owns its inputs) also drops each input (and view
    # of one) after its last use: one neither returned, nor written (copied back), nor the base of an output
    own = {name for name, buf in inputs if buf is not None} - _kept_inputs(outputs, roots, written)
    for k, step in enumerate(steps):
        for root in sorted({roots.get(n, n) for n in _refs(step)} - made, key=lambda r: first.get(r, 0)):
            made.add(root)
            _make(w, root, plan, device, reuse.get(root))
        if isinstance(step, Extern):
            _extern_step(w, step, plan, sizes)
        else:
            _kernel(w, k, step, plan, host)
        dead = [n for n in _refs(step) if last.get(n) == k and n not in keep and roots.get(n, n) not in keep
                and n not in donors]
        if dead:
            w.emit(f"del {', '.join(w.local(n) for n in dict.fromkeys(dead))}")
            w.op("drop", tuple(dict.fromkeys(dead)))
        spent = [n for n in dict.fromkeys(_refs(step)) if last.get(n) == k and n not in dead
                 and (n in own or (roots.get(n) in own and n not in keep))]  # inputs and their views
        if spent:
            w.emit(f"del {', '.join(w.local(n) for n in spent)}" + _BOXED_ONLY)
            w.op("release", tuple(spent))
    for root in {roots.get(o, o) for o in outputs} - made:  # an output no operation touches
        _make(w, root, plan, device, None)
    if any(name in written for name, _ in inputs):
        w.emit("for _original, _copy in _back: _original.copy_(_copy)")
    w.emit(f"return [{', '.join(_output(w, o, sizes) for o in program.outputs)}]")
    w.op("return", tuple(_output_value(o, sizes) for o in program.outputs))
    unread = [w.local(n) for n, _ in inputs if n in own and n not in last]
    if unread:
        w.ops.insert(0, ("release", tuple(n for n, _ in inputs if n in own and n not in last)))
    boxed = ("def call_boxed(args):\n" + (f"    {''.join(a + ', ' for a in args)}= args\n" if args else "")
             + "    args.clear()\n"
             + (f"    del {', '.join(unread)}\n" if unread else "")
             + "\n".join(line[:-len(_BOXED_ONLY)] if line.endswith(_BOXED_ONLY) else line for line in w.lines))
    source = f"def call({', '.join(args)}):\n" + "\n".join(line for line in w.lines if not line.endswith(_BOXED_ONLY))
    filename = f"<torchvendor runner {program.name} {id(w)}>"
    text = source + "\n" + boxed + "\n"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)  # tracebacks show it
    exec(compile(text, filename, "exec"), w.scope)  # noqa: S102 - our own generated source
    for k, op in enumerate(w.ops):  # an extern step's lines as a function of its own, for the replay
        if op[0] == "call":
            exec(compile(op[1], f"{filename} step {k}", "exec"), w.scope)  # noqa: S102
            w.ops[k] = ("call", w.scope[op[1][4:op[1].index("(")]], *op[2:])
    naive, peak, at = _footprint(w.ops, plan)
    idle = _idle_inputs(w.ops, plan, [name for name, buf in inputs if buf is not None], at)
    return Written(source, w.scope["call"], tuple(w.ops), naive, peak, idle, w.scope["call_boxed"])


#: marks a line only the boxed call has (it drops an input)
_BOXED_ONLY = "  # boxed"


def _kept_inputs(outputs: set[str], roots: Mapping[str, str], written: set[str]) -> set[str]:
    """Inputs the boxed call keeps to its end: outputs, bases of outputs, inputs it writes."""
    return outputs | {roots.get(o, o) for o in outputs} | written


def _kernel(w: _Writer, k: int, step: Step, plan: Any, host: set[str]) -> None:
    """One kernel's call (on device copies of the host buffers it touches: ``loop_runner._on_device``)."""
    kernel_args = [w.local(n) for n in step[2]] + [repr(v) for v in plan.size_args[k]]
    moved = tuple(i for i, n in enumerate(step[2]) if n in host)
    if moved:
        back = tuple(i for i in moved if step[2][i] in step[0].writes())
        kernel_args = [w.constant(step[1], 'kernel'), repr(moved), repr(back), "_dev", *kernel_args]
        w.emit(f"_on_device({', '.join(kernel_args)})")
        w.op("on_device", k, tuple(step[2]), tuple(plan.size_args[k]), moved, back)
    else:
        w.emit(f"{w.constant(step[1], 'kernel')}({', '.join(kernel_args)})")
        w.op("kernel", k, tuple(step[2]), tuple(plan.size_args[k]))


def planned() -> bool:
    """Whether calls drop buffers after their last use and reuse dead storage (the default;
    ``TORCHVENDOR_MEMORY_PLAN=0`` keeps every buffer to the end of the call: to measure what the
    plan saves, or to rule it out when a result looks wrong).

    >>> planned() in (True, False)
    True
    """
    return os.environ.get("TORCHVENDOR_MEMORY_PLAN", "1") != "0"


def _numel(size: Sequence[int]) -> int:
    n = 1
    for s in size:
        n *= s
    return n


def _refs(step: Step) -> tuple[str, ...]:
    """The names an operation touches: buffers read and written, and an extern's named result."""
    if isinstance(step, Extern):
        named = (step.op.name,) if not step.op.outputs and not step.op.mutated else ()
        return (*step.op.reads(), *step.op.writes(), *named)
    return step[2]


def _liveness(program: LoopProgram, plan: Any, steps: Sequence[Step]) -> tuple[dict, dict, dict]:
    """(name -> the buffer whose storage it views, for views; root -> the first step that needs
    it; name -> the last step that touches it, or what views it)."""
    roots: dict[str, str] = {}
    for name, base, *_ in plan.views:
        roots[name] = roots.get(base, base)
    for base, views in plan.late_views.items():
        for name, *_ in views:
            roots[name] = base
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for k, step in enumerate(steps):
        for n in _refs(step):
            first.setdefault(roots.get(n, n), k)
            last[n] = k
    for name, base in roots.items():  # a view keeps its base's local alive (it is made from it)
        if name in last:
            last[base] = max(last.get(base, -1), last[name])
    return roots, first, last


def _reuse(plan: Any, steps: Sequence[Step], roots: Mapping[str, str], first: Mapping[str, int],
           last: Mapping[str, int], keep: set[str]) -> dict[str, str]:
    """buffer -> an earlier buffer whose storage it takes over, as Inductor's wrapper reuses a
    dead buffer (``buf15 = reinterpret_tensor(buf3, ...); del buf3  # reuse``): one of the same
    dtype and storage extent that no later operation touches, through any of its views, and
    that no output is; never one an extern kernel may have returned a view of (nothing tracks
    that view's uses)."""
    pinned = {roots.get(n, n) for step in steps if isinstance(step, Extern) and step.aliases for n in step.op.reads()}
    own = {name: (dtype, _extent(size, stride)) for name, size, stride, dtype, where in plan.allocs if where is None}
    dead_at: dict[str, int] = {}
    for name, k in last.items():
        root = roots.get(name, name)
        dead_at[root] = max(dead_at.get(root, -1), k)
    frees: dict[int, list[str]] = {}
    for root, k in dead_at.items():
        if root in own and root not in keep and root not in pinned:
            frees.setdefault(k, []).append(root)
    pool: dict[tuple, list[str]] = {}
    reuse: dict[str, str] = {}
    starts: dict[int, list[str]] = {}
    for root in own:
        starts.setdefault(first.get(root, 0), []).append(root)
    for k in range(len(steps)):
        for root in starts.get(k, ()):
            donors = pool.get(own[root])
            if donors:
                reuse[root] = donors.pop()
        for root in frees.get(k, ()):
            pool.setdefault(own[root], []).append(root)
    return reuse


def _footprint(ops: Sequence[tuple], plan: Any) -> tuple[int, int, int]:
    """(bytes if every buffer had storage of its own for the whole call, the most bytes live at
    once as ``ops`` drop and reuse them, the index of the first operation at that peak): the
    call's own storage, extern results counted by their buffer's layout, inputs not counted."""
    def nbytes(name: str) -> int:
        size, stride, dtype = plan.layouts[name]
        return _extent(size, stride) * dtype.itemsize

    storage: dict[str, str] = {}   # name -> the name whose allocation it lives in
    held: dict[str, int] = {}      # allocation -> bytes
    users: dict[str, int] = {}     # allocation -> names on it
    naive = live = peak = at = 0
    for k, op in enumerate(ops):
        new = [op[1]] if op[0] in ("alloc", "reuse") else list(op[4]) if op[0] == "call" else []
        for name in new:
            naive += nbytes(name)
        if op[0] == "alloc" or op[0] == "call":
            for name in new:
                storage[name], held[name], users[name] = name, nbytes(name), 1
                live += held[name]
        elif op[0] in ("view", "reuse"):
            root = storage.get(op[2])
            if root is not None:
                storage[op[1]] = root
                users[root] += 1
        if op[0] == "drop" or op[0] == "reuse":
            for name in op[1] if op[0] == "drop" else (op[2],):
                root = storage.pop(name, None)
                if root is not None:
                    users[root] -= 1
                    if not users[root]:
                        live -= held.pop(root)
        if live > peak:
            peak, at = live, k
    return naive, peak, at


def _idle_inputs(ops: Sequence[tuple], plan: Any, inputs: Sequence[str], at: int) -> int:
    """Bytes of the inputs that no operation from ``at`` on reads (through any view) and that are
    not returned: storage that would be free at the call's peak if the caller had let go of them
    (the runner gets its inputs as arguments, so the caller's references keep them alive)."""
    base = {op[1]: op[2] for op in ops if op[0] == "view"}

    def root(name: str) -> str:
        while name in base:
            name = base[name]
        return name
    used = set()
    for op in ops[at:]:
        names = (op[2] if op[0] in ("kernel", "on_device") else (*op[2], *op[3]) if op[0] == "call" else
                 [o for o in op[1] if isinstance(o, str)] if op[0] == "return" else ())
        used |= {root(n) for n in names}
    idle = 0
    for name in inputs:
        if name not in used and name in plan.layouts:
            size, stride, dtype = plan.layouts[name]
            idle += _extent(size, stride) * dtype.itemsize
    return idle


def _extent(size: Sequence[int], stride: Sequence[int]) -> int:
    """Elements of storage a layout spans."""
    if any(n == 0 for n in size):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(size, stride))


def _prologue(w: _Writer, plan: Any, inputs: Sequence[tuple[str, Any]], written: set[str], device: str) -> None:
    """Inputs whose strides differ from those compiled for run on a copy (copied back at the end
    where the program writes them); constants and views of inputs."""
    if any(name in written for name, _ in inputs):
        w.emit("_back = []")
    for (name, buf), stride in zip(inputs, plan.strides):
        if buf is not None and stride is not None and _numel(plan.layouts[name][0]) > 1:
            a = w.local(name)
            back = "_back" if name in written else "None"
            w.emit(f"if isinstance({a}, _Tensor) and {a}.stride() != {stride!r}: "
                   f"{a} = _restrided({a}, {stride!r}, {back})")
    if device != "cpu" or plan.constants:
        first = next((w.local(name) for name, buf in inputs if buf is not None and buf.device == device),
                     next((w.local(name) for name, buf in inputs if buf is not None), "None"))
        w.emit(f"_dev = _device_of({first})")
    for name, value, size, dtype, where in plan.constants:
        w.emit(f"{w.local(name)} = _constant({w.constant(value)}, {size!r}, {w.constant(dtype, 'dtype')}, "
               f"{w.constant(where) if where else '_dev'})")
        w.op("constant", name, value, size, dtype, where)
    w.early = {name for name, _ in inputs} | {c[0] for c in plan.constants}
    for name, base, size, stride, offset in plan.views:
        if base in w.early:
            w.emit(f"{w.local(name)} = _view({w.local(base)}, {size!r}, {stride!r}, {offset!r})")
            w.op("view", name, base, size, stride, offset)
            w.early.add(name)


def _make(w: _Writer, root: str, plan: Any, device: str, donor: str | None) -> None:
    """Allocate buffer ``root`` (unless an input, constant or extern result gives it, or it takes
    over the storage of ``donor``), then its views."""
    if root in w.early:
        return
    for name, size, stride, dtype, where in plan.allocs:
        if name == root and donor is not None:
            same = plan.layouts[donor][:2] == (size, stride)
            storage = w.local(donor) if same else f"_view({w.local(donor)}, {size!r}, {stride!r}, 0)"
            w.emit(f"{w.local(name)} = {storage}; del {w.local(donor)}  # reuse")
            w.op("reuse", name, donor, size, stride, dtype)
        elif name == root:
            d = w.constant(dtype, "dtype")
            if device == "cpu" and where is None:
                w.emit(f"{w.local(name)} = _empty({size!r}, {stride!r}, {d})")
            else:
                w.emit(f"{w.local(name)} = _empty_strided({size!r}, {stride!r}, dtype={d}, "
                       f"device={w.constant(where) if where else '_dev'})")
            w.op("alloc", name, size, stride, dtype, where)
    tree = {root}
    for name, base, size, stride, offset in plan.views:
        if base in tree:
            tree.add(name)
            w.emit(f"{w.local(name)} = _view({w.local(base)}, {size!r}, {stride!r}, {offset!r})")
            w.op("view", name, base, size, stride, offset)


def _extern_step(w: _Writer, ext: Extern, plan: Any, sizes: Mapping[str, int]) -> None:
    """:func:`_extern`'s lines, and for the replay the same lines as a function of the buffers they
    read, returning those they bind (``("call", source, reads, binds)``)."""
    start = len(w.lines)
    _extern(w, ext, plan, sizes)
    op = ext.op
    named = (op.name,) if not op.outputs and not op.mutated else ()
    fresh = {out for out, deferred in zip(op.outputs, ext.deferred) if deferred}
    fresh |= {view for out in fresh for view, *_ in plan.late_views.get(out, ())}
    binds = tuple(dict.fromkeys([*op.outputs, *sorted(fresh - set(op.outputs)), *named]))
    reads = tuple(n for n in dict.fromkeys(_refs(ext)) if n not in fresh and n not in named)
    name = f"_step{len(w.ops)}"
    source = (f"def {name}({', '.join(w.local(n) for n in reads)}):\n" + "\n".join(w.lines[start:]) +
              f"\n    return ({''.join(w.local(n) + ', ' for n in binds)})\n")
    w.op("call", source, reads, binds, tuple(sorted(fresh)))


def _extern(w: _Writer, ext: Extern, plan: Any, sizes: Mapping[str, int]) -> None:
    """One extern kernel's call, and its results bound to their buffers."""
    op, outputs = ext.op, ext.op.outputs
    if ext.fn is None:  # getitem: indexing its source
        call = w.local(op.args[0].name) + "".join(f"[{_arg(w, i, sizes)}]" for i in op.args[1:])
    else:
        parts = [_arg(w, a, sizes) for a in op.args] + [f"{key}={_arg(w, v, sizes)}" for key, v in op.kwargs]
        call = f"{w.constant(ext.fn, 'extern')}({', '.join(parts)})"
    if not outputs:
        w.emit(f"{w.local(op.name)} = {call}" if not op.mutated else call)
        return
    if len(outputs) == 1:  # the result itself, as zip((result,), ...) took it
        results = [call]
    else:
        w.emit(f"_result = {call}")
        results = [f"_result[{j}]" for j in range(len(outputs))]
    for out, deferred, result in zip(outputs, ext.deferred, results):
        o = w.local(out)
        if deferred:
            size, stride, dtype = plan.layouts[out]
            w.emit(f"{o} = _as_buffer({result}, {size!r}, {stride!r}, {w.constant(dtype, 'dtype')})")
            for view, vsize, vstride, offset in plan.late_views.get(out, ()):
                w.emit(f"{w.local(view)} = _view({o}, {vsize!r}, {vstride!r}, {offset!r})")
        else:
            w.emit(f"{o} = _write({o}, {result})")


def _arg(w: _Writer, value: Any, sizes: Mapping[str, int]) -> str:
    """An extern argument as Python source: a local, a literal, or a global."""
    if isinstance(value, BufferRef):
        return w.local(value.name)
    if isinstance(value, SizeExpr):
        v = int(value.expr) if value.expr.lstrip("-").isdigit() else eval_index(value.expr, sizes)
        return repr(int(v)) if isinstance(v, int) or getattr(v, "is_Integer", False) else w.constant(v)
    if isinstance(value, tuple):
        return "[" + ", ".join(_arg(w, v, sizes) for v in value) + "]"
    return w.constant(value.resolve() if isinstance(value, TorchValue) else value)


def _output_value(o: Any, sizes: Mapping[str, int]) -> Any:
    """An output as the replay's ``return`` names it: a buffer's name, else ``("value", value)``."""
    if isinstance(o, BufferRef):
        return o.name
    if isinstance(o, str):
        return o
    if isinstance(o, SizeExpr):
        v = int(o.expr) if o.expr.lstrip("-").isdigit() else eval_index(o.expr, sizes)
        return ("value", int(v) if isinstance(v, int) or getattr(v, "is_Integer", False) else v)
    return ("value", o.resolve() if isinstance(o, TorchValue) else o)


def _output(w: _Writer, o: Any, sizes: Mapping[str, int]) -> str:
    if isinstance(o, BufferRef):
        return w.local(o.name)
    if isinstance(o, str):
        return w.local(o)
    if isinstance(o, SizeExpr):
        return _arg(w, o, sizes)
    return w.constant(o)

