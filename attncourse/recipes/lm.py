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
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from attncourse.data.text import CharCorpus, random_windows, text_digest
from attncourse.data.vocab import Vocabulary
from attncourse.nn.gated import GatedOptions
from attncourse.nn.gpt import GPT, GPT_POSITIONAL
from attncourse.nn.old_files import SAVED_FIELDS
from attncourse.nn.rope import ROPE_SCALINGS
from attncourse.nn.spec import AttentionSpec, DecoderSpec, PositionSpec
from attncourse.recipes.lm_options import (  # importable from here too
    in_options,
    lm_attention,
    lm_decoder_spec,
    lm_layer_attention,
)
from attncourse.train.config import (
    BATCH,
    CLIP_NORM,
    FFN_WIDTH,
    HEADS,
    LAYERS,
    LEARNING_RATE,
    ROPE_FACTOR,
    SIZE,
    STEPS,
    WEIGHT_DECAY,
    WIDTH,
    Limit,
    setting,
)
from attncourse.train.loop import Epoch, EpochRun, train_epochs


@dataclass(frozen=True)
class LMConfig:
    """One language-model run: model, data, optimiser and budget.

    Attributes
    ----------
    positional : {"sinusoidal", "learned", "rope", "alibi"}
    num_kv_heads : int or None
        None: as many as ``num_heads`` (multi-head); ``num_heads`` itself is stored as None.
    causal : bool
    window : int or None
        Sliding-window attention.
    d_model, num_heads, num_layers, d_ff, max_len : int
        The :class:`~attncourse.nn.gpt.GPT`'s sizes.
    context : int
        Training window, in characters.
    batch_size : int
        Windows per step.
    steps : int
        Optimiser steps in all; a multiple of ``steps_per_epoch``.
    steps_per_epoch : int
        Steps between checkpoints and validation.
    lr : float
        AdamW's learning rate, constant after ``warmup`` linear steps.
    warmup : int
    weight_decay : float
    clip_norm : float
    dropout : float
    seed : int
        Initial weights and the windows drawn.
    corpus : str
        Digest of the text (:func:`~attncourse.data.text.text_digest`), set by :func:`train_lm`.
    latent_dim, rope_dim : int or None
        Multi-head latent attention (chapter 10; :class:`~attncourse.nn.gpt.GPT`'s options).
    rope_scaling : {"pi", "ntk", "yarn"} or None
        Stretch RoPE by ``rope_factor`` for a model trained on ``context`` positions
        (chapter 12; :class:`~attncourse.nn.rope.RopeScaling`).
    rope_factor : float
        The scale factor s >= 1 (target length / training length); 1 without ``rope_scaling``.
    gate : bool
        Qiu et al.'s (2025) sigmoid gate on every head's output (chapter 12;
        :mod:`attncourse.nn.gated`).
    attention : str or None
        A registered attention variant (:data:`~attncourse.nn.spec.ATTENTION_VARIANTS`), with
        the options of :data:`~attncourse.recipes.lm_options.ATTENTION_OPTIONS` it has
        (:func:`~attncourse.recipes.lm_options.lm_attention`); None: ``"gqa"``,
        or ``"mla"`` with ``latent_dim``, ``"gated"`` with ``gate``. A name those options already
        imply is stored as None (the same model, the same run).
    chunk_size : int or None
        With a memory attention (``"linear"``, ``"deltanet"``, ``"gated-deltanet"``): positions
        per chunk of the delta rules' chunkwise form (:class:`~attncourse.nn.memory_attention.MemoryOptions`;
        None: its default, 64). The outputs agree to rounding whatever the size; on a CPU,
        chunks of 16 train chapter 7's DeltaNet in three quarters of the time of 64.
    softmax_every : int or None
        A hybrid (chapter 14): every ``softmax_every``-th block has softmax attention (``"gqa"``),
        the others ``attention`` (Qwen3-Next, 2025: 4, three Gated DeltaNet blocks per softmax
        block); ``num_layers`` must be a multiple of it. None: every block has ``attention``.

    ``latent_dim`` and the fields after it, unset, stay out of the run's settings
    (:func:`lm_settings`), so earlier runs keep their folders.

    Raises
    ------
    ValueError
        For a step count that is not a multiple of ``steps_per_epoch``, a context past a
        position table, or options that clash (scaling without RoPE, a factor without a
        scaling, the gate with latent attention, an unregistered ``attention`` or an option its
        variant lacks); one line naming the options.
    """

    # Each field but ``corpus`` is also an option of ``train-lm`` (:func:`~attncourse.train.config.setting`).
    positional: str = setting("rope", "position scheme (default rope)", choices=GPT_POSITIONAL, group="model")
    num_kv_heads: int | None = setting(
        None, "key/value heads: 1 multi-query, between grouped-query (default: --num-heads)",
        check="positive_int", limit=HEADS, group="model", metavar="G")
    causal: bool = setting(
        True, "the causal mask (default); --no-causal trains without it, to see the model peek (chapter 7)",
        group="model")
    window: int | None = setting(
        None, "sliding-window attention over W tokens", check="positive_int",
        limit=Limit(1, 8192, "a window wider than --max-len's ceiling changes nothing"), group="model",
        metavar="W")
    d_model: int = setting(64, "width of the embeddings and of every block (default 64)", check="positive_int",
                           limit=WIDTH, group="model", metavar="N")
    num_heads: int = setting(8, "attention heads; must divide --d-model (default 8)", check="positive_int",
                             limit=HEADS, group="model", metavar="N")
    num_layers: int = setting(2, "decoder blocks (default 2)", check="positive_int", limit=LAYERS,
                              group="model", metavar="N")
    d_ff: int = setting(256, "inner width of the feed-forward layers (default 256)", check="positive_int",
                        limit=FFN_WIDTH, group="model", metavar="N")
    max_len: int = setting(
        256, "positions of a sinusoidal or learned table (default 256)", check="positive_int",
        limit=Limit(1, 8192, "positions; attention memory grows with its square"), group="model", metavar="N")
    context: int = setting(64, "training window, in characters (default 64)", check="positive_int",
                           limit=Limit(1, 8192, "attention memory grows with its square"), metavar="N")
    batch_size: int = setting(32, "windows per step (default 32)", check="positive_int", limit=BATCH,
                              metavar="N")
    steps: int = setting(300, "optimiser steps in all; a multiple of --steps-per-epoch (default 300)",
                         check="positive_int", limit=STEPS, metavar="N")
    steps_per_epoch: int = setting(100, "steps between checkpoints and validation (default 100)",
                                   check="positive_int", limit=STEPS, metavar="N")
    lr: float = setting(3e-3, "AdamW's learning rate, constant after the warmup (default 0.003)",
                        check="positive_float", limit=LEARNING_RATE, metavar="LR")
    warmup: int = setting(30, "steps of linear warmup of the rate (default 30)", check="positive_int",
                          limit=STEPS, metavar="N")
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay (default 0.01)",
                                  check="nonnegative_float", limit=WEIGHT_DECAY, metavar="W")
    clip_norm: float = setting(1.0, "clip the gradient's global norm to C (default 1.0)", check="positive_float",
                               limit=CLIP_NORM, metavar="C")
    dropout: float = setting(0.0, "dropout in every block (default 0)", check="dropout", group="model",
                             metavar="P")
    seed: int = setting(0, "initial weights and batches (default 0)", check="seed", metavar="S")
    #: Not an option: train_lm sets it to the text's digest (--text names the text).
    corpus: str = ""
    latent_dim: int | None = setting(
        None, "multi-head latent attention (chapter 10): cache a latent of D numbers per token (DeepSeek-V2); "
        "not with --num-kv-heads, --window or ALiBi", check="positive_int", limit=WIDTH,
        group="model", metavar="D")
    rope_dim: int | None = setting(
        None, "with --latent-dim and --positional rope: the rotary part of each query and key, even (default: "
        "half a head, rounded up to even)", check="int", limit=Limit(0, 4096, SIZE), group="model", metavar="R")
    rope_scaling: str | None = setting(
        None, "stretch RoPE past the training length --context (chapter 12): position interpolation, "
        "NTK-aware base, or YaRN (by frequency band, with its attention temperature)", choices=ROPE_SCALINGS,
        group="model")
    rope_factor: float = setting(
        1.0, "with --rope-scaling: the scale factor s = target length / --context (default 1)",
        check="positive_float", limit=ROPE_FACTOR, group="model",
        metavar="S")
    gate: bool = setting(
        False, "a sigmoid gate on every head's output, from the layer's input (Qiu et al. 2025; chapter 12); "
        "not with --latent-dim", group="model", negatable=False)
    attention: str | None = setting(
        None, "the attention variant, any registered by name: gqa, mla, gated, and those of the modules named "
        "in the environment variable ATTNCOURSE_VARIANTS; --num-kv-heads, --window, --latent-dim, "
        "--rope-dim and --chunk-size set its options of those names (default: gqa; mla with --latent-dim, "
        "gated with --gate)",
        check="text", group="model", metavar="NAME")
    chunk_size: int | None = setting(
        None, "with --attention linear, deltanet or gated-deltanet: positions per chunk of the delta rules' "
        "chunkwise form (default 64; the outputs agree to rounding, 16 trains faster on a CPU)",
        check="positive_int", limit=Limit(1, 8192, "a chunk's matrices grow with its square"), group="model",
        metavar="C")
    softmax_every: int | None = setting(
        None, "a hybrid (chapter 14): every N-th block keeps softmax attention (gqa), the others --attention "
        "(Qwen3-Next: 4); --num-layers must be a multiple of N", check="positive_int", limit=LAYERS,
        group="model", metavar="N")

    def __post_init__(self) -> None:
        if self.num_kv_heads == self.num_heads:  # multi-head either way: one name, one cached run
            object.__setattr__(self, "num_kv_heads", None)
        if self.steps < 1 or self.steps_per_epoch < 1 or self.steps % self.steps_per_epoch:
            raise ValueError(f"steps={self.steps} must be a positive multiple of "
                             f"steps_per_epoch={self.steps_per_epoch}")
        if self.context < 1 or self.batch_size < 1:
            raise ValueError(f"context and batch_size must be positive, got {self.context}, {self.batch_size}")
        if self.positional in ("sinusoidal", "learned") and self.context > self.max_len:
            raise ValueError(f"context={self.context} does not fit max_len={self.max_len} positions")
        if self.attention is not None:
            self._normalise_attention()
        try:  # every rule of the model (positions, the variant and its options), checked by the spec
            lm_decoder_spec(self, 1)
        except ValueError as error:
            raise ValueError(in_options(str(error))) from None

    def _normalise_attention(self) -> None:
        """``--attention``: the name the other options already say is left out (one model, one run
        folder); the others are checked with the model."""
        implied = {"gqa": not self.gate and self.latent_dim is None, "gated": self.latent_dim is None,
                   "mla": not self.gate and self.latent_dim is not None}
        if implied.get(self.attention):
            object.__setattr__(self, "gate", self.gate or self.attention == "gated")
            object.__setattr__(self, "attention", None)
        elif self.gate:
            raise ValueError(f"--gate is --attention gated: not with --attention {self.attention}")

    @property
    def run_name(self) -> str:
        """Readable prefix of the run's folder under ``runs_dir``."""
        kv = self.num_heads if self.num_kv_heads is None else self.num_kv_heads
        mask = "causal" if self.causal else "nomask"
        window = "" if self.window is None else f"-w{self.window}"
        mla = "" if self.latent_dim is None else f"-mla{self.latent_dim}"
        scaling = "" if self.rope_scaling is None else f"-{self.rope_scaling}{self.rope_factor:g}"
        gate = "-gated" if self.gate else ""
        variant = "" if self.attention is None else f"-{self.attention}"
        hybrid = "" if self.chunk_size is None else f"-chunk{self.chunk_size}"
        hybrid += "" if self.softmax_every is None else f"-softmax-every{self.softmax_every}"
        return (f"lm/{self.positional}{scaling}-kv{kv}{mla}{gate}{variant}{hybrid}-{mask}{window}"
                f"-seed{self.seed}")


#: Fields of :class:`LMConfig` added after runs existed (not in
#: :data:`~attncourse.nn.old_files.SAVED_FIELDS`): in the settings only when set.
OPTIONAL_FIELDS = tuple(f.name for f in dataclasses.fields(LMConfig) if f.name not in SAVED_FIELDS)


def lm_settings(config: LMConfig) -> dict:
    """``dataclasses.asdict(config)`` without the :data:`OPTIONAL_FIELDS` left at their defaults.

    What names a run (its folder's hash) and what ``train-lm --resume`` compares: a run
    trained before those fields existed keeps its name.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(LMConfig)}
    return {k: v for k, v in dataclasses.asdict(config).items()
            if not (k in OPTIONAL_FIELDS and v == defaults[k])}


def _keyword_lm(config: LMConfig, vocab_size: int) -> GPT:
    return GPT(vocab_size, d_model=config.d_model, num_heads=config.num_heads, num_layers=config.num_layers,
               d_ff=config.d_ff, max_len=config.max_len, positional=config.positional,
               num_kv_heads=config.num_kv_heads, causal=config.causal, window=config.window,
               dropout=config.dropout, latent_dim=config.latent_dim, rope_dim=config.rope_dim)


def build_lm(config: LMConfig, vocab_size: int) -> GPT:
    """The untrained :class:`~attncourse.nn.gpt.GPT` of ``config``.

    Without ``rope_scaling``, ``gate`` and ``attention`` it is built from the GPT's keywords
    (chapter 7's models, initialised as they always were); with any, from :func:`lm_spec`.
    """
    if (config.rope_scaling is None and not config.gate and config.attention is None
            and config.softmax_every is None):
        return _keyword_lm(config, vocab_size)
    return GPT(spec=lm_spec(config, vocab_size))


def lm_spec(config: LMConfig, vocab_size: int, positions: PositionSpec | None = None,
            gate: bool | None = None) -> DecoderSpec:
    """The :class:`~attncourse.nn.spec.DecoderSpec` of ``config``'s model, with other positions or the gate.

    Parameters
    ----------
    config : LMConfig
    vocab_size : int
    positions : PositionSpec, optional
        Default: ``config.positional``'s, stretched by ``config.rope_scaling`` if set (for a
        model trained on ``config.context`` positions).
    gate : bool, optional
        Default: ``config.gate``.

    Raises
    ------
    ValueError
        If the gate is combined with MLA (``config.latent_dim``).
    """
    # Building the keyword model draws its initial weights: chapter 12's seeded runs count on it.
    spec = _keyword_lm(config, vocab_size).spec
    if positions is None and config.rope_scaling is not None:
        positions = dataclasses.replace(spec.positions, rope_scaling=config.rope_scaling,
                                        rope_factor=config.rope_factor, original_len=config.context)
    changes = {} if positions is None else {"positions": positions}
    if config.attention is not None:
        if gate:
            raise ValueError(f"the gate is attention 'gated': not with attention {config.attention!r}")
        changes["attention"] = lm_attention(config)
    elif config.gate if gate is None else gate:
        if spec.attention.name != "gqa":
            raise ValueError(f"the gate goes on grouped-query attention, not {spec.attention.name!r}")
        options = spec.attention.options
        changes["attention"] = AttentionSpec("gated", GatedOptions(options.num_kv_heads, options.window,
                                                                   options.bias))
    if config.softmax_every is not None:
        changes["layer_attention"] = lm_layer_attention(config)
    return dataclasses.replace(spec, **changes)


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
             amp: str | None = None, compile: bool = False, extend: bool = False) -> EpochRun:
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
    vocab_size = len(corpus.vocab)

    def build(dev: torch.device):
        model = build_lm(config, vocab_size).to(dev)
        return model, decoupled_adamw(model, config.lr, config.weight_decay)

    def train_epoch(epoch: Epoch):
        return train_lm_epoch(epoch, config, corpus)

    def evaluate(model: GPT):
        loss = heldout_loss(model, corpus.valid, config.context, max_windows=64)
        return {"valid_loss": loss, "valid_bits_per_char": bits_per_char(loss)}

    # amp changes the numbers, so it names the run; unset, runs keep the folders they had before it existed
    settings = {**lm_settings(config), **({"amp": amp} if amp is not None else {})}
    run = train_epochs(config.run_name, settings, build, train_epoch, evaluate,
                       config.steps // config.steps_per_epoch, seed=config.seed, progress=progress,
                       device=device, out_dir=out_dir, amp=amp, compile=compile, clip_norm=config.clip_norm,
                       extendable=("steps",) if extend else (), steps_per_epoch=config.steps_per_epoch)
    run.model.vocab = corpus.vocab
    return run


def vocab_of(run: EpochRun) -> Vocabulary:
    """The vocabulary :func:`train_lm` attached to its model."""
    return run.model.vocab
