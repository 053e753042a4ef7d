"""torchvendor: the SDK with which hardware vendors plug a new accelerator into PyTorch 2.

- ``torchvendor.sdk``: ``register_device``, and the vendor-facing API.
- ``torchvendor.ir``: the three IR levels and the GraphView adapters.
- ``torchvendor.pattern_matcher`` / ``torchvendor.partitioner``: IR-agnostic algorithms.
- ``torchvendor._C``: the C++ device layer (imported on first use by ``torchvendor.sdk``).

The subpackages are imported lazily: ``import torchvendor.partitioner`` never imports torch.
"""
__version__ = "0.1.0"
