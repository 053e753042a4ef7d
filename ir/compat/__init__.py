"""The one place torchvendor touches torch's private APIs, one module per torch subsystem.

A torch release that moves something breaks one module here, and its test
(``tests/test_compat_<module>.py``) names what moved. Supported releases: 2.11 to 2.15.

==================  ==========================================================================
``version``         the running release (:data:`TORCH_VERSION`), the supported ones (:data:`SUPPORTED_RELEASES`)
``dispatch``        operator objects, dispatch keys, autocast state, dispatch modes
``fx``              FX internals, pytree, ``make_fx``
``fake_tensor``     FakeTensors and their modes
``dynamo``          Dynamo's caches, guards, backend registry, counters, tracing context
``aot_autograd``    AOTAutograd (``torch._functorch``): backend, partitioners, metadata
``decompositions``  decomposition tables and ``torch._refs`` mode
``inductor_api``    Inductor: the namespace the loop IR uses, scoped device registration
``privateuse1``     PrivateUse1 naming and ``torch._register_device_module``
``distributed``     ProcessGroup internals, gloo, functional collectives
``autograd``        the autograd engine
``testing``         ``torch.testing._internal``: OpInfo database, device-generic tests
``triton_api``      Triton and Inductor's Triton code generation: the Triton level's kernels
==================  ==========================================================================

Every public name of every module is re-exported here, so ``compat.X`` works for all of them.

Example::

    >>> from torchvendor.ir import compat
    >>> compat.TORCH_VERSION >= (2, 11)
    True
"""
from __future__ import annotations

from . import (aot_autograd, autograd, decompositions, dispatch, distributed, dynamo, fake_tensor, fx, inductor_api,
               privateuse1, testing, triton_api, version)
from .aot_autograd import *  # noqa: F401,F403
from .autograd import *  # noqa: F401,F403
from .decompositions import *  # noqa: F401,F403
from .dispatch import *  # noqa: F401,F403
from .distributed import *  # noqa: F401,F403
from .dynamo import *  # noqa: F401,F403
from .fake_tensor import *  # noqa: F401,F403
from .fx import *  # noqa: F401,F403
from .inductor_api import *  # noqa: F401,F403
from .privateuse1 import *  # noqa: F401,F403
from .testing import *  # noqa: F401,F403
from .triton_api import *  # noqa: F401,F403
from .version import *  # noqa: F401,F403

#: the subsystem modules, in the order of the table above
MODULES = (version, dispatch, fx, fake_tensor, dynamo, aot_autograd, decompositions, inductor_api, privateuse1,
           distributed, autograd, testing, triton_api)

__all__ = [name for module in MODULES for name in module.__all__]
