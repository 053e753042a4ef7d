"""torchvendor.reference_backends.cuda: the reference CUDA backend (loop IR -> CUDA C, NVRTC) and
the runtime table over the CUDA driver API (:mod:`.runtime`)."""
