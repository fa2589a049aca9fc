"""Train and evaluate chapter 7's character-level language model; losses in nats/char.

Source: Radford et al. (2018), section 3.1 (the language-modelling objective).
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
    """What names a run and ``--resume`` compares: :func:`lm_settings` and ``amp``."""
    return {**lm_settings(config), "amp": amp}


def build_lm(config: LMConfig, vocab_size: int, spec: DecoderSpec | None = None) -> GPT:
    """The untrained GPT of ``config`` (or of ``spec``, if given)."""
    return GPT(spec=lm_spec(config, vocab_size) if spec is None else spec)


def with_spec(model: GPT, **changes) -> GPT:
    """Copy of ``model`` with spec ``changes`` (``ValueError`` if parameters change)."""
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
    """Mean cross-entropy (nats/char) over non-overlapping windows of ``context``.

    ``per_position``: a ``(context,)`` tensor. ``ValueError`` if no window fits.
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
    """Mean nats/char of ``n_targets`` characters, each from the ``context`` before it.

    As generation sees the text; ``ValueError`` if ``ids`` is too short.
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
    """AdamW (Loshchilov, Hutter 2019) decaying the matrices only, in group 0."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr)


def train_lm_epoch(epoch: Epoch, config: LMConfig, corpus: CharCorpus) -> dict[str, float]:
    """One epoch of ``config.steps_per_epoch`` steps on random windows, warmup first.

    Returns ``step``, ``train_loss`` (nats); ``FloatingPointError`` if it diverges.
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
    """Train (or load from its folder) the model of ``config`` on ``corpus``.

    ``text`` names an unnamed corpus; history: ``train_loss``, ``valid_loss`` (nats).
    Raises ``ValueError`` without a corpus name, ``FloatingPointError`` on divergence.
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
