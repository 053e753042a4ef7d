"""Draws docs/training_loss.svg from the training examples' loss files (docs/training.md).

``python docs/training_loss.py DIR [OUT]`` reads, where present, ``DIR/<run>.json`` from
examples/train_on_device.py (``TRAIN_LOSSES``: ``{"losses": [...], "resumed": [...]}``) for the runs
``cpu``, ``acme``, ``cuda`` and ``gpu``, and ``DIR/<device>_two/<mode>.json`` from
examples/train_two_devices.py (a list of losses) for ``acme`` and ``gpu`` with ``ddp`` and
``fsdp2``; a run that is absent is left out of the picture. Standard library only.

    >>> curves = {"cpu": [5.5, 1.0, 0.05]}
    >>> svg(curves, steps=3).count("<polyline")
    1
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

#: run -> (label, colour, dash); the order of the legend
RUNS = {"cpu": ("cpu", "#1f77b4", ""), "acme": ("acme", "#d62728", "4 3"),
        "acme_ddp": ("acme x2, DDP (torchrun)", "#2ca02c", "1 2"),
        "acme_fsdp2": ("acme x2, FSDP2 (torchrun)", "#9467bd", "6 2 1 2"),
        "cuda": ("cuda (torchvendor_cuda)", "#ff7f0e", ""), "gpu": ("PrivateUse1 GPU (torchvendor_cuda)", "#8c564b", "4 3"),
        "gpu_ddp": ("PrivateUse1 GPU x2, DDP", "#e377c2", "1 2"),
        "gpu_fsdp2": ("PrivateUse1 GPU x2, FSDP2", "#17becf", "6 2 1 2")}
W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 380, 60, 620, 20, 320


def load(folder: Path) -> dict[str, list[float]]:
    """The loss curves present in ``folder``, keyed as :data:`RUNS`."""
    out = {}
    for run in RUNS:
        device, _, mode = run.partition("_")
        path = folder / (f"{device}_two/{mode}.json" if mode else f"{run}.json")
        if path.exists():
            data = json.loads(path.read_text())
            out[run] = data["losses"] if isinstance(data, dict) else data
    return out


def svg(curves: dict[str, list[float]], steps: int) -> str:
    """The picture: loss on a log scale (0.01 to 10) against the step, one line per run."""
    def x(step: int) -> float:
        return LEFT + (RIGHT - LEFT) * (step - 1) / max(steps - 1, 1)

    def y(loss: float) -> float:
        return TOP + (BOTTOM - TOP) * (1 - (math.log10(max(loss, 1e-2)) + 2) / 3)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
             'font-size="12">', f'<rect width="{W}" height="{H}" fill="white"/>']
    for value, label in ((0.01, "0.01"), (0.1, "0.1"), (1, "1"), (10, "10")):
        parts.append(f'<line x1="{LEFT}" x2="{RIGHT}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#ddd"/>'
                     f'<text x="{LEFT - 8}" y="{y(value) + 4:.1f}" text-anchor="end">{label}</text>')
    for step in sorted({1, *range(50, steps + 1, 50), steps}):
        parts.append(f'<text x="{x(step):.1f}" y="{BOTTOM + 18}" text-anchor="middle">{step}</text>')
    parts.append(f'<text x="{(LEFT + RIGHT) / 2:.1f}" y="{BOTTOM + 34}" text-anchor="middle">step</text>')
    parts.append(f'<text x="14" y="{(TOP + BOTTOM) / 2:.1f}" transform="rotate(-90 14 {(TOP + BOTTOM) / 2:.1f})" '
                 'text-anchor="middle">loss (log scale)</text>')
    for k, (run, losses) in enumerate(curves.items()):
        label, colour, dash = RUNS.get(run, (run, "#000", ""))
        style = f'stroke="{colour}" stroke-width="1.5"' + (f' stroke-dasharray="{dash}"' if dash else "")
        points = " ".join(f"{x(i + 1):.1f},{y(v):.1f}" for i, v in enumerate(losses[:steps]))
        parts.append(f'<polyline fill="none" {style} points="{points}"/>')
        ly = 40 + 18 * k
        parts.append(f'<line x1="380" x2="410" y1="{ly}" y2="{ly}" {style}/><text x="416" y="{ly + 4}">{label}</text>')
    parts.append(f'<text x="{LEFT}" y="14">examples/train_on_device.py and train_two_devices.py, GPT-2 (64 wide, '
                 f'2 layers), bf16, {steps} steps</text>')
    return "\n".join(parts + ["</svg>"]) + "\n"


def main(argv: list[str]) -> None:
    """``DIR [OUT]``: writes the picture of the runs in DIR to OUT (docs/training_loss.svg)."""
    curves = load(Path(argv[0]))
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).with_name("training_loss.svg")
    out.write_text(svg(curves, max(len(c) for c in curves.values())))
    print(f"{out}: {', '.join(curves)}")


if __name__ == "__main__":
    main(sys.argv[1:])
