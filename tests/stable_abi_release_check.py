"""Release-independence check of a stable-ABI kernel library, run under any torch release.

    python tests/stable_abi_release_check.py [--runtime path/to/libacme_tv.so] path/to/libacme_kernels.so

Registers the simulated device (or the device of the given vendor runtime library, also built
once elsewhere: ``./dev.sh release-check`` passes the runtime template's) with the torchvendor
installed for *this* interpreter's torch (the device layer is rebuilt per release), loads the
given kernel library unchanged (built once, elsewhere, with TORCH_TARGET 2.11), compares each template operator with the CPU - through its
OpInfo samples when torch's OpInfo database imports here, else through fixed cases - and prints
one JSON line: the torch version and per-operator results.
"""
from __future__ import annotations

import json
import sys
import warnings

import torch


def fixed_cases(device: str) -> dict[str, str]:
    """Broadcasting, type promotion, strides: each operator vs the CPU (no OpInfo needed)."""
    cases = {
        "add": [lambda d: torch.randn(4, 3).to(d) + torch.randn(3).to(d),
                lambda d: torch.add(torch.arange(6).to(d), torch.randn(6).to(d), alpha=2)],
        "mul": [lambda d: torch.randn(4, 1).to(d) * torch.randn(1, 5).to(d),
                lambda d: torch.arange(6, dtype=torch.int32).to(d) * 2.5],
        "relu": [lambda d: torch.relu(torch.randn(4, 4).to(d).t())],
        "mm": [lambda d: torch.mm(torch.randn(3, 4).to(d), torch.randn(4, 2).to(d))],
        "sum": [lambda d: torch.randn(3, 4, 5).to(d).sum((0, 2), keepdim=True),
                lambda d: torch.arange(12).reshape(3, 4).to(d).sum()],
    }
    out = {}
    for name, fns in cases.items():
        ok = True
        for i, fn in enumerate(fns):
            torch.manual_seed(i)
            want = fn("cpu")
            torch.manual_seed(i)
            got = fn(device)
            ok = ok and got.dtype == want.dtype and torch.allclose(got.cpu().double(), want.double(), atol=1e-4)
        out[name] = "pass" if ok else "fail"
    return out


def opinfo_results(device: str) -> dict[str, str]:
    from torchvendor.sdk.conformance.opinfo import opinfo_ops, run_opinfo_op

    out = {}
    for op in opinfo_ops(torch.float32, ["add", "mul", "nn.functional.relu", "mm", "sum"]):
        r = run_opinfo_op(op, device, torch.float32)
        out[op.full_name] = f"{r.status} {r.passed}/{r.samples}"
    return out


def main(path: str, runtime: str | None = None) -> int:
    warnings.simplefilter("ignore")
    from torchvendor.sdk import load_kernel_library, register_device

    acme = register_device("acme", runtime=runtime)
    lib = load_kernel_library(path)
    try:
        results, how = opinfo_results("acme"), "opinfo"
    except ImportError as e:  # no OpInfo database on this install (e.g. expecttest missing)
        results, how = fixed_cases("acme"), f"fixed cases ({e})"
    native = acme.native_counts()
    from torchvendor import _C

    info = _C.runtime_info()
    print(json.dumps({"torch": torch.__version__,
                      "runtime": f"{info['name']} ABI {info['abi_major']}.{info['abi_minor']} ({info['path']})",
                      "library": path, "operators": lib.operators,
                      "check": how, "results": results,
                      "native_ops": sorted(native), "fallback_ops": sorted(acme.fallback_counts())}))
    return 0 if all(v.startswith("pass") for v in results.values()) else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "--runtime":
        sys.exit(main(args[2], runtime=args[1]))
    if len(args) != 1:
        sys.exit("usage: stable_abi_release_check.py [--runtime LIBRARY] KERNEL_LIBRARY")
    sys.exit(main(args[0]))
