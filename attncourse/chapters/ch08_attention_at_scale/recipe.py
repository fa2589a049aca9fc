"""Train softmax and linear attention on associative recall, and measure their recall.

:class:`~attncourse.nn.recall.RecallModel` learns on fresh random batches of
:func:`~attncourse.data.recall.associative_recall` (each batch with a number of pairs drawn
in turn from ``pair_counts``), with Adam and cross-entropy on the stored value. The run is
cached under ``runs_dir("recall/{attention}-seed{seed}-{hash}")`` like every trained model
of the course, so a second run of the chapter loads it.

Measured with the defaults (d_model 64, d_k 16, 128 key and 128 value symbols, 2,000 steps
of 128 examples, one CPU thread: about half a minute per model on a busy 2-core machine;
train small models like this one with ``torch.set_num_threads(1)``, since two threads
fighting a busy machine's other work made an epoch up to 30 times slower): softmax
attention recalls 99.9-100 % of the queries for 4 to 64 pairs and 99.8 % for 128; linear
attention 98 % for 4 pairs, 68 % for 32 and 20 % for 128.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attncourse.data.recall import RecallBatch, associative_recall
from attncourse.nn.recall import RECALL_ATTENTIONS, RecallModel
from attncourse.runtime import data_seed
from attncourse.train.loop import Epoch, EpochRun, train_epochs


@dataclass(frozen=True)
class RecallConfig:
    """Everything a recall run depends on.

    Attributes
    ----------
    attention : {"softmax", "linear"}
    seed : int
        Seeds the initial weights and every batch.
    n_keys, n_values : int
        Vocabulary sizes.
    d_model, d_k : int
    pair_counts : tuple of int
        Pairs per context, one count per training batch in turn.
    batch_size, steps_per_epoch, epochs : int
    lr : float
        Adam's learning rate.
    """

    attention: str = "softmax"
    seed: int = 0
    n_keys: int = 128
    n_values: int = 128
    d_model: int = 64
    d_k: int = 16
    pair_counts: tuple[int, ...] = (8, 16, 32, 64, 128)
    batch_size: int = 128
    steps_per_epoch: int = 200
    epochs: int = 10
    lr: float = 3e-3

    def __post_init__(self) -> None:
        if self.attention not in RECALL_ATTENTIONS:
            raise ValueError(f"attention must be one of {RECALL_ATTENTIONS}, got {self.attention!r}")
        if not self.pair_counts or max(self.pair_counts) > self.n_keys:
            raise ValueError(f"pair_counts {self.pair_counts} must be non-empty and at most n_keys={self.n_keys}")

    @property
    def run_name(self) -> str:
        """Folder prefix of the run, e.g. ``"recall/linear-seed0"``."""
        return f"recall/{self.attention}-seed{self.seed}"


def _to_device(batch: RecallBatch, device: torch.device) -> RecallBatch:
    return dataclasses.replace(batch, **{f.name: getattr(batch, f.name).to(device) for f in dataclasses.fields(batch)})


def recall_accuracy(model: RecallModel, config: RecallConfig, n_pairs: int, n_examples: int = 2000,
                    seed: int = 12345) -> float:
    """Fraction of fresh examples with ``n_pairs`` pairs whose stored value the model names.

    The examples come from their own generator (``seed``), apart from the training batches.
    """
    generator = torch.Generator().manual_seed(data_seed(seed) + n_pairs)
    batch = associative_recall(n_examples, n_pairs, config.n_keys, config.n_values, generator)
    device = next(model.parameters()).device
    batch = _to_device(batch, device)
    model.eval()
    with torch.no_grad():
        return float((model(batch).argmax(dim=-1) == batch.target).float().mean())


def train_recall(config: RecallConfig, progress: bool = True, device: str | torch.device | None = None) -> EpochRun:
    """Train (or load) the recall model of ``config``.

    Returns
    -------
    EpochRun
        ``history`` rows hold ``epoch``, ``seconds``, ``train_loss`` and ``valid_accuracy``
        (recall with the largest of ``pair_counts``).
    """
    def build(dev: torch.device):
        model = RecallModel(config.n_keys, config.n_values, config.d_model, config.d_k, config.attention).to(dev)
        return model, torch.optim.Adam(model.parameters(), lr=config.lr)

    def train_epoch(epoch: Epoch):
        dev = epoch.device
        generator = torch.Generator().manual_seed(data_seed(config.seed) * 1000 + epoch.number)
        total = 0.0
        for step in range(config.steps_per_epoch):
            n_pairs = config.pair_counts[step % len(config.pair_counts)]
            batch = associative_recall(config.batch_size, n_pairs, config.n_keys, config.n_values, generator)
            batch = _to_device(batch, dev)
            with epoch.autocast():
                logits = epoch.forward(batch)
            loss = F.cross_entropy(logits, batch.target)
            epoch.step(loss)
            total += loss.item()
        return {"train_loss": total / config.steps_per_epoch}

    def evaluate(model):
        return {"valid_accuracy": recall_accuracy(model, config, max(config.pair_counts), n_examples=500,
                                                  seed=777)}

    settings = dataclasses.asdict(config)
    settings["pair_counts"] = list(config.pair_counts)
    return train_epochs(config.run_name, settings, build, train_epoch, evaluate, config.epochs,
                        seed=config.seed, progress=progress, device=device)


__all__ = ["RecallConfig", "recall_accuracy", "train_recall"]
