"""Golden snapshot of the reference code generators (a refactor must not change their output).

In the manner of tinygrad's process replay: capture every IR-corpus program at loop level once
(``capture``, a JSON file), then write the source both reference backends generate for each of
its kernels (``write``: the CPU C++, the CUDA C with its launches, the CUDA C with the buffers
used elsewhere as the backend passes them, and each reduction+pointwise pair the CUDA backend
fuses). Run ``write`` before and after a change and ``diff -r`` the two folders::

    python tests/tools/codegen_snapshot.py capture /tmp/programs.json
    python tests/tools/codegen_snapshot.py write /tmp/programs.json /tmp/before
    ... change a code generator ...
    python tests/tools/codegen_snapshot.py write /tmp/programs.json /tmp/after
    diff -r /tmp/before /tmp/after
    python tests/tools/codegen_snapshot.py nvcc /tmp/after      # every .cu compiles (no GPU needed)

``nvcc`` compiles every CUDA file of a snapshot with ``nvcc -arch=sm_90 -cubin`` in a few
translation units (each module's prelude once, its ``__global__`` functions renamed apart).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from dataclasses import replace
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_PROGRAMS = os.path.join(HERE, "..", "data", "cuda_loop_programs.json")


def capture_corpus(path: str) -> None:
    """Every corpus program (inference; forward and backward of trainable cases) as JSON."""
    sys.path.insert(0, os.path.join(HERE, ".."))
    from ir_corpus import CORPUS
    from torchvendor.ir import capture

    out = {}
    for case in CORPUS:
        for training in (False, True) if case.trainable else (False,):
            cap = capture(case.make(), case.inputs(), level="loop", dynamic=case.dynamic, training=training)
            out.update({f"{case.name}.{part}": p.to_json() for part, p in cap.programs().items()})
    with open(path, "w") as f:
        json.dump(out, f)
    print(len(out), "programs")


def _elsewhere(lk: Any, parts: tuple[Any, ...]) -> frozenset[str]:
    """The kernel's buffers that other operations use (as the CUDA backend computes them)."""
    program, skip = lk.program, {p.kernel.name for p in parts}
    used = {n for op in program.ops if getattr(op, "name", None) not in skip for n in (*op.reads(), *op.writes())}
    used |= {getattr(o, "name", o) for o in program.outputs if o is not None}
    views = {b.name: b.view_of for b in program.buffers if b.view_of}
    for name in list(used):
        while name in views:
            name = views[name]
            used.add(name)
    return frozenset(used & {b.name for b in lk.buffers})


def _fused_pair(a: Any, b: Any, program: Any) -> Any:
    mine = {x.name for x in b.buffers}
    bufs = tuple(x for x in a.buffers if x.name not in mine)
    sizes = tuple(v for v in a.size_vars if v not in b.size_vars)
    return types.SimpleNamespace(kernel=replace(b.kernel, nests=a.kernel.nests + b.kernel.nests),
                                 buffers=(*b.buffers, *bufs), size_vars=(*b.size_vars, *sizes), program=program)


def write_snapshot(programs_path: str, out: str) -> None:
    """The generated source of every kernel of every program, one file each, under ``out``."""
    from torchvendor.ir.loop_ir import LoopProgram
    from torchvendor.reference_backends.cpu import codegen as cpu
    from torchvendor.reference_backends.cuda import codegen as cuda
    from torchvendor.sdk import loop_kernels

    os.makedirs(out, exist_ok=True)
    with open(programs_path) as f, open(GPU_PROGRAMS) as g:
        progs = {k: LoopProgram.from_json(v) for k, v in json.load(f).items()}
        progs.update({f"gpu_{k}": LoopProgram.from_json(v) for k, v in json.load(g).items()})

    def write(path: str, fn: Callable[[], Any]) -> None:
        try:
            value = fn()
            text = value if isinstance(value, str) else f"{value.source}\n// launches: {value.launches!r}\n"
        except Exception as e:  # noqa: BLE001 - an error is part of the snapshot
            text = f"ERROR {type(e).__name__}: {e}\n"
        with open(os.path.join(out, path), "w") as f:
            f.write(text)

    for name, prog in sorted(progs.items()):
        lks = loop_kernels(prog)
        for lk in lks:
            base = f"{name}.{lk.kernel.name}"
            write(base + ".cpp", lambda: cpu.generate(lk))
            write(base + ".cu", lambda: cuda.generate(lk.kernel, lk.buffers, lk.size_vars))
            write(base + ".ew.cu", lambda: cuda.generate(lk.kernel, lk.buffers, lk.size_vars, _elsewhere(lk, (lk,)), 132))
        for a, b in zip(lks, lks[1:]):
            if any(n.reduction_ranges for n in a.kernel.nests) and not any(n.reduction_ranges for n in b.kernel.nests):
                m = _fused_pair(a, b, prog)
                write(f"{name}.{a.kernel.name}+{b.kernel.name}.cu",
                      lambda: cuda.generate(m.kernel, m.buffers, m.size_vars, _elsewhere(m, (a, b)), 132))
    print(len(os.listdir(out)), "files in", out)


def nvcc_snapshot(folder: str, units: int = 8) -> int:
    """Compile every ``.cu`` file of a snapshot folder with nvcc; the number of failed units."""
    files = sorted(f for f in os.listdir(folder) if f.endswith(".cu"))
    sources = [(f, open(os.path.join(folder, f)).read()) for f in files]
    sources = [(f, s) for f, s in sources if not s.startswith("ERROR")]
    head = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
    chunks: list[list[str]] = [[] for _ in range(units)]
    for k, (name, src) in enumerate(sources):
        start = src.index('extern "C"')
        if not chunks[k % units]:
            chunks[k % units].append(head + re.sub(r"#include <[^>]+>\n", "", src[:start]))
        body, tag = src[start:], re.sub(r"\W", "_", name)
        for fn in set(re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', body)):
            body = re.sub(rf"\b{fn}\b", f"{tag}__{fn}", body)
        chunks[k % units].append(body)
    failed = 0
    for k, chunk in enumerate(chunks):
        path = os.path.join("/tmp", f"codegen_snapshot_{os.getpid()}_{k}.cu")
        with open(path, "w") as f:
            f.write("\n".join(chunk))
        done = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", path[:-3] + ".cubin", path],
                              capture_output=True, text=True)
        failed += done.returncode != 0
        print(f"unit {k}: {len(chunk) - 1} modules, nvcc exit {done.returncode}",
              done.stderr[-2000:] if done.returncode else "")
    print(len(sources), "modules,", failed, "units failed")
    return failed


if __name__ == "__main__":
    if sys.argv[1:2] == ["capture"] and len(sys.argv) == 3:
        capture_corpus(sys.argv[2])
    elif sys.argv[1:2] == ["write"] and len(sys.argv) == 4:
        write_snapshot(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["nvcc"] and len(sys.argv) == 3:
        sys.exit(nvcc_snapshot(sys.argv[2]) != 0)
    else:
        sys.exit(__doc__)
