"""Running experiments: device choice and seeding, the training loop with atomic
checkpoints and resume, decoding (greedy and beam search), metrics; the command
line lives in :mod:`attncourse.train.cli` (``python -m attncourse``)."""

from attncourse.train.captioning import CaptionConfig, caption_metrics, load_canvases, train_captioner
from attncourse.train.checkpoint import load_checkpoint, load_model, save_checkpoint
from attncourse.train.decoding import beam_search, greedy_decode, sequence_log_probs, translate, wu_length_penalty
from attncourse.train.experiment import (
    TASKS,
    Experiment,
    TrainedModel,
    build_model,
    load_task,
    run_experiment,
    seconds_to_reach,
    shorter_than,
    transformer_preset,
)
from attncourse.train.fit import FitConfig, FitResult, evaluate, fit
from attncourse.train.loop import EpochRun, train_epochs
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
from attncourse.train.recall import RecallConfig, recall_accuracy, train_recall
from attncourse.train.relation import (
    RELATION_MODELS,
    RelationConfig,
    load_relation_canvases,
    relation_accuracy,
    train_relation_classifier,
)
from attncourse.train.schedule import noam_lambda, warmup_inverse_sqrt
from attncourse.train.runtime import describe_device, pick_device, runs_dir, seed_everything

__all__ = [
    "RecallConfig",
    "recall_accuracy",
    "train_recall",
    "TASKS",
    "Experiment",
    "TrainedModel",
    "build_model",
    "load_task",
    "run_experiment",
    "seconds_to_reach",
    "shorter_than",
    "transformer_preset",
    "noam_lambda",
    "warmup_inverse_sqrt",
    "EpochRun",
    "CaptionConfig",
    "caption_metrics",
    "load_canvases",
    "train_captioner",
    "RELATION_MODELS",
    "RelationConfig",
    "load_relation_canvases",
    "relation_accuracy",
    "train_relation_classifier",
    "train_epochs",
    "FitConfig",
    "FitResult",
    "evaluate",
    "fit",
    "load_checkpoint",
    "load_model",
    "save_checkpoint",
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
    "runs_dir",
    "seed_everything",
    "sequence_log_probs",
    "token_accuracy",
    "translate",
    "wu_length_penalty",
]
