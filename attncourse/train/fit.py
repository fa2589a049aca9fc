"""Training an encoder-decoder: the loop, validation, early stopping, checkpoints and resuming.

One epoch of :func:`fit` does, for every training batch (in an order drawn afresh
each epoch):

1. **Forward with teacher forcing**: the decoder reads the gold previous token
   y_{i-1} at every step (``Batch.tgt_in`` = ``<bos>`` y_1..y_T) and scores the
   next one; logits have shape (batch, tgt_len, tgt_vocab).
2. **Loss**: the cross-entropy -log p(y_i | y_<i, x) averaged over the real
   target tokens (``Batch.tgt_out`` = y_1..y_T ``<eos>``); padding is ignored.
   This is the negative log-likelihood that Bahdanau et al. (2015, section 2)
   and Sutskever et al. (2014, section 3.1) maximise.
3. **Update**: backpropagate, clip the gradient's global norm, take an Adam step.

After each epoch it measures the model on the validation batches: the same
loss and token accuracy under teacher forcing, and the exact match of greedy
decoding, where the model reads its *own* previous outputs as it must on new
data. It then writes a checkpoint, so that a run can stop at any moment and
continue later with ``resume=True`` along exactly the same path: the optimizer's
moments and the random generators are saved with the weights.

References
----------
Kingma, Ba (2015), "Adam: A Method for Stochastic Optimization".
Pascanu, Mikolov, Bengio (2013), "On the difficulty of training recurrent neural
networks", section 3.2 (gradient norm clipping).
Bengio, Vinyals, Jaitly, Shazeer (2015), "Scheduled Sampling for Sequence
Prediction with Recurrent Neural Networks".
Prechelt (1998), "Early Stopping - But When?".
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from attncourse.data.batching import Batch, make_batches
from attncourse.data.pairs import PairDataset, detokenize
from attncourse.data.vocab import Vocabulary
from attncourse.train.checkpoint import check_compatible, differences, load_checkpoint, save_checkpoint
from attncourse.train.decoding import beam_search, greedy_decode
from attncourse.train.metrics import evaluate_by_bucket
from attncourse.train.runtime import pick_device

PAD_ID = Vocabulary.pad_id
CHECKPOINT_NAME = "checkpoint.pt"
BEST_NAME = "best.pt"
MONITORS = ("exact_match", "loss")

#: FitConfig fields that shape the training path; a resumed run must keep them.
_REPLAY_FIELDS = ("lr", "batch_size", "clip_norm", "teacher_forcing", "seed", "monitor")


@dataclass
class FitConfig:
    """How :func:`fit` trains.

    Attributes
    ----------
    epochs : int
        Total number of epochs (passes over the training batches). A resumed
        run continues up to this number, so raise it to train longer.
    lr : float
        Adam's learning rate.
    batch_size : int
        Examples per batch, as used to build ``train_batches`` (e.g. with
        :func:`~attncourse.data.batching.make_batches`); :func:`fit` does not
        re-batch, it checks that no batch is larger and records the value.
    clip_norm : float or None
        Rescale the gradient whenever its global L2 norm exceeds this
        (Pascanu et al. 2013); ``None`` turns clipping off. RNNs occasionally
        produce huge gradients ("exploding gradients"); one such step can undo
        an epoch of training.
    teacher_forcing : float in [0, 1]
        Probability of feeding the gold previous token y_{i-1} to the decoder.
        1.0 (the default, and what Bahdanau et al. 2015 do) is pure teacher
        forcing: fast, because the whole target is scored in one call. Below 1,
        at every step after the first and for every sentence independently,
        the decoder is fed its own most probable previous token instead with
        probability ``1 - teacher_forcing``: a constant-rate form of *scheduled
        sampling* (Bengio et al. 2015, who lower the probability over training
        and sample the model's token). It narrows the gap between training,
        where the decoder always sees correct prefixes, and decoding, where it
        sees its own mistakes. It needs a model with ``encode``,
        ``init_state`` and ``decode_step`` and runs step by step (slower).
    patience : int or None
        Early stopping: stop after this many epochs in a row without a new
        best validation score (see ``monitor``). ``None`` trains all epochs.
    monitor : {"exact_match", "loss"}
        What "best" means. ``"exact_match"`` (default): the highest greedy
        exact match on the validation set, ties broken by the lower validation
        loss. Exact match is what the course's tasks are judged by, and the
        tie-break matters: early in training exact match sits at 0 for several
        epochs while the loss is still falling, and those epochs count as
        progress instead of running out the patience. The loss alone can
        rise (the model grows over-confident on a few tokens) while exact
        match still improves. ``"loss"``: the lowest validation loss.
    restore_best : bool
        At the end, load the weights of the best epoch into the model (they are
        also in ``out_dir/best.pt``). If False the model keeps its last weights.
    seed : int
        Seeds the order of the batches in each epoch (a :class:`torch.Generator`)
        and torch's global generator (dropout). Initialise the model yourself
        after ``torch.manual_seed`` for a fully repeatable run.
    device : str or None
        ``"cpu"``, ``"cuda"``, ``"mps"`` ...; ``None`` picks CUDA, then MPS,
        then the CPU (:func:`~attncourse.train.runtime.pick_device`).
    num_threads : int or None
        CPU threads for torch during the run (restored afterwards); ``None``
        leaves the setting as it is. The course's models are small: their
        matrix products are too small to gain from several threads, and the
        threads' synchronisation costs more than it saves. On a shared 2-core machine
        one thread trained a 0.1M- to 1.6M-parameter model 3 to 10 times faster
        than two, so ``python -m attncourse train`` uses 1 by default.

    Raises
    ------
    ValueError
        If a value is out of range (``epochs < 1``, ``lr <= 0``, ...).
    """

    epochs: int = 10
    lr: float = 1e-3
    batch_size: int = 64
    clip_norm: float | None = 1.0
    teacher_forcing: float = 1.0
    patience: int | None = None
    monitor: str = "exact_match"
    restore_best: bool = True
    seed: int = 0
    device: str | None = None
    num_threads: int | None = None

    def __post_init__(self) -> None:
        if int(self.epochs) < 1:
            raise ValueError(f"epochs must be at least 1, got {self.epochs}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if int(self.batch_size) < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be positive or None, got {self.clip_norm}")
        if not 0.0 <= self.teacher_forcing <= 1.0:
            raise ValueError(f"teacher_forcing is a probability in [0, 1], got {self.teacher_forcing}")
        if self.patience is not None and int(self.patience) < 1:
            raise ValueError(f"patience must be at least 1 or None, got {self.patience}")
        if self.monitor not in MONITORS:
            raise ValueError(f"monitor must be one of {MONITORS}, got {self.monitor!r}")
        if self.num_threads is not None and int(self.num_threads) < 1:
            raise ValueError(f"num_threads must be at least 1 or None, got {self.num_threads}")


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes
    ----------
    history : list of dict
        One dict per epoch (a resumed run includes the earlier epochs):
        ``epoch`` (1-based), ``train_loss`` and ``valid_loss`` (mean cross-entropy
        per target token, nats), ``train_acc`` and ``valid_acc`` (token accuracy
        under teacher forcing, in [0, 1]), ``valid_exact_match`` (fraction of
        validation sentences that greedy decoding gets exactly right) and
        ``seconds`` (wall-clock time of the epoch's training and validation).
    best_epoch : int
        The epoch whose weights ``out_dir/best.pt`` holds (and the model, if
        ``restore_best``); 0 if no epoch ran.
    wall_time : float
        Seconds this call took, checkpoints included.
    device : str
        Where it ran, e.g. ``"cpu"`` or ``"cuda"``.
    stopped_early : bool
        True if the patience ran out before ``epochs``.
    """

    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    wall_time: float = 0.0
    device: str = "cpu"
    stopped_early: bool = False


def sequence_loss(logits: torch.Tensor, tgt_out: torch.Tensor, pad_id: int = PAD_ID) -> tuple[torch.Tensor, int, int]:
    """Mean token cross-entropy, ignoring padding, and the counts behind token accuracy.

    Parameters
    ----------
    logits : (batch, tgt_len, tgt_vocab)
        Unnormalised scores of y_i for every step.
    tgt_out : (batch, tgt_len) long
        Gold next tokens y_1..y_T ``<eos>``, ``pad_id`` at padding.
    pad_id : int

    Returns
    -------
    loss : scalar tensor
        -(1/N) sum log p(y_i | ...) over the N real target tokens (nats per token).
    n_correct : int
        Real positions where the argmax of ``logits`` is the gold token.
    n_tokens : int
        N.

    Raises
    ------
    ValueError
        If the shapes do not fit together.
    """
    if logits.dim() != 3 or logits.shape[:2] != tgt_out.shape:
        raise ValueError(
            f"logits (batch, tgt_len, tgt_vocab) {tuple(logits.shape)} do not fit "
            f"tgt_out (batch, tgt_len) {tuple(tgt_out.shape)}"
        )
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=pad_id)
    real = tgt_out != pad_id
    n_correct = int(((logits.argmax(dim=-1) == tgt_out) & real).sum())
    return loss, n_correct, int(real.sum())


def _scheduled_sampling_logits(
    model: Any, batch: Batch, teacher_forcing: float, generator: torch.Generator
) -> torch.Tensor:
    """Decoder logits (batch, tgt_len, vocab) when each input token is gold with probability p."""
    for name in ("encode", "init_state", "decode_step"):
        if not hasattr(model, name):
            raise TypeError(f"teacher_forcing < 1 needs a model with encode, init_state and decode_step; "
                            f"{type(model).__name__} has no {name}")
    tgt_in = batch.tgt_in
    enc = model.encode(batch.src, batch.src_mask)
    state = model.init_state(enc)
    prev = tgt_in[:, 0]  # <bos>
    steps = []
    for i in range(tgt_in.shape[1]):
        if i > 0:
            # Coin flips on the CPU generator, so they replay identically on resume and on any device.
            gold = torch.rand(tgt_in.shape[0], generator=generator) < teacher_forcing
            prev = torch.where(gold.to(tgt_in.device), tgt_in[:, i], steps[-1].argmax(dim=-1))
        logits, state, _ = model.decode_step(prev, state, enc)
        steps.append(logits)
    return torch.stack(steps, dim=1)


def _train_step(
    model: Any,
    batch: Batch,
    optimizer: torch.optim.Optimizer,
    config: FitConfig,
    generator: torch.Generator,
) -> tuple[float, int, int]:
    if config.teacher_forcing >= 1.0:
        logits = model(batch.src, batch.src_mask, batch.tgt_in).logits
    else:
        logits = _scheduled_sampling_logits(model, batch, config.teacher_forcing, generator)
    loss, n_correct, n_tokens = sequence_loss(logits, batch.tgt_out)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if config.clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
    optimizer.step()
    return float(loss.detach()), n_correct, n_tokens


def validate(model: Any, batches: Sequence[Batch], device: torch.device | str | None = None) -> dict[str, float]:
    """Validation loss and token accuracy under teacher forcing, and greedy exact match.

    Parameters
    ----------
    model
        A sequence-to-sequence model: ``model(src, src_mask, tgt_in).logits``
        and the decoding interface of :mod:`attncourse.train.decoding`.
    batches : sequence of Batch
    device : torch.device or str, optional
        Where the model is; default: where its first parameter is.

    Returns
    -------
    dict
        ``valid_loss`` (nats per target token), ``valid_acc`` and
        ``valid_exact_match`` (fractions in [0, 1]).

    Raises
    ------
    ValueError
        If ``batches`` is empty.
    """
    if len(batches) == 0:
        raise ValueError("no validation batches: give at least one")
    if device is None:
        device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss_sum = 0.0
    correct = tokens = exact = sentences = 0
    try:
        with torch.no_grad():
            for batch in batches:
                batch = batch.to(device)
                logits = model(batch.src, batch.src_mask, batch.tgt_in).logits
                loss, n_correct, n_tokens = sequence_loss(logits, batch.tgt_out)
                loss_sum += float(loss) * n_tokens
                correct += n_correct
                tokens += n_tokens
                # max_len = T_max + 2 > T + 1 tokens (eos included) of any gold target: an output
                # cut at max_len is longer than every reference, so it is never counted as exact.
                hyps, _ = greedy_decode(model, batch.src, batch.src_mask, max_len=batch.tgt.shape[1])
                lengths = batch.tgt_mask.sum(dim=1).tolist()
                gold_rows = batch.tgt.tolist()
                for hyp, row, length in zip(hyps, gold_rows, lengths):
                    exact += hyp == row[1 : length - 1]  # strip <bos> and <eos>
                sentences += len(hyps)
    finally:
        model.train(was_training)
    return {
        "valid_loss": loss_sum / max(tokens, 1),
        "valid_acc": correct / max(tokens, 1),
        "valid_exact_match": exact / max(sentences, 1),
    }


def _fingerprint(batches: Sequence[Batch]) -> str:
    """A hash of the training batches' token ids, so a resumed run can tell it has the same data."""
    digest = hashlib.sha256()
    for batch in batches:
        for tensor in (batch.src, batch.tgt):
            t = tensor.detach().to("cpu", torch.int64).contiguous()
            digest.update(str(tuple(t.shape)).encode())
            digest.update(t.numpy().tobytes())
    return digest.hexdigest()


def _replay_settings(config: FitConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in _REPLAY_FIELDS}


def check_resume(
    out_dir: str | PathLike,
    model: torch.nn.Module,
    train_batches: Sequence[Batch],
    config: FitConfig,
    extra: dict[str, Any] | None = None,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """Check that ``out_dir/checkpoint.pt`` can be resumed by this run, and return it.

    :func:`fit` calls it when ``resume=True``; call it yourself to find out
    before anything else is written.

    Parameters
    ----------
    out_dir : str or path-like
    model : torch.nn.Module
        The model to resume; its ``config`` must match the saved one.
    train_batches : sequence of Batch
        Must hold the same token ids, in the same batches, as in the saved run.
    config : FitConfig
        ``lr``, ``batch_size``, ``clip_norm``, ``teacher_forcing``, ``seed`` and
        ``monitor`` must be the saved ones (``epochs``, ``patience``,
        ``restore_best``, ``device`` and ``num_threads`` may change).
    extra : dict, optional
        Must equal the saved ``extra`` (vocabularies, level, ...).
    fingerprint : str, optional
        Hash of ``train_batches`` if already computed.

    Returns
    -------
    dict
        The checkpoint, loaded on the CPU.

    Raises
    ------
    FileNotFoundError
        If there is no ``checkpoint.pt`` in ``out_dir``.
    ValueError
        If it is unreadable, or naming everything that differs from this run.
    """
    path = Path(out_dir) / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"nothing to resume: no {CHECKPOINT_NAME} in {str(out_dir)!r}")
    saved = load_checkpoint(path, map_location="cpu")
    check_compatible(saved, model, {} if extra is None else extra, path)
    trainer = saved["trainer"]
    problems = differences(trainer.get("fit_config", {}), _replay_settings(config), "setting")
    if fingerprint is None:
        fingerprint = _fingerprint(train_batches)
    if trainer.get("data_fingerprint") != fingerprint:
        problems.append("the training batches differ (other data, batch size or data seed)")
    if saved.get("optimizer_state") is None or "generator_state" not in trainer:
        problems.append("it holds no optimizer or generator state (is it a best.pt?)")
    if problems:
        raise ValueError(f"checkpoint {path} does not match this run: " + "; ".join(problems))
    return saved


def _score(row: dict[str, float], monitor: str) -> tuple[float, ...]:
    """Larger is better; NaN never counts as an improvement."""
    loss = row["valid_loss"]
    neg_loss = -loss if not math.isnan(loss) else -math.inf
    if monitor == "loss":
        return (neg_loss,)
    return (row["valid_exact_match"], neg_loss)


def _cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def fit(
    model: torch.nn.Module,
    train_batches: Sequence[Batch],
    valid_batches: Sequence[Batch],
    config: FitConfig,
    out_dir: str | PathLike | None = None,
    resume: bool = False,
    progress: bool = True,
    extra: dict[str, Any] | None = None,
    callback: Callable[[list[dict[str, float]]], None] | None = None,
) -> FitResult:
    """Train a sequence-to-sequence model with Adam, validating and checkpointing every epoch.

    Parameters
    ----------
    model : torch.nn.Module
        ``model(src, src_mask, tgt_in)`` returns an object with ``logits``
        (batch, tgt_len, tgt_vocab), like :class:`~attncourse.nn.rnn.Seq2Seq`;
        validation also decodes greedily with it. Moved to the chosen device
        and trained in place.
    train_batches : sequence of Batch
        Built once (e.g. :func:`~attncourse.data.batching.make_batches`); each
        epoch visits all of them in a fresh order drawn from a
        :class:`torch.Generator` seeded with ``config.seed``.
    valid_batches : sequence of Batch
        Validation data, measured after every epoch.
    config : FitConfig
    out_dir : str or path-like, optional
        If given (created if missing), every epoch writes ``checkpoint.pt``
        (everything needed to resume) and, when the epoch is the best so far,
        ``best.pt`` (its weights), both atomically; an existing run there is
        overwritten unless ``resume``.
    resume : bool
        Continue the run saved in ``out_dir/checkpoint.pt`` with the epoch
        after the saved one, restoring weights, optimizer state, history, best
        weights and random generator states. On the CPU the result equals an
        uninterrupted run bit for bit. Raise ``config.epochs`` to train longer.
    progress : bool
        Show progress bars (``tqdm.auto``: a widget in a notebook, text in a
        terminal): one over epochs and one over each epoch's batches, with the
        running loss and accuracy.
    extra : dict, optional
        Plain data saved in both checkpoints, e.g. the vocabularies as
        ``Vocabulary.to_dict()`` and the data level; on resume it must equal the
        saved one.
    callback : callable, optional
        Called after each epoch, once its checkpoint is written, as
        ``callback(history)`` with a copy of the history so far (the last
        dict is the epoch just finished): to print, plot live curves or log.

    Returns
    -------
    FitResult
        Per-epoch history, best epoch, wall time (seconds) and device.

    Raises
    ------
    ValueError
        If there are no training or validation batches, a batch is larger than
        ``config.batch_size``, ``resume`` is set without ``out_dir``, or the
        checkpoint is unreadable or belongs to another run: a different model
        config, vocabulary (``extra``), training data or a setting listed in
        the message (lr, batch_size, clip_norm, teacher_forcing, seed, monitor).
    FileNotFoundError
        If ``resume`` is set and ``out_dir/checkpoint.pt`` does not exist.
    KeyboardInterrupt
        Passed on; the checkpoint of the last finished epoch stays on disk, so
        call again with ``resume=True``.

    Notes
    -----
    Seeding: ``torch.manual_seed(config.seed)`` is called at the start of a
    fresh run (dropout draws from torch's global generator), so call it
    yourself *before* building the model for a repeatable initialisation.
    Exact replay after ``resume`` holds on the CPU; CUDA kernels may be
    non-deterministic unless ``torch.use_deterministic_algorithms(True)``.
    """
    if len(train_batches) == 0:
        raise ValueError("no training batches: give at least one")
    if len(valid_batches) == 0:
        raise ValueError("no validation batches: give at least one")
    largest = max(len(b) for b in train_batches)
    if largest > config.batch_size:
        raise ValueError(
            f"a training batch holds {largest} examples but config.batch_size is {config.batch_size}; "
            "build the batches with the same batch_size"
        )
    if resume and out_dir is None:
        raise ValueError("resume=True needs the out_dir that holds checkpoint.pt")
    start_time = time.perf_counter()
    device = pick_device(config.device)
    out = None if out_dir is None else Path(out_dir)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    extra = {} if extra is None else dict(extra)
    replay = _replay_settings(config)
    fingerprint = _fingerprint(train_batches)

    previous_threads = torch.get_num_threads()
    if config.num_threads is not None:
        torch.set_num_threads(int(config.num_threads))
    was_training = model.training
    try:
        model.to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        generator = torch.Generator().manual_seed(config.seed)
        history: list[dict[str, float]] = []
        best_epoch, best_state = 0, None
        if resume:
            saved = check_resume(out, model, train_batches, config, extra, fingerprint)
            trainer = saved["trainer"]
            model.load_state_dict(saved["model_state"])
            optimizer.load_state_dict(saved["optimizer_state"])
            generator.set_state(trainer["generator_state"])
            torch.set_rng_state(trainer["torch_rng_state"])
            if device.type == "cuda" and trainer.get("cuda_rng_state") is not None:
                torch.cuda.set_rng_state(trainer["cuda_rng_state"], device)
            history = [dict(row) for row in saved["history"]]
            best_epoch = int(trainer["best_epoch"])
            best_state = trainer["best_model_state"]
        else:
            torch.manual_seed(config.seed)
        start_epoch = len(history)
        best_score = _score(history[best_epoch - 1], config.monitor) if best_epoch else None
        stopped_early = False

        epochs_bar = tqdm(total=config.epochs, initial=min(start_epoch, config.epochs), desc="epochs",
                          unit="epoch", disable=not progress, dynamic_ncols=True)
        try:
            for epoch in range(start_epoch + 1, config.epochs + 1):
                if config.patience is not None and best_epoch and epoch - 1 - best_epoch >= config.patience:
                    stopped_early = True
                    break
                epoch_start = time.perf_counter()
                model.train()
                order = torch.randperm(len(train_batches), generator=generator).tolist()
                loss_sum, correct, tokens = 0.0, 0, 0
                with tqdm(total=len(order), desc=f"epoch {epoch}", unit="batch", leave=False,
                          disable=not progress, dynamic_ncols=True) as batch_bar:
                    for index in order:
                        batch = train_batches[index].to(device)
                        loss, n_correct, n_tokens = _train_step(model, batch, optimizer, config, generator)
                        loss_sum += loss * n_tokens
                        correct += n_correct
                        tokens += n_tokens
                        batch_bar.update()
                        batch_bar.set_postfix(loss=f"{loss_sum / tokens:.3f}", acc=f"{correct / tokens:.3f}",
                                              refresh=False)
                row = {"epoch": epoch, "train_loss": loss_sum / tokens, "train_acc": correct / tokens}
                row.update(validate(model, valid_batches, device))
                row["seconds"] = time.perf_counter() - epoch_start
                history.append(row)
                score = _score(row, config.monitor)
                if best_score is None or score > best_score:
                    best_epoch, best_score, best_state = epoch, score, _cpu_state(model)
                    if out is not None:
                        save_checkpoint(out / BEST_NAME, model=model, epoch=epoch, history=history, extra=extra)
                if out is not None:
                    trainer = {
                        "fit_config": replay,
                        "data_fingerprint": fingerprint,
                        "generator_state": generator.get_state(),
                        "torch_rng_state": torch.get_rng_state(),
                        "cuda_rng_state": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                        "best_epoch": best_epoch,
                        "best_model_state": best_state,
                    }
                    save_checkpoint(out / CHECKPOINT_NAME, model=model, optimizer=optimizer, epoch=epoch,
                                    history=history, extra=extra, trainer=trainer)
                epochs_bar.update()
                epochs_bar.set_postfix(valid_loss=f"{row['valid_loss']:.3f}",
                                       exact=f"{row['valid_exact_match']:.3f}", best=best_epoch)
                if callback is not None:
                    callback([dict(r) for r in history])
        finally:
            epochs_bar.close()
        if config.restore_best and best_state is not None:
            model.load_state_dict(best_state)
    finally:
        model.train(was_training)
        if config.num_threads is not None:
            torch.set_num_threads(previous_threads)
    return FitResult(
        history=history,
        best_epoch=best_epoch,
        wall_time=time.perf_counter() - start_time,
        device=device.type,
        stopped_early=stopped_early,
    )


def _default_edges(lengths: Sequence[int], n_buckets: int = 5) -> list[int]:
    lo, hi = int(min(lengths)), int(max(lengths))
    step = max(1, math.ceil((hi - lo + 1) / n_buckets))
    return list(range(lo, hi + 1, step))


def evaluate(
    model: Any,
    dataset: PairDataset,
    src_vocab: Vocabulary,
    tgt_vocab: Vocabulary,
    *,
    beam_size: int = 1,
    batch_size: int = 256,
    edges: Sequence[int] | None = None,
    max_len: int | None = None,
    length_penalty: float = 0.6,
) -> dict[str, Any]:
    """Decode a dataset and score it overall and by source length.

    Parameters
    ----------
    model
        A trained model with the decoding interface (:class:`~attncourse.nn.rnn.Seq2Seq`);
        it stays where it is (CPU or GPU).
    dataset : PairDataset
        Test pairs; their level (word or char) decides how outputs are joined into text.
    src_vocab, tgt_vocab : Vocabulary
        The vocabularies the model was trained with.
    beam_size : int
        1: greedy decoding (:func:`~attncourse.train.decoding.greedy_decode`);
        more: :func:`~attncourse.train.decoding.beam_search` with this many hypotheses.
    batch_size : int
        Sentences decoded at once.
    edges : sequence of int, optional
        Left edges of the source-length buckets, in tokens (see
        :func:`~attncourse.train.metrics.bucket_labels`). Default: five buckets of
        equal width from the shortest to the longest source.
    max_len : int, optional
        Most tokens generated per sentence; default twice the longest reference plus 5.
    length_penalty : float
        alpha of the beam search's length penalty (ignored when ``beam_size == 1``).

    Returns
    -------
    dict
        ``"metrics"``: :func:`~attncourse.train.metrics.evaluate_by_bucket`'s
        result, ``{"overall": row, bucket_label: row, ...}`` with exact match,
        token accuracy, BLEU and chrF (tokens are words or characters by the
        dataset's level); ``"sources"``, ``"references"`` and ``"hypotheses"``:
        lists of text in dataset order; ``"edges"``: the bucket edges used.

    Raises
    ------
    ValueError
        If ``beam_size`` or ``batch_size`` is below 1, the dataset is empty or a
        source is shorter than ``edges[0]``.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if len(dataset) == 0:
        raise ValueError(f"dataset {dataset.name!r} is empty")
    lengths = dataset.src_lengths().tolist()
    edges = _default_edges(lengths) if edges is None else [int(e) for e in edges]
    if max_len is None:
        max_len = 2 * int(dataset.tgt_lengths().max()) + 5
    outputs: list[list[str] | None] = [None] * len(dataset)
    for batch in make_batches(dataset, src_vocab, tgt_vocab, batch_size, shuffle=False):
        if beam_size == 1:
            ids, _ = greedy_decode(model, batch.src, batch.src_mask, max_len=max_len)
        else:
            ids, _ = beam_search(model, batch.src, batch.src_mask, beam_size=beam_size, max_len=max_len,
                                 length_penalty=length_penalty)
        for i, hyp in zip(batch.index.tolist(), ids):
            outputs[i] = tgt_vocab.decode(hyp)
    refs = [list(tgt) for _, tgt in dataset.pairs]
    metrics = evaluate_by_bucket(lengths, outputs, refs, edges)
    level = dataset.level
    return {
        "metrics": metrics,
        "sources": [detokenize(src, level) for src, _ in dataset.pairs],
        "references": [detokenize(tgt, level) for tgt in refs],
        "hypotheses": [detokenize(hyp, level) for hyp in outputs],
        "edges": edges,
    }

