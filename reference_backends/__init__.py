"""torchvendor.reference_backends."""
