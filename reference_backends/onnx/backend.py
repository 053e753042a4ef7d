"""``torchvendor_ort``: the reference ONNX-level backend, built on the public SDK API only.

The SDK hands ``compile`` one partition as an ``onnx.ModelProto`` (``docs/backend.md``, the ONNX
level); this backend makes an ONNX Runtime session of it (the CUDA execution provider for
partitions on ``cuda`` where onnxruntime has it, else the CPU one; the CUDA branch is untested:
the CPU machine's onnxruntime has no CUDA provider) and returns an
:class:`OrtEngine` that runs it with I/O binding: ONNX Runtime reads the input tensors' memory
and writes into output tensors allocated by torch, so nothing is copied on the way. On a
torchvendor device (the simulated accelerator) the engine reaches the tensors through the
device's copies: inputs to the host, the session on the CPU, outputs back to the device.

Example::

    >>> import torch
    >>> import torchvendor.reference_backends.onnx
    >>> f = torch.compile(lambda x: torch.softmax(x, -1) * 2, backend="torchvendor_ort")
    >>> x = torch.randn(4, 32)
    >>> torch.allclose(f(x), torch.softmax(x, -1) * 2, atol=1e-6)
    True
"""
from __future__ import annotations

from typing import Any, Sequence

import onnx
import onnxruntime as ort
import torch

from torchvendor.sdk import Backend, Level

__all__ = ["OrtBackend", "OrtEngine"]

_ORT_DTYPES = {onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.DOUBLE: torch.float64,
               onnx.TensorProto.FLOAT16: torch.float16, onnx.TensorProto.BFLOAT16: torch.bfloat16,
               onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.INT32: torch.int32,
               onnx.TensorProto.INT16: torch.int16, onnx.TensorProto.INT8: torch.int8,
               onnx.TensorProto.UINT8: torch.uint8, onnx.TensorProto.BOOL: torch.bool}
_TORCH_DTYPES = {v: k for k, v in _ORT_DTYPES.items()}


class OrtBackend(Backend):
    """ONNX partitions run by ONNX Runtime."""

    name = "torchvendor_ort"
    level = Level.ONNX
    device = None               # wherever the inputs are: cpu, cuda, or a torchvendor device
    min_partition_size = 1
    #: threads: ONNX Runtime's intra-op threads (0: its default, one per core)
    default_options: dict[str, Any] = {"threads": 0}
    version = "1"

    def compile(self, model: onnx.ModelProto, example_inputs: Sequence[Any]) -> "OrtEngine":
        device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)), torch.device("cpu"))
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(self.options["threads"])
        options.log_severity_level = 3  # errors only: a partition's shape warnings are not the user's
        # no spin-waiting after a run: the eager ops between partitions need those cores
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        cuda = device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers()
        providers = [("CUDAExecutionProvider", {"device_id": device.index or 0})] if cuda else []
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=providers + ["CPUExecutionProvider"])
        return OrtEngine(session, model, device if cuda else torch.device("cpu"))


class OrtEngine:
    """One partition's session, called with the partition's tensors (and SymInts as ints)."""

    def __init__(self, session: ort.InferenceSession, model: onnx.ModelProto, device: torch.device) -> None:
        self.session, self.device = session, device
        self.scratch: torch.Tensor | None = None  # made at the first run: compile may run under a fake mode
        self.inputs = [i.name for i in model.graph.input]
        self.outputs = []  # (name, dtype, static shape or None)
        for o in model.graph.output:
            t = o.type.tensor_type
            static = all(d.HasField("dim_value") for d in t.shape.dim)
            self.outputs.append((o.name, _ORT_DTYPES[t.elem_type],
                                 [d.dim_value for d in t.shape.dim] if static else None))

    def _pointer(self, t: torch.Tensor) -> int:
        # an empty tensor may have no memory, and ONNX Runtime refuses a null pointer
        if t.numel():
            return t.data_ptr()
        if self.scratch is None:
            self.scratch = torch.empty(8, dtype=torch.uint8, device=self.device)
        return self.scratch.data_ptr()

    def _bind(self, binding: ort.IOBinding, name: str, t: torch.Tensor) -> None:
        binding.bind_input(name, self.device.type, self.device.index or 0, _TORCH_DTYPES[t.dtype],
                           list(t.shape), self._pointer(t))

    def __call__(self, *args: Any) -> list[torch.Tensor]:
        home = next((a.device for a in args if isinstance(a, torch.Tensor)), self.device)
        binding = self.session.io_binding()
        keep = []  # the bound tensors stay alive until the run returns
        for name, a in zip(self.inputs, args):
            t = torch.tensor(a, dtype=torch.int64) if not isinstance(a, torch.Tensor) else a
            t = t.to(self.device).contiguous()  # a no-op on the engine's device, else the device's copy
            keep.append(t)
            self._bind(binding, name, t)
        results: list[Any] = []
        for name, dtype, shape in self.outputs:
            if shape is None:  # a symbolic size: ONNX Runtime allocates, and the result is copied out
                binding.bind_output(name, self.device.type, self.device.index or 0)
                results.append(None)
            else:
                out = torch.empty(shape, dtype=dtype, device=self.device)
                binding.bind_output(name, self.device.type, self.device.index or 0, _TORCH_DTYPES[dtype],
                                    shape, self._pointer(out))
                results.append(out)
        self.session.run_with_iobinding(binding)
        ort_values = binding.get_outputs()
        for i, (r, (_, dtype, _)) in enumerate(zip(results, self.outputs)):
            if r is None:
                results[i] = torch.from_numpy(ort_values[i].numpy()).to(dtype)
        return [r.to(home) for r in results] if home != self.device else results
