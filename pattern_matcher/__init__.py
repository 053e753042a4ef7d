"""torchvendor.pattern_matcher."""
