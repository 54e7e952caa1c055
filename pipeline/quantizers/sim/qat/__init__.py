"""Quantization-aware training on the simulation (docs/qat.md).

``tqt`` (the learnable-threshold quantizer), ``layers`` (conv/linear with BN simulated folding),
``trainable`` (the trainable model: the PTQ test-mode graph with a quantizer at each of its
quantization points), ``deploy`` (``to_deployable``'s files). The drop-in ``QatProcessor`` is
``pipeline.apis.qat``.
"""
