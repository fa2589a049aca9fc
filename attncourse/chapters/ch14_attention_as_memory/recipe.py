"""Train one-layer MQAR models with softmax attention and with each fixed-size memory.

:class:`~attncourse.nn.recall.MQARModel` learns multi-query associative recall
(:mod:`attncourse.data.mqar`) on fresh random batches, each with a number of pairs taken
in turn from ``pair_counts`` and every pair asked, with Adam and cross-entropy on the
values. A run is cached under ``runs_dir("mqar/{attention}-seed{seed}-{hash}")`` like every
trained model of the course, so a second run of the chapter loads it.

Measured with the defaults (d_model 32, one head: a 32 x 32 state; 128 key and 64 value
symbols; 960 steps of 64 contexts; one CPU thread; about 70 CPU-seconds for the four on a
busy 2-core machine), recall at 4, 8, 16, 32, 64 and 128 pairs, seeds 0 and 1: softmax
attention 1.00 everywhere; linear attention 0.99-1.00, 0.98, 0.92-0.93, 0.78-0.79,
0.53, 0.28; DeltaNet 1.00, 1.00, 0.99, 0.89-0.91, 0.62-0.66, 0.34-0.37; Gated DeltaNet
0.93-1.00, 0.90-1.00, 0.85-0.98, 0.75-0.89, 0.54-0.64, 0.29-0.36 (chapter 14 asserts
bounds on these).

References
----------
Arora et al. (2023), "Zoology", section 3 (MQAR); Yang et al. (2024, 2025) for DeltaNet
and Gated DeltaNet.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attncourse.data.mqar import MQARBatch, multi_query_recall
from attncourse.nn.recall import MQARModel
from attncourse.runtime import data_seed
from attncourse.train.loop import Epoch, EpochRun, train_epochs

#: The attentions the chapter compares, by the registry's names.
MQAR_ATTENTIONS: tuple[str, ...] = ("gqa", "linear", "deltanet", "gated-deltanet")


@dataclass(frozen=True)
class MQARConfig:
    """Everything an MQAR run depends on.

    Attributes
    ----------
    attention : str
        One of :data:`MQAR_ATTENTIONS` (``"gqa"``: softmax attention).
    seed : int
        Seeds the initial weights and the training batches (both plus ``$ATTNCOURSE_SEED_OFFSET``).
    n_keys, n_values, d_model, num_heads : int
    pair_counts : tuple of int
        Pairs per context, one count per training batch in turn (every pair asked).
    batch_size, steps_per_epoch, epochs : int
    lr : float
        Adam's learning rate.
    """

    attention: str = "gqa"
    seed: int = 0
    n_keys: int = 128
    n_values: int = 64
    d_model: int = 32
    num_heads: int = 1
    pair_counts: tuple[int, ...] = (4, 8, 16, 32, 64)
    batch_size: int = 64
    steps_per_epoch: int = 80
    epochs: int = 12
    lr: float = 3e-3

    def __post_init__(self) -> None:
        if self.attention not in MQAR_ATTENTIONS:
            raise ValueError(f"attention must be one of {MQAR_ATTENTIONS}, got {self.attention!r}")
        if not self.pair_counts or max(self.pair_counts) > self.n_keys:
            raise ValueError(f"pair_counts {self.pair_counts} must be non-empty and at most "
                             f"n_keys={self.n_keys}")

    @property
    def run_name(self) -> str:
        """Folder prefix of the run, e.g. ``"mqar/deltanet-seed0"``."""
        return f"mqar/{self.attention}-seed{self.seed}"


def _to_device(batch: MQARBatch, device: torch.device) -> MQARBatch:
    return dataclasses.replace(batch, keys=batch.keys.to(device), values=batch.values.to(device),
                               asked=batch.asked.to(device))


@torch.no_grad()
def mqar_accuracy(model: MQARModel, config: MQARConfig, n_pairs: int, n_examples: int = 256,
                  seed: int = 12345) -> float:
    """Share of the queries of fresh contexts with ``n_pairs`` pairs that the model answers.

    The contexts come from their own generator (``seed + n_pairs``), apart from training's.
    """
    generator = torch.Generator().manual_seed(data_seed(seed) + n_pairs)
    batch = multi_query_recall(n_examples, n_pairs, n_pairs, config.n_keys, config.n_values, generator)
    batch = _to_device(batch, next(model.parameters()).device)
    model.eval()
    return float((model(batch).argmax(dim=-1) == batch.answers).float().mean())


def train_mqar(config: MQARConfig, progress: bool = True,
               device: str | torch.device | None = None) -> EpochRun:
    """Train (or load) the MQAR model of ``config``.

    Returns
    -------
    EpochRun
        ``history`` rows hold ``epoch``, ``seconds``, ``train_loss`` and ``valid_accuracy``
        (recall at the largest of ``pair_counts``).
    """
    def build(dev: torch.device):
        model = MQARModel(config.attention, config.n_keys, config.n_values, config.d_model,
                          config.num_heads).to(dev)
        return model, torch.optim.Adam(model.parameters(), lr=config.lr)

    def train_epoch(epoch: Epoch):
        generator = torch.Generator().manual_seed(data_seed(config.seed) * 1000 + epoch.number)
        total = 0.0
        for step in range(config.steps_per_epoch):
            n_pairs = config.pair_counts[step % len(config.pair_counts)]
            batch = multi_query_recall(config.batch_size, n_pairs, n_pairs, config.n_keys,
                                       config.n_values, generator)
            batch = _to_device(batch, epoch.device)
            with epoch.autocast():
                logits = epoch.forward(batch)
            loss = F.cross_entropy(logits.flatten(0, 1), batch.answers.flatten())
            epoch.step(loss)
            total += loss.item()
        return {"train_loss": total / config.steps_per_epoch}

    def evaluate(model):
        return {"valid_accuracy": mqar_accuracy(model, config, max(config.pair_counts), n_examples=64,
                                                seed=777)}

    settings = dataclasses.asdict(config)
    settings["pair_counts"] = list(config.pair_counts)
    return train_epochs(config.run_name, settings, build, train_epoch, evaluate, config.epochs,
                        seed=config.seed, progress=progress, device=device,
                        steps_per_epoch=config.steps_per_epoch)


__all__ = ["MQAR_ATTENTIONS", "MQARConfig", "mqar_accuracy", "train_mqar"]
