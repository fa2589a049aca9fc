"""Chapter 12 (long context): chapter 7's language model with other positions or a gate, its
fine-tunes at a longer context, a passkey task, and what the model does with its first token.

:func:`train_lm_variant` trains chapter 7's GPT (:class:`~attncourse.recipes.lm.LMConfig`)
with a :class:`~attncourse.nn.spec.PositionSpec` of its own (RoPE stretched by PI, NTK or
YaRN; :class:`~attncourse.nn.rope.RopeScaling`) and/or the gated attention of Qiu et al.
(2025) (:mod:`attncourse.nn.gated`), from scratch or from a trained run (a fine-tune), cached
under ``runs_dir("long-context/...")`` like every run of the course. The options travel in
the model's spec; :class:`LMConfig` itself is unchanged, so a plain config names chapter 7's
run and :func:`~attncourse.recipes.lm.train_lm` loads it.

:func:`train_passkey` trains a small GPT on :mod:`attncourse.data.passkey` (seconds; not
cached) and :func:`passkey_accuracy` scores it at a chosen distance.

References
----------
Chen et al. (2023) and Peng et al. (2023) for the scalings; Qiu et al. (2025) for the gate;
Xiao et al. (2024), "Efficient Streaming Language Models with Attention Sinks", for the
first token's share of attention; Mohtashami and Jaggi (2023) for the passkey task.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from attncourse.data.passkey import passkey_batch, passkey_vocab_size
from attncourse.data.text import CharCorpus
from attncourse.nn.gpt import GPT
from attncourse.nn.spec import PositionSpec
from attncourse.recipes.lm import (
    LMConfig,
    decoupled_adamw,
    heldout_loss,
    lm_settings,
    lm_spec,
    train_lm_epoch,
)
from attncourse.runtime import data_seed, progress_bar, training_seed
from attncourse.train.loop import Epoch, EpochRun, train_epochs
from attncourse.train.store import train_once


def train_lm_variant(config: LMConfig, corpus: CharCorpus, *, positions: PositionSpec | None = None,
                     gate: bool = False, init: EpochRun | None = None, device=None,
                     progress: bool = True) -> EpochRun:
    """Train (or load) ``config``'s model with ``positions`` and/or the gate, from scratch or from ``init``.

    Parameters
    ----------
    config : LMConfig
        The recipe (its ``corpus`` digest set); for a fine-tune its ``context``, ``steps``,
        ``lr``, ``warmup`` and ``batch_size`` are the fine-tune's.
    corpus : CharCorpus
    positions : PositionSpec, optional
        Default: ``config.positional``'s.
    gate : bool
        Qiu et al.'s sigmoid gate on every head's output: attention ``"gated"``
        (:mod:`attncourse.nn.gated`).
    init : EpochRun, optional
        A trained run whose weights the model starts from (a fine-tune); they must fit.
    device : optional
    progress : bool
        A bar over the steps while training; one line when the run loads from its folder.

    Returns
    -------
    EpochRun
        As :func:`~attncourse.recipes.lm.train_lm`'s (history rows ``step``, ``train_loss``,
        ``valid_loss`` at ``config.context``); ``model.vocab`` set.

    Raises
    ------
    ValueError
        If ``config.corpus`` is empty, or ``init``'s weights do not fit the model.
    FloatingPointError
        If the loss becomes NaN or infinite.
    """
    if not config.corpus:
        raise ValueError("config.corpus must name the text (text_digest) to name the run")
    if gate:
        config = dataclasses.replace(config, attention="gated")
    spec = lm_spec(config, len(corpus.vocab), positions)
    settings = {**lm_settings(config), "positions": spec.positions.to_dict(),
                "attention": spec.attention.to_dict(),
                "init": None if init is None else init.out_dir.name}
    scaling = spec.positions.rope_scaling or spec.positions.kind
    name = (f"long-context/{scaling}-{'gated' if gate else 'plain'}-ctx{config.context}"
            f"-{'ft' if init is not None else 'new'}-seed{config.seed}")

    def build(dev: torch.device):
        model = GPT(spec=spec).to(dev)
        if init is not None:
            model.load_state_dict(init.model.state_dict())
        return model, decoupled_adamw(model, config.lr, config.weight_decay)

    def train_epoch(epoch: Epoch):
        return train_lm_epoch(epoch, config, corpus)

    def evaluate(model: GPT):
        return {"valid_loss": heldout_loss(model, corpus.valid, config.context, max_windows=16)}

    run = train_epochs(name, settings, build, train_epoch, evaluate, config.steps // config.steps_per_epoch,
                       seed=config.seed, progress=progress, device=device, clip_norm=config.clip_norm,
                       steps_per_epoch=config.steps_per_epoch)
    run.model.vocab = corpus.vocab
    return run


# ---- what the model does with its first token ----------------------------------------------

@torch.no_grad()
def first_token_share(model: GPT, ids: torch.Tensor, context: int, max_windows: int = 32,
                      skip: int = 8) -> np.ndarray:
    """Mean attention weight on the first position of the window, by layer.

    Parameters
    ----------
    model : GPT
    ids : (n,) long
        E.g. the held-out text, cut into windows of ``context``.
    context : int
    max_windows : int
    skip : int
        Queries 0 .. skip - 1 are left out: they have few keys and give key 0 a large
        share however they attend.

    Returns
    -------
    (num_layers,) float64 array
        Mean over windows, heads and queries ``skip .. context - 1`` of the weight on key 0.
        Uniform attention gives the mean of 1 / (i + 1) over those queries
        (:func:`uniform_first_token_share`).

    Raises
    ------
    ValueError
        If ``ids`` holds no window of ``context`` tokens or ``skip >= context``.
    """
    n_windows = min(max_windows, ids.numel() // context)
    if n_windows < 1 or not 0 <= skip < context:
        raise ValueError(f"need a window of context={context} in {ids.numel()} ids and 0 <= skip < context, "
                         f"got skip={skip}")
    windows = ids[: n_windows * context].view(n_windows, context).to(next(model.parameters()).device)
    was_training = model.training
    model.eval()
    _, weights = model(windows, need_weights=True)
    model.train(was_training)
    return np.array([float(w[:, :, skip:, 0].double().mean()) for w in weights])


def uniform_first_token_share(context: int, skip: int = 8) -> float:
    """What :func:`first_token_share` gives for uniform causal attention: mean of 1 / (i + 1), i >= skip."""
    return float(np.mean(1.0 / (np.arange(skip, context) + 1)))


@torch.no_grad()
def largest_activation(model: GPT, ids: torch.Tensor, context: int, max_windows: int = 32) -> np.ndarray:
    """Largest absolute value of the residual stream after each block, by layer.

    Returns
    -------
    (num_layers,) float64 array
        Over ``max_windows`` windows of ``context`` ids; Sun et al. (2024) call values
        thousands of times the median "massive activations".
    """
    n_windows = min(max_windows, ids.numel() // context)
    windows = ids[: n_windows * context].view(n_windows, context).to(next(model.parameters()).device)
    found = []
    hooks = [block.register_forward_hook(lambda _m, _i, out: found.append(float(out[0].abs().max())))
             for block in model.blocks]
    was_training = model.training
    model.eval()
    try:
        model(windows)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return np.array(found)


# ---- a passkey in filler ---------------------------------------------------------------------

@dataclass(frozen=True)
class PasskeyConfig:
    """A small GPT trained on :func:`~attncourse.data.passkey.passkey_batch` at one length.

    Attributes
    ----------
    positional : str
        A :data:`~attncourse.nn.gpt.GPT_POSITIONAL` scheme.
    length : int
        Training length (the passkey anywhere in it).
    d_model, num_heads, num_layers, d_ff : int
    steps, batch_size : int
    lr : float
        Adam's.
    n_filler, n_keys : int
    seed : int
    """

    positional: str = "rope"
    length: int = 64
    d_model: int = 32
    num_heads: int = 4
    num_layers: int = 1
    d_ff: int = 64
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    n_filler: int = 16
    n_keys: int = 8
    seed: int = 0


def train_passkey(config: PasskeyConfig, progress: bool = True) -> GPT:
    """Train ``config``'s model (a learned table gets ``length`` rows: it cannot go further).

    ``progress``: a bar over the steps (chapter 12 trains ten of these in one cell). The
    weights are kept (:func:`~attncourse.train.store.train_once`, run
    ``passkey/{positional}-seed{seed}``): a second run of the chapter, or grading after
    ``python -m attncourse prepare``, loads them instead of training again.

    Returns
    -------
    GPT
        In eval mode; trained with cross-entropy on the passkey at the query only.

    Raises
    ------
    attncourse.runtime.UnpreparedRun
        Untrained, while ``$ATTNCOURSE_NO_TRAINING`` says grading does not train.
    """
    torch.manual_seed(training_seed(config.seed))  # plus $ATTNCOURSE_SEED_OFFSET (make claims)
    model = GPT(passkey_vocab_size(config.n_filler, config.n_keys), d_model=config.d_model,
                num_heads=config.num_heads, num_layers=config.num_layers, d_ff=config.d_ff,
                max_len=config.length if config.positional == "learned" else 8 * config.length,
                positional=config.positional)

    def train(model: GPT) -> None:
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        generator = torch.Generator().manual_seed(data_seed(config.seed))
        for _ in progress_bar(range(config.steps), progress=progress, leave=False, unit="step",
                              desc=f"passkey, {config.positional}, seed {config.seed}"):
            batch = passkey_batch(config.batch_size, config.length, n_filler=config.n_filler,
                                  n_keys=config.n_keys, generator=generator)
            logits, _ = model(batch.tokens)
            loss = F.cross_entropy(logits[:, -1], batch.answer)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    name = f"passkey/{config.positional}-seed{config.seed}"
    return train_once(name, dataclasses.asdict(config), model, train, announce=progress).eval()


@torch.no_grad()
def passkey_accuracy(model: GPT, config: PasskeyConfig, distance: int, n_examples: int = 256,
                     seed: int = 1) -> float:
    """Fraction of ``n_examples`` whose passkey, ``distance`` tokens before the query (the first
    token of a sequence of ``distance + 1``), the model names (arg max at the query).

    Raises
    ------
    ValueError
        If ``distance < 1``, or the model cannot read ``distance + 1`` positions (its table).
    """
    batch = passkey_batch(n_examples, distance + 1, distance, config.n_filler, config.n_keys,
                          torch.Generator().manual_seed(data_seed(seed)))
    logits, _ = model(batch.tokens)
    return float((logits[:, -1].argmax(-1) == batch.answer).double().mean())


# ---- a fixed-size state ------------------------------------------------------------------------

def outer_product_recall(n_pairs: int, d_k: int, trials: int = 8, seed: int = 0) -> float:
    """Recall of a d_k x d_k linear-attention state written with ``n_pairs`` (key, value) pairs.

    Keys and values are random unit vectors of width d_k; the state is
    S = sum_j v_j k_j^T (linear attention with the identity feature map and no normaliser,
    a "fast-weight" memory, Schlag et al. 2021) and the query k_i reads S k_i, which is
    scored right when its nearest value (largest dot product) is v_i. The crosstalk of the
    other pairs grows like sqrt(N / d_k): a state of d_k^2 numbers keeps about d_k pairs apart.

    Returns
    -------
    float
        Fraction of the ``trials * n_pairs`` queries recalled.
    """
    rng = np.random.default_rng(data_seed(seed))
    hits = 0
    for _ in range(trials):
        keys = rng.normal(size=(n_pairs, d_k))
        keys /= np.linalg.norm(keys, axis=1, keepdims=True)
        values = rng.normal(size=(n_pairs, d_k))
        values /= np.linalg.norm(values, axis=1, keepdims=True)
        state = values.T @ keys                           # (d_k, d_k): all the memory there is
        read = keys @ state.T                              # row i: S k_i
        hits += int((np.argmax(read @ values.T, axis=1) == np.arange(n_pairs)).sum())
    return hits / (trials * n_pairs)


__all__ = [
    "PasskeyConfig", "first_token_share", "largest_activation", "outer_product_recall",
    "passkey_accuracy", "train_lm_variant", "train_passkey", "uniform_first_token_share",
]
