"""A random padded batch for the tests of the encoder-decoder models (RNN, Luong, Transformer)."""

import torch


def padded_batch(lengths, tgt_len: int, seed: int, src_vocab: int, tgt_vocab: int, tgt_low: int = 4):
    """Source ids, their mask and teacher-forcing target inputs, from one generator seeded ``seed``.

    Returns ``src`` (batch, max(lengths)): ids in [4, src_vocab), 0 (padding) past each
    sentence's length; ``mask``, True at real tokens; ``tgt_in`` (batch, tgt_len): ids in
    [tgt_low, tgt_vocab) after a bos (1). The source is drawn first, then the targets.
    """
    g = torch.Generator().manual_seed(seed)
    src_len = max(lengths)
    mask = torch.arange(src_len)[None, :] < torch.tensor(lengths)[:, None]
    src = torch.randint(4, src_vocab, (len(lengths), src_len), generator=g).masked_fill(~mask, 0)
    tgt_in = torch.randint(tgt_low, tgt_vocab, (len(lengths), tgt_len), generator=g)
    tgt_in[:, 0] = 1  # bos
    return src, mask, tgt_in
