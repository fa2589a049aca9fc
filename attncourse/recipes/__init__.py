"""The chapters' recipes: what each chapter trains, on what, and how long.

Each module describes one family of runs and trains it with the engine of
:mod:`attncourse.train`, cached under :func:`~attncourse.runtime.runs_dir` so
that a finished run loads in a second:

- :mod:`~attncourse.recipes.experiment`: encoder-decoder translation runs
  (chapters 1-3, 6; the ``train`` command), :class:`Experiment`;
- :mod:`~attncourse.recipes.lm`: chapter 7's character-level GPT (the
  ``train-lm`` command), trained again in chapters 9 and 10;
- :mod:`~attncourse.recipes.gpu_results`: the GPU report's results, for chapter 6 and
  the benchmarks' page.

What one chapter alone trains is its folder's ``recipe`` (``attncourse/chapters/``).
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "experiment": ("TASKS", "Experiment", "TrainedModel", "build_model", "load_task", "run_experiment",
        "seconds_to_reach", "shorter_than", "transformer_preset"),
    "lm": ("LMConfig", "bits_per_char", "build_lm", "heldout_loss", "loss_without_peeking", "train_lm"),
})

__all__ = [
    "TASKS",
    "Experiment",
    "LMConfig",
    "TrainedModel",
    "bits_per_char",
    "build_lm",
    "build_model",
    "heldout_loss",
    "load_task",
    "loss_without_peeking",
    "run_experiment",
    "seconds_to_reach",
    "shorter_than",
    "train_lm",
    "transformer_preset",
]
