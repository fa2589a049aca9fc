"""Train the attention-only GPTs of chapter 9 and measure their heads over training.

:class:`InductionConfig` fixes a run: an attention-only
:class:`~attncourse.nn.gpt.GPT` (``attention_only=True``) of 1 or 2 layers, trained
with AdamW on fresh batches of :func:`~attncourse.data.induction.repeated_segments`
(``task="repeat"``) or on random windows of a character corpus, as chapter 7 trains
its GPT (``task="text"``). :func:`train_induction` runs it through
:func:`~attncourse.train.loop.train_epochs`, the course's cached, resumable loop: an
"epoch" is ``steps_per_epoch`` steps, and after each one the loop evaluates
:func:`induction_metrics` on a fixed evaluation batch, so the history holds the loss,
the in-context-learning score and every head's prefix-matching, previous-token and
copying scores at every checkpoint. The weights at every checkpoint (step 0
included) are kept in the run's ``state["snapshots"]`` (a few hundred kB for these
models), for the explorer and for measurements after training (:func:`snapshot_model`).

Measured with the defaults below (torch 2.13, one CPU thread, a shared 2-core machine):
a 2-layer run takes 8-14 s of training (200 steps of 32 sequences) plus its 20
evaluations. The loss on the repeated tokens sinks slowly from 4.4 to about 3.2 by step
80, then falls below 1 by step 120 while the layer-2 heads' prefix-matching scores rise
from about 0.2 to above 0.8; on seeds 0, 1 and 2 the loss crosses half-way at step 100
(:func:`transition_step`). With chapter 7's LayerNorms kept, 2-layer models stalled near
2.3-2.7 nats for 600 steps with no induction head (batch 64, lr 3e-3), which is why
``attention_only`` also drops them. Halving ``d_model`` to 32 gave no induction head in
250 steps.

References
----------
Olsson et al. (2022), "In-context Learning and Induction Heads", sections 2-4.
Elhage et al. (2021), "A Mathematical Framework for Transformer Circuits".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attncourse.data.induction import RepeatBatch, repeated_segments
from attncourse.data.text import CharCorpus, random_windows, text_digest
from attncourse.functional.head_scores import (
    copying_score,
    in_context_learning_score,
    prefix_matching_score,
    previous_token_score,
)
from attncourse.nn.circuits import ov_circuit
from attncourse.nn.gpt import GPT
from attncourse.recipes.lm import decoupled_adamw
from attncourse.runtime import data_seed
from attncourse.train.loop import Epoch, EpochRun, train_epochs

#: Values of ``InductionConfig(task=...)``.
INDUCTION_TASKS: tuple[str, ...] = ("repeat", "text")


@dataclass(frozen=True)
class InductionConfig:
    """One run of chapter 9: an attention-only GPT, its data, optimiser and budget.

    Attributes
    ----------
    task : {"repeat", "text"}
        Repeated random segments, or windows of the character corpus given to
        :func:`train_induction`.
    num_layers, d_model, num_heads : int
        The attention-only :class:`~attncourse.nn.gpt.GPT`.
    positional : str
        As in :class:`~attncourse.nn.gpt.GPT`; learned absolute positions by default.
    vocab_size : int
        Tokens of the repeat task (the text task uses the corpus's vocabulary).
    context : int
        Tokens per training sequence (and ``max_len`` of the model).
    min_segment, max_segment : int
        Segment lengths of the repeat task.
    batch_size, steps, steps_per_epoch : int
        ``steps`` is a multiple of ``steps_per_epoch``, the interval between checkpoints.
    lr, weight_decay, clip_norm : float
        AdamW with a constant learning rate; gradient-norm clipping.
    eval_size : int
        Sequences in the fixed evaluation batch.
    seed : int
    corpus : str
        Digest of the text (task ``"text"``), set by :func:`train_induction`.
    """

    task: str = "repeat"
    num_layers: int = 2
    d_model: int = 64
    num_heads: int = 4
    positional: str = "learned"
    vocab_size: int = 64
    context: int = 64
    min_segment: int = 4
    max_segment: int = 16
    batch_size: int = 32
    steps: int = 200
    steps_per_epoch: int = 10
    lr: float = 5e-3
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    eval_size: int = 64
    seed: int = 0
    corpus: str = ""

    def __post_init__(self) -> None:
        if self.task not in INDUCTION_TASKS:
            raise ValueError(f"task must be one of {INDUCTION_TASKS}, got {self.task!r}")
        if self.steps < 1 or self.steps_per_epoch < 1 or self.steps % self.steps_per_epoch:
            raise ValueError(f"steps={self.steps} must be a positive multiple of "
                             f"steps_per_epoch={self.steps_per_epoch}")

    @property
    def run_name(self) -> str:
        """Readable prefix of the run's folder, e.g. ``"induction/repeat-2layer-seed0"``."""
        return f"induction/{self.task}-{self.num_layers}layer-seed{self.seed}"

    @property
    def icl_positions(self) -> tuple[int, int]:
        """``(early, late)`` of the in-context-learning score: Olsson et al.'s tokens 50 and 500
        of 512, scaled to ``context`` (6 and 62 for 64)."""
        return 49 * self.context // 512, 499 * self.context // 512


def build_induction_model(config: InductionConfig, vocab_size: int | None = None) -> GPT:
    """The untrained attention-only GPT of ``config`` (``vocab_size`` overrides the config's)."""
    vocab = config.vocab_size if vocab_size is None else vocab_size
    return GPT(vocab, d_model=config.d_model, num_heads=config.num_heads, num_layers=config.num_layers,
               max_len=config.context, positional=config.positional, attention_only=True)


@torch.no_grad()
def per_token_loss(model: GPT, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy (nats) of every target: ``(batch, seq_len)`` inputs and targets -> ``(batch, seq_len)``."""
    device = next(model.parameters()).device
    logits, _ = model(inputs.to(device))
    return F.cross_entropy(logits.transpose(1, 2), targets.to(device), reduction="none").cpu()


def head_name(layer: int, head: int) -> str:
    """1-based label of a head, ``"L2H3"`` for layer index 1, head index 2."""
    return f"L{layer + 1}H{head + 1}"


@torch.no_grad()
def head_scores(model: GPT, tokens: torch.Tensor) -> dict[str, float]:
    """Every head's prefix-matching, previous-token and copying score.

    Parameters
    ----------
    model : GPT
    tokens : (batch, seq_len) int
        Sequences with repeats (prefix matching needs tokens that occur twice).

    Returns
    -------
    dict
        ``"prefix_L1H1"``, ``"previous_L1H1"``, ``"copying_L1H1"``, ... for every head:
        the first two averaged over the batch
        (:func:`~attncourse.functional.head_scores.prefix_matching_score`,
        :func:`~attncourse.functional.head_scores.previous_token_score`), the copying
        score from the head's OV circuit
        (:func:`~attncourse.functional.head_scores.copying_score`).
    """
    device = next(model.parameters()).device
    _, weights = model(tokens.to(device), need_weights=True)
    return _scores_of(model, weights, tokens.to(device))


def _scores_of(model: GPT, weights: Sequence[torch.Tensor], tokens: torch.Tensor) -> dict[str, float]:
    scores: dict[str, float] = {}
    for layer, w in enumerate(weights):
        prefix = prefix_matching_score(w, tokens).mean(0)
        previous = previous_token_score(w).mean(0)
        for head in range(w.shape[1]):
            name = head_name(layer, head)
            scores[f"prefix_{name}"] = float(prefix[head])
            scores[f"previous_{name}"] = float(previous[head])
            scores[f"copying_{name}"] = float(copying_score(ov_circuit(model, layer, head)))
    return scores


@torch.no_grad()
def induction_metrics(model: GPT, config: InductionConfig, batch: RepeatBatch) -> dict[str, float]:
    """Losses, in-context-learning score and head scores of ``model`` on a repeat batch.

    Returns
    -------
    dict
        ``loss`` (all targets), ``loss_repeated`` (targets that repeat an earlier token),
        ``loss_first`` (the first segment's targets, unpredictable: ln(vocab) at best),
        ``icl_score`` (:func:`~attncourse.functional.head_scores.in_context_learning_score`
        at :attr:`InductionConfig.icl_positions`), and :func:`head_scores`.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    inputs = batch.inputs.to(device)
    logits, weights = model(inputs, need_weights=True)   # one forward for losses and scores
    losses = F.cross_entropy(logits.transpose(1, 2), batch.targets.to(device), reduction="none").cpu()
    early, late = config.icl_positions
    metrics = {
        "loss": float(losses.mean()),
        "loss_repeated": float(losses[batch.predictable].mean()),
        "loss_first": float(losses[~batch.predictable].mean()),
        "icl_score": float(in_context_learning_score(losses, early, late)),
        **_scores_of(model, weights, inputs),
    }
    model.train(was_training)
    return metrics


def evaluation_batch(config: InductionConfig, vocab_size: int | None = None, offset: int = 4) -> RepeatBatch:
    """The fixed evaluation batch of ``config``: repeated segments from their own seed.

    With the text task the tokens are the corpus's characters (ids from ``offset``, after
    the special ids), so that the text model's heads are scored on repeats of real symbols.
    """
    generator = torch.Generator().manual_seed(data_seed(10_000 + config.seed))
    if config.task == "repeat":
        return repeated_segments(config.eval_size, config.context, config.vocab_size, config.min_segment,
                                 config.max_segment, generator)
    batch = repeated_segments(config.eval_size, config.context, vocab_size - offset, config.min_segment,
                              config.max_segment, generator)
    return dataclasses.replace(batch, inputs=batch.inputs + offset, targets=batch.targets + offset)


def train_induction(config: InductionConfig, corpus: CharCorpus | None = None, text: str | None = None,
                    progress: bool = True, device: str | torch.device | None = None) -> EpochRun:
    """Train (or load) the attention-only GPT of ``config``, measuring its heads at every checkpoint.

    Parameters
    ----------
    config : InductionConfig
    corpus : CharCorpus, optional
        Required for ``task="text"``.
    text : str, optional
        The corpus's text, to name it in the config (when ``config.corpus`` is empty).
    progress : bool
        A tqdm bar over the checkpoints.
    device : str or torch.device, optional

    Returns
    -------
    EpochRun
        ``history`` rows: ``epoch``, ``seconds``, ``step``, ``train_loss``, then
        :func:`induction_metrics` on :func:`evaluation_batch` (for ``task="text"`` also
        ``valid_loss``, the held-out text's loss). ``state["snapshots"]`` maps each
        checkpoint's step (a string, ``"0"`` for the initial weights) to a state dict.

    Raises
    ------
    ValueError
        If ``task="text"`` comes without a corpus, or without a text or digest to name it.
    """
    if config.task == "text":
        if corpus is None:
            raise ValueError("task='text' needs the corpus (attncourse.data.text.char_corpus)")
        if not config.corpus:
            if text is None:
                raise ValueError("task='text' needs the text (or config.corpus set to its digest) to name the run")
            config = dataclasses.replace(config, corpus=text_digest(text))
    vocab_size = config.vocab_size if corpus is None or config.task == "repeat" else len(corpus.vocab)
    eval_batch = evaluation_batch(config, vocab_size)

    def build(dev: torch.device):
        model = build_induction_model(config, vocab_size).to(dev)
        return model, decoupled_adamw(model, config.lr, config.weight_decay)

    def snapshot(model: GPT) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}

    def train_epoch(epoch: Epoch) -> dict[str, float]:
        model, dev = epoch.model, epoch.device
        snapshots = epoch.state.setdefault("snapshots", {})
        if epoch.number == 1:
            snapshots["0"] = snapshot(model)
        total = 0.0
        for _ in range(config.steps_per_epoch):
            if config.task == "repeat":
                batch = repeated_segments(config.batch_size, config.context, config.vocab_size,
                                          config.min_segment, config.max_segment)
                inputs, targets = batch.inputs, batch.targets
            else:
                inputs, targets = random_windows(corpus.train, config.context, config.batch_size)
            logits, _ = epoch.forward(inputs.to(dev))
            loss = F.cross_entropy(logits.flatten(0, 1), targets.to(dev).flatten())
            epoch.step(loss)
            total += float(loss.detach())
        step = epoch.number * config.steps_per_epoch
        snapshots[str(step)] = snapshot(model)
        return {"step": step, "train_loss": total / config.steps_per_epoch}

    def evaluate(model: GPT):
        metrics = induction_metrics(model, config, eval_batch)
        if config.task == "text":
            inputs, targets = random_windows(corpus.valid, config.context, 64,
                                             torch.Generator().manual_seed(data_seed(config.seed)))
            metrics["valid_loss"] = float(per_token_loss(model, inputs, targets).mean())
        return metrics

    return train_epochs(config.run_name, dataclasses.asdict(config), build, train_epoch, evaluate,
                        config.steps // config.steps_per_epoch, seed=config.seed, progress=progress,
                        device=device, clip_norm=config.clip_norm)


def snapshot_model(run: EpochRun, step: int | str) -> GPT:
    """A copy of the run's model with the weights it had at checkpoint ``step`` (evaluation mode).

    Raises
    ------
    KeyError
        If the run kept no snapshot at ``step`` (the steps are ``run.state["snapshots"]``'s keys).
    """
    snapshots = run.state["snapshots"]
    if str(step) not in snapshots:
        raise KeyError(f"no snapshot at step {step}; the run has steps {sorted(map(int, snapshots))}")
    model = GPT.from_config(run.model.config).to(next(run.model.parameters()).device)
    model.load_state_dict(snapshots[str(step)])
    return model.eval()


def snapshot_steps(run: EpochRun) -> list[int]:
    """The steps at which ``run`` kept weights, in order (0 first)."""
    return sorted(int(s) for s in run.state["snapshots"])


def transition_step(steps: Sequence[int], values: Sequence[float]) -> int:
    """The first step at which ``values`` has covered half of its way from its first to its last value.

    The criterion of chapter 9 for "the step of the change": for a falling loss, the
    first checkpoint at or below ``(first + last) / 2``; for a rising score, the first at
    or above it. Half-way is robust to noise on the plateaus, where a largest-jump
    criterion is not.

    Parameters
    ----------
    steps : sequence of int
        Increasing.
    values : sequence of float
        One per step.

    Returns
    -------
    int
        An element of ``steps``.

    Raises
    ------
    ValueError
        If the lengths differ or fewer than two values are given.
    """
    if len(steps) != len(values) or len(values) < 2:
        raise ValueError(f"need as many steps as values (at least 2), got {len(steps)} and {len(values)}")
    first, last = float(values[0]), float(values[-1])
    half = (first + last) / 2
    for step, value in zip(steps, values):
        if (value <= half) if last < first else (value >= half):
            return int(step)
    return int(steps[-1])
