"""Train a CNN with and without self-attention to tell whether two far-apart digits are equal.

The task is :func:`~attncourse.data.canvases.digit_relation_task` with
``relation="equal"``: two handwritten digits on a 16 x 48 canvas, at least 16
blank columns apart, label 1 if they show the same digit. The two models,
:class:`~attncourse.nn.conv_attention.PlainCNN` and
:class:`~attncourse.nn.conv_attention.AttentionCNN`, differ in one block only:
a 3x3 convolution or a self-attention block (Wang et al. 2018; Zhang et al. 2019).

Why the plain CNN cannot do it. Every unit before its global average pooling
sees at most 18 pixels, so one digit, never both. Its output is a linear map of
the average, i.e. a score s(left digit) + s(right digit) + const; "equal" is not
a threshold of such a sum (if 2 s(a) > t and 2 s(b) > t then s(a) + s(b) > t).
The best such rule (say "equal" when both digits fall in one half of the ten)
is right on about 64 % of the canvases. The attention block lets every
position read the other digit *before* the nonlinearity of the 1x1 head, so
"what is here" and "what is there" can be compared.

The recipe (the defaults of :class:`RelationConfig`), found by trial:

* **A shared, pretrained, frozen stem.** Trained from scratch, both models stay
  at 50 %: the relation gives no gradient until the features already say which
  digit is where. So the two convolution blocks (the stem) are first trained
  to classify single digits on 16 x 16 canvases (a linear probe on the stem's
  channel-wise maximum over positions, 3 epochs), once, as its own cached run
  (:func:`pretrain_stem`); both models load those weights and keep them
  frozen. The comparison then changes the mixing block and nothing else.
* The attention gate starts at gamma = 1 rather than 0 (a block that starts
  as the identity gets no gradient for a relation no local feature predicts),
  with d_k = 16 instead of SAGAN's C/8 = 4.
* Adam at 2e-3, batches of 64, 8000 training canvases, 40 epochs.

Both models have the stem's width (32 channels), so the attention model has
fewer parameters than the plain one: 13,859 against 19,938 in all, of which
4,291 against 10,370 are trained (its block has 1x1 projections instead of a
3x3 convolution).

Measured with these defaults on one CPU thread (seeds 0 and 1): the plain CNN
stays at chance (validation 49 % and 47 %, test 51 % and 52 %; it does not
even find the 64 % rule), the attention CNN reaches 83 % and 85 % validation,
81 % and 84 % test accuracy. Training takes about 25 s (plain) and 40 s
(attention); with the canvases, the stem's pretraining and the evaluations,
both together take under two minutes.

References
----------
Wang, Girshick, Gupta, He (2018), "Non-local Neural Networks", CVPR, section 3.
Zhang, Goodfellow, Metaxas, Odena (2019), "Self-Attention Generative Adversarial
Networks", ICML, section 3.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import nn

from attncourse.data.canvases import (
    RELATIONS,
    CanvasSplits,
    digit_canvas_task,
    digit_relation_task,
)
from attncourse.functional.validation import validate_positive_ints
from attncourse.nn.conv_attention import AttentionCNN, PlainCNN, conv_stem
from attncourse.runtime import data_seed
from attncourse.train.loop import Epoch, EpochRun, train_epochs

#: The two models :func:`train_relation_classifier` knows.
RELATION_MODELS: tuple[str, ...] = ("plain", "attention")

#: Digit classes of the pretraining task.
NUM_DIGITS = 10


@dataclass(frozen=True)
class RelationConfig:
    """Everything a run on the digit-relation task depends on.

    The defaults are the course's recipe (see the module docstring).

    Attributes
    ----------
    model : {"plain", "attention"}
        :class:`~attncourse.nn.conv_attention.PlainCNN` or
        :class:`~attncourse.nn.conv_attention.AttentionCNN`.
    seed : int
        Seeds the stem's pretraining, the initial weights and every epoch's batches.
    data_seed : int
        Seeds the canvases (and the source-image pools); kept apart from
        ``seed`` so that runs of several seeds see the same canvases.
    relation : {"equal", "less"}
    height, width : int
        Canvas size in pixels.
    min_gap : int or None
        Fewest blank columns between the digits (None: ``width // 2 - 8``).
    n_train, n_valid, n_test : int
        Canvases per split.
    channels : int
        Width of every hidden layer of both models (the shared stem's width).
    key_channels : int
        d_k of the attention block.
    gamma_init : float
        Starting value of the attention gate.
    epochs, batch_size : int
    lr : float
        Adam's learning rate.
    pretrain_epochs : int
        Epochs of single-digit classification for the stem (0: no
        pretraining; the stem then trains with the rest).
    pretrain_canvases : int
        Single-digit 16 x 16 canvases for the pretraining.
    pretrain_lr : float
    pretrain_batch_size : int
    freeze_stem : bool
        Keep the pretrained stem fixed while training on the relation.
    """

    model: str = "attention"
    seed: int = 0
    data_seed: int = 0
    relation: str = "equal"
    height: int = 16
    width: int = 48
    min_gap: int | None = None
    n_train: int = 8000
    n_valid: int = 1000
    n_test: int = 1000
    channels: int = 32
    key_channels: int = 16
    gamma_init: float = 1.0
    epochs: int = 40
    batch_size: int = 64
    lr: float = 2e-3
    pretrain_epochs: int = 3
    pretrain_canvases: int = 4000
    pretrain_lr: float = 3e-3
    pretrain_batch_size: int = 64
    freeze_stem: bool = True

    def __post_init__(self) -> None:
        if self.model not in RELATION_MODELS:
            raise ValueError(f"model must be one of {RELATION_MODELS}, got {self.model!r}")
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        validate_positive_ints(**{name: getattr(self, name) for name in (
            "epochs", "batch_size", "n_train", "n_valid", "channels", "key_channels", "pretrain_batch_size")})
        if self.freeze_stem and self.pretrain_epochs == 0:
            raise ValueError("freeze_stem=True needs pretrain_epochs > 0: a frozen random stem learns nothing")

    @property
    def run_name(self) -> str:
        """Folder prefix of the run, e.g. ``"relation/attention-seed0"``."""
        return f"relation/{self.model}-seed{self.seed}"

    def stem_settings(self) -> dict:
        """The settings that decide the pretrained stem (the same for both models)."""
        return {"seed": self.seed, "channels": self.channels, "epochs": self.pretrain_epochs,
                "canvases": self.pretrain_canvases, "lr": self.pretrain_lr,
                "batch_size": self.pretrain_batch_size, "data_seed": self.data_seed}


@lru_cache(maxsize=4)
def _relation_canvases(n_train: int, n_valid: int, n_test: int, height: int, width: int, seed: int,
                       relation: str, min_gap: int | None) -> CanvasSplits:
    return digit_relation_task(n_train, n_valid, n_test, height=height, width=width, seed=seed,
                               relation=relation, min_gap=min_gap)


def load_relation_canvases(config: RelationConfig) -> CanvasSplits:
    """The train, valid and test canvases of ``config`` (the same for both models and every ``seed``).

    Parameters
    ----------
    config : RelationConfig

    Returns
    -------
    CanvasSplits
        ``.train``, ``.valid``, ``.test``; each ``.tensors()`` gives ``images
        (n, 1, height, width)`` float and ``labels (n,)`` long in {0, 1}, and
        ``.positions (n, 2, 2)`` the digits' top-left (row, col). Cached: equal
        data settings return the same (read-only) object.
    """
    return _relation_canvases(config.n_train, config.n_valid, config.n_test, config.height, config.width,
                              data_seed(config.data_seed), config.relation, config.min_gap)


class DigitProbe(nn.Module):
    """A stem and a linear probe on its channel-wise maximum: the single-digit pretraining model.

    logits = W max_{positions} stem(image) + b. Taking the maximum over
    positions makes the score independent of where the digit is, so the stem
    learns digit detectors that fire wherever the digit lies.

    Parameters
    ----------
    channels : int
        Width of the stem (as in the relation models).
    num_classes : int

    Attributes
    ----------
    stem : Sequential
        Two blocks of [3x3 convolution, ReLU, 2x2 max pooling], the same
        layout as the relation models' ``stem``, so its weights load there.
    probe : Linear (channels -> num_classes)
    """

    def __init__(self, channels: int = 32, num_classes: int = NUM_DIGITS) -> None:
        super().__init__()
        self.stem = nn.Sequential(*conv_stem(1, channels))
        self.probe = nn.Linear(channels, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Digit scores: images (batch, 1, height, width) -> logits (batch, num_classes)."""
        return self.probe(self.stem(images).amax(dim=(2, 3)))


#: Canvases :func:`relation_accuracy` scores at once (and the batches of the validation features
#: that :func:`train_relation_classifier` keeps for a frozen stem).
_EVAL_BATCH = 1000


def _above_stem(model: nn.Module, features: torch.Tensor) -> torch.Tensor:
    """The model's logits from its stem's features: mixing block, 1x1 head, average pooling, classifier."""
    return model.classifier(model.head(model.mixer(features)).mean(dim=(2, 3)))


def relation_accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                      batch_size: int = _EVAL_BATCH) -> float:
    """Share of canvases whose predicted class (the argmax of the logits) is the label.

    Parameters
    ----------
    model : nn.Module
        images (batch, 1, height, width) -> logits (batch, classes); put in
        evaluation mode and run under ``torch.no_grad()`` by this function.
    images : (n, 1, height, width) float
    labels : (n,) long
    batch_size : int
        Canvases scored at once.

    Returns
    -------
    float in [0, 1]

    Raises
    ------
    ValueError
        If ``images`` is not 4-D, ``labels`` not 1-D, their sizes differ, or they are empty.
    """
    if images.dim() != 4 or labels.dim() != 1 or images.shape[0] != labels.shape[0] or labels.shape[0] == 0:
        raise ValueError(f"images {tuple(images.shape)} must be (n, channels, height, width) and labels "
                         f"{tuple(labels.shape)} (n,) with the same n >= 1")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    right = 0
    with torch.no_grad():
        for start in range(0, images.shape[0], batch_size):
            logits = model(images[start:start + batch_size].to(device))
            right += int((logits.argmax(-1).cpu() == labels[start:start + batch_size].cpu()).sum())
    model.train(was_training)
    return right / labels.shape[0]


def _run_batches(epoch: Epoch, inputs, labels, batch_size, forward) -> dict[str, float]:
    """One epoch of Adam steps on shuffled batches through ``forward``; mean loss and accuracy."""
    order = torch.randperm(len(inputs), device=inputs.device)
    loss_sum, right = 0.0, 0
    for start in range(0, len(inputs), batch_size):
        index = order[start:start + batch_size]
        with epoch.autocast():
            logits = forward(inputs[index])
        loss = nn.functional.cross_entropy(logits, labels[index])
        epoch.step(loss)
        loss_sum += float(loss.detach()) * len(index)
        right += int((logits.argmax(-1) == labels[index]).sum())
    return {"train_loss": loss_sum / len(inputs), "train_accuracy": right / len(inputs)}


def pretrain_stem(config: RelationConfig, progress: bool = True,
                  device: str | torch.device | None = None) -> EpochRun:
    """Train (or load) the stem on single-digit classification, shared by both models.

    The data are ``config.pretrain_canvases`` 16 x 16 canvases with one digit
    each (:func:`~attncourse.data.canvases.digit_canvas_task` with ``k=1``,
    seeded by ``config.data_seed``, so their source images come from the same
    train pool as the relation canvases' and the valid/test digits stay
    unseen). The run depends only on :meth:`RelationConfig.stem_settings`, so
    the plain and the attention model of one seed load the same stem.

    Parameters
    ----------
    config : RelationConfig
        ``pretrain_epochs`` must be positive.
    progress : bool
    device : str or torch.device, optional

    Returns
    -------
    EpochRun
        ``model`` is a :class:`DigitProbe`; ``history`` rows hold
        ``train_loss``, ``train_accuracy`` and ``valid_accuracy`` (500 single
        digits of the valid pool). Runs live in
        ``runs_dir("relation/stem-seed{seed}-{hash}")``.

    Raises
    ------
    ValueError
        If ``config.pretrain_epochs`` is 0.
    """
    if config.pretrain_epochs < 1:
        raise ValueError(f"pretrain_stem needs pretrain_epochs >= 1, got {config.pretrain_epochs}")
    singles = digit_canvas_task(config.pretrain_canvases, 500, 0, k=1, height=16, width=16,
                                seed=data_seed(config.data_seed))
    train_images, train_labels = singles.train.tensors()
    valid_images, valid_labels = singles.valid.tensors()
    train_labels, valid_labels = train_labels[:, 0], valid_labels[:, 0]

    def build(dev: torch.device):
        model = DigitProbe(config.channels).to(dev)
        return model, torch.optim.Adam(model.parameters(), lr=config.pretrain_lr)

    def train_epoch(epoch: Epoch):
        dev = epoch.device
        return _run_batches(epoch, train_images.to(dev), train_labels.to(dev), config.pretrain_batch_size,
                            epoch.forward)

    def evaluate(model):
        return {"valid_accuracy": relation_accuracy(model, valid_images, valid_labels)}

    settings = config.stem_settings()
    return train_epochs(f"relation/stem-seed{config.seed}", settings, build, train_epoch, evaluate,
                        config.pretrain_epochs, seed=config.seed, progress=progress, device=device)


def build_relation_model(config: RelationConfig) -> PlainCNN | AttentionCNN:
    """The untrained (randomly initialised) model of ``config``, two classes."""
    if config.model == "plain":
        return PlainCNN(num_classes=2, channels=config.channels)
    return AttentionCNN(num_classes=2, channels=config.channels, key_channels=config.key_channels,
                        gamma_init=config.gamma_init)


def train_relation_classifier(config: RelationConfig, progress: bool = True,
                              device: str | torch.device | None = None) -> EpochRun:
    """Train (or load) the plain or the attention CNN of ``config`` on the relation canvases.

    With ``pretrain_epochs > 0`` the stem first comes from :func:`pretrain_stem`
    (one cached run shared by both models); with ``freeze_stem`` it stays
    fixed, so its features of the training canvases are computed once and only
    the mixing block, the 1x1 head and the linear classifier learn (their
    Adam optimiser holds only those). The loss is cross-entropy on the two
    classes.

    Parameters
    ----------
    config : RelationConfig
    progress : bool
        tqdm bars over the epochs.
    device : str or torch.device, optional
        Default: :func:`~attncourse.runtime.pick_device`.

    Returns
    -------
    EpochRun
        ``history`` rows hold ``epoch``, ``seconds``, ``train_loss``,
        ``train_accuracy`` and ``valid_accuracy``. Runs live in
        ``runs_dir("relation/{model}-seed{seed}-{hash}")``; a finished run with
        the same config loads without training (the stem's run too).
    """
    splits = load_relation_canvases(config)
    train_images, train_labels = splits.train.tensors()
    valid_images, valid_labels = splits.valid.tensors()
    stem_state = None
    if config.pretrain_epochs > 0:
        stem_state = pretrain_stem(config, progress=progress, device=device).model.stem.state_dict()
    frozen = config.freeze_stem
    cache: dict[str, torch.Tensor] = {}

    def build(dev: torch.device):
        model = build_relation_model(config)
        if stem_state is not None:
            model.stem.load_state_dict(stem_state)
        model.stem.requires_grad_(not frozen)
        model = model.to(dev)
        trainable = [p for p in model.parameters() if p.requires_grad]
        return model, torch.optim.Adam(trainable, lr=config.lr)

    def train_epoch(epoch: Epoch):
        model, dev = epoch.model, epoch.device
        labels = train_labels.to(dev)
        if not frozen:
            return _run_batches(epoch, train_images.to(dev), labels, config.batch_size, epoch.forward)
        if "features" not in cache:
            # A frozen stem gives the same features every epoch: compute them once.
            with torch.no_grad():
                cache["features"] = torch.cat([model.stem(train_images[i:i + 1000].to(dev))
                                               for i in range(0, len(train_images), 1000)])

        return _run_batches(epoch, cache["features"], labels, config.batch_size,
                            lambda features: _above_stem(model, features))

    def evaluate(model):
        if not frozen:
            return {"valid_accuracy": relation_accuracy(model, valid_images, valid_labels)}
        if "valid" not in cache:
            # The frozen stem's validation features, computed once instead of every epoch (the stem
            # was most of an evaluation's time), in relation_accuracy's batches: the same numbers.
            dev = next(model.parameters()).device
            cache["valid"] = [model.stem(valid_images[i:i + _EVAL_BATCH].to(dev))
                              for i in range(0, len(valid_images), _EVAL_BATCH)]
        right = sum(int((_above_stem(model, features).argmax(-1).cpu()
                         == valid_labels[i * _EVAL_BATCH:(i + 1) * _EVAL_BATCH].cpu()).sum())
                    for i, features in enumerate(cache["valid"]))
        return {"valid_accuracy": right / len(valid_labels)}

    return train_epochs(config.run_name, dataclasses.asdict(config), build, train_epoch, evaluate,
                        config.epochs, seed=config.seed, progress=progress, device=device)
