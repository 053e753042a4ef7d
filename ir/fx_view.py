"""GraphView adapter for torch.fx graphs, at torch level (Dynamo) and ATen level (AOTAutograd).

Operator keys:

- ``OpOverload``: ``"aten.add.Tensor"``; ``OpOverloadPacket``: ``"aten.add"``;
- other callables: their qualified name, e.g. ``"torch.relu"``, ``"operator.getitem"``;
- ``call_method``: ``"method.<name>"``; ``call_module``: ``"module.<ClassName>"``;
- ``placeholder``, ``get_attr``, ``output`` keep their FX opcode.

Example::

    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: torch.relu(x + 1))
    >>> view = FxView(gm.graph)
    >>> [view.op(n) for n in view.nodes()]
    ['placeholder', 'operator.add', 'torch.relu', 'output']
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Collection, Mapping, Sequence

import torch
import torch.fx as fx

from . import compat
from .graph_view import NodeKind

__all__ = ["FxView", "op_key", "resolve_op"]

_KINDS: dict[str, NodeKind] = {"placeholder": "input", "output": "output", "get_attr": "constant"}


# Where torch-level callables are looked up first, so keys name the public spelling.
_PUBLIC_NAMESPACES = (("operator", operator), ("torch", torch), ("torch.nn.functional", torch.nn.functional),
                      ("torch.special", torch.special), ("torch.linalg", torch.linalg))


def op_key(target: Any) -> str:
    """The operator key of an FX ``call_function`` target.

    >>> op_key(torch.ops.aten.add.Tensor), op_key(operator.getitem)
    ('aten.add.Tensor', 'operator.getitem')
    """
    if isinstance(target, compat.OpOverload):
        return target.name().replace("::", ".") if target._overloadname != "default" else \
            f"{target.namespace}.{target._schema.name.split('::')[-1]}.default"
    if isinstance(target, compat.OpOverloadPacket):
        return target._qualified_op_name.replace("::", ".")
    if isinstance(target, compat.HigherOrderOperator):
        return f"higher_order.{target.__name__}"
    name = getattr(target, "__name__", None)
    for prefix, namespace in _PUBLIC_NAMESPACES:
        if name and getattr(namespace, name, None) is target:
            return f"{prefix}.{name}"
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or name or repr(target)
    return f"{module}.{name}" if module else name


def resolve_op(key: str) -> Callable[..., Any]:
    """The callable for an operator key: the inverse of :func:`op_key` for call_function targets.

    >>> resolve_op("aten.relu.default") is torch.ops.aten.relu.default
    True
    """
    head, _, rest = key.partition(".")
    if head == "operator":
        return getattr(operator, rest)
    if head == "torch":
        obj: Any = torch
        for part in rest.split("."):
            obj = getattr(obj, part)
        return obj
    # torch.ops namespaces: aten, prims, and any vendor library registered with torch.library.
    parts = key.split(".")
    if len(parts) not in (2, 3) or not hasattr(torch.ops, parts[0]):
        raise ValueError(f"cannot resolve operator key {key!r}: expected 'namespace.op[.overload]' "
                         f"of a registered torch.ops library, 'operator.<fn>' or 'torch.<path>'")
    obj = getattr(getattr(torch.ops, parts[0]), parts[1])
    return getattr(obj, parts[2]) if len(parts) == 3 else obj


_Node = fx.Node
_FLAT_ARG_TYPES = frozenset({fx.Node, int, float, bool, str, type(None)})


def _flat_nodes(args: Any, kwargs: Mapping[str, Any]) -> list[fx.Node]:
    out: list[fx.Node] = []
    fx.node.map_arg((args, dict(kwargs)), out.append)
    return out


def _has_node(value: Any) -> bool:
    found = []
    fx.node.map_arg(value, found.append)
    return bool(found)


def _tensor_of(node: fx.Node) -> Any:
    """The example tensor (or ``TensorMetadata``) describing the node's value, else ``None``."""
    meta = node.meta
    val = meta.get("val", meta.get("example_value"))
    if val is not None:  # (isinstance against torch.Tensor runs its metaclass hook: skip it for None)
        if isinstance(val, (list, tuple)):
            val = val[0] if val and isinstance(val[0], torch.Tensor) else None
        if isinstance(val, torch.Tensor):
            return val
    tm = meta.get("tensor_meta")
    return tm if tm is not None and hasattr(tm, "dtype") else None


def _tensor_meta(node: fx.Node) -> dict[str, Any]:
    t = _tensor_of(node)
    return {} if t is None else {"dtype": str(t.dtype).removeprefix("torch."), "shape": tuple(t.shape)}


class FxView:
    """A :class:`~torchvendor.ir.graph_view.MutableGraphView` over an ``fx.Graph``.

    After rewriting, call ``gm.recompile()`` on the owning GraphModule.
    """

    #: a node's kind follows from its operator key: only ``placeholder``, ``get_attr`` and
    #: ``output`` name non-operations (compiled patterns skip the kind question for other keys)
    kind_follows_op = True

    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        self._owner = graph.owning_module
        self._keys: dict[int, tuple[Any, str]] = {}  # id(target) -> (target, op_key): graphs reuse few

    def nodes(self) -> list[fx.Node]:
        return list(self.graph.nodes)

    def inputs(self, node: fx.Node) -> Sequence[fx.Node]:
        # Fast path for the common flat argument list (matching calls this for every candidate).
        args = node.args
        if not node.kwargs:
            for a in args:
                if type(a) is not _Node:
                    break
            else:  # every argument a node (most ATen calls): the node's own tuple, nothing built
                return args
            if all(type(a) in _FLAT_ARG_TYPES for a in args):
                return [a for a in args if type(a) is _Node]
        return _flat_nodes(args, node.kwargs)

    def users(self, node: fx.Node) -> list[fx.Node]:
        return list(node.users)

    def op(self, node: fx.Node) -> str:
        if node.op == "call_function":
            # by id: OpOverload hashes in Python; the entry holds the target, so the id stays its own
            target = node.target
            hit = self._keys.get(id(target))
            if hit is not None and hit[0] is target:
                return hit[1]
            key = op_key(target)
            self._keys[id(target)] = (target, key)
            return key
        if node.op == "call_method":
            return f"method.{node.target}"
        if node.op == "call_module":
            mod = self._owner.get_submodule(node.target) if self._owner is not None else None
            return f"module.{type(mod).__name__}" if mod is not None else f"module.{node.target}"
        return node.op

    def kind(self, node: fx.Node) -> NodeKind:
        return _KINDS.get(node.op, "op")

    def attrs(self, node: fx.Node) -> dict[str, Any]:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        names = [a.name for a in schema.arguments] if schema is not None else []
        out: dict[str, Any] = {}
        for i, value in enumerate(node.args):
            if not _has_node(value):
                out[names[i] if i < len(names) else f"arg{i}"] = value
        for key, value in node.kwargs.items():
            if not _has_node(value):
                out[key] = value
        if node.op == "get_attr":
            out["target"] = node.target
        return out

    def meta(self, node: fx.Node) -> dict[str, Any]:
        out = _tensor_meta(node)
        if "stack_trace" in node.meta:
            out["stack_trace"] = node.meta["stack_trace"]
        return out

    def name(self, node: fx.Node) -> str:
        return node.name

    def nbytes(self, node: fx.Node) -> int | None:
        """Bytes of the node's tensor value (elements times element size), ``None`` if unknown
        (no tensor metadata, a symbolic size): read from the example tensor without building
        :meth:`meta`'s dict, for the partitioner's boundary pricing.

        >>> gm = torch.fx.symbolic_trace(lambda x: x + 1)
        >>> add = next(n for n in gm.graph.nodes if n.op == "call_function")
        >>> add.meta["val"] = torch.empty(2, 3, dtype=torch.float16)
        >>> FxView(gm.graph).nbytes(add), FxView(gm.graph).nbytes(next(iter(gm.graph.nodes)))
        (12, None)
        """
        t = _tensor_of(node)
        if t is None:
            return None
        total = t.dtype.itemsize
        for d in t.shape:
            if type(d) is not int:
                try:
                    d = int(d)  # a concrete SymInt; a symbolic one raises
                except Exception:  # noqa: BLE001
                    return None
            total *= d
        return total

    def nodes_with_ops(self, keys: Collection[str]) -> list[fx.Node] | None:
        """The nodes whose operator key is in ``keys``, in graph order, read from FX's own index
        of nodes by target (``Graph.find_nodes``) instead of a walk over every node; ``None`` for
        a key that no single target spells (``module.*``, ``torch.*`` callables, unresolvable
        keys): the caller then walks the graph.

        >>> gm = torch.fx.symbolic_trace(lambda x: (x + 1).relu() + 2)
        >>> [n.name for n in FxView(gm.graph).nodes_with_ops({"operator.add"})]
        ['add', 'add_1']
        """
        found: list[fx.Node] = []
        for key in keys:
            where = _lookup(key)
            if where is None:
                return None
            found += self.graph.find_nodes(op=where[0], target=where[1], sort=False)
        return sorted(found)  # Node.__lt__ is graph order; the index keeps creation order

    # -- rewriting -------------------------------------------------------------------------------
    def create(self, op: str | Callable[..., Any], inputs: Sequence[fx.Node],
               attrs: Mapping[str, Any] | None = None, *, before: fx.Node,
               meta: Mapping[str, Any] | None = None) -> fx.Node:
        """Insert ``op(inputs, **attrs)``; ``op`` is an operator key or a callable.

        For an ATen operator the inputs fill the schema's tensor arguments in order and
        ``attrs`` the others by name; for any other callable the inputs come first, and
        ``attrs`` named ``arg<i>`` are placed at position ``i``, the rest passed as keywords.
        """
        attrs = dict(attrs or {})
        if isinstance(op, str) and op.startswith("method."):
            target: Any = op.removeprefix("method.")
            kind = "call_method"
        else:
            if isinstance(op, str):
                target = _TARGETS.get(op)
                if target is None:
                    target = _TARGETS[op] = resolve_op(op)
            else:
                target = op
            kind = "call_function"
        schema = getattr(target, "_schema", None)
        if schema is not None:
            args, kwargs = _bind_schema(schema, list(inputs), attrs, op)
        else:
            args = list(inputs)
            for key in sorted((k for k in attrs if k.startswith("arg") and k[3:].isdigit()), key=lambda k: int(k[3:])):
                args.insert(int(key[3:]), attrs.pop(key))
            kwargs = attrs
        node = compat.fx_insert_node(self.graph, kind, target, tuple(args), kwargs, before)
        if meta:
            node.meta.update({k: v for k, v in meta.items() if k not in ("dtype", "shape")})
        return node

    def replace_uses(self, old: fx.Node, new: fx.Node) -> None:
        """Redirect ``old``'s users to ``new``; ``new`` inherits the metadata it lacks."""
        for key, value in old.meta.items():
            new.meta.setdefault(key, value)
        old.replace_all_uses_with(new)

    def erase(self, node: fx.Node) -> None:
        compat.fx_erase_node(self.graph, node)


#: operator key -> (FX opcode, target) for ``find_nodes``, or None when not indexable
_LOOKUPS: dict[str, tuple[str, Any] | None] = {}


def _lookup(key: str) -> tuple[str, Any] | None:
    """Where FX's target index files the nodes of ``key``. Only keys whose target is determined
    by the key qualify: torch.ops overloads and packets, ``operator.*`` and ``method.*``
    (another callable could share a ``torch.*`` key's name, and would then be missed)."""
    try:
        return _LOOKUPS[key]
    except KeyError:
        pass
    where: tuple[str, Any] | None = None
    if key.startswith("method."):
        where = ("call_method", key.removeprefix("method."))
    elif key in ("placeholder", "get_attr", "output"):
        where = (key, None)
    elif not key.startswith(("torch.", "module.", "higher_order.")):
        try:
            target = resolve_op(key)
        except (ValueError, AttributeError, RuntimeError):
            target = None
        if target is not None and op_key(target) == key:
            where = ("call_function", target)
    _LOOKUPS[key] = where
    return where


_TENSOR = ("Tensor", "Tensor?", "Optional[Tensor]")
_TENSOR_LIST = ("List[Tensor]", "Tensor[]", "List[Optional[Tensor]]", "Tensor?[]")
# per schema: (name, "tensor" | "tensors" | "other", kwarg_only, has_default)
_PLANS: dict[Any, tuple[tuple[str, str, bool, bool], ...]] = {}
_TARGETS: dict[str, Any] = {}  # operator key -> resolved callable


def _plan(schema: Any) -> tuple[tuple[str, str, bool, bool], ...]:
    plan = _PLANS.get(schema)
    if plan is None:
        plan = _PLANS[schema] = tuple(
            (a.name, "tensor" if str(a.type) in _TENSOR else "tensors" if str(a.type) in _TENSOR_LIST else "other",
             a.kwarg_only, a.has_default_value()) for a in schema.arguments)
    return plan


def _bind_schema(schema: Any, inputs: list[fx.Node], attrs: dict[str, Any], op: Any) -> tuple[list[Any], dict[str, Any]]:
    """Inputs fill the schema's tensor arguments in order, ``attrs`` the others by name."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for index, (name, kind, kwarg_only, has_default) in enumerate(_plan(schema)):
        if name in attrs:
            value = attrs.pop(name)
        elif kind == "tensor" and inputs:
            value = inputs.pop(0)
        elif kind == "tensors":
            value, inputs = inputs, []
        elif has_default:
            continue
        else:
            raise ValueError(f"cannot create {op}: no value for argument {name!r}")
        if kwarg_only:
            kwargs[name] = value
        else:
            if len(args) != index:
                raise ValueError(f"cannot create {op}: argument {name!r} given but an earlier positional "
                                 f"argument was left to its default; pass it in attrs")
            args.append(value)
    if inputs or attrs:
        raise ValueError(f"cannot create {op}: unused inputs {inputs} or attributes {sorted(attrs)}")
    return args, kwargs


