"""The torchvendor runtime table over the CUDA driver API (``tv_cuda_runtime.c``), built on demand.

The C library is what a GPU vendor ships: ``torchvendor/runtime.h`` implemented with the CUDA
driver. It needs only ``cuda.h`` to build (the driver is opened with ``dlopen`` at load time),
so it is compiled here with the system C compiler the first time it is asked for and cached
on disk by the hash of its source, the ABI headers (``runtime.h``, ``runtime_checks.h``),
``cuda.h`` and the compiler::

    >>> from torchvendor.reference_backends.cuda.runtime import build_runtime, cuda_include_dir
    >>> path = build_runtime() if cuda_include_dir() else None   # needs cuda.h, not a GPU
    >>> path is None or path.endswith(".so")
    True

Then ``torchvendor.sdk.register_device("gpu", runtime=path)`` makes the GPU a PrivateUse1
device. Without an NVIDIA driver, registration fails with a :class:`RuntimeLoadError` whose
message says so.

Its collectives run on NCCL, which the library opens with ``dlopen`` on first use:
``$TORCHVENDOR_NCCL``, which ``build_runtime()`` points at the NCCL torch ships
(:func:`nccl_library`) unless it is set already, else any ``libnccl.so.2`` on the library path.
Without one, joining a communicator fails with a message saying how to get it.
"""
from __future__ import annotations

import os
import shutil
import sys
import subprocess
from pathlib import Path

from torchvendor.sdk import ArtifactCache, include_dir

__all__ = ["build_runtime", "cuda_include_dir", "nccl_library", "runtime_include_dir", "SOURCE",
           "RuntimeBuildError"]

#: The C source of the runtime library.
SOURCE = Path(__file__).resolve().with_name("tv_cuda_runtime.c")


class RuntimeBuildError(RuntimeError):
    """The runtime library could not be compiled; the message names the missing tool or header."""


def cuda_include_dir() -> str | None:
    """The folder holding ``cuda.h`` (``$CUDA_HOME``, ``$CUDA_PATH``, ``/usr/local/cuda``, or
    the folder of ``nvcc``), or None when no CUDA toolkit headers are installed.

    >>> d = cuda_include_dir()
    >>> d is None or os.path.exists(os.path.join(d, "cuda.h"))
    True
    """
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    for root in roots:
        if root and (Path(root) / "include" / "cuda.h").exists():
            return str(Path(root) / "include")
    return None


def nccl_library() -> str | None:
    """The NCCL that torch's CUDA wheels ship (``nvidia/nccl/lib/libnccl.so.2`` in site-packages),
    or None when it is not installed (a CPU build of torch).

    >>> p = nccl_library()
    >>> p is None or p.endswith("libnccl.so.2")
    True
    """
    for entry in sys.path:
        path = Path(entry or ".", "nvidia", "nccl", "lib", "libnccl.so.2")
        if path.is_file():
            return str(path.resolve())
    return None


def runtime_include_dir() -> str:
    """The folder holding ``torchvendor/runtime.h`` (the ABI header the library implements).

    >>> os.path.exists(os.path.join(runtime_include_dir(), "torchvendor", "runtime.h"))
    True
    """
    override = os.environ.get("TORCHVENDOR_INCLUDE")
    if override and (Path(override) / "torchvendor" / "runtime.h").exists():
        return override
    try:
        return include_dir()  # the headers installed with the package (or the checkout's, editable)
    except Exception as e:  # noqa: BLE001  the SDK's own message says what is missing
        raise RuntimeBuildError(f"cannot find torchvendor/runtime.h ({e}): set TORCHVENDOR_INCLUDE to the "
                                f"folder that holds torchvendor/runtime.h (csrc/include in a source checkout)") from e


def build_runtime(cache: ArtifactCache | None = None, cc: str | None = None) -> str:
    """Compile ``tv_cuda_runtime.c`` into a shared library (cached) and return its path.

    ``cc`` is the C compiler (default ``$CC`` or ``cc``). Needs ``cuda.h``, not a GPU or a driver.
    Also sets ``$TORCHVENDOR_NCCL`` to :func:`nccl_library` when it is unset, so the library's
    collectives (and those of processes started from here) load the NCCL torch ships.

    >>> build_runtime() == build_runtime() if cuda_include_dir() else True   # the second is a cache hit
    True
    """
    nccl = nccl_library()
    if nccl and not os.environ.get("TORCHVENDOR_NCCL"):
        os.environ["TORCHVENDOR_NCCL"] = nccl
    cuda_inc = cuda_include_dir()
    if cuda_inc is None:
        raise RuntimeBuildError("cannot build the CUDA runtime library: cuda.h not found; install the CUDA "
                                "toolkit headers or set CUDA_HOME")
    cc = cc or os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        raise RuntimeBuildError(f"cannot build the CUDA runtime library: no C compiler {cc!r} (set CC)")
    tv_inc = runtime_include_dir()
    headers = [Path(tv_inc, "torchvendor", h).read_bytes() for h in ("runtime.h", "runtime_checks.h")]
    key = b"\0".join([SOURCE.read_bytes(), *headers, Path(cuda_inc, "cuda.h").read_bytes(), cc.encode()])
    cache = cache or ArtifactCache(namespace="torchvendor_cuda_runtime/1")

    def build(out: str) -> None:
        cmd = [cc, "-std=gnu11", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-I", tv_inc, "-I",
               cuda_inc, str(SOURCE), "-o", out, "-ldl", "-lpthread"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeBuildError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")

    return cache.get_or_build(key, build, suffix=".so")
