"""Running experiments: device choice and seeding, decoding (greedy and beam search)
and metrics."""

from attncourse.train.decoding import beam_search, greedy_decode, sequence_log_probs, wu_length_penalty
from attncourse.train.metrics import (
    bucket_labels,
    corpus_bleu,
    corpus_chrf,
    evaluate_by_bucket,
    exact_match,
    format_table,
    length_buckets,
    token_accuracy,
)
from attncourse.train.runtime import describe_device, pick_device, seed_everything

__all__ = [
    "beam_search",
    "bucket_labels",
    "corpus_bleu",
    "corpus_chrf",
    "describe_device",
    "evaluate_by_bucket",
    "exact_match",
    "format_table",
    "greedy_decode",
    "length_buckets",
    "pick_device",
    "seed_everything",
    "sequence_log_probs",
    "token_accuracy",
    "wu_length_penalty",
]
