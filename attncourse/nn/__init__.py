"""Attention modules (``torch.nn.Module``): encoders, decoders, attention variants and
the Transformer. The self-attention chapter uses :mod:`attncourse.functional`
directly; modules arrive with the sequence-to-sequence chapters."""
