"""The training engine: how every model of the course is trained, whatever the chapter.

:func:`fit` (the encoder-decoder loop: AMP, compile, data parallelism, resume,
early stopping, progress) and :func:`train_epochs` (the cached, resumable epoch
loop) in :mod:`~attncourse.train.fit` and :mod:`~attncourse.train.loop`; the
settings of a run, declared once (:class:`TrainingSettings`, :class:`FitConfig`,
:func:`setting`: the command line and :class:`~attncourse.recipes.Experiment`
derive theirs) in :mod:`~attncourse.train.config`;
atomic, ``weights_only`` checkpoints (:mod:`~attncourse.train.checkpoint`);
data parallelism (:mod:`~attncourse.train.distributed`); learning-rate
schedules (:mod:`~attncourse.train.schedule`); and evaluation metrics
(:mod:`~attncourse.train.metrics`). What each chapter trains lives above, in
:mod:`attncourse.recipes`; decoding below, in :mod:`attncourse.decode`; the
device and seeding in :mod:`attncourse.runtime`.
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
