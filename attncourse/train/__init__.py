"""The training engine: how every model of the course is trained, whatever the chapter.

:func:`fit` (encoder-decoders) and :func:`train_epochs` (the resumable epoch loop),
their settings (:mod:`~attncourse.train.config`), checkpoints, data parallelism,
learning-rate schedules and metrics. What each chapter trains lives in
:mod:`attncourse.recipes`.
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "checkpoint": ("load_checkpoint", "load_model", "save_checkpoint"),
    "config": ("FitConfig", "TrainingSettings", "setting"),
    "fit": ("FitResult", "fit"),
    "loop": ("EpochRun", "train_epochs"),
    "metrics": ("bucket_labels", "corpus_bleu", "corpus_chrf", "evaluate_by_bucket", "exact_match", "format_table",
        "length_buckets", "token_accuracy"),
    "schedule": ("noam_lambda", "warmup_inverse_sqrt"),
    "seq2seq": ("evaluate",),
})

__all__ = [
    "EpochRun",
    "FitConfig",
    "FitResult",
    "TrainingSettings",
    "bucket_labels",
    "corpus_bleu",
    "corpus_chrf",
    "evaluate",
    "evaluate_by_bucket",
    "exact_match",
    "fit",
    "format_table",
    "length_buckets",
    "load_checkpoint",
    "load_model",
    "noam_lambda",
    "save_checkpoint",
    "setting",
    "token_accuracy",
    "train_epochs",
    "warmup_inverse_sqrt",
]
