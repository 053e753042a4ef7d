"""The Triton level: Inductor's Triton kernels for a PrivateUse1 device, built by the vendor's
Triton backend (here NVIDIA's, target "cuda") and launched through the device's runtime table
(here the reference CUDA runtime); a source hook annotates every kernel before it is compiled.
Needs an NVIDIA GPU and Triton.

$ python examples/triton_level.py
inference matches eager: True
training matches eager: True
every kernel annotated: True
partitions native: True
"""
import torch

from torchvendor.reference_backends.cuda.runtime import build_runtime
from torchvendor.sdk import TritonBackend, last_report, register_backend, register_device

NOTE = "# built for the PrivateUse1 GPU by example_triton\n"


class AnnotatedTriton(TritonBackend):
    name = "example_triton"
    triton_target = "cuda"    # the GPUTarget NVIDIA's triton.backends entry compiles for
    binary_format = "cubin"   # what the runtime's module_load_data (cuModuleLoadData) takes
    sources: dict[str, str] = {}

    def kernel_source(self, name: str, source: str) -> str:
        self.sources[name] = NOTE + source   # inspect or rewrite each kernel's Triton source
        return self.sources[name]


def main() -> None:
    register_device("gpu", runtime=build_runtime())
    register_backend(AnnotatedTriton)
    torch.manual_seed(0)
    x = torch.randn(64, 256)
    w = torch.randn(256, requires_grad=True)

    def f(x, w):
        return (torch.softmax(x * w, -1) + torch.nn.functional.gelu(x)).sum(-1)

    compiled = torch.compile(f, backend="example_triton")
    xg, wg = x.to("gpu"), w.detach().to("gpu").requires_grad_()
    with torch.no_grad():
        print("inference matches eager:", torch.allclose(compiled(xg, wg).cpu(), f(x, w), atol=1e-4))
    compiled(xg, wg).sum().backward()
    f(x, w).sum().backward()
    print("training matches eager:", torch.allclose(wg.grad.cpu(), w.grad, atol=1e-3))
    sources = AnnotatedTriton.sources
    print("every kernel annotated:", len(sources) > 0 and all(s.startswith(NOTE) for s in sources.values()))
    report = last_report()
    print("partitions native:", all(p.status == "compiled" and p.calls > 0 for p in report.partitions))


if __name__ == "__main__":
    main()
