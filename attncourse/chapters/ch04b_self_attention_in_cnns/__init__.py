"""Chapter 4b's own code: what only ``notebooks/04b_self_attention_in_cnns.md`` uses.

See :mod:`attncourse.chapters`.
"""
