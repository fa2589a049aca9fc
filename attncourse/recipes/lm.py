"""Train and evaluate the character-level decoder-only language model of chapter 7.

:class:`LMConfig` fixes everything a run depends on (the corpus, by its digest;
the model; the optimiser; the budget in steps). :func:`train_lm` trains a
:class:`~attncourse.nn.gpt.GPT` on random windows of the training text through
:func:`~attncourse.train.loop.train_epochs`, in "epochs" of ``steps_per_epoch``
steps, so a finished run loads from ``runs_dir`` instead of training again, an
interrupted one resumes, and every checkpoint loads with ``weights_only=True``.

Losses are in nats per character (cross-entropy with the natural log);
:func:`bits_per_char` converts. :func:`heldout_loss` scores non-overlapping
windows of the held-out text, each position predicted from the earlier positions
of its window (so it averages over contexts of 0 .. context - 1 characters);
:func:`loss_without_peeking` predicts each held-out character from the
``context`` characters before it *only*, the way generation sees the text, which
is the honest score of a model trained without the causal mask.

References
----------
Radford et al. (2018), section 3.1 (the language-modelling objective).
Loshchilov, Hutter (2019), "Decoupled Weight Decay Regularization" (AdamW).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from attncourse.data.text import CharCorpus, random_windows, text_digest
from attncourse.data.vocab import Vocabulary
from attncourse.nn.gpt import GPT
from attncourse.nn.spec import DecoderSpec
from attncourse.recipes.lm_config import (  # noqa: F401 (importable from here: the chapters' one import)
    VARIANT_OPTIONS,
    LMConfig,
    LMSettings,
    lm_attention,
    lm_settings,
    lm_spec,
)
from attncourse.train.loop import Epoch, EpochRun, train_epochs


def lm_run_settings(config: LMConfig, amp: str | None = None) -> dict:
    """What names a run of :func:`train_lm` and what ``--resume`` compares: :func:`lm_settings` and
    the autocast (it changes the numbers)."""
    return {**lm_settings(config), "amp": amp}


def build_lm(config: LMConfig, vocab_size: int, spec: DecoderSpec | None = None) -> GPT:
    """The untrained :class:`~attncourse.nn.gpt.GPT` of ``config`` (of ``spec``, if the caller made
    :func:`lm_spec` already)."""
    return GPT(spec=lm_spec(config, vocab_size) if spec is None else spec)


def with_spec(model: GPT, **changes) -> GPT:
    """A copy of ``model`` (same weights, eval mode) whose spec has ``changes`` (DecoderSpec fields).

    ``positions=PositionSpec("rope", rope_scaling="yarn", ...)`` stretches a trained RoPE model
    zero-shot (the scalings change no parameter); ``max_len=512`` gives a sinusoidal model a
    longer table (computed, not trained).

    Raises
    ------
    ValueError
        If the changes alter the parameters: a learned table of another length, or positions
        that need parameters the model lacks.
    """
    copy = GPT(spec=dataclasses.replace(model.spec, **changes))
    ours, theirs = copy.state_dict(), model.state_dict()
    differ = sorted(k for k in ours.keys() | theirs.keys()
                    if k not in ours or k not in theirs or ours[k].shape != theirs[k].shape)
    if differ:
        raise ValueError(f"{changes} change the model's parameters ({', '.join(differ)}): "
                         "a trained model cannot be given them")
    copy.load_state_dict(theirs)
    copy.vocab = getattr(model, "vocab", None)
    return copy.to(next(model.parameters()).device).eval()


def bits_per_char(loss_nats: float) -> float:
    """A cross-entropy in nats per character, in bits: ``loss / ln 2``."""
    return loss_nats / math.log(2)


def _model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def heldout_loss(model: GPT, ids: torch.Tensor, context: int, max_windows: int | None = None,
                 batch_size: int = 64, per_position: bool = False) -> float | torch.Tensor:
    """Mean cross-entropy (nats/char) over non-overlapping windows of ``context`` predictions.

    Parameters
    ----------
    model : GPT
    ids : (n,) int64
        E.g. the held-out text.
    context : int
        Window length; each window's t-th target is predicted from its first t + 1 inputs.
    max_windows : int, optional
        Use the first windows only (all by default).
    batch_size : int
        Windows per forward pass.
    per_position : bool
        Return the mean loss at each position of the window instead of the overall mean.

    Returns
    -------
    float, or (context,) float64 tensor with ``per_position``

    Raises
    ------
    ValueError
        If ``ids`` holds no window of ``context + 1`` tokens.
    """
    n_windows = (ids.numel() - 1) // context
    if n_windows < 1:
        raise ValueError(f"{ids.numel()} tokens hold no window of context + 1 = {context + 1}")
    n_windows = n_windows if max_windows is None else min(n_windows, max_windows)
    starts = torch.arange(n_windows) * context
    was_training = model.training
    model.eval()
    total, count = torch.zeros(context, dtype=torch.float64), 0
    for first in range(0, n_windows, batch_size):
        windows = ids[starts[first:first + batch_size, None] + torch.arange(context + 1)].to(_model_device(model))
        logits, _ = model(windows[:, :-1])
        losses = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")  # (batch, context)
        total += losses.double().sum(0).cpu()
        count += windows.shape[0]
    model.train(was_training)
    return total / count if per_position else float(total.sum() / (count * context))


@torch.no_grad()
def loss_without_peeking(model: GPT, ids: torch.Tensor, context: int, n_targets: int = 512) -> float:
    """Mean cross-entropy (nats/char) of ``n_targets`` characters, each predicted from the ``context`` before it only.

    Each target gets its own input window, ``ids[t - context : t]``, and only the
    last position's prediction counts: the model never receives the character it
    predicts, nor any later one, whatever its mask. For a causal model this is its
    loss at context length ``context``; a model trained without the mask is scored
    on what it can do when generating.

    Raises
    ------
    ValueError
        If ``ids`` has fewer than ``context + 1`` tokens.
    """
    if ids.numel() < context + 1:
        raise ValueError(f"{ids.numel()} tokens hold no window of context + 1 = {context + 1}")
    targets = torch.linspace(context, ids.numel() - 1, min(n_targets, ids.numel() - context)).long()
    was_training = model.training
    model.eval()
    windows = ids[targets[:, None] - context + torch.arange(context)].to(_model_device(model))
    logits, _ = model(windows)
    loss = float(F.cross_entropy(logits[:, -1], ids[targets].to(logits.device)))
    model.train(was_training)
    return loss


def decoupled_adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW that decays the matrices only.

    Parameters of two or more dimensions (the weight matrices and embeddings) get
    ``weight_decay``; the others (biases, the norms' gains) get none, as GPT-2 and most
    language models since train them.

    Parameters
    ----------
    model : torch.nn.Module
    lr : float
        AdamW's learning rate.
    weight_decay : float
        Decoupled weight decay of the matrices (Loshchilov, Hutter 2019).

    Returns
    -------
    torch.optim.AdamW
        Two parameter groups, the decayed one first, each in ``model.parameters()``'s order.
    """
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr)


def train_lm_epoch(epoch: Epoch, config: LMConfig, corpus: CharCorpus) -> dict[str, float]:
    """One epoch of next-character training, for :func:`~attncourse.train.loop.train_epochs`.

    ``config.steps_per_epoch`` steps, each on ``config.batch_size`` random windows of
    ``config.context`` characters of ``corpus.train``, the learning rate rising linearly
    over the first ``config.warmup`` steps, then constant at ``config.lr``; the gradient is
    clipped by the loop (its ``clip_norm``).

    Returns
    -------
    dict
        ``step`` (the last step's number) and ``train_loss`` (nats, mean over the epoch).

    Raises
    ------
    FloatingPointError
        If the loss becomes NaN or infinite.
    """
    dev = epoch.device
    total = 0.0
    for i in range(config.steps_per_epoch):
        step = (epoch.number - 1) * config.steps_per_epoch + i + 1
        for group in epoch.optimizer.param_groups:
            group["lr"] = config.lr * min(1.0, step / max(1, config.warmup))
        inputs, targets = random_windows(corpus.train, config.context, config.batch_size)
        with epoch.autocast():
            logits, _ = epoch.forward(inputs.to(dev))
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.to(dev).flatten())
        epoch.step(loss)  # clipped at config.clip_norm
        total += float(loss.detach())
        if not math.isfinite(total):
            raise FloatingPointError(f"training diverged at step {step} (loss {total / (i + 1):g}); "
                                     f"lower the learning rate (lr={config.lr:g})")
    return {"step": epoch.number * config.steps_per_epoch, "train_loss": total / config.steps_per_epoch}


def train_lm(config: LMConfig, corpus: CharCorpus, text: str | None = None, progress: bool = True,
             device: str | torch.device | None = None, out_dir: str | Path | None = None, *,
             amp: str | None = None, compile: bool = False, extend: bool = False,
             spec: DecoderSpec | None = None) -> EpochRun:
    """Train (or load) the language model of ``config`` on ``corpus``.

    Parameters
    ----------
    config : LMConfig
        Its ``corpus`` field is set to the digest of ``text`` when it is empty.
    corpus : CharCorpus
    text : str, optional
        The corpus's text, to name it in the config (required when ``config.corpus`` is empty).
    progress : bool
        A tqdm bar over the steps (a run loaded from its folder prints one line).
    device : str or torch.device, optional
    out_dir : path, optional
        Default ``runs_dir(f"{config.run_name}-{hash}")``.
    extend : bool
        A run in ``out_dir`` with fewer ``steps`` (and otherwise the same config)
        continues up to ``config.steps`` (``train-lm --resume --steps N``); by
        default a folder of another config is refused.
    amp : {None, "bf16"}
        bfloat16 autocast of the training forward passes (CUDA or CPU); it
        enters the run's config, and so its folder's name, when set.
    compile : bool
        :func:`torch.compile` the training forward pass. Both come from the
        engine's loop (:class:`~attncourse.train.loop.Loop`), as do data
        parallelism under ``torchrun`` and resuming.
    spec : DecoderSpec, optional
        The model's spec, if the caller made it already (``lm_spec(config, len(corpus.vocab))``).

    Returns
    -------
    EpochRun
        ``history`` rows: ``epoch``, ``seconds``, ``step``, ``train_loss`` (nats, mean
        over the epoch's steps), ``valid_loss`` (nats, :func:`heldout_loss` at
        ``config.context`` on the first 64 held-out windows), ``valid_bits_per_char``.
        ``model.vocab`` is set to the corpus's vocabulary.

    Raises
    ------
    ValueError
        If neither ``config.corpus`` nor ``text`` names the corpus.
    FloatingPointError
        If the training loss becomes NaN or infinite (the learning rate is too
        high); the last checkpoint is the one before it.
    """
    if not config.corpus:
        if text is None:
            raise ValueError("train_lm needs the text (or config.corpus set to its digest) to name the run")
        config = dataclasses.replace(config, corpus=text_digest(text))
    spec = lm_spec(config, len(corpus.vocab)) if spec is None else spec

    def build(dev: torch.device):
        model = build_lm(config, len(corpus.vocab), spec).to(dev)
        return model, decoupled_adamw(model, config.lr, config.weight_decay)

    def train_epoch(epoch: Epoch):
        return train_lm_epoch(epoch, config, corpus)

    def evaluate(model: GPT):
        loss = heldout_loss(model, corpus.valid, config.context, max_windows=64)
        return {"valid_loss": loss, "valid_bits_per_char": bits_per_char(loss)}

    settings = lm_run_settings(config, amp)
    run = train_epochs(config.run_name, settings, build, train_epoch, evaluate,
                       config.steps // config.steps_per_epoch, seed=config.seed, progress=progress,
                       device=device, out_dir=out_dir, amp=amp, compile=compile, clip_norm=config.clip_norm,
                       extendable=("steps",) if extend else (), steps_per_epoch=config.steps_per_epoch)
    run.model.vocab = corpus.vocab
    return run


def vocab_of(run: EpochRun) -> Vocabulary:
    """The vocabulary :func:`train_lm` attached to its model."""
    return run.model.vocab
