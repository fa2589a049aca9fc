"""Chapter 15's own code: what only ``notebooks/15_attention_in_practice.md`` uses."""
