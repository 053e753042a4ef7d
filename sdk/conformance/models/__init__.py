"""The conformance model suite: 50+ architectures, each checked for inference, a second input
shape and one SGD training step against float64 truth, with vendor coverage, speedups and
compile times (:mod:`.catalog` the models, :mod:`.check` one model in one process,
:mod:`.suite` a process per model)."""
