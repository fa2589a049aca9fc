"""Chapter 14's own code: what only ``notebooks/14_attention_as_memory.md`` uses.

See :mod:`attncourse.chapters`.
"""
