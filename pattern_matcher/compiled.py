"""Patterns compiled ahead of time into specialised Python functions.

The interpreter in :mod:`.pattern` walks a pattern with continuations: one closure and one
``env`` dict update per pattern node and binding, at every candidate anchor. Here each pattern is
translated once (per set of commutative keys) into the source of one function that does the same
search with local variables: operator keys are compared with constants, wildcard bindings are
locals, and every choice point (the two operand orders of a commutative node, the branches of an
alternative) is a ``for`` loop, so backtracking is ``continue`` and the search order -- hence the
first match found at an anchor -- is exactly the interpreter's. Which names are already bound is
known statically on each path, so a repeated name becomes one identity test.

Rules that differ only in constants (an attribute value, a dtype) share one code object; where
the search fails before testing any constant, the matcher skips the other rules of that group at
this anchor, so a family of 20 norm variants costs one structural test per node (the prefix
sharing of MLIR's PDL automaton, for the common case of identical structure).

Patterns with a variadic (``Star``) and multi-output patterns stay on the interpreter, as does
any pattern whose code would nest deeper than Python allows; :func:`compile_pattern` returns
``None`` for them.

Example::

    >>> from torchvendor.ir.graph_view import DictGraph
    >>> from torchvendor.pattern_matcher import P, MatchContext
    >>> g = DictGraph(); x, y = g.add_input("x"), g.add_input("y")
    >>> r = g.add_node("relu", [g.add_node("add", [y, x])])
    >>> ctx = MatchContext(g, {"add"}); _ = ctx.index_positions()
    >>> run = compile_pattern(P("relu", P("add", "a", "b")), ctx.commutative).bind(ctx, lambda n, b, nodes, in_order: print(b) or False)
    >>> run(r)
    {'a': %y, 'b': %x}
    {'a': %x, 'b': %y}
    False
"""
from __future__ import annotations

from typing import Any, Callable, Hashable

from .context import MatchContext
from .pattern import Alt, Op, Pattern, Variadic, Wildcard

__all__ = ["CompiledPattern", "compile_pattern"]

#: emit(anchor, bindings, op_nodes, in_order) -> bool: True stops the search at this anchor (as in
#: Pattern.match); ``in_order``: op_nodes are distinct and in topological order
Emit = Callable[[Hashable, dict, tuple, bool], bool]
#: Python refuses more than 20 statically nested blocks; stay clear of it
_MAX_DEPTH = 18
#: above this many lines (alternatives duplicate the code after them) the interpreter is used
_MAX_LINES = 4000


class CompiledPattern:
    """The generated source of one pattern and the factory that binds it to a pass."""

    __slots__ = ("source", "_factory", "code")

    def __init__(self, source: str, factory: Callable[..., Callable[[Hashable], bool | None]], code: Any) -> None:
        #: patterns with the same code object differ only in constants (attribute values,
        #: predicates): where one fails before testing any constant, all of them fail
        self.source, self._factory, self.code = source, factory, code

    def bind(self, ctx: MatchContext, emit: Emit, fast: Emit | None = None) -> Callable[[Hashable], bool | None]:
        """``run(anchor)`` over ``ctx``, reporting each structural
        match to ``emit(anchor, bindings, op_nodes)`` in the interpreter's order. It returns True
        when ``emit`` accepted a match, False when not, and ``None`` when the search failed
        before testing any constant of the pattern (nor emitting): then every pattern sharing
        this code object fails at this anchor too.

        With ``fast``, a match that passes the validity rules of :mod:`.validity` (containment,
        no capture inside the match; a single-output match has no cycle to check) goes to
        ``fast`` instead, which may skip those tests."""
        return self._factory(ctx, emit, fast)


def compile_pattern(pattern: Pattern, commutative: frozenset[str]) -> CompiledPattern | None:
    """The compiled form of ``pattern`` for this commutative set (cached on the pattern), or
    ``None`` when it stays interpreted (variadics, too deep, too large)."""
    cache = pattern.__dict__.setdefault("_codegen", {})
    if commutative in cache:
        return cache[commutative]
    comp = None
    if not any(isinstance(a, Variadic) for p in pattern.walk() if isinstance(p, Op) for a in p.args):
        try:
            comp = _Gen(commutative).build(pattern)
        except _TooBig:
            comp = None
    cache[commutative] = comp
    return comp


class _TooBig(Exception):
    pass


_MISSING = object()
#: operator keys of non-operation nodes in views that declare ``kind_follows_op`` (FX's opcodes)
NON_OP_KEYS = frozenset({"placeholder", "get_attr", "output"})
#: generated source -> code object
_CODE: dict[str, Any] = {}


class _Gen:
    """Code generator: a depth-first walk over a task list (the continuation, made explicit)."""

    def __init__(self, commutative: frozenset[str]) -> None:
        self.commutative = commutative
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.count = 0
        self.parent: dict[str, str] = {}  # argument variable -> variable of its op

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value: Any) -> str:
        name = f"K{len(self.consts)}"
        self.consts[name] = value
        return name

    def put(self, depth: int, line: str) -> None:
        if depth > _MAX_DEPTH or len(self.lines) > _MAX_LINES:
            raise _TooBig
        self.lines.append("    " * depth + line)

    def build(self, pattern: Pattern) -> CompiledPattern:
        self.put(2, "for _ in ONCE:")
        self.tasks([("pat", pattern, "n0", False)], {}, [], [], 3)
        body = "\n".join(self.lines)
        source = ("def factory(ctx, emit, fast):\n"
                  "    ops, kinds_get, kind, inputs_get, attrs = ctx._ops, ctx._kinds.get, ctx.kind, ctx._inputs.get, ctx.attrs\n"
                  "    inputs_cache, view_inputs = ctx._inputs, ctx.view.inputs\n"
                  "    kinds_set, view_kind = ctx._kinds.setdefault, ctx.view.kind\n"
                  "    users_get, users_set, view_users = ctx._users.get, ctx._users.setdefault, ctx.view.users\n"
                  "    kind_follows_op = getattr(ctx.view, 'kind_follows_op', False)\n"
                  "    def run(n0):\n"
                  "        reached = None\n"
                  f"{body}\n"
                  "        return reached\n"
                  "    return run\n")
        scope: dict[str, Any] = {"ONCE": (0,), "MISSING": _MISSING, "COMM": self.commutative, **self.consts}
        code = _CODE.get(source)
        if code is None:  # rules that differ only in constants (keys excepted) share the code object
            try:
                code = compile(source, f"<pattern {pattern!r:.60}>", "exec")
            except (SyntaxError, RecursionError, MemoryError):  # nesting or size limits of CPython
                raise _TooBig from None
            if len(_CODE) < 4096:
                _CODE[source] = code
        exec(code, scope)
        return CompiledPattern(source, scope["factory"], code)

    # -- the walk ------------------------------------------------------------------------------------
    def tasks(self, todo: list[tuple], bound: dict[Hashable, str], names: list[tuple[str, str]],
              opvars: list[str], depth: int) -> None:
        """Code for matching ``todo`` in order, then emitting. ``bound``: slot -> variable on this
        path; ``names``: (name, variable) in binding order; ``opvars``: op nodes in binding order."""
        for at, task in enumerate(todo):  # (the loop sees checks appended to todo on the way)
            rest = todo[at + 1:]
            if task[0] == "check":
                self.put(depth, "reached = False")
                self.put(depth, task[1])
                continue
            if task[0] == "alpha":  # add(x, y, alpha=2) is not symmetric: asked once the operands matched
                self.put(depth, f"if {task[2]} and attrs({task[1]}).get('alpha', 1) not in (1, None): continue")
                continue
            _, p, var, known = task
            if isinstance(p, Alt):
                for branch in p.branches:
                    self.put(depth, "for _ in ONCE:")
                    self.tasks([("pat", branch, var, False)] + rest, dict(bound), list(names), list(opvars), depth + 1)
                return
            if isinstance(p, Wildcard):
                todo.extend(self.wildcard(p, var, bound, names, depth))
                continue
            slot = p.name if p.name is not None else p
            if slot in bound:
                self.put(depth, f"if {var} is not {bound[slot]}: continue")
                continue
            self.op(p, var, known, rest, bound, names, opvars, depth)
            return
        self.emit(names, opvars, depth)

    def emit(self, names: list[tuple[str, str]], opvars: list[str], depth: int) -> None:
        """Report the match: to ``fast`` when it passes the validity rules (tested here), else to
        ``emit`` (see :meth:`CompiledPattern.bind`)."""
        ops = list(dict.fromkeys(opvars))
        # a chain (each op the argument of the one before) is in topological order backwards:
        # the emit is told so (True) and does not sort
        chain = all(self.parent.get(v) == u for u, v in zip(opvars, opvars[1:]))
        order = ops[::-1] if chain else opvars
        args = f"n0, {{{', '.join(f'{n!r}: {v}' for n, v in names)}}}, ({''.join(v + ', ' for v in order)}), {chain}"
        tests = [f"_in.issuperset(users_get({v}) or users_set({v}, view_users({v})))" for v in ops[1:]]
        tests += [f"{v} not in _in" for n, v in names if v not in ops]  # a capture inside the match
        self.put(depth, "reached = False")
        self.put(depth, f"_in = {{{', '.join(ops)}}}")
        self.put(depth, f"if fast is not None and {' and '.join(tests) or 'True'}:")
        self.put(depth + 1, f"if fast({args}): return True")
        self.put(depth, f"elif emit({args}):")
        self.put(depth + 1, "return True")

    def wildcard(self, p: Wildcard, var: str, bound: dict[Hashable, str], names: list[tuple[str, str]],
                 depth: int) -> list[tuple[str, str]]:
        """Binds or compares the name now; returns the constraint test, deferred (see :meth:`op`)."""
        if p.name is not None:
            if p.name in bound:
                self.put(depth, f"if {var} is not {bound[p.name]}: continue")
            else:
                bound[p.name] = var
                names.append((p.name, var))
        return [] if p.plain else [("check", f"if not {self.const(p)}.accepts(ctx, {var}): continue")]

    @staticmethod
    def keyset(keys: frozenset[str]) -> str:
        """A set display: inside ``in`` CPython makes it a constant, and it stays in the source."""
        return "{" + ", ".join(map(repr, sorted(keys))) + "}"

    def key_test(self, p: Op, expr: str) -> str:
        """A condition that holds when the key ``expr`` is *not* accepted by ``p``."""
        if p.keys is None:
            return f"(reached := False) or not {self.const(p.pred)}({expr})"
        if len(p.keys) == 1:
            return f"{expr} != {next(iter(p.keys))!r}"
        return f"{expr} not in {self.keyset(p.keys)}"

    def quick(self, p: Op, seq: str, swapped: bool = False) -> str:
        """The interpreter's ``_quick_ok`` on ``seq`` (with its first two items swapped), inlined
        (``True`` when there is nothing to test)."""
        at = {0: 1, 1: 0} if swapped else {}
        tests = [f"ops[{seq}[{at.get(i, i)}]] {'== ' + repr(next(iter(k))) if len(k) == 1 else 'in ' + self.keyset(k)}"
                 for i, k in p._quick]
        return " and ".join(tests) or "True"

    def swap_mode(self, p: Op) -> str:
        """``never``, ``always`` (when the two operands differ) or ``runtime`` (ask the key)."""
        if len(p.args) < 2 or p.commutative is False:
            return "never"
        if p.commutative or (p.keys is not None and p.keys <= self.commutative):
            return "always"
        if p.keys is not None and p.keys.isdisjoint(self.commutative):
            return "never"
        return "runtime"

    def op(self, p: Op, var: str, known: bool, rest: list[tuple], bound: dict[Hashable, str],
           names: list[tuple[str, str]], opvars: list[str], depth: int) -> None:
        """Code matching ``p`` at ``var``. ``known``: the parent's quick test already checked the key.

        The interpreter's tests, with two reorderings that change no result (every test on a
        path must pass; the paths and their order are the interpreter's): the kind is asked after
        the inputs' keys, which reject most nodes at no adapter call; and constraint tests
        (attributes, dtype, shape, ``where``, constrained wildcards) run after the whole structure
        matched, just before the emit, so that rules differing only in them fail together."""
        put = self.put
        if not known:
            put(depth, f"if {self.key_test(p, f'ops[{var}]')}: continue")
        iv, n = self.fresh("i"), len(p.args)
        kind_test = self.kind_test(var, p)
        checks = self.constraints(p.cons, var) if p.cons is not None else []
        put(depth, f"{iv} = inputs_get({var})")
        put(depth, f"if {iv} is None: {iv} = inputs_cache[{var}] = view_inputs({var})")
        put(depth, f"if len({iv}) != {n}: continue")
        bound[p.name if p.name is not None else p] = var
        if p.name is not None:
            names.append((p.name, var))
        opvars.append(var)
        mode = self.swap_mode(p)
        args = [self.fresh("a") for _ in range(n)]
        self.parent.update(dict.fromkeys(args, var))
        quick = {i for i, _ in p._quick}
        todo = [("pat", a, v, i in quick) for i, (a, v) in enumerate(zip(p.args, args))]
        if mode == "never":
            put(depth, f"if not ({self.quick(p, iv)}): continue")
            put(depth, kind_test)
            put(depth, f"{', '.join(args)}, = {iv}")
            self.tasks(todo + rest + checks, bound, names, opvars, depth)
            return
        st, sw, seq, flag = self.fresh("t"), self.fresh("s"), self.fresh("q"), self.fresh("f")
        cond = f"{iv}[0] is not {iv}[1]"
        if mode == "runtime":
            cond = f"ops[{var}] in COMM and " + cond
        swapped = f"({iv}[1], {iv}[0], *{iv}[2:])"
        put(depth, f"{st} = {self.quick(p, iv)}")
        put(depth, f"{sw} = {cond} and {self.quick(p, iv, swapped=True)}")  # no tuple built to say no
        put(depth, f"if not ({st} or {sw}): continue")
        put(depth, kind_test)
        put(depth, f"for {seq}, {flag} in ((({iv}, False),) if {st} else ()) + "
                   f"((({swapped}, True),) if {sw} else ()):")
        put(depth + 1, f"{', '.join(args)}, = {seq}")
        alpha = [("alpha", var, flag)] if p.commutative is None else []
        self.tasks(todo + alpha + rest + checks, bound, names, opvars, depth + 1)

    def constraints(self, cons: Any, var: str) -> list[tuple[str, str]]:
        """``cons.ok(ctx, var)`` as check tasks, attribute tests inlined (same tests, same order)."""
        if cons.dtype is not None or cons.shape is not None or not cons.attrs:
            return [("check", f"if not {self.const(cons)}.ok(ctx, {var}): continue")]
        av = self.fresh("x")
        lines = [f"{av} = attrs({var})"]
        for key, want in cons.attrs.items():
            if callable(want):
                lines.append(f"if not {self.const(want)}({av}.get({key!r})): continue")
            else:
                lines.append(f"if {av}.get({key!r}, MISSING) != {self.const(want)}: continue")
        if cons.where is not None:
            lines.append(f"if not {self.const(cons.where)}(ctx.view, {var}): continue")
        return [("check", line) for line in lines]

    def kind_test(self, var: str, p: Op | None = None) -> str:
        """Fails unless the node is an operation (kinds are non-empty strings, cached by the
        context). When the view declares ``kind_follows_op`` (FX: only the keys ``placeholder``,
        ``get_attr`` and ``output`` name non-operations) and every key of ``p`` names an
        operation, the key test already passed says it: no question is asked."""
        test = f"(kinds_get({var}) or kinds_set({var}, view_kind({var}))) != 'op'"
        if p is not None and p.keys is not None and p.keys.isdisjoint(NON_OP_KEYS):
            return f"if not kind_follows_op and {test}: continue"
        return f"if {test}: continue"
