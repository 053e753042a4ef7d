"""torchvendor.partitioner."""
