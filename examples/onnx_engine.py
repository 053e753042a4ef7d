"""ONNX level, in the style of Torch-TensorRT: each partition of at least three ops arrives as an
ONNX model, is built into an "engine" (serialized once into the artifact cache, then loaded by
ONNX Runtime) and runs in place of the partition; smaller partitions and ops without an ONNX
form run eagerly.

    $ python examples/onnx_engine.py
    engine fused_0: Transpose, Gemm, Relu, Transpose, Gemm, Relu, Mul (7 nodes, opset 18)
    not claimed (eager): {'aten.sort.default': 1}
    claimed, left outside (eager): {'operator.getitem': {'in an atomic group with unsupported sort (aten.sort.default)': 1}, 'aten.mul.Tensor': {'in a partition of 2 compute node(s), below min_size=3': 1}, 'aten.add.Tensor': {'in a partition of 2 compute node(s), below min_size=3': 1}}
    matches eager: True
"""
import tempfile
from pathlib import Path

import onnxruntime as ort
import torch

from torchvendor.sdk import OnnxBackend, last_report, register_backend


class OnnxEngines(OnnxBackend):
    name = "example_onnx_engine"
    min_partition_size = 3    # Torch-TensorRT's min_block_size

    def compile(self, model, example_inputs):
        ops = ", ".join(n.op_type for n in model.graph.node)
        print(f"engine {model.graph.name}: {ops} ({len(model.graph.node)} nodes, opset {model.opset_import[0].version})")
        engine = self.cache.get_or_build(model.SerializeToString(), lambda p: Path(p).write_bytes(
            model.SerializeToString()), ".onnx")  # a real vendor serializes its built engine here
        session = ort.InferenceSession(engine, providers=["CPUExecutionProvider"])
        names = [i.name for i in model.graph.input]
        return lambda *args: [torch.from_numpy(o) for o in session.run(None, {
            n: a.numpy() for n, a in zip(names, args)})]


register_backend(OnnxEngines)


def main() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8), torch.nn.ReLU())
    model = lambda x: torch.sort(mlp(x) * 2, dim=-1).values * 3 + 1  # noqa: E731
    x = torch.randn(5, 16)
    options = {"cache_dir": tempfile.mkdtemp()}
    with torch.no_grad():
        got = torch.compile(model, backend="example_onnx_engine", options=options)(x)
        print("not claimed (eager):", last_report().unsupported())
        print("claimed, left outside (eager):", last_report().left_outside())
        print("matches eager:", torch.allclose(got, model(x), atol=1e-6))


if __name__ == "__main__":
    main()
