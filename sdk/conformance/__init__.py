"""The conformance suite: does a device, a compile backend, or both, behave like PyTorch?"""
