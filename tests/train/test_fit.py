"""Tests for the training loop, checkpoints, resuming and evaluation (attncourse.train.fit, .checkpoint)."""

from __future__ import annotations

import copy
import importlib
import math
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch

from attncourse.data.batching import build_vocabs, make_batches
from attncourse.data.pairs import PairDataset
from attncourse.nn.rnn import Seq2Seq
from attncourse.train.checkpoint import (
    atomic_torch_save,
    load_checkpoint,
    load_model,
    save_checkpoint,
)
from attncourse.train.fit import FitConfig, fit
from attncourse.train.metrics import exact_match
from attncourse.train.seq2seq import evaluate, sequence_loss, validate

# importlib, not "import attncourse.train.fit as ...": the package re-exports the function fit,
# which shadows the module of the same name as an attribute of attncourse.train.
fit_module = importlib.import_module("attncourse.train.fit")

LETTERS = "abcdefg"


def without_timings(row: dict) -> dict:
    """A history row less its wall-clock times, which no replay reproduces."""
    return {k: v for k, v in row.items() if k not in ("seconds", "train_seconds")}


def reverse_pairs(n: int, seed: int, name: str) -> PairDataset:
    """Sequences of 2-5 letters and their reverses: tiny, but needs the whole source."""
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        src = tuple(str(c) for c in rng.choice(list(LETTERS), size=int(rng.integers(2, 6))))
        pairs.append((src, src[::-1]))
    return PairDataset(tuple(pairs), level="word", name=name)


@pytest.fixture(scope="module")
def data():
    return make_data()


def make_data() -> dict:
    """Reversal pairs, their vocabularies and batches (tests/train/test_fit_cache.py uses them too)."""
    train, valid = reverse_pairs(96, 0, "train"), reverse_pairs(24, 1, "valid")
    src_vocab, tgt_vocab = build_vocabs(train)
    return {
        "train": train,
        "valid": valid,
        "src_vocab": src_vocab,
        "tgt_vocab": tgt_vocab,
        "train_batches": make_batches(train, src_vocab, tgt_vocab, 16, shuffle=True, seed=0),
        "valid_batches": make_batches(valid, src_vocab, tgt_vocab, 64, shuffle=False),
        "extra": {"src_vocab": src_vocab.to_dict(), "tgt_vocab": tgt_vocab.to_dict(), "level": "word"},
    }


def new_model(data, seed=0, hidden_dim=16, attention="bahdanau", dropout=0.0):
    torch.manual_seed(seed)
    return Seq2Seq(len(data["src_vocab"]), len(data["tgt_vocab"]), emb_dim=8, hidden_dim=hidden_dim,
                   attention=attention, dropout=dropout)


def config(**kw):
    base = {"epochs": 4, "lr": 1e-2, "batch_size": 16, "seed": 0, "device": "cpu", "num_threads": 1}
    base.update(kw)
    return FitConfig(**base)


def run(data, model, cfg, **kw):
    return fit(model, data["train_batches"], data["valid_batches"], cfg, progress=False, **kw)


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


# --- the loop ---------------------------------------------------------------------------------


def test_fit_reduces_loss_and_reports_every_epoch(data):
    model = new_model(data)
    result = run(data, model, config(epochs=6))
    rows = result.history
    assert [r["epoch"] for r in rows] == list(range(1, 7))
    keys = {"epoch", "train_loss", "train_acc", "valid_loss", "valid_acc", "valid_exact_match", "seconds",
            "train_tokens", "train_seconds", "train_steps"}
    assert all(set(r) == keys for r in rows)
    assert sum(r["train_tokens"] for r in rows) == result.train_tokens
    assert sum(r["train_seconds"] for r in rows) == pytest.approx(result.train_seconds)
    assert rows[-1]["train_loss"] < 0.7 * rows[0]["train_loss"]
    assert rows[-1]["valid_loss"] < rows[0]["valid_loss"]
    assert rows[-1]["train_acc"] > rows[0]["train_acc"]
    assert all(0.0 <= r[k] <= 1.0 for r in rows for k in ("train_acc", "valid_acc", "valid_exact_match"))
    assert result.device == "cpu" and result.wall_time > 0 and 1 <= result.best_epoch <= 6
    assert not result.stopped_early


def test_fit_restores_thread_count(data):
    before = torch.get_num_threads()
    run(data, new_model(data), config(epochs=1, num_threads=1))
    assert torch.get_num_threads() == before


def test_sequence_loss_ignores_padding():
    logits = torch.randn(2, 3, 5)
    gold = torch.tensor([[4, 2, 0], [3, 4, 2]])
    loss, correct, tokens = sequence_loss(logits, gold)
    real = gold != 0
    expected = torch.nn.functional.cross_entropy(logits[real], gold[real])
    assert torch.allclose(loss, expected)
    assert tokens == 5
    assert correct == int(((logits.argmax(-1) == gold) & real).sum())
    with pytest.raises(ValueError, match=r"\(2, 3, 5\).*\(2, 4\)"):
        sequence_loss(logits, torch.zeros(2, 4, dtype=torch.long))


def test_validate_exact_match_agrees_with_decoding(data):
    model = new_model(data)
    run(data, model, config(epochs=5))
    scores = validate(model, data["valid_batches"])
    result = evaluate(model, data["valid"], data["src_vocab"], data["tgt_vocab"])
    assert scores["valid_exact_match"] == pytest.approx(result["metrics"]["overall"]["exact_match"])


def test_scheduled_sampling_trains_and_is_repeatable(data):
    results = []
    for _ in range(2):
        model = new_model(data)
        results.append((run(data, model, config(epochs=3, teacher_forcing=0.5)), model))
    (first, m1), (second, m2) = results
    assert first.history[-1]["train_loss"] < first.history[0]["train_loss"]
    assert_same_weights(m1, m2)


@pytest.mark.parametrize(
    "kw, message",
    [({"epochs": 0}, "epochs"), ({"lr": 0.0}, "lr"), ({"teacher_forcing": 1.5}, "probability"),
     ({"patience": 0}, "patience"), ({"monitor": "bleu"}, "monitor"), ({"clip_norm": -1.0}, "clip_norm")],
)
def test_fit_config_rejects_bad_values(kw, message):
    with pytest.raises(ValueError, match=message):
        config(**kw)


def test_fit_rejects_batches_larger_than_batch_size(data):
    with pytest.raises(ValueError, match="batch_size is 8"):
        run(data, new_model(data), config(batch_size=8))


# --- checkpoints ----------------------------------------------------------------------------


def test_checkpoints_are_written_atomically_and_load_weights_only(data, tmp_path):
    model = new_model(data)
    result = run(data, model, config(epochs=2), out_dir=tmp_path, extra=data["extra"])
    assert sorted(os.listdir(tmp_path)) == ["best.pt", "checkpoint.pt"]  # no temporary files left
    for name in ("checkpoint.pt", "best.pt"):
        raw = torch.load(tmp_path / name, weights_only=True)  # tensors and plain values only
        assert raw["format"] == "attncourse-checkpoint"
        assert raw["extra"] == data["extra"]
        assert raw["model_config"] == model.config
    ckpt = load_checkpoint(tmp_path / "checkpoint.pt")
    assert ckpt["epoch"] == 2 and len(ckpt["history"]) == 2
    assert ckpt["optimizer_state"] is not None
    best, best_ckpt = load_model(tmp_path / "best.pt")
    assert best_ckpt["epoch"] == result.best_epoch
    assert_same_weights(best, model)  # restore_best: the model holds the best weights


def test_failed_save_keeps_the_old_file_and_leaves_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    atomic_torch_save({"a": torch.ones(3)}, path)

    def crash(obj, f):
        with open(f, "wb") as out:  # atomic_torch_save hands torch.save the temporary file's name
            out.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        atomic_torch_save({"a": torch.zeros(3)}, path)
    assert os.listdir(tmp_path) == ["checkpoint.pt"]
    assert torch.equal(torch.load(path, weights_only=True)["a"], torch.ones(3))


def test_corrupt_or_foreign_files_give_a_clear_error(data, tmp_path):
    model = new_model(data)
    good = tmp_path / "good.pt"
    save_checkpoint(good, model=model, epoch=1, extra=data["extra"])
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"this is not a checkpoint\n" * 10)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.ones(2)}, foreign)
    pickled = tmp_path / "pickled.pt"
    torch.save({"format": "attncourse-checkpoint", "thing": Fraction(1, 3)}, pickled)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    for path in (truncated, garbage, foreign, pickled, empty):
        with pytest.raises(ValueError, match="is not a readable attncourse checkpoint") as info:
            load_checkpoint(path)
        assert str(path) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt")


def test_save_refuses_objects_weights_only_cannot_load(data, tmp_path):
    with pytest.raises(TypeError, match="extra\\['vocab'\\]"):
        save_checkpoint(tmp_path / "c.pt", model=new_model(data), extra={"vocab": data["src_vocab"]})
    with pytest.raises(TypeError, match="float64"):
        save_checkpoint(tmp_path / "c.pt", model=new_model(data), history=[{"loss": np.float64(1.0)}])
    assert not list(tmp_path.iterdir())


# --- resuming -------------------------------------------------------------------------------


def stop_at_epoch_two(data, model, cfg, short_cfg, how, out_dir):
    """Leave ``out_dir`` as a run stopped after epoch 2 leaves it.

    ``how="interrupt"``: a run of ``cfg`` interrupted (Ctrl-C) after its second epoch;
    ``"shorter"``: a run of ``short_cfg``, of two epochs, that ends there.
    """
    if how == "interrupt":

        def stop_after_two(history):
            if len(history) == 2:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            run(data, model, cfg, out_dir=out_dir, extra=data["extra"], callback=stop_after_two)
    else:
        run(data, model, short_cfg, out_dir=out_dir, extra=data["extra"])


@pytest.mark.parametrize("how", ["interrupt", "shorter"])
@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_resumed_run_equals_uninterrupted_run(data, tmp_path, how, dropout):
    cfg = config(epochs=4, restore_best=False)
    straight = new_model(data, dropout=dropout)
    full = run(data, straight, cfg)

    first = new_model(data, dropout=dropout)
    stop_at_epoch_two(data, first, cfg, config(epochs=2, restore_best=False), how, tmp_path)
    assert load_checkpoint(tmp_path / "checkpoint.pt")["epoch"] == 2

    resumed = new_model(data, seed=123, dropout=dropout)  # other initial weights: must be overwritten
    result = run(data, resumed, cfg, out_dir=tmp_path, resume=True, extra=data["extra"])
    assert_same_weights(resumed, straight)
    assert [r["epoch"] for r in result.history] == [1, 2, 3, 4]
    for a, b in zip(result.history, full.history):
        assert without_timings(a) == without_timings(b)
    assert result.best_epoch == full.best_epoch


def test_resume_refuses_another_run(data, tmp_path):
    run(data, new_model(data), config(epochs=1), out_dir=tmp_path, extra=data["extra"])
    with pytest.raises(ValueError, match="hidden_dim: 16 in the checkpoint, 24 in this run"):
        run(data, new_model(data, hidden_dim=24), config(), out_dir=tmp_path, resume=True, extra=data["extra"])
    other_vocab = dict(data["extra"], src_vocab={"tokens": data["extra"]["src_vocab"]["tokens"] + ["z"]})
    with pytest.raises(ValueError, match="src_vocab"):
        run(data, new_model(data), config(), out_dir=tmp_path, resume=True, extra=other_vocab)
    with pytest.raises(ValueError, match="lr: 0.01 in the checkpoint, 0.02 in this run"):
        run(data, new_model(data), config(lr=2e-2), out_dir=tmp_path, resume=True, extra=data["extra"])
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        run(data, new_model(data), config(), out_dir=tmp_path / "empty", resume=True)


# --- early stopping -------------------------------------------------------------------------


def scripted_validation(monkeypatch, exact, loss=None):
    """Make validation report the given scores epoch by epoch."""
    calls = iter(range(len(exact)))

    def fake(model, batches, device=None):
        i = next(calls)
        return {"valid_loss": 1.0 if loss is None else loss[i], "valid_acc": 0.5, "valid_exact_match": exact[i]}

    monkeypatch.setattr(fit_module, "validate", fake)


def test_early_stopping_stops_and_restores_the_best(data, tmp_path, monkeypatch):
    scripted_validation(monkeypatch, exact=[0.1, 0.5, 0.4, 0.3, 0.9, 0.9])
    snapshots = {}
    model = new_model(data)

    def keep(history):
        snapshots[len(history)] = {k: v.clone() for k, v in model.state_dict().items()}

    result = run(data, model, config(epochs=6, patience=2), out_dir=tmp_path, callback=keep)
    assert result.stopped_early
    assert len(result.history) == 4 and result.best_epoch == 2
    for name, value in model.state_dict().items():
        assert torch.equal(value, snapshots[2][name]), name
    assert any(not torch.equal(snapshots[2][k], snapshots[4][k]) for k in snapshots[2])  # training went on
    best, ckpt = load_model(tmp_path / "best.pt")
    assert ckpt["epoch"] == 2
    assert_same_weights(best, model)


def test_exact_match_ties_are_broken_by_validation_loss(data, monkeypatch):
    scripted_validation(monkeypatch, exact=[0.0, 0.0, 0.0, 0.0, 0.0], loss=[3.0, 2.0, 2.5, 2.6, 1.0])
    result = run(data, new_model(data), config(epochs=5, patience=2))
    assert result.best_epoch == 2 and result.stopped_early and len(result.history) == 4
    scripted_validation(monkeypatch, exact=[0.2, 0.3, 0.3], loss=[1.0, 2.0, 1.0])
    assert run(data, new_model(data), config(epochs=3, monitor="loss")).best_epoch == 1


# --- evaluation -----------------------------------------------------------------------------


@pytest.mark.parametrize("beam_size", [1, 3])
def test_evaluate_returns_metrics_by_bucket_and_hypotheses(data, beam_size):
    model = new_model(data)
    run(data, model, config(epochs=4))
    valid = data["valid"]
    result = evaluate(model, valid, data["src_vocab"], data["tgt_vocab"], beam_size=beam_size, edges=(2, 4))
    metrics = result["metrics"]
    assert list(metrics) == ["overall", "2-3", "4+"]
    assert metrics["overall"]["count"] == len(valid)
    assert metrics["2-3"]["count"] + metrics["4+"]["count"] == len(valid)
    assert len(result["hypotheses"]) == len(valid)
    assert result["references"] == [" ".join(t) for _, t in valid.pairs]
    assert result["sources"] == [" ".join(s) for s, _ in valid.pairs]
    expected = exact_match(result["hypotheses"], result["references"])
    assert metrics["overall"]["exact_match"] == pytest.approx(expected)


def test_evaluate_char_level_joins_characters(data):
    pairs = tuple((tuple(a), tuple(b)) for a, b in [("ab", "ba"), ("abc", "cba"), ("ca", "ac")])
    dataset = PairDataset(pairs, level="char", name="chars")
    src_vocab, tgt_vocab = build_vocabs(dataset)
    torch.manual_seed(0)
    model = Seq2Seq(len(src_vocab), len(tgt_vocab), emb_dim=4, hidden_dim=8)
    result = evaluate(model, dataset, src_vocab, tgt_vocab)
    assert result["references"] == ["ba", "cba", "ac"]
    assert all(" " not in h for h in result["hypotheses"])
    assert result["edges"] == [2, 3]
    with pytest.raises(ValueError, match="beam_size"):
        evaluate(model, dataset, src_vocab, tgt_vocab, beam_size=0)


def test_checkpoint_history_round_trips(data, tmp_path):
    # history values are plain floats, so a history row survives torch.load(weights_only=True) unchanged
    model = new_model(data)
    result = run(data, model, config(epochs=1), out_dir=tmp_path)
    raw = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert raw["history"] == result.history
    assert isinstance(raw["trainer"]["generator_state"], torch.Tensor)


def test_progress_bars_show_epochs_and_batches(data, capsys):
    run_result = fit(new_model(data), data["train_batches"], data["valid_batches"], config(epochs=1), progress=True)
    err = capsys.readouterr().err
    assert "epochs" in err and "1/1" in err
    assert run_result.history[0]["epoch"] == 1


@pytest.mark.parametrize("env", [{}, {"TQDM_DISABLE": "1"}])
def test_tqdm_disable_in_the_environment_turns_the_bars_off(env):
    # tqdm reads TQDM_* when it is imported, so each case needs a process of its own (make test sets it for nbval)
    code = ("from attncourse.runtime import progress_bar\n"
            "assert progress_bar(range(2), progress=False).disable\n"
            "print(progress_bar(range(2), progress=True).disable)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(bool(env))


# --- label smoothing ------------------------------------------------------------------------


def test_label_smoothing_matches_a_hand_computed_case():
    # p = (1/4, 1/2, 1/4), gold token 0, eps = 0.1: the target is 0.9 on token 0 plus 0.1/3 on each token, so
    # loss = 0.9 * -log p_0 + 0.1 * mean_k(-log p_k) = 0.9 * log 4 + 0.1 * (log 4 + log 2 + log 4) / 3
    expected = 0.9 * math.log(4) + 0.1 * (5 * math.log(2)) / 3
    logits = torch.tensor([[[math.log(1.0), math.log(2.0), math.log(1.0)], [5.0, -3.0, 0.5]]])
    gold = torch.tensor([[0, 0]])
    loss, _, _ = sequence_loss(logits[:, :1], gold[:, :1], label_smoothing=0.1, pad_id=2)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    # with a padded position added (pad_id = 2 as the gold there), nothing changes
    padded_gold = torch.tensor([[0, 2]])
    loss_padded, _, tokens = sequence_loss(logits, padded_gold, label_smoothing=0.1, pad_id=2)
    assert float(loss_padded) == pytest.approx(expected, rel=1e-6) and tokens == 1
    plain, _, _ = sequence_loss(logits[:, :1], gold[:, :1], pad_id=2)
    assert float(plain) == pytest.approx(math.log(4), rel=1e-6)


def test_label_smoothing_equals_torch_and_the_written_out_formula():
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 6)
    gold = torch.tensor([[4, 2, 0, 0], [3, 4, 2, 5], [1, 0, 0, 0]])
    eps = 0.2
    loss, _, _ = sequence_loss(logits, gold, label_smoothing=eps)
    real = gold != 0
    reference = torch.nn.functional.cross_entropy(logits[real], gold[real], label_smoothing=eps)
    log_p = logits[real].log_softmax(-1)
    formula = ((1 - eps) * -log_p.gather(1, gold[real][:, None]).squeeze(1) + eps * -log_p.mean(-1)).mean()
    assert torch.allclose(loss, reference, atol=1e-6) and torch.allclose(loss, formula, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_label_smoothing_is_finite_for_extreme_logits(dtype):
    big = torch.finfo(dtype).max
    rows = torch.tensor([
        [1e4, -1e4, 0.0, 0.0],
        [big, -big, 0.0, 1.0],                       # a range that overflows the dtype
        [0.0, float("-inf"), float("-inf"), 2.0],    # banned tokens: probability exactly 0
        [-big, -big, -big, -big],                    # all equal, hugely negative
        [-1e30 if dtype != torch.float16 else -6e4, 3.0, 0.0, 0.0],
    ]).to(dtype)
    logits = rows[None].clone().requires_grad_(True)
    gold = torch.tensor([[1, 0, 2, 3, 0]])  # row 0 and 2: the gold token is the least likely one
    for eps in (0.1, 0.5):
        loss, _, _ = sequence_loss(logits, gold, label_smoothing=eps)
        assert torch.isfinite(loss), (dtype, eps, loss)
        (grad,) = torch.autograd.grad(loss, logits)
        assert torch.isfinite(grad.float()).all()


def mean_train_loss(model, batches, label_smoothing=0.0):
    with torch.no_grad():
        total = sum(float(sequence_loss(model(b.src, b.src_mask, b.tgt_in).logits, b.tgt_out,
                                        label_smoothing=label_smoothing)[0]) * b.n_tgt_tokens for b in batches)
    return total / sum(b.n_tgt_tokens for b in batches)


def test_fit_with_label_smoothing_reports_the_plain_loss(data):
    model = new_model(data)
    run(data, model, config(epochs=4))  # confident enough that smoothing changes the loss
    plain = mean_train_loss(model, data["train_batches"])
    smoothed = mean_train_loss(model, data["train_batches"], label_smoothing=0.3)
    assert smoothed - plain > 0.1
    # a learning rate so small that the weights do not move: the epoch's train_loss is this model's
    result = run(data, model, config(epochs=1, lr=1e-12, label_smoothing=0.3))
    assert result.history[0]["train_loss"] == pytest.approx(plain, rel=1e-5)


# --- optimizer, schedule, precision ---------------------------------------------------------


def test_schedule_follows_equation_3_per_batch(data, tmp_path):
    cfg = config(epochs=2, schedule="noam", warmup=4, d_model_for_schedule=16, lr_scale=2.0)
    run(data, new_model(data), cfg, out_dir=tmp_path)
    saved = load_checkpoint(tmp_path / "checkpoint.pt")
    steps = 2 * len(data["train_batches"])
    assert saved["scheduler_state"]["last_epoch"] == steps
    # the rate for the next step, step number steps + 1
    expected = 2.0 * 16**-0.5 * min((steps + 1) ** -0.5, (steps + 1) * 4**-1.5)
    assert saved["optimizer_state"]["param_groups"][0]["lr"] == pytest.approx(expected)


def test_noam_needs_a_d_model(data):
    with pytest.raises(ValueError, match="d_model_for_schedule"):
        run(data, new_model(data), config(epochs=1, schedule="noam"))


@pytest.mark.parametrize("how", ["interrupt", "shorter"])
def test_resumed_run_with_schedule_and_smoothing_equals_uninterrupted_run(data, tmp_path, how):
    recipe = dict(restore_best=False, schedule="noam", warmup=5, d_model_for_schedule=16, label_smoothing=0.1,
                  optimizer="adamw", weight_decay=0.01, betas=(0.9, 0.98), eps=1e-9)
    cfg = config(epochs=4, **recipe)
    straight = new_model(data, dropout=0.2)
    full = run(data, straight, cfg)

    first = new_model(data, dropout=0.2)
    stop_at_epoch_two(data, first, cfg, config(epochs=2, **recipe), how, tmp_path)

    resumed = new_model(data, seed=123, dropout=0.2)
    result = run(data, resumed, cfg, out_dir=tmp_path, resume=True, extra=data["extra"])
    assert_same_weights(resumed, straight)
    for a, b in zip(result.history, full.history):
        assert without_timings(a) == without_timings(b)
    assert load_checkpoint(tmp_path / "checkpoint.pt")["scheduler_state"]["last_epoch"] == 4 * len(
        data["train_batches"])


def test_resume_refuses_another_recipe(data, tmp_path):
    run(data, new_model(data), config(epochs=1, label_smoothing=0.1), out_dir=tmp_path, extra=data["extra"])
    with pytest.raises(ValueError, match="label_smoothing: 0.1 in the checkpoint, 0.0 in this run"):
        run(data, new_model(data), config(epochs=2), out_dir=tmp_path, resume=True, extra=data["extra"])
    with pytest.raises(ValueError, match="schedule: None in the checkpoint, 'noam' in this run"):
        run(data, new_model(data), config(epochs=2, label_smoothing=0.1, schedule="noam", d_model_for_schedule=16),
            out_dir=tmp_path, resume=True, extra=data["extra"])


def test_checkpoints_from_before_the_new_settings_still_resume(data, tmp_path):
    run(data, new_model(data), config(epochs=1), out_dir=tmp_path, extra=data["extra"])
    path = tmp_path / "checkpoint.pt"
    raw = torch.load(path, weights_only=True)
    old_keys = ("lr", "batch_size", "clip_norm", "teacher_forcing", "seed", "monitor")
    raw["trainer"]["fit_config"] = {k: raw["trainer"]["fit_config"][k] for k in old_keys}
    for key in ("scheduler_state",):
        del raw[key]
    del raw["trainer"]["rank_rng_states"]
    torch.save(raw, path)
    result = run(data, new_model(data), config(epochs=2), out_dir=tmp_path, resume=True, extra=data["extra"])
    assert [r["epoch"] for r in result.history] == [1, 2]


def test_optimizer_settings_reach_the_optimizer(data):
    model = new_model(data)
    cfg = config(optimizer="adamw", betas=(0.8, 0.9), eps=1e-7, weight_decay=0.05, fused=True)
    optimizer = fit_module.make_optimizer(model, cfg, "cpu")
    assert isinstance(optimizer, torch.optim.AdamW)
    group = optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (1e-2, (0.8, 0.9), 1e-7, 0.05)
    assert group["fused"]  # torch >= 2.4 has a fused CPU kernel
    assert not fit_module.make_optimizer(model, config(fused=False), "cpu").param_groups[0].get("fused")
    assert type(fit_module.make_optimizer(model, config(), "cpu")) is torch.optim.Adam
    assert fit_module.make_optimizer(model, config(schedule="noam"), "cpu").param_groups[0]["lr"] == 1.0


def test_fused_adamw_on_the_cpu_takes_the_same_steps_as_the_plain_one(data):
    """The fused CPU kernel against torch's per-parameter AdamW, three steps of the same gradients."""
    torch.manual_seed(0)
    plain_model = new_model(data)
    fused_model = copy.deepcopy(plain_model)
    settings = dict(optimizer="adamw", weight_decay=0.01, lr=1e-2)
    plain = fit_module.make_optimizer(plain_model, config(fused=False, **settings), "cpu")
    fused = fit_module.make_optimizer(fused_model, config(fused=True, **settings), "cpu")
    assert fused.param_groups[0]["fused"] and not plain.param_groups[0].get("fused")
    for _ in range(3):
        for model, optimizer in ((plain_model, plain), (fused_model, fused)):
            optimizer.zero_grad()
            sum(p.square().sum() for p in model.parameters()).backward()
            optimizer.step()
    for a, b in zip(plain_model.parameters(), fused_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert not torch.equal(next(plain_model.parameters()), next(new_model(data).parameters()))


def test_bf16_autocast_trains_on_the_cpu(data):
    model = new_model(data)
    result = run(data, model, config(epochs=2, amp="bf16"))
    rows = result.history
    assert all(math.isfinite(r[k]) for r in rows for k in ("train_loss", "valid_loss"))
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay float32


def test_throughput_is_reported(data):
    result = run(data, new_model(data), config(epochs=2))
    assert result.train_tokens == 2 * sum(b.n_tgt_tokens for b in data["train_batches"])
    assert 0 < result.train_seconds < result.wall_time
    assert result.tokens_per_second == pytest.approx(result.train_tokens / result.train_seconds)
    assert result.world_size == 1


@pytest.mark.parametrize(
    "kw, message",
    [({"label_smoothing": 1.0}, "label_smoothing"), ({"optimizer": "sgd"}, "optimizer"),
     ({"schedule": "cosine"}, "schedule"), ({"warmup": 0}, "warmup"), ({"amp": "fp16"}, "gradient scaler"),
     ({"betas": (0.9, 1.0)}, "betas"), ({"lr_scale": 0.0}, "lr_scale"), ({"eps": 0.0}, "eps"),
     ({"weight_decay": -1.0}, "weight_decay")],
)
def test_fit_config_rejects_bad_recipe_values(kw, message):
    with pytest.raises(ValueError, match=message):
        config(**kw)


def test_load_model_names_unknown_model_classes(data, tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, model=new_model(data), epoch=1)
    raw = torch.load(path, weights_only=True)
    raw["model_class"] = "Perceiver"
    torch.save(raw, path)
    with pytest.raises(ValueError, match="'Perceiver'.*rebuilds GPT, LuongSeq2Seq, Seq2Seq, Transformer models only"):
        load_model(path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_recipe_bf16_fused_compile(data):
    model = new_model(data)
    cfg = config(epochs=2, device="cuda", amp="bf16", fused=True, compile=True, optimizer="adamw")
    result = run(data, model, cfg)
    assert result.device == "cuda" and all(math.isfinite(r["train_loss"]) for r in result.history)
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]


def test_noam_reads_d_model_of_a_spec_built_gpt():
    from attncourse.nn.gpt import GPT
    from attncourse.nn.spec import DecoderSpec
    from attncourse.train.fit import make_scheduler

    model = GPT(spec=DecoderSpec(10, d_model=32, num_heads=4, num_layers=1))
    assert "d_model" not in model.config  # a spec-built GPT's config is {"spec": ...}
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = make_scheduler(optimizer, config(schedule="noam", warmup=4), model)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(32**-0.5 * 1 * 4**-1.5)
    assert scheduler is not None


def test_a_run_loaded_finished_reports_its_recorded_throughput():
    """Chapter 6's CPU row read 0 tokens/s when its model came from the cache."""
    from attncourse.train.fit import FitResult
    rows = [{"train_tokens": 1000, "train_seconds": 2.0}, {"train_tokens": 3000, "train_seconds": 2.0}]
    loaded = FitResult(history=rows)              # no epoch ran in this call
    assert loaded.train_tokens == 0 and loaded.tokens_per_second == 1000.0
    assert FitResult(history=[{"epoch": 1}]).tokens_per_second == 0.0   # nothing recorded
    fresh = FitResult(history=rows, train_tokens=500, train_seconds=1.0)
    assert fresh.tokens_per_second == 500.0       # this call's epochs first
