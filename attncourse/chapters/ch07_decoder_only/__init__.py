"""Chapter 7's own code: what only ``notebooks/07_decoder_only.md`` uses.

See :mod:`attncourse.chapters`.
"""
