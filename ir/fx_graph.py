"""FX graphs, shared by the torch and ATen/prim levels (both are FX graphs): their reference
interpreter (:func:`run_graph`), input binding (:class:`Binder`, :class:`Slot`) and JSON form
(:func:`graph_to_json`, :func:`graph_from_json`). The loop level has its own interpreter,
``loop_ir/interpreter.py``.

Graphs run node by node with eager torch ops through :class:`torch.fx.Interpreter`; on failure
the error names the node (``While executing %node``) as torch's interpreter does, and
:func:`run_graph` adds which graph and what arguments it was given.

:class:`Binder` turns user inputs into a graph's placeholder values: each placeholder is fed
by one :class:`Slot` (a user input, a parameter or buffer of the captured module, a captured
constant tensor, or a symbolic size evaluated from the input shapes).

Example::

    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: x * 2 + 1)
    >>> run_graph(gm, [torch.ones(2)])
    [tensor([3., 3.])]
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import sympy
import torch
import torch.fx as fx

__all__ = ["run_graph", "Slot", "Binder", "TensorSpec", "placeholders", "placeholder_specs", "graph_to_json",
           "graph_from_json", "encode_fx_value", "decode_fx_value"]


def placeholders(gm: fx.GraphModule) -> list[fx.Node]:
    """The placeholder nodes of ``gm``, in order."""
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def run_graph(gm: fx.GraphModule, args: Sequence[Any], *, name: str = "graph") -> list[Any]:
    """Interpret ``gm`` on ``args`` with eager torch ops; the outputs as a flat list.

    Raises ValueError naming the graph when the argument count is wrong.
    """
    expected = len(placeholders(gm))
    if len(args) != expected:
        raise ValueError(f"{name} takes {expected} inputs ({[n.name for n in placeholders(gm)]}), got {len(args)}")
    out = fx.Interpreter(gm, garbage_collect_values=True).run(*args)
    return list(out) if isinstance(out, (tuple, list)) else [out]


SlotKind = Literal["input", "parameter", "buffer", "constant", "symint"]


@dataclass(frozen=True)
class Slot:
    """What feeds one graph placeholder.

    ``kind`` is ``"input"`` (``index`` into the flattened user inputs), ``"parameter"`` /
    ``"buffer"`` (``name`` is the module's qualified name), ``"constant"`` (``value`` is a
    tensor captured with the graph, e.g. a global) or ``"symint"`` (``value`` is a sympy
    expression over the symbolic sizes of the inputs).
    """

    kind: SlotKind
    name: str
    index: int | None = None
    value: Any = None

    @property
    def grad_key(self) -> str:
        """The key of this slot's gradient in ``run_backward``'s result."""
        return f"input{self.index}" if self.kind == "input" else self.name

    def __str__(self) -> str:
        return {"input": f"input{self.index}", "symint": f"symint {self.value}"}.get(self.kind, f"{self.kind} {self.name}")

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible data (a constant's tensor inline, a symbolic size as a string)."""
        value = str(self.value) if self.kind == "symint" else encode_fx_value(self.value, f"slot {self.name}")
        return {"kind": self.kind, "name": self.name, "index": self.index, "value": value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Slot":
        """The inverse of :meth:`to_json`."""
        value = sympy.sympify(data["value"]) if data["kind"] == "symint" else decode_fx_value(data["value"], {})
        return cls(data["kind"], data["name"], data["index"], value)


@dataclass(frozen=True)
class TensorSpec:
    """A placeholder's dtype and shape (ints and sympy expressions) where no fake tensor exists:
    in a program read back from JSON. :class:`Binder` accepts it in place of a fake tensor."""

    dtype: torch.dtype
    shape: tuple[Any, ...]


def placeholder_specs(gm: fx.GraphModule) -> list[Any]:
    """Per placeholder of a graph from :func:`graph_from_json`: a :class:`TensorSpec`, a sympy
    expression (a symbolic int) or None, from the serialized ``meta``."""
    specs: list[Any] = []
    for node in placeholders(gm):
        meta = node.meta.get("serialized", {})
        if "dtype" in meta:
            shape = tuple(sympy.sympify(d) if isinstance(d, str) else d for d in meta["shape"])
            specs.append(TensorSpec(getattr(torch, meta["dtype"]), shape))
        else:
            specs.append(sympy.sympify(meta["symint"]) if "symint" in meta else None)
    return specs


def _sym_expr(value: Any) -> Any:
    if isinstance(value, torch.SymInt):
        return value.node.expr
    return value


def _shape(fake: Any) -> tuple[Any, ...] | None:
    """A placeholder's shape (ints and sympy expressions) from a fake tensor or a TensorSpec."""
    if isinstance(fake, torch.Tensor):
        return tuple(_sym_expr(s) for s in fake.shape)
    if isinstance(fake, TensorSpec):
        return fake.shape
    return None


class Binder:
    """Binds user inputs (and a module's parameters/buffers) to a graph's placeholders.

    ``fakes`` are the placeholders' fake values (symbolic shapes) as captured; they define the
    symbols of symbolic sizes and let :meth:`bind` check the inputs' ranks and static sizes.
    """

    def __init__(self, slots: Sequence[Slot], fakes: Sequence[Any], module: torch.nn.Module | None) -> None:
        self.slots = list(slots)
        self.module = module
        self._shapes: dict[int, tuple[Any, ...]] = {}
        self._symbols: dict[sympy.Symbol, tuple[int, int]] = {}
        for slot, fake in zip(self.slots, fakes):
            shape = _shape(fake)
            if slot.kind == "input" and shape is not None:
                self._shapes.setdefault(slot.index, shape)
                for dim, s in enumerate(shape):
                    if isinstance(s, sympy.Symbol):
                        self._symbols.setdefault(s, (slot.index, dim))
        self._int_symbols: dict[sympy.Symbol, int] = {}
        for slot, fake in zip(self.slots, fakes):
            if slot.kind == "input" and isinstance(_sym_expr(fake), sympy.Symbol):
                self._int_symbols[_sym_expr(fake)] = slot.index

    @property
    def symbolic(self) -> bool:
        """Whether any size is symbolic."""
        return bool(self._symbols or self._int_symbols)

    def input_shapes(self) -> dict[int, tuple[Any, ...]]:
        """Flat input index -> shape as captured (ints and sympy symbols)."""
        return dict(self._shapes)

    def _env(self, flat: Sequence[Any]) -> dict[sympy.Symbol, int]:
        env: dict[sympy.Symbol, int] = {}
        for index, shape in self._shapes.items():
            value = flat[index]
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"input{index} must be a tensor (captured with shape {list(shape)}), got {type(value).__name__}")
            if value.dim() != len(shape):
                raise ValueError(f"input{index} has shape {list(value.shape)} but the program was captured for rank "
                                 f"{len(shape)} ({list(shape)}); capture again for this rank")
            for dim, (want, got) in enumerate(zip(shape, value.shape)):
                if isinstance(want, sympy.Symbol):
                    if env.setdefault(want, got) != got:
                        raise ValueError(f"input{index} dim {dim} is {got} but symbol {want} is {env[want]} from another input")
                elif isinstance(want, int) and want != got:
                    hint = "" if self.symbolic else "; capture with dynamic=True for other sizes"
                    raise ValueError(f"input{index} has shape {list(value.shape)} but the program was captured for "
                                     f"{list(shape)} (dim {dim} is static){hint}")
        for sym, index in self._int_symbols.items():
            env.setdefault(sym, int(flat[index]))
        return env

    def bind(self, flat: Sequence[Any]) -> list[Any]:
        """Placeholder values for flat user inputs ``flat``."""
        env = self._env(flat)
        params = dict(self.module.named_parameters(remove_duplicate=False)) if self.module is not None else {}
        buffers = dict(self.module.named_buffers(remove_duplicate=False)) if self.module is not None else {}
        args: list[Any] = []
        for slot in self.slots:
            if slot.kind == "input":
                if slot.index >= len(flat):
                    raise ValueError(f"the program takes at least {slot.index + 1} flattened inputs, got {len(flat)}")
                args.append(flat[slot.index])
            elif slot.kind in ("parameter", "buffer"):
                named = params if slot.kind == "parameter" else buffers
                if slot.name not in named:
                    raise ValueError(f"the program reads {slot} of its module, but "
                                     + ("no module was given: pass module= to from_json()" if self.module is None
                                        else f"the module has no {slot.kind} {slot.name!r}"))
                args.append(named[slot.name])
            elif slot.kind == "constant":
                args.append(slot.value)
            else:
                expr = sympy.sympify(slot.value)
                missing = expr.free_symbols - set(env)
                if missing:
                    raise ValueError(f"cannot evaluate symbolic size {expr}: symbols {sorted(map(str, missing))} "
                                     f"are not sizes of any input")
                args.append(int(expr.xreplace(env)))
        return args


# ---- serialization: FX graphs as JSON-compatible data ---------------------------------------------

def encode_fx_value(value: Any, where: str) -> Any:
    """The JSON form of an FX argument or attribute value (``where`` names it in errors)."""
    if isinstance(value, fx.Node):
        return {"node": value.name}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (list, tuple)):
        items = [encode_fx_value(v, where) for v in value]
        return {"tuple": items} if isinstance(value, tuple) else {"list": items}
    if isinstance(value, dict):
        return {"dict": {str(k): encode_fx_value(v, where) for k, v in value.items()}}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, slice):
        return {"slice": [encode_fx_value(value.start, where), encode_fx_value(value.stop, where), encode_fx_value(value.step, where)]}
    if value is Ellipsis:
        return {"ellipsis": True}
    if isinstance(value, torch.Tensor):
        return {"tensor": {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                           "data": value.detach().cpu().reshape(-1).tolist()}}
    raise ValueError(f"cannot serialize {type(value).__name__} {value!r} in {where}; supported: nodes, Python "
                     f"scalars, lists/tuples/dicts, dtypes, devices, layouts, memory formats, slices, tensors")


def decode_fx_value(value: Any, nodes: dict[str, fx.Node]) -> Any:
    """The value of an :func:`encode_fx_value` form, its nodes looked up in ``nodes``."""
    if isinstance(value, dict):
        (tag, payload), = value.items()
        if tag == "node":
            return nodes[payload]
        if tag in ("list", "tuple"):
            items = [decode_fx_value(v, nodes) for v in payload]
            return tuple(items) if tag == "tuple" else items
        if tag == "dict":
            return {k: decode_fx_value(v, nodes) for k, v in payload.items()}
        if tag == "float":
            return float(payload)
        if tag in ("dtype", "layout", "memory_format"):
            return getattr(torch, payload)
        if tag == "device":
            return torch.device(payload)
        if tag == "slice":
            return slice(*(decode_fx_value(v, nodes) for v in payload))
        if tag == "ellipsis":
            return Ellipsis
        if tag == "tensor":
            return torch.tensor(payload["data"], dtype=getattr(torch, payload["dtype"])).reshape(payload["shape"])
        raise ValueError(f"unknown serialized value tag {tag!r}")
    return value


def _meta_json(node: fx.Node) -> dict[str, Any]:
    if "serialized" in node.meta:  # read back by graph_from_json: written again as read
        return dict(node.meta["serialized"])
    val = node.meta.get("val", node.meta.get("example_value"))
    if isinstance(val, torch.Tensor):
        return {"dtype": str(val.dtype).removeprefix("torch."), "shape": [str(s) if isinstance(s, torch.SymInt) else s
                                                                          for s in val.shape]}
    if isinstance(val, torch.SymInt):
        return {"symint": str(val)}
    return {}


def graph_to_json(gm: fx.GraphModule) -> dict[str, Any]:
    """An FX graph as JSON-compatible data: ``{"nodes": [...], "attrs": {...}}``.

    Each node is ``{"name", "op", "target", "args", "kwargs", "meta"}``: ``target`` is the
    operator key (``"aten.add.Tensor"``, ``"torch.nn.functional.linear"``, ``"operator.getitem"``)
    for ``call_function``, the method name for ``call_method``; ``meta`` has ``dtype`` and
    ``shape`` (symbolic sizes as strings). Tensors the graph reads with ``get_attr`` are stored
    in ``attrs``. :func:`graph_from_json` is the inverse.

    >>> import torch, json
    >>> gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) + 1)
    >>> back = graph_from_json(json.loads(json.dumps(graph_to_json(gm))))
    >>> run_graph(back, [torch.tensor([-1.0, 2.0])])
    [tensor([1., 3.])]
    """
    from .fx_view import op_key

    nodes = []
    for n in gm.graph.nodes:
        where = f"node %{n.name}"
        target = op_key(n.target) if n.op == "call_function" else str(n.target)
        nodes.append({"name": n.name, "op": n.op, "target": target, "args": encode_fx_value(tuple(n.args), where)["tuple"],
                      "kwargs": encode_fx_value(dict(n.kwargs), where)["dict"], "meta": _meta_json(n)})
    attrs = {n.target: encode_fx_value(_get_attr(gm, n.target), f"attribute {n.target}")
             for n in gm.graph.nodes if n.op == "get_attr"}
    return {"format": "torchvendor.fx/1", "nodes": nodes, "attrs": attrs}


def _get_attr(gm: fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _resolve_target(key: str) -> Any:
    from .fx_view import resolve_op

    try:
        return resolve_op(key)
    except (ValueError, AttributeError):
        pass
    module, _, name = key.rpartition(".")
    try:
        obj: Any = importlib.import_module(module)
        return getattr(obj, name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot resolve serialized call target {key!r}") from e


def graph_from_json(data: dict[str, Any]) -> fx.GraphModule:
    """Rebuild an ``fx.GraphModule`` from :func:`graph_to_json` data (meta keeps dtype/shape only)."""
    if data.get("format") != "torchvendor.fx/1":
        raise ValueError(f"not a torchvendor FX graph (format {data.get('format')!r}, expected 'torchvendor.fx/1')")
    root = torch.nn.Module()
    for target, value in data.get("attrs", {}).items():
        parent = root
        *path, last = target.split(".")
        for part in path:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.register_buffer(last, decode_fx_value(value, {}))
    graph = fx.Graph()
    nodes: dict[str, fx.Node] = {}
    for rec in data["nodes"]:
        op, target = rec["op"], rec["target"]
        if op == "call_function":
            target = _resolve_target(target)
        args = tuple(decode_fx_value({"list": rec["args"]}, nodes))
        kwargs = decode_fx_value({"dict": rec["kwargs"]}, nodes)
        if op == "output":
            node = graph.output(args[0])
        else:
            node = graph.create_node(op, target, args, kwargs, name=rec["name"])
        node.meta["serialized"] = rec.get("meta", {})
        nodes[rec["name"]] = node
    return fx.GraphModule(root, graph)
