"""``python -m torchvendor.sdk.device.tour``: bring up the reference simulated accelerator as "acme".

Registers the device, creates tensors, copies them both ways, runs a few operators (through the
counted CPU fallback), takes a small autograd step, and prints memory statistics, the fallback
counts and the registration diagnosis.
"""
from __future__ import annotations

import argparse
import warnings

import torch

from torchvendor.sdk import register_device


def main(argv: list[str] | None = None) -> int:
    """Run the tour; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m torchvendor.sdk.device.tour")
    parser.add_argument("--name", default="acme", help="device name (default: acme)")
    parser.add_argument("--runtime", default=None,
                        help="vendor runtime library (default: the reference simulator)")
    args = parser.parse_args(argv)

    acme = register_device(args.name, runtime=args.runtime)
    dev = args.name
    print(f"registered torch.{dev}: {acme.device_count()} device(s), "
          f"{acme.get_device_name(0)!r}, accelerator={torch.accelerator.current_accelerator()}")

    warnings.simplefilter("ignore", UserWarning)  # the once-per-process fallback warning
    torch.manual_seed(0)  # seeds the CPU and every acme device
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3).to(dev)
    b = torch.randn(2, 3, device=dev)
    print(f"created {a.device} {tuple(a.shape)} and {b.device} {tuple(b.shape)}")
    back = a.cpu()
    assert torch.equal(back, torch.arange(6, dtype=torch.float32).reshape(2, 3))
    print(f"copied back to the CPU: {back.tolist()}")
    c = (a * 2 + b).relu().sum(dim=1)
    print(f"(a * 2 + b).relu().sum(1) = {c.cpu().tolist()}")
    print(f"a.t() is a view: {a.t().untyped_storage().data_ptr() == a.untyped_storage().data_ptr()}")
    if acme.device_count() > 1:
        other = a.to(f"{dev}:1")
        print(f"cross-device copy to {other.device}: {torch.equal(other.cpu(), back)}")
    else:  # one device: a copy on it, which is not a cross-device copy
        other = a.clone()
        print(f"device-to-device copy on {other.device} (the only device): "
              f"{torch.equal(other.cpu(), back)}")

    model = torch.nn.Linear(3, 2).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 3, device=dev)
    y = torch.randn(8, 2, device=dev)
    for step in range(3):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"autograd step {step}: loss {loss.item():.4f}")

    stream = acme.Stream()
    with acme.stream(stream):
        z = x @ x.t()
    stream.synchronize()
    print(f"ran on a side stream {stream.stream_id}: {tuple(z.shape)}")

    stats = acme.memory_stats()
    print(f"memory: allocated {acme.memory_allocated()} B (peak {acme.max_memory_allocated()}),"
          f" reserved {acme.memory_reserved()} B, segments {stats['segment.all.current']}")
    print("fallback counts (implement these next):")
    for op, n in acme.fallback_counts().items():
        print(f"  {op:32s} {n}")
    print(acme.diagnose())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
