"""Attention modules (``torch.nn.Module``): encoders, decoders, attention variants and
the Transformer. Every module documents what plays the query, the keys and the values."""

from attncourse.nn.additive import AdditiveAttention
from attncourse.nn.alibi import alibi_bias, alibi_slopes
from attncourse.nn.attention import (
    KVCache,
    MultiHeadAttention,
    merge_heads,
    split_heads,
)
from attncourse.nn.conv_attention import (
    AttentionCNN,
    PlainCNN,
    SelfAttention2d,
    conv_stem,
    receptive_field,
)
from attncourse.nn.ffn import FFNS, SwiGLU
from attncourse.nn.gpt import GPT, GPT_POSITIONAL, DecoderOnlyBlock
from attncourse.nn.gqa import CausalSelfAttention, GQAOptions, allowed_keys, repeat_kv
from attncourse.nn.image_attention import (
    IMAGE_ATTENTION_KINDS,
    REWARD_KINDS,
    ConvEncoder,
    HardAttentionLoss,
    ImageAttentionOutput,
    ImageCaptioner,
    ImageEncoding,
    MovingAverageBaseline,
    doubly_stochastic_penalty,
    hard_attention_loss,
    soft_attention_loss,
)
from attncourse.nn.luong import (
    LuongAttention,
    LuongDecoderState,
    LuongSeq2Seq,
    LuongSeq2SeqOutput,
)
from attncourse.nn.mla import LatentCache, MLAOptions, MultiHeadLatentAttention
from attncourse.nn.norm import NORMS, RMSNorm
from attncourse.nn.positional import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
)
from attncourse.nn.protocol import DecoderAttention, DecoderCache, EncoderDecoder
from attncourse.nn.recall import RECALL_ATTENTIONS, RecallModel
from attncourse.nn.rnn import (
    ATTENTION_KINDS,
    Encoder,
    EncoderState,
    Seq2Seq,
    Seq2SeqOutput,
    count_parameters,
    hidden_dim_for_budget,
    reorder_batch,
)
from attncourse.nn.rope import apply_rope, rope_frequencies
from attncourse.nn.spec import (
    ATTENTION_VARIANTS,
    AttentionSpec,
    DecoderSpec,
    FFNSpec,
    NormSpec,
    PositionSpec,
    register_attention,
)
from attncourse.nn.transformer import (
    POSITIONAL_KINDS,
    DecoderLayer,
    EncoderLayer,
    PositionwiseFeedForward,
    Transformer,
    TransformerDecoderState,
    TransformerEncoderState,
)

__all__ = [
    "ATTENTION_VARIANTS",
    "AttentionSpec",
    "DecoderAttention",
    "DecoderCache",
    "DecoderSpec",
    "FFNS",
    "FFNSpec",
    "GQAOptions",
    "LatentCache",
    "MLAOptions",
    "MultiHeadLatentAttention",
    "NORMS",
    "NormSpec",
    "PositionSpec",
    "RMSNorm",
    "SwiGLU",
    "conv_stem",
    "register_attention",
    "CausalSelfAttention",
    "DecoderOnlyBlock",
    "EncoderDecoder",
    "GPT",
    "GPT_POSITIONAL",
    "alibi_bias",
    "alibi_slopes",
    "allowed_keys",
    "apply_rope",
    "repeat_kv",
    "rope_frequencies",
    "RECALL_ATTENTIONS",
    "RecallModel",
    "AttentionCNN",
    "ConvEncoder",
    "HardAttentionLoss",
    "IMAGE_ATTENTION_KINDS",
    "ImageAttentionOutput",
    "ImageCaptioner",
    "ImageEncoding",
    "MovingAverageBaseline",
    "PlainCNN",
    "REWARD_KINDS",
    "SelfAttention2d",
    "doubly_stochastic_penalty",
    "hard_attention_loss",
    "receptive_field",
    "soft_attention_loss",
    "ATTENTION_KINDS",
    "AdditiveAttention",
    "DecoderLayer",
    "EncoderLayer",
    "KVCache",
    "LearnedPositionalEncoding",
    "LuongAttention",
    "LuongDecoderState",
    "LuongSeq2Seq",
    "LuongSeq2SeqOutput",
    "MultiHeadAttention",
    "POSITIONAL_KINDS",
    "PositionwiseFeedForward",
    "SinusoidalPositionalEncoding",
    "Transformer",
    "TransformerDecoderState",
    "TransformerEncoderState",
    "Encoder",
    "EncoderState",
    "Seq2Seq",
    "Seq2SeqOutput",
    "count_parameters",
    "hidden_dim_for_budget",
    "merge_heads",
    "reorder_batch",
    "split_heads",
]
