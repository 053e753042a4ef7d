"""Device semantics any device must honour: creation, copies, dtypes, views, streams and events,
memory statistics, RNG, serialization, ``torch.accelerator``, autocast, autograd, and a visible
CPU fallback. Each case compares with the CPU.

    >>> from torchvendor.sdk.conformance.core import Target
    >>> len(cases(Target(device="cpu"), "minimal"))
    0
"""
from __future__ import annotations

import io
from typing import Any, Callable

import torch

from .core import Case, Target
from .differences import what_differs

__all__ = ["cases"]

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool)


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    a, b = a.cpu(), b.cpu()  # compared on the CPU, never with the device under test
    torch.testing.assert_close(a, b, equal_nan=True, msg=lambda m: f"{what_differs(a, b) or 'they differ'}\n{m}")


def _module(device: str) -> Any:
    return getattr(torch, device)


def _roundtrip(device: str, dtype: torch.dtype) -> None:
    x = (torch.randn(37, 5) * 10).to(dtype)
    y = x.to(device)
    assert y.device.type == device, f"tensor landed on {y.device}"
    assert y.dtype == dtype
    _close(y.cpu(), x)


def _factories(device: str) -> None:
    for make, ref in ((lambda d: torch.zeros(3, 4, device=d), torch.zeros(3, 4)),
                      (lambda d: torch.ones(2, 5, device=d), torch.ones(2, 5)),
                      (lambda d: torch.full((3,), 7.5, device=d), torch.full((3,), 7.5)),
                      (lambda d: torch.arange(10, device=d), torch.arange(10)),
                      (lambda d: torch.eye(4, device=d), torch.eye(4))):
        _close(make(device), ref)


def _views(device: str) -> None:
    x = torch.arange(24.0).reshape(4, 6)
    d = x.to(device)
    for f in (lambda t: t.t(), lambda t: t[1:, ::2], lambda t: t.view(6, 4), lambda t: t.unsqueeze(0).expand(2, 4, 6),
              lambda t: t.narrow(1, 2, 3), lambda t: t.permute(1, 0)[2]):
        _close(f(d), f(x))
    v = d[1]
    v.fill_(-1.0)  # a write through a view is visible in the base
    x[1] = -1.0
    _close(d, x)


def _noncontiguous_copy(device: str) -> None:
    x = torch.randn(8, 9).t()
    d = torch.empty(9, 8, device=device)
    d.copy_(x)
    _close(d, x)
    back = torch.empty(9, 8).t().t()
    back.copy_(d)
    _close(back, x)


def _inplace_and_out(device: str) -> None:
    x, y = torch.randn(6), torch.randn(6)
    dx, dy = x.to(device), y.to(device)
    dx.add_(dy)
    _close(dx, x + y)
    out = torch.empty(6, device=device)
    torch.mul(dx, dy, out=out)
    _close(out, (x + y) * y)


def _device_context(device: str) -> None:
    mod = _module(device)
    n = mod.device_count()
    assert n >= 1, "device_count() is 0"
    for i in range(n):
        with torch.device(f"{device}:{i}"):
            t = torch.empty(2)
        assert t.device.index == i, f"torch.device('{device}:{i}') context made a tensor on {t.device}"


def _cross_device_copy(device: str) -> Any:
    mod = _module(device)
    if mod.device_count() < 2:
        return {"skip": "one device"}
    x = torch.randn(100)
    a = x.to(f"{device}:0")
    b = a.to(f"{device}:1")
    assert b.device.index == 1
    _close(b, x)
    return None


def _streams(device: str) -> None:
    mod = _module(device)
    x = torch.randn(1 << 16)
    s = mod.Stream()
    with mod.stream(s):
        d = x.to(device, non_blocking=True)
        y = d * 2
    s.synchronize()
    _close(y, x * 2)
    assert mod.current_stream() != s or False


def _events(device: str) -> None:
    mod = _module(device)
    start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
    start.record()
    y = torch.randn(256, 256, device=device) @ torch.randn(256, 256, device=device)
    end.record()
    end.synchronize()
    assert end.query(), "event not complete after synchronize()"
    assert start.elapsed_time(end) >= 0.0
    del y


def _memory_stats(device: str) -> None:
    mod = _module(device)
    mod.synchronize()
    before = mod.memory_allocated()
    t = torch.empty(1 << 20, device=device)
    assert mod.memory_allocated() >= before + (1 << 22), "memory_allocated() did not grow by the tensor's size"
    assert mod.max_memory_allocated() >= mod.memory_allocated()
    del t
    assert mod.memory_allocated() == before, "memory_allocated() did not return after the tensor was freed"


def _rng(device: str) -> None:
    mod = _module(device)
    mod.manual_seed(1234)
    a = torch.rand(100, device=device)
    mod.manual_seed(1234)
    b = torch.rand(100, device=device)
    _close(a, b)
    state = mod.get_rng_state()
    c = torch.randn(10, device=device)
    mod.set_rng_state(state)
    _close(torch.randn(10, device=device), c)
    assert not torch.equal(a.cpu(), torch.rand(100, device=device).cpu())


def _serialization(device: str) -> None:
    x = torch.randn(5, 3)
    buf = io.BytesIO()
    torch.save({"w": x.to(device)}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["w"].device.type == device
    _close(loaded["w"], x)
    buf.seek(0)
    _close(torch.load(buf, map_location="cpu")["w"], x)


def _accelerator(device: str) -> None:
    acc = torch.accelerator.current_accelerator()
    assert acc is not None and acc.type == device, f"torch.accelerator.current_accelerator() is {acc}"
    assert torch.accelerator.device_count() == _module(device).device_count()


def _autograd(device: str) -> None:
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    dx, dw = x.detach().to(device).requires_grad_(), w.detach().to(device).requires_grad_()
    (x @ w).relu().sum().backward()
    (dx @ dw).relu().sum().backward()
    _close(dx.grad, x.grad)
    _close(dw.grad, w.grad)


def _autocast(device: str) -> Any:
    mod = _module(device)
    dtypes = mod.get_amp_supported_dtype() if hasattr(mod, "get_amp_supported_dtype") else []
    if torch.bfloat16 not in dtypes and torch.float16 not in dtypes:
        return {"skip": "the device declares no autocast dtype"}
    low = torch.bfloat16 if torch.bfloat16 in dtypes else torch.float16
    a, b = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    with torch.autocast(device_type=device, dtype=low):
        y = a @ b
    assert y.dtype == low, f"mm under autocast gave {y.dtype}, expected {low}"
    return None


def _fallback_visible(device: str) -> Any:
    mod = _module(device)
    if not hasattr(mod, "fallback_counts"):
        return {"skip": "the device keeps no fallback counts"}
    mod.reset_fallback_counts()
    x = torch.randn(16, device=device)
    y = torch.special.i0(x)  # a rare op: vendors seldom have a kernel for it
    _close(y, torch.special.i0(x.cpu()))
    counts = {k: v for k, v in mod.fallback_counts().items() if "i0" in k}
    return {"fallback": counts, "reason": "special_i0 ran through the CPU fallback"} if counts else None


def _oom(device: str) -> None:
    try:
        torch.empty(1 << 60, dtype=torch.uint8, device=device)
    except torch.OutOfMemoryError:
        return
    except RuntimeError as e:
        raise AssertionError(f"an impossible allocation raised {type(e).__name__}, not torch.OutOfMemoryError: {e}")
    raise AssertionError("allocating 2**60 bytes succeeded")


_CHECKS: dict[str, Callable[[str], Any]] = {
    "factories": _factories, "views": _views, "noncontiguous_copy": _noncontiguous_copy,
    "inplace_and_out": _inplace_and_out, "device_context": _device_context, "cross_device_copy": _cross_device_copy,
    "streams": _streams, "events": _events, "memory_stats": _memory_stats, "rng": _rng,
    "serialization": _serialization, "accelerator": _accelerator, "autograd": _autograd, "autocast": _autocast,
    "fallback_visible": _fallback_visible, "out_of_memory": _oom,
}


def _check(fn: Callable[[str], Any]) -> Callable[[Target], Any]:
    return lambda target: fn(target.device)


def cases(target: Target, profile: str) -> list[Case]:
    """Device cases (none for the CPU itself: it is the reference)."""
    if target.device == "cpu":
        return []
    out = [Case(f"device/{name}", "device", _check(fn)) for name, fn in _CHECKS.items()]
    for dtype in DTYPES:
        name = str(dtype).removeprefix("torch.")
        out.append(Case(f"device/copy_roundtrip/{name}", "device",
                        (lambda d: lambda t: _roundtrip(t.device, d))(dtype), {"dtype": name}))
    return out
