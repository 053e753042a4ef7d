"""``torchvendor_ort``: the reference ONNX-level backend, built on the public SDK API only.

The SDK hands ``compile`` one partition as an ``onnx.ModelProto`` (``docs/backend.md``, the ONNX
level); this backend makes an ONNX Runtime session of it and returns an :class:`OrtEngine` that
runs it with I/O binding: ONNX Runtime reads the input tensors' memory and writes into output
tensors allocated by torch, so nothing is copied on the way. A partition on ``cuda`` runs in the
CUDA execution provider on the tensors' device memory where the installed onnxruntime has it
(``onnxruntime-gpu``), else in the CPU one through copies, with a warning saying so. On a
torchvendor device (the simulated accelerator) the engine reaches the tensors through the
device's copies: inputs to the host, the session on the CPU, outputs back to the device.

Example::

    >>> import torch
    >>> import torchvendor.reference_backends.ort
    >>> f = torch.compile(lambda x: torch.softmax(x, -1) * 2, backend="torchvendor_ort")
    >>> x = torch.randn(4, 32)
    >>> torch.allclose(f(x), torch.softmax(x, -1) * 2, atol=1e-6)
    True
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import onnx
import onnxruntime as ort
import torch

from torchvendor.sdk import OnnxBackend

__all__ = ["OrtBackend", "OrtEngine"]

_ORT_DTYPES = {onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.DOUBLE: torch.float64,
               onnx.TensorProto.FLOAT16: torch.float16, onnx.TensorProto.BFLOAT16: torch.bfloat16,
               onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.INT32: torch.int32,
               onnx.TensorProto.INT16: torch.int16, onnx.TensorProto.INT8: torch.int8,
               onnx.TensorProto.UINT8: torch.uint8, onnx.TensorProto.BOOL: torch.bool}
_TORCH_DTYPES = {v: k for k, v in _ORT_DTYPES.items()}
_CUDA = "CUDAExecutionProvider"


class OrtBackend(OnnxBackend):
    """ONNX partitions run by ONNX Runtime."""

    name = "torchvendor_ort"
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
        if device.type == "cuda":
            device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        cuda = device.type == "cuda" and _CUDA in ort.get_available_providers()
        providers = [(_CUDA, {"device_id": device.index})] if cuda else []
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=providers + ["CPUExecutionProvider"])
        if device.type == "cuda" and _CUDA not in session.get_providers():
            why = "could not start (see onnxruntime's log)" if cuda else \
                f"is not in this onnxruntime {ort.__version__} (providers: {ort.get_available_providers()})"
            warnings.warn(f"torchvendor_ort: a partition on {device} runs in ONNX Runtime's CPU execution provider, "
                          f"with its tensors copied to the host and back: the CUDA execution provider {why}; "
                          "install onnxruntime-gpu for this CUDA release to run on the device", RuntimeWarning,
                          stacklevel=2)
        on_device = _CUDA in session.get_providers()
        return OrtEngine(session, model, device if on_device else torch.device("cpu"))


class OrtEngine:
    """One partition's session, called with the partition's tensors (and SymInts as ints).

    On ``cuda`` every input and output is bound to the tensors' device memory: the engine waits
    for torch's stream before the run (ONNX Runtime works on a stream of its own and synchronizes
    it before ``run_with_iobinding`` returns), and an output of symbolic shape, which ONNX Runtime
    allocates, is copied device to device into a torch tensor."""

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

    def _input(self, a: Any) -> torch.Tensor:
        """An argument as a contiguous tensor ONNX Runtime can read: a SymInt's value and an ATen
        CPU scalar stay in host memory (ONNX Runtime moves what a device kernel needs itself),
        any other tensor is on the engine's device (a no-op there, else the device's copy)."""
        if not isinstance(a, torch.Tensor):
            return torch.tensor(a, dtype=torch.int64)
        if a.device.type == "cpu" and (a.dim() == 0 or self.device.type == "cpu"):
            return a.contiguous()
        return a.to(self.device).contiguous()

    def __call__(self, *args: Any) -> list[torch.Tensor]:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        # where the results go: the partition's device (an ATen CPU scalar among the inputs is not it)
        home = next((t.device for t in tensors if t.device.type != "cpu" or t.dim()),
                    tensors[0].device if tensors else self.device)
        binding = self.session.io_binding()
        keep = []  # the bound tensors stay alive until the run returns
        for name, a in zip(self.inputs, args):
            t = self._input(a)
            keep.append(t)
            binding.bind_input(name, t.device.type, t.device.index or 0, _TORCH_DTYPES[t.dtype], list(t.shape),
                               self._pointer(t))
        where = (self.device.type, self.device.index or 0)
        results: list[Any] = []
        for name, dtype, shape in self.outputs:
            if shape is None:  # a symbolic size: ONNX Runtime allocates, and the result is copied out
                binding.bind_output(name, *where)
                results.append(None)
            else:
                out = torch.empty(shape, dtype=dtype, device=self.device)
                binding.bind_output(name, *where, _TORCH_DTYPES[dtype], shape, self._pointer(out))
                results.append(out)
        if self.device.type == "cuda":  # the inputs are written on torch's stream
            torch.cuda.current_stream(self.device).synchronize()
        self.session.run_with_iobinding(binding)
        ort_values = binding.get_outputs()
        for i, (r, (_, dtype, _)) in enumerate(zip(results, self.outputs)):
            if r is None:
                results[i] = self._allocated(ort_values[i], dtype)
        return [r.to(home) for r in results] if home != self.device else results

    def _allocated(self, value: Any, dtype: torch.dtype) -> torch.Tensor:
        """A torch tensor holding an output ONNX Runtime allocated (on the engine's device)."""
        if self.device.type != "cuda":
            return torch.from_numpy(value.numpy()).to(dtype)
        shape = list(value.shape())
        out = torch.empty(shape, dtype=dtype, device=self.device)
        if out.numel():  # ONNX Runtime's memory seen as bytes (public CUDA array interface), copied on the device
            nbytes = out.numel() * out.element_size()
            view = _CudaBytes(value.data_ptr(), nbytes)
            out.view(-1).view(torch.uint8).copy_(torch.as_tensor(view, device=self.device))
        return out


class _CudaBytes:
    """``nbytes`` of device memory at ``pointer``, as ``torch.as_tensor`` reads it without a copy."""

    def __init__(self, pointer: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False),
                                         "version": 3, "stream": None}
