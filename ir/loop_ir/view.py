"""GraphView adapters for the loop IR (protocol: :mod:`torchvendor.ir.graph_view`).

- :class:`KernelBodyView`: a kernel's SSA body as a mutable dataflow graph. Nodes are the
  statements of all its loop nests, in order. Operator keys are the ``ops.*`` names (``load``,
  ``exp``, ``add``, ``reduction``, ``store``, ...). ``load`` and ``index_expr`` are ``"op"``
  nodes without graph inputs (the buffer and index are attributes), so patterns such as
  ``load -> exp -> store`` match; ``constant`` statements are ``"constant"`` nodes; ``store`` and
  ``store_reduction`` are ``"output"`` nodes. Attributes are the statement's (``buffer``,
  ``index``, ``kind``, ``dtype``, ...) plus ``nest`` (the loop nest's name); ``meta`` has
  ``dtype``. After rewriting, :meth:`KernelBodyView.to_kernel` gives the new :class:`Kernel`.
- :class:`ProgramView`: a program's operations as a graph for partitioning. Nodes are the
  program inputs (``"input"``), constant buffers (``"constant"``), kernels (op key
  ``kernel.pointwise`` / ``kernel.reduction``), extern kernels (their op key, e.g.
  ``aten.mm.default``) and one ``"output"`` node; edges go through buffers (views count as
  their base), with write-after-read and write-after-write edges for in-place writes so any
  topological order stays correct. :meth:`ProgramView.subprogram` cuts a set of operations
  out as a standalone :class:`LoopProgram`.

Example::

    >>> from torchvendor.ir.loop_ir.schema import Kernel, LoopNest, Stmt
    >>> body = (Stmt("t0", "load", (), (("buffer", "x"), ("index", "i0")), "float32"),
    ...         Stmt("t1", "exp", ("t0",), (), "float32"),
    ...         Stmt(None, "store", ("t1",), (("buffer", "y"), ("index", "i0"), ("mode", None))))
    >>> v = KernelBodyView(Kernel("k", (LoopNest("op0", ("4",), (), body),)))
    >>> [(v.op(n), v.kind(n)) for n in v.nodes()]
    [('load', 'op'), ('exp', 'op'), ('store', 'output')]
    >>> t1 = v.nodes()[1]
    >>> t2 = v.create("sigmoid", [v.nodes()[0]], before=t1)
    >>> v.replace_uses(t1, t2); v.erase(t1)
    >>> [s.op for s in v.to_kernel().nests[0].body]
    ['load', 'sigmoid', 'store']
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from ..graph_view import DictGraph, DictNode, NodeKind
from .schema import Buffer, BufferRef, ExternKernel, Kernel, LoopNest, LoopProgram, SizeExpr, Stmt

__all__ = ["KernelBodyView", "ProgramView", "ProgramNode"]

_KIND: dict[str, NodeKind] = {"store": "output", "store_reduction": "output", "constant": "constant"}


def _external_refs(body: Sequence[Stmt]) -> list[str]:
    """SSA names a sub-block reads but does not define."""
    defined: set[str] = set()
    out: list[str] = []
    for s in body:
        for st in s.walk():
            for a in st.args:
                if a not in defined and a not in out:
                    out.append(a)
            if st.name:
                defined.add(st.name)
    return out


class KernelBodyView(DictGraph):
    """A :class:`~torchvendor.ir.graph_view.MutableGraphView` over a kernel's SSA body
    (see the module docstring)."""

    def __init__(self, kernel: Kernel) -> None:
        super().__init__()
        self.kernel = kernel
        by_name: dict[str, DictNode] = {}
        for nest in kernel.nests:
            for st in nest.body:
                ins = [by_name[a] for a in st.args]
                if st.body:  # masked: the mask, then values the sub-block reads from outside
                    ins += [by_name[a] for a in _external_refs(st.body) if a in by_name and a not in st.args]
                attrs = {k: v for k, v in st.attrs}
                attrs["nest"] = nest.name
                if st.body:
                    attrs["body"] = st.body
                node = self.add_node(st.op, ins, attrs, name=st.name or f"{st.op}", kind=_KIND.get(st.op, "op"),
                                     dtype=st.dtype)
                node.meta["_nargs"] = len(st.args)
                if st.name:
                    by_name[st.name] = node

    def create(self, op: str, inputs: Sequence[DictNode], attrs: Mapping[str, Any] | None = None, *,
               before: DictNode, meta: Mapping[str, Any] | None = None) -> DictNode:
        """Insert ``op(inputs, **attrs)`` before ``before``, in the same loop nest; ``store`` and
        ``store_reduction`` become output nodes. ``meta`` may give ``dtype``."""
        attrs = dict(attrs or {})
        attrs.setdefault("nest", before.attrs["nest"])
        node = super().create(op, inputs, attrs, before=before, meta=meta)
        node.kind = _KIND.get(op, "op")
        node.meta["_nargs"] = len(inputs)
        node.meta.setdefault("dtype", None)
        return node

    def to_kernel(self, name: str | None = None) -> Kernel:
        """The kernel this view now describes (nests in their original order)."""
        nests: dict[str, list[Stmt]] = {n.name: [] for n in self.kernel.nests}
        for node in self.nodes():
            attrs = dict(node.attrs)
            nest = attrs.pop("nest")
            body = attrs.pop("body", ())
            nargs = node.meta.get("_nargs", len(node.inputs))
            args = tuple(i.name for i in node.inputs[:nargs])
            defines = node.kind != "output"
            nests.setdefault(nest, []).append(Stmt(node.name if defines else None, node.op, args,
                                                   tuple(attrs.items()), node.meta.get("dtype"), tuple(body)))
        old = {n.name: n for n in self.kernel.nests}
        return Kernel(name or self.kernel.name,
                      tuple(LoopNest(k, old[k].ranges, old[k].reduction_ranges, tuple(v)) for k, v in nests.items()),
                      self.kernel.group)


class ProgramNode:
    """A node of :class:`ProgramView`: an input, a constant, an operation or the output."""

    __slots__ = ("name", "kind", "op", "index")

    def __init__(self, name: str, kind: NodeKind, op: Any, index: int) -> None:
        self.name, self.kind, self.op, self.index = name, kind, op, index

    def __repr__(self) -> str:
        return f"%{self.name}"


class ProgramView:
    """A read-only :class:`~torchvendor.ir.graph_view.GraphView` of a program's operations
    (see the module docstring)."""

    def __init__(self, program: LoopProgram) -> None:
        self.program = program
        self._buffers = {b.name: b for b in program.buffers}
        self._nodes: list[ProgramNode] = []
        self._inputs: dict[ProgramNode, list[ProgramNode]] = {}
        producer: dict[str, ProgramNode] = {}
        readers: dict[str, list[ProgramNode]] = {}
        scalars = {n for n, _ in program.scalar_inputs}
        for name in program.inputs:
            node = self._add(name, "input", None, [])
            if name not in scalars:
                producer[self.root(name)] = node
        for b in program.buffers:
            if b.kind == "constant":
                producer[self.root(b.name)] = self._add(b.name, "constant", None, [])
        for op in program.ops:
            deps: list[ProgramNode] = []
            for buf in op.reads():
                p = producer.get(self.root(buf))
                if p is not None:
                    deps.append(p)
            for buf in op.writes():
                r = self.root(buf)
                if r in producer and (self._buffers.get(r) is None or self._buffers[r].kind == "input"
                                      or any(b.view_of == r for b in program.buffers) or r in op.reads()):
                    deps.append(producer[r])        # in-place / partial writes: order after the last writer
                deps += [n for n in readers.get(r, ())]  # write after read
            name = op.name
            node = self._add(name, "op", op, list(dict.fromkeys(deps)))
            for buf in op.reads():
                readers.setdefault(self.root(buf), []).append(node)
            for buf in op.writes():
                producer[self.root(buf)] = node
                readers[self.root(buf)] = []
        outs = [producer[self.root(o.name)] for o in program.outputs
                if isinstance(o, BufferRef) and self.root(o.name) in producer]
        self._add("output", "output", None, list(dict.fromkeys(outs)))
        self._users: dict[ProgramNode, list[ProgramNode]] = {n: [] for n in self._nodes}
        for n in self._nodes:
            for i in self._inputs[n]:
                if n not in self._users[i]:
                    self._users[i].append(n)

    def _add(self, name: str, kind: NodeKind, op: Any, inputs: list[ProgramNode]) -> ProgramNode:
        node = ProgramNode(name, kind, op, len(self._nodes))
        self._nodes.append(node)
        self._inputs[node] = inputs
        return node

    def root(self, buffer: str) -> str:
        """The buffer whose storage ``buffer`` views (itself when it is not a view)."""
        b = self._buffers.get(buffer)
        while b is not None and b.view_of is not None:
            buffer = b.view_of
            b = self._buffers.get(buffer)
        return buffer

    # -- GraphView ------------------------------------------------------------------------------
    def nodes(self) -> list[ProgramNode]:
        return list(self._nodes)

    def inputs(self, node: ProgramNode) -> list[ProgramNode]:
        return list(self._inputs[node])

    def users(self, node: ProgramNode) -> list[ProgramNode]:
        return list(self._users[node])

    def op(self, node: ProgramNode) -> str:
        if node.kind == "input":
            return "placeholder"
        if node.kind in ("output", "constant"):
            return node.kind
        if isinstance(node.op, Kernel):
            return f"kernel.{node.op.kind}"
        return node.op.op

    def kind(self, node: ProgramNode) -> NodeKind:
        return node.kind

    def attrs(self, node: ProgramNode) -> dict[str, Any]:
        op = node.op
        if isinstance(op, Kernel):
            ops = sorted({s.op for n in op.nests for s in n.stmts()})
            kinds = sorted({s.attr("kind") for n in op.nests for s in n.stmts() if s.op == "reduction"})
            return {"kernel": op.name, "reads": op.reads(), "writes": op.writes(), "body_ops": tuple(ops),
                    "reductions": tuple(kinds), "nests": len(op.nests)}
        if isinstance(op, ExternKernel):
            return {"args": op.args, "kwargs": dict(op.kwargs), "reads": op.reads(), "writes": op.writes()}
        return {}

    def meta(self, node: ProgramNode) -> dict[str, Any]:
        if node.kind in ("input", "constant"):
            b = self._buffers.get(node.name)
        else:
            writes = node.op.writes() if node.op is not None else ()
            b = self._buffers.get(writes[0]) if writes else None
        if b is None:
            return {}
        shape = tuple(int(s) if s.lstrip("-").isdigit() else s for s in b.size)
        return {"dtype": b.dtype, "shape": shape}

    def name(self, node: ProgramNode) -> str:
        return node.name

    # -- cutting -----------------------------------------------------------------------------------
    def subprogram(self, nodes: Iterable[ProgramNode], name: str = "partition") -> LoopProgram:
        """The operations ``nodes`` (in program order) as a standalone program: its inputs are
        the buffers they read (or write partially) that other operations or the caller
        produce; its outputs the buffers they write that later operations or the program's
        outputs read."""
        chosen = sorted({n for n in nodes if n.kind == "op"}, key=lambda n: n.index)
        if not chosen:
            raise ValueError("subprogram needs at least one operation node")
        ops = [n.op for n in chosen]
        produced_inside: set[str] = set()
        inputs: list[str] = []
        for op in ops:
            # A kernel's nests run in order: a buffer an earlier nest stored is not an input of
            # a later nest that loads it (softmax's max and sum buffers).
            for reads, writes in _steps(op):
                for buf in (*reads, *writes):
                    r = self.root(buf)
                    if r not in produced_inside and r not in inputs and (buf in reads or r != buf
                                                                          or self._buffers[r].kind == "input"):
                        inputs.append(r)
                produced_inside.update(self.root(buf) for buf in writes)
        later_reads: set[str] = set()
        last = chosen[-1].index
        for n in self._nodes:
            if n.kind == "op" and n.index > last or (n.kind == "op" and n not in chosen and n.index > chosen[0].index):
                later_reads |= {self.root(b) for b in n.op.reads()}
        later_reads |= {self.root(o.name) for o in self.program.outputs if isinstance(o, BufferRef)}
        outputs = [r for r in dict.fromkeys(self.root(b) for op in ops for b in op.writes())
                   if r in later_reads or self._buffers[r].kind == "input"]
        used = set(inputs) | set(outputs) | {b for op in ops for b in (*op.reads(), *op.writes())}
        closure = set(used)
        for b in list(used):
            while self._buffers[b].view_of is not None:
                b = self._buffers[b].view_of
                closure.add(b)
        buffers = []
        for b in self.program.buffers:
            if b.name not in closure:
                continue
            kind = "input" if b.name in inputs else "output" if b.name in outputs else \
                ("constant" if b.kind == "constant" else "intermediate")
            buffers.append(Buffer(b.name, b.dtype, b.size, b.stride, b.device, kind, b.offset, b.view_of))
        sizes = tuple(sorted({s for b in buffers for e in (*b.size, *b.stride, b.offset)
                              for s in _syms(e)} | {s for op in ops for s in _op_syms(op)}))
        return LoopProgram(name, self.program.device, tuple(buffers), tuple(inputs) + sizes,
                           tuple(BufferRef(o) for o in outputs), tuple(ops), tuple((s, s) for s in sizes),
                           sizes, tuple(outputs),
                           tuple((k, v) for k, v in self.program.constants if k in closure))


def _steps(op: Any) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(buffers read, buffers written) per step of an operation, in execution order."""
    if isinstance(op, Kernel):
        return [(tuple(dict.fromkeys(s.attr("buffer") for s in n.stmts() if s.op in ("load", "load_seed"))),
                 tuple(dict.fromkeys(s.attr("buffer") for s in n.stmts() if s.op in ("store", "store_reduction"))))
                for n in op.nests]
    return [(op.reads(), op.writes())]


def _syms(text: str) -> set[str]:
    import re

    return set(re.findall(r"\bs\d+\b", text))


def _op_syms(op: Any) -> set[str]:
    out: set[str] = set()
    if isinstance(op, Kernel):
        for n in op.nests:
            for e in (*n.ranges, *n.reduction_ranges):
                out |= _syms(e)
            for s in n.stmts():
                for _, v in s.attrs:
                    if isinstance(v, str):
                        out |= _syms(v)
    else:
        def walk(v: Any) -> None:
            nonlocal out
            if isinstance(v, SizeExpr):
                out |= _syms(v.expr)
            elif isinstance(v, tuple):
                for x in v:
                    walk(x)
        walk(op.args)
        walk(tuple(v for _, v in op.kwargs))
    return out
