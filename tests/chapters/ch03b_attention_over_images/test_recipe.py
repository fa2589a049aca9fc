"""Tests of attncourse.chapters.ch03b_attention_over_images.recipe: configs, metrics,
and cached, seeded training runs."""

import dataclasses

import pytest
import torch

import attncourse.chapters.ch03b_attention_over_images.recipe as captioning
from attncourse.chapters.ch03b_attention_over_images.recipe import (
    CaptionConfig,
    build_captioner,
    caption_metrics,
    caption_scores,
    load_canvases,
    train_captioner,
)

TINY = dict(k=2, height=16, width=24, n_train=40, n_valid=12, n_test=8, feature_dim=10, hidden_dim=12,
            emb_dim=4, channels=4, epochs=2, batch_size=20)


def test_caption_scores_hand_made():
    labels = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9], [0, 0, 0]])
    predictions = torch.tensor([[1, 2, 3], [4, 5, 0], [0, 0, 0], [0, 0, 0]])
    scores = caption_scores(predictions, labels)
    assert scores["exact_match"] == pytest.approx(2 / 4)
    assert scores["digit_accuracy"] == pytest.approx((3 + 2 + 0 + 3) / 12)
    with pytest.raises(ValueError, match=r"\(4, 2\).*\(4, 3\)"):
        caption_scores(predictions[:, :2], labels)


class _FixedModel(torch.nn.Module):
    """Predicts given captions, to check caption_metrics without training."""

    def __init__(self, captions):
        super().__init__()
        self.captions = captions
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.calls = []

    def predict(self, images, num_steps):
        start = sum(self.calls)
        self.calls.append(len(images))
        return self.captions[start:start + len(images), :num_steps], None


def test_caption_metrics_decodes_in_batches():
    labels = torch.tensor([[1, 2], [3, 4], [5, 6]])
    model = _FixedModel(torch.tensor([[1, 2], [3, 0], [5, 6]]))
    scores = caption_metrics(model, torch.zeros(3, 1, 16, 24), labels, batch_size=2)
    assert model.calls == [2, 1]
    assert scores == pytest.approx({"exact_match": 2 / 3, "digit_accuracy": 5 / 6})
    with pytest.raises(ValueError, match=r"\(2, 1, 16, 24\).*\(3, 2\)"):
        caption_metrics(model, torch.zeros(2, 1, 16, 24), labels)


def test_config_validates_and_names_runs():
    assert CaptionConfig(attention="hard", seed=3).run_name == "canvases/hard-seed3"
    with pytest.raises(ValueError, match="attention"):
        CaptionConfig(attention="sharp")
    with pytest.raises(ValueError, match="reward"):
        CaptionConfig(reward="accuracy")
    with pytest.raises(ValueError, match="epochs"):
        CaptionConfig(epochs=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        CaptionConfig().seed = 1


def test_canvases_do_not_depend_on_the_model_seed():
    a = load_canvases(CaptionConfig(seed=0, **TINY))
    b = load_canvases(CaptionConfig(seed=5, attention="hard", **TINY))
    assert a is b
    images, labels = a.train.tensors()
    assert images.shape == (40, 1, 16, 24) and labels.shape == (40, 2)
    assert load_canvases(CaptionConfig(data_seed=1, **TINY)).train.targets.tolist() != labels.tolist()


def test_build_uses_expectation_only_for_hard_attention():
    assert build_captioner(CaptionConfig(attention="hard", **TINY)).expectation_prob == 0.5
    assert build_captioner(CaptionConfig(attention="soft", **TINY)).expectation_prob == 0.0


def test_hard_run_trains_then_loads_without_training(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    config = CaptionConfig(attention="hard", **TINY)
    run = train_captioner(config, progress=False, device="cpu")
    assert run.out_dir.parent == tmp_path / "canvases" and run.out_dir.name.startswith("hard-seed0-")
    assert [row["epoch"] for row in run.history] == [1, 2]
    for key in ("train_loss", "train_nll", "train_reward", "train_entropy", "baseline",
                "valid_exact_match", "valid_digit_accuracy"):
        assert key in run.history[-1]
    # The REINFORCE baseline is checkpointed with the weights.
    assert run.state["baseline"] == pytest.approx(run.history[-1]["baseline"])
    assert run.history[-1]["train_reward"] < 0  # log-likelihood reward

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run must load, not train")

    monkeypatch.setattr(captioning, "hard_attention_loss", no_training)
    again = train_captioner(config, progress=False, device="cpu")
    assert again.history == run.history
    for name, value in run.model.state_dict().items():
        assert torch.equal(value, again.model.state_dict()[name]), name


def test_soft_runs_are_reproducible(tmp_path, monkeypatch):
    config = CaptionConfig(attention="soft", epochs=1, **{k: v for k, v in TINY.items() if k != "epochs"})
    models = []
    for folder in ("a", "b"):
        monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path / folder))
        run = train_captioner(config, progress=False, device="cpu")
        assert set(run.history[0]) == {"epoch", "seconds", "train_loss", "train_nll",
                                       "valid_exact_match", "valid_digit_accuracy"}
        models.append(run.model)
    for (name, a), b in zip(models[0].state_dict().items(), models[1].state_dict().values()):
        assert torch.equal(a, b), name
