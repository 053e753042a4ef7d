"""The backend registry: :func:`register_backend` makes ``torch.compile(backend=name)`` find a
backend class, :func:`get_backend` gives the one backend object per class and option set.

A registrable class subclasses exactly one level class — :class:`TorchBackend`,
:class:`AtenBackend`, :class:`LoopBackend` or :class:`OnnxBackend` — which sets its ``level``;
anything else is refused with a :class:`BackendDefinitionError` that names them.

Example::

    >>> from torchvendor.sdk import AtenBackend, Backend
    >>> class Plain(Backend):
    ...     name = "doc_plain"
    ...     def compile(self, gm, example_inputs):
    ...         return gm
    >>> try:
    ...     register_backend(Plain)
    ... except BackendDefinitionError as e:
    ...     print(str(e).split(";")[0])
    Plain subclasses Backend directly
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch.fx as fx

from torchvendor.ir import compat

from .aten_level import AtenBackend
from .backend import Backend
from .levels import BackendDefinitionError, BackendError
from .loop_level import LoopBackend
from .onnx_level import OnnxBackend
from .torch_level import TorchBackend
from .triton_level import TritonBackend

__all__ = ["register_backend", "get_backend", "registered_backends", "LEVEL_CLASSES"]

#: the classes a vendor's backend subclasses, one per level
LEVEL_CLASSES: tuple[type[Backend], ...] = (TorchBackend, AtenBackend, LoopBackend, OnnxBackend, TritonBackend)

#: name -> (the newest class registered under it, its Dynamo compiler function)
_REGISTERED: dict[str, tuple[type[Backend], Callable[..., Any]]] = {}
#: (class, options) -> its one backend object
_INSTANCES: dict[tuple[type[Backend], tuple], Backend] = {}


def _validate(cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendDefinitionError(f"register_backend expects a subclass of torchvendor.sdk.Backend, got {cls!r}")
    names = ", ".join(c.__name__ for c in LEVEL_CLASSES)
    levels = [c for c in LEVEL_CLASSES if issubclass(cls, c)]
    if not levels:
        set_level = f" (it sets level = {cls.level!r}: subclass that level's class instead)" if cls.level else ""
        raise BackendDefinitionError(f"{cls.__name__} subclasses Backend directly; subclass the class of its IR level, "
                                     f"one of torchvendor.sdk.{names}{set_level}")
    if len(levels) > 1 or cls.level is not levels[0].level:
        raise BackendDefinitionError(f"{cls.__name__}.level is set by the one level class it subclasses "
                                     f"({names}); it subclasses {[c.__name__ for c in levels]} with "
                                     f"level={cls.level!r}")
    cls._check_definition()


def _options_key(options: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in options.items()))


def get_backend(backend: str | type[Backend], **options: Any) -> Backend:
    """The one backend object for this class (or registered name) and option set.

    Dynamo guards on the backend's identity, so one object per option set keeps
    ``torch.compile`` from recompiling when two models use the same backend and options.

    >>> import torch
    >>> class Eager(AtenBackend):
    ...     name = "doc_get_backend"
    ...     def compile(self, gm, example_inputs):
    ...         return gm
    >>> get_backend(Eager) is get_backend(Eager), get_backend(Eager, strict=True).strict
    (True, True)
    """
    if isinstance(backend, str):
        if backend not in _REGISTERED:
            raise BackendError(f"no torchvendor backend named {backend!r} is registered; registered: "
                               f"{sorted(_REGISTERED)} (import the vendor package or call register_backend)")
        backend = _REGISTERED[backend][0]
    _validate(backend)
    key = (backend, _options_key(options))
    if key not in _INSTANCES:
        _INSTANCES[key] = backend(**options)
    return _INSTANCES[key]


def register_backend(cls: type[Backend]) -> Callable[..., Any]:
    """Make ``torch.compile(model, backend=cls.name, options={...})`` use ``cls``; returns the
    Dynamo compiler function. Point a ``torch_dynamo_backends`` entry point at it (assign it to
    a module attribute) and ``torch.compile`` finds the backend without an import:

    .. code-block:: toml

        [project.entry-points.torch_dynamo_backends]
        acme = "acme_torch.backend:dynamo_backend"

    Registering the same class again returns the same function; another class under a name
    that is taken raises :class:`BackendDefinitionError`.

    >>> class Mine(AtenBackend):
    ...     name = "doc_register_backend"
    ...     def compile(self, gm, example_inputs):
    ...         return gm
    >>> fn = register_backend(Mine)
    >>> fn is register_backend(Mine), "doc_register_backend" in registered_backends()
    (True, True)
    """
    _validate(cls)
    if cls.name in _REGISTERED:
        owner, fn = _REGISTERED[cls.name]
        if owner is cls or (owner.__qualname__ == cls.__qualname__ and owner.__module__ == cls.__module__):
            _REGISTERED[cls.name] = (cls, fn)  # a reloaded module: the newest class wins
            return fn
        raise BackendDefinitionError(f"backend name {cls.name!r} is already registered by "
                                     f"{owner.__module__}.{owner.__qualname__}; choose another name")

    def dynamo_backend(gm: fx.GraphModule, example_inputs: list[Any], *, options: Mapping[str, Any] | None = None,
                       mode: str | None = None, **_: Any) -> Callable[..., Any]:
        return get_backend(_REGISTERED[cls.name][0], **dict(options or {}))(gm, example_inputs)

    dynamo_backend.__name__ = cls.name
    dynamo_backend.__qualname__ = f"{cls.__qualname__}.dynamo_backend"
    state = compat.dynamo_backend_state(cls.name)
    if state == "loaded" and compat.dynamo_registered_backend(cls.name) is not dynamo_backend:
        raise BackendDefinitionError(f"torch.compile already has a backend named {cls.name!r} that is not "
                                     f"{cls.__qualname__}; choose another name")
    _REGISTERED[cls.name] = (cls, dynamo_backend)
    if state is None:
        compat.dynamo_register_backend(dynamo_backend, cls.name)
    # state == "entry_point": Dynamo loads the entry point (this function) on first use.
    return dynamo_backend


def registered_backends() -> list[str]:
    """Names of the torchvendor backends registered in this process.

    >>> isinstance(registered_backends(), list)
    True
    """
    return sorted(_REGISTERED)
