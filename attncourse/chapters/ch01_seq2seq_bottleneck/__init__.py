"""Chapter 1's own code: what only ``notebooks/01_seq2seq_bottleneck.md`` uses.

See :mod:`attncourse.chapters`.
"""
