"""Chapter 13 (encoders): a masked language model on the course's text, and small image classifiers.

:func:`bert_mask` corrupts a batch of character ids as BERT does (Devlin et al. 2019,
section 3.1): each position is chosen with probability 0.15; a chosen position becomes
``[MASK]`` 80 % of the time, a random character 10 %, and stays itself 10 %; the loss
is taken at the chosen positions only. :func:`train_mlm` trains chapter 7's GPT without
its causal mask (``LMConfig(causal=False)``) on that objective, cached under
``runs_dir("encoders/...")`` like every run of the course. The vocabulary's ``<pad>``
(id 0) never occurs in the text, so it serves as ``[MASK]``; ``<bos>`` (id 1) serves as
``[CLS]``.

:func:`gap_accuracy` asks the masked model and chapter 7's causal model for the same
characters: the causal model from the characters to the left only, the masked model
from those and the text to the right, beyond a gap of masked characters.

:func:`load_digits_split` and :func:`train_classifier` train the chapter's image
classifiers (the ViT of :mod:`.vit` and chapter 4b's CNNs) on scikit-learn's digits.

References
----------
Devlin, Chang, Lee, Toutanova (2019), "BERT", section 3.1 and appendix A.1.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import torch
import torch.nn.functional as F

from attncourse.data.text import CharCorpus, random_windows
from attncourse.data.vocab import Vocabulary
from attncourse.nn.gpt import GPT
from attncourse.recipes.lm import LMConfig, build_lm, decoupled_adamw, lm_settings
from attncourse.runtime import data_seed, progress_bar, training_seed
from attncourse.train.loop import Epoch, EpochRun, train_epochs
from attncourse.train.store import tensor_digest

#: ``[MASK]``: the id of ``<pad>``, which the character stream never contains.
MASK_ID = Vocabulary.pad_id
#: ``[CLS]``: the id of ``<bos>``, which the character stream never contains either.
CLS_ID = Vocabulary.bos_id
#: The first id of a real character (ids 0-3 are the specials).
FIRST_CHAR_ID = 4
#: Targets that the loss leaves out (``F.cross_entropy``'s default ``ignore_index``).
IGNORE = -100


def bert_mask(ids: torch.Tensor, vocab_size: int, rate: float = 0.15, mask_id: int = MASK_ID,
              first_id: int = FIRST_CHAR_ID, generator: torch.Generator | None = None,
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption of a batch: choose positions, then mask 80 %, randomise 10 %, keep 10 %.

    Parameters
    ----------
    ids : (batch, seq_len) int
        The clean tokens.
    vocab_size : int
        Random replacements are drawn uniformly from ``first_id .. vocab_size - 1``.
    rate : float
        Probability that a position is chosen (0.15 in BERT), each position independently.
    mask_id, first_id : int
    generator : torch.Generator, optional

    Returns
    -------
    inputs : (batch, seq_len) int64
        The corrupted tokens.
    targets : (batch, seq_len) int64
        The clean token at chosen positions, :data:`IGNORE` elsewhere.

    Raises
    ------
    ValueError
        If ``ids`` is not a 2-D integer tensor, ``rate`` is outside (0, 1], or
        ``first_id >= vocab_size``.

    References
    ----------
    Devlin et al. (2019), section 3.1, "Task #1: Masked LM".
    """
    if ids.dim() != 2 or ids.is_floating_point():
        raise ValueError(f"ids must be a (batch, seq_len) integer tensor, got {tuple(ids.shape)} {ids.dtype}")
    if not 0 < rate <= 1:
        raise ValueError(f"rate must lie in (0, 1], got {rate!r}")
    if first_id >= vocab_size:
        raise ValueError(f"first_id={first_id} leaves no token to draw below vocab_size={vocab_size}")
    ids = ids.long()
    chosen = torch.rand(ids.shape, generator=generator) < rate
    action = torch.rand(ids.shape, generator=generator)
    random_ids = torch.randint(first_id, vocab_size, ids.shape, generator=generator)
    inputs = torch.where(chosen & (action < 0.8), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    targets = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    return inputs, targets


def mlm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) over the chosen positions (``targets != IGNORE``) only.

    ``logits (batch, seq_len, vocab_size)``, ``targets (batch, seq_len)``.
    """
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def mlm_config(**changes) -> LMConfig:
    """Chapter 7's recipe (:class:`~attncourse.recipes.lm.LMConfig`) without the causal mask:
    the masked language model's sizes, context and optimiser; ``changes`` replace fields."""
    return dataclasses.replace(LMConfig(causal=False), **changes)


def train_mlm(config: LMConfig, corpus: CharCorpus, rate: float = 0.15, device=None,
              progress: bool = True) -> EpochRun:
    """Train (or load) a masked language model: ``config``'s GPT, trained on :func:`bert_mask`'s objective.

    Parameters
    ----------
    config : LMConfig
        ``causal=False`` and ``corpus`` (the text's digest) set, e.g. :func:`mlm_config`.
    corpus : CharCorpus
    rate : float
        BERT's 0.15.
    device : optional
    progress : bool
        A bar over the steps; one line when the run loads from its folder.

    Returns
    -------
    EpochRun
        History rows ``step``, ``train_loss`` and ``valid_loss`` (nats per masked character,
        on 32 held-out windows masked with a fixed generator); ``model.vocab`` set.

    Raises
    ------
    ValueError
        If ``config`` is causal or names no corpus.
    """
    if config.causal or not config.corpus:
        raise ValueError(f"train_mlm needs causal=False and config.corpus set, got causal={config.causal}, "
                         f"corpus={config.corpus!r}")
    vocab_size = len(corpus.vocab)

    def build(dev: torch.device):
        model = build_lm(config, vocab_size).to(dev)
        return model, decoupled_adamw(model, config.lr, config.weight_decay)

    def train_epoch(epoch: Epoch):
        total = 0.0
        for i in range(config.steps_per_epoch):
            step = (epoch.number - 1) * config.steps_per_epoch + i + 1
            for group in epoch.optimizer.param_groups:
                group["lr"] = config.lr * min(1.0, step / max(1, config.warmup))
            windows, _ = random_windows(corpus.train, config.context, config.batch_size)
            inputs, targets = bert_mask(windows, vocab_size, rate)
            logits, _ = epoch.forward(inputs.to(epoch.device))
            loss = mlm_loss(logits, targets.to(epoch.device))
            epoch.step(loss)
            total += float(loss.detach())
        if not math.isfinite(total):
            raise FloatingPointError(f"training diverged in epoch {epoch.number}; lower lr={config.lr:g}")
        return {"step": epoch.number * config.steps_per_epoch, "train_loss": total / config.steps_per_epoch}

    def evaluate(model: GPT):
        generator = torch.Generator().manual_seed(data_seed(0))
        windows, _ = random_windows(corpus.valid, config.context, 32, generator=generator)
        inputs, targets = bert_mask(windows, vocab_size, rate, generator=generator)
        logits, _ = model(inputs.to(_device(model)))
        return {"valid_loss": float(mlm_loss(logits, targets.to(logits.device)))}

    settings = {**lm_settings(config), "objective": f"bert-mlm-{rate:g}-80-10-10"}
    run = train_epochs(f"encoders/mlm-seed{config.seed}", settings, build, train_epoch, evaluate,
                       config.steps // config.steps_per_epoch, seed=config.seed, progress=progress,
                       device=device, clip_norm=config.clip_norm, steps_per_epoch=config.steps_per_epoch)
    run.model.vocab = corpus.vocab
    return run


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def evaluation_windows(ids: torch.Tensor, length: int, n_windows: int, seed: int = 0) -> torch.Tensor:
    """``n_windows`` windows of ``length`` consecutive ids at evenly spaced places of ``ids``
    (deterministic; ``seed`` shifts them), ``(n_windows, length)`` int64."""
    if ids.numel() < length + n_windows:
        raise ValueError(f"{ids.numel()} ids hold no {n_windows} windows of {length}")
    starts = torch.linspace(0, ids.numel() - length - 1 - seed, n_windows).long() + seed
    return ids[starts[:, None] + torch.arange(length)].long()


@torch.no_grad()
def gap_accuracy(mlm: GPT, causal: GPT, windows: torch.Tensor, left: int,
                 gaps: tuple[int | None, ...], progress: bool = True) -> dict:
    """Top-1 accuracy on the character at position ``left`` of each window, with and without right context.

    The causal model reads the ``left`` characters before it (its prediction at position
    ``left - 1``). The masked model reads the same characters, then ``[MASK]`` at positions
    ``left .. left + gap - 1`` and the true text after them: the nearest visible character
    to the right is ``gap`` positions away. ``gap=None`` masks everything from ``left`` on
    (no right context at all).

    Parameters
    ----------
    mlm, causal : GPT
        A masked language model and a causal one over the same vocabulary.
    windows : (n, length) int
    left : int
        1 <= left < length.
    gaps : tuple of int or None
    progress : bool
        A bar over the reads (the causal model's, then one per gap).

    Returns
    -------
    dict
        ``"causal"``: float; ``"mlm"``: {gap: float}.

    Raises
    ------
    ValueError
        If ``left`` does not leave a character to predict, or a gap runs past the window.
    """
    length = windows.shape[1]
    if not 1 <= left < length:
        raise ValueError(f"left={left} must lie in 1 .. window length - 1 = {length - 1}")
    for gap in gaps:
        if gap is not None and left + gap > length:
            raise ValueError(f"gap={gap} runs past the window of {length} from left={left}")
    target = windows[:, left]
    bar = progress_bar(total=1 + len(gaps), desc="reads at the gap", unit="read", progress=progress)
    logits, _ = causal(windows[:, :left].to(_device(causal)))
    bar.update()
    result = {"causal": float((logits[:, -1].argmax(-1).cpu() == target).float().mean()), "mlm": {}}
    for gap in gaps:
        end = length if gap is None else left + gap
        inputs = windows.clone()
        inputs[:, left:end] = MASK_ID
        logits, _ = mlm(inputs.to(_device(mlm)))
        result["mlm"][gap] = float((logits[:, left].argmax(-1).cpu() == target).float().mean())
        bar.update()
    bar.close()
    return result


@torch.no_grad()
def fill_in(model: GPT, vocab: Vocabulary, text: str, start: int, length: int, top: int = 5,
            ) -> list[list[tuple[str, float]]]:
    """The masked model's ``top`` guesses for each of ``length`` characters masked from ``start``.

    Parameters
    ----------
    model : GPT
        A masked language model.
    vocab : Vocabulary
    text : str
        The sentence (unknown characters become ``<unk>``).
    start, length : int
        The masked span ``text[start : start + length]``, all masked at once.
    top : int

    Returns
    -------
    list over the span of [(character, probability), ...], most probable first

    Raises
    ------
    ValueError
        If the span is empty or runs past the text.
    """
    if length < 1 or start < 0 or start + length > len(text):
        raise ValueError(f"span start={start}, length={length} must lie inside the text of {len(text)} characters")
    ids = torch.tensor([vocab.encode(list(text))])
    ids[:, start:start + length] = MASK_ID
    logits, _ = model(ids.to(_device(model)))
    probs = logits[0, start:start + length].float().softmax(-1).cpu()
    values, indices = probs.topk(top, dim=-1)
    return [[(vocab.tokens[int(i)], float(p)) for p, i in zip(row_p, row_i)]
            for row_p, row_i in zip(values, indices)]


# ---- fine-tuning with few labels ----------------------------------------------------------

def code_labels(text: str) -> np.ndarray:
    """1 for each character of ``text`` inside a MyST code cell (between a line that opens
    with three backticks and ``{code-cell}`` and the closing fence), 0 elsewhere (prose); (len(text),) int8."""
    labels = np.zeros(len(text), dtype=np.int8)
    position, inside = 0, False
    for line in text.splitlines(keepends=True):
        if line.startswith("```{code-cell}"):
            inside = True
        elif inside and line.rstrip() == "```":
            inside = False
        elif inside:
            labels[position:position + len(line)] = 1
        position += len(line)
    return labels


def labelled_windows(ids: torch.Tensor, labels: np.ndarray, length: int, n_per_class: int, seed: int = 0
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``n_per_class`` windows of ``length`` ids per class, each window all prose or all code.

    Returns ``windows (2 n_per_class, length)`` int64 and ``targets (2 n_per_class,)`` (0 prose,
    1 code), drawn without replacement among the non-overlapping pure windows, shuffled.

    Raises
    ------
    ValueError
        If ``labels`` does not match ``ids``, or a class has fewer pure windows than asked.
    """
    if len(labels) != ids.numel():
        raise ValueError(f"labels ({len(labels)}) and ids ({ids.numel()}) must be as long")
    starts = np.arange(0, ids.numel() - length + 1, length)
    means = np.array([labels[s:s + length].mean() for s in starts])
    rng = np.random.default_rng(data_seed(seed))
    chosen, targets = [], []
    for cls, pure in ((0, means == 0), (1, means == 1)):
        if pure.sum() < n_per_class:
            raise ValueError(f"class {cls} has {int(pure.sum())} pure windows of {length}, fewer than {n_per_class}")
        chosen.extend(rng.choice(starts[pure], n_per_class, replace=False))
        targets.extend([cls] * n_per_class)
    order = rng.permutation(len(chosen))
    starts_t = torch.tensor(np.array(chosen)[order])
    return ids[starts_t[:, None] + torch.arange(length)].long(), torch.tensor(np.array(targets)[order])


def mean_pool(states: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``states (batch, seq_len, d)`` over the positions where ``mask (batch, seq_len)``
    is True (all positions without a mask): ``(batch, d)``. Padding must stay out of the mean,
    or the summary would depend on how much padding the batch needed.

    Raises
    ------
    ValueError
        If the mask's shape is not ``states.shape[:2]``, or a row has no True.
    """
    if mask is None:
        return states.mean(dim=1)
    if tuple(mask.shape) != tuple(states.shape[:2]):
        raise ValueError(f"mask {tuple(mask.shape)} must be states' (batch, seq_len) = {tuple(states.shape[:2])}")
    counts = mask.sum(dim=1, keepdim=True)
    if bool((counts == 0).any()):
        raise ValueError("every sequence needs at least one position where mask is True")
    weights = mask.to(states.dtype)[..., None]
    return (states * weights).sum(dim=1) / counts.to(states.dtype)


class PooledClassifier(torch.nn.Module):
    """An encoder's final states (after its final norm), averaged over positions, then a linear layer.

    ``encoder`` is a :class:`~attncourse.nn.gpt.GPT` (its output layer is unused);
    ``forward(tokens (batch, seq_len)) -> logits (batch, num_classes)``.
    """

    def __init__(self, encoder: GPT, num_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.classifier = torch.nn.Linear(encoder.d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        states = []
        hook = self.encoder.final_norm.register_forward_hook(lambda _m, _i, out: states.append(out))
        try:
            self.encoder(tokens)
        finally:
            hook.remove()
        return self.classifier(mean_pool(states[0]))  # no padding: every window is full


def finetune(encoder: GPT, windows: torch.Tensor, targets: torch.Tensor, steps: int = 60, batch_size: int = 16,
             lr: float = 1e-3, seed: int = 0) -> PooledClassifier:
    """Fine-tune every weight of ``encoder`` and a new linear head on ``(windows, targets)``.

    AdamW (weight decay 0.01), ``steps`` minibatches drawn with replacement; returns the
    classifier in eval mode. The encoder is changed in place: pass a copy to keep it.
    """
    torch.manual_seed(training_seed(seed))
    model = PooledClassifier(encoder, int(targets.max()) + 1)
    generator = torch.Generator().manual_seed(training_seed(seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    for _ in range(steps):
        batch = torch.randint(0, len(targets), (batch_size,), generator=generator)
        loss = F.cross_entropy(model(windows[batch]), targets[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


# ---- images -------------------------------------------------------------------------------

def load_digits_split(n_test: int = 497, seed: int = 0
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 digits (8 x 8, shipped with the library), shuffled and split.

    Returns
    -------
    train_images : (1797 - n_test, 8, 8) float32 in [0, 1]
    train_labels : (1797 - n_test,) int64
    test_images, test_labels : the same for the ``n_test`` held-out digits
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(data_seed(seed)).permutation(len(digits.target))
    images = torch.tensor(digits.images[order] / 16.0, dtype=torch.float32)
    labels = torch.tensor(digits.target[order], dtype=torch.long)
    return images[n_test:], labels[n_test:], images[:n_test], labels[:n_test]


def train_classifier(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, steps: int = 300,
                     batch_size: int = 32, lr: float = 3e-3, seed: int = 0, progress: bool = True,
                     desc: str = "train") -> torch.nn.Module:
    """Train an image classifier with AdamW (weight decay 0.01) on random batches; returns it in eval mode.

    ``images (n, 8, 8)`` go to the model as they are; a CNN (chapter 4b's, which wants a
    channel axis) gets ``images[:, None]``. Minibatches are drawn with replacement from the
    n examples, so every size of training set gets the same number of steps. ``model`` is
    trained in place from its initial weights; ``desc`` labels the progress bar and the run's folder.

    The run is cached like every run of the course (``runs_dir("encoders/...")``, through
    :func:`~attncourse.train.loop.train_epochs`), named by the model's class, a digest of its
    initial weights and of the data, and the settings: a second call loads the weights instead
    of training again (a notebook re-run, or its student edition after the book build).
    """
    generator = torch.Generator().manual_seed(training_seed(seed))
    wants_channels = not hasattr(model, "patch_size")
    settings = {"model": type(model).__name__, "init": tensor_digest(model.state_dict().values()),
                "data": tensor_digest([images, labels]), "steps": steps, "batch_size": batch_size, "lr": lr,
                "seed": seed}

    def build(dev: torch.device):
        model.to(dev)
        return model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)

    def train_epoch(epoch: Epoch):
        total = 0.0
        for _ in range(steps):
            batch = torch.randint(0, len(labels), (batch_size,), generator=generator)
            x = images[batch][:, None] if wants_channels else images[batch]
            loss = F.cross_entropy(epoch.forward(x.to(epoch.device)), labels[batch].to(epoch.device))
            epoch.step(loss)
            total += float(loss.detach())
        return {"train_loss": total / steps}

    name = "encoders/" + re.sub(r"[^a-z0-9]+", "-", desc.lower()).strip("-")
    run = train_epochs(name, settings, build, train_epoch, lambda _model: {}, 1, seed=seed,
                       progress=progress, device=_device(model), steps_per_epoch=steps)
    return run.model.eval()


@torch.no_grad()
def classifier_accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    """Top-1 accuracy of an image classifier (a CNN gets a channel axis added)."""
    x = images if hasattr(model, "patch_size") else images[:, None]
    return float((model(x).argmax(-1) == labels).float().mean())


__all__ = ["CLS_ID", "FIRST_CHAR_ID", "IGNORE", "MASK_ID", "PooledClassifier", "bert_mask",
           "classifier_accuracy", "code_labels", "evaluation_windows", "fill_in", "finetune", "gap_accuracy",
           "labelled_windows", "mean_pool", "load_digits_split", "mlm_config", "mlm_loss",
           "train_classifier", "train_mlm"]
