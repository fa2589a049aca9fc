"""Chapter 2's own code: what only ``notebooks/02_bahdanau_attention.md`` uses.

See :mod:`attncourse.chapters`.
"""
