"""The chapters' recipes: what each chapter trains, on what, and how long.

Each module describes one family of runs and trains it with the engine of
:mod:`attncourse.train`, cached under :func:`~attncourse.runtime.runs_dir` so
that a finished run loads in a second:

- :mod:`~attncourse.recipes.experiment`: encoder-decoder translation runs
  (chapters 1-3, 6; the ``train`` command), :class:`Experiment`;
- :mod:`~attncourse.recipes.captioning`: image captioning with soft and hard
  attention (chapter 3b);
- :mod:`~attncourse.recipes.relation`: relational reasoning with and without
  self-attention in a CNN (chapter 4b);
- :mod:`~attncourse.recipes.lm`: chapter 7's character-level GPT (the
  ``train-lm`` command);
- :mod:`~attncourse.recipes.recall`: associative recall, softmax against linear
  attention (chapter 8).
"""

from attncourse.recipes.captioning import (
    CaptionConfig,
    caption_metrics,
    load_canvases,
    train_captioner,
)
from attncourse.recipes.experiment import (
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
from attncourse.recipes.lm import (
    LMConfig,
    bits_per_char,
    build_lm,
    heldout_loss,
    loss_without_peeking,
    train_lm,
)
from attncourse.recipes.recall import RecallConfig, recall_accuracy, train_recall
from attncourse.recipes.relation import (
    RELATION_MODELS,
    RelationConfig,
    load_relation_canvases,
    relation_accuracy,
    train_relation_classifier,
)

__all__ = [
    "RELATION_MODELS",
    "TASKS",
    "CaptionConfig",
    "Experiment",
    "LMConfig",
    "RecallConfig",
    "RelationConfig",
    "TrainedModel",
    "bits_per_char",
    "build_lm",
    "build_model",
    "caption_metrics",
    "heldout_loss",
    "load_canvases",
    "load_relation_canvases",
    "load_task",
    "loss_without_peeking",
    "recall_accuracy",
    "relation_accuracy",
    "run_experiment",
    "seconds_to_reach",
    "shorter_than",
    "train_captioner",
    "train_lm",
    "train_recall",
    "train_relation_classifier",
    "transformer_preset",
]
