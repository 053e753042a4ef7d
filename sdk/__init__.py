"""torchvendor.sdk."""
