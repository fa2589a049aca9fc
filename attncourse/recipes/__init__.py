"""The chapters' recipes: what each chapter trains, on what and how long, cached.

Modules: ``experiment``, translation (``train``); ``lm``, chapter 7's GPT
(``train-lm``); ``gpu_results``, the committed GPU run.
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
