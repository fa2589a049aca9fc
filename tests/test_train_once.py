"""A chapter's own training loop, trained once and loaded afterwards (attncourse.train.once)."""

import pytest
import torch

from attncourse.chapters.ch12_long_context import recipe
from attncourse.runtime import NO_TRAINING_ENV, UnpreparedRun
from attncourse.train.once import train_once


@pytest.fixture(autouse=True)
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv(NO_TRAINING_ENV, "0")
    return tmp_path / "runs"


def _fresh(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


def _train(calls):
    def train(model):
        calls.append(1)
        with torch.no_grad():
            model.weight += 1.0
    return train


def test_the_first_call_trains_and_later_calls_load_the_same_weights(capsys):
    calls = []
    trained = train_once("toy/a", {"lr": 1}, _fresh(), _train(calls))
    capsys.readouterr()
    loaded = train_once("toy/a", {"lr": 1}, _fresh(), _train(calls))
    assert calls == [1]
    assert torch.equal(trained.weight, loaded.weight) and torch.equal(trained.bias, loaded.bias)
    assert not torch.equal(loaded.weight, _fresh().weight)
    assert "toy/a: trained already, loaded from" in capsys.readouterr().out
    train_once("toy/a", {"lr": 2}, _fresh(), _train(calls))   # another config: its own run
    assert calls == [1, 1]


def test_an_interrupted_training_leaves_nothing_and_the_next_call_trains(runs):
    def interrupted(model):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        train_once("toy/b", {}, _fresh(), interrupted)
    assert not list(runs.rglob("*.pt"))
    calls = []
    train_once("toy/b", {}, _fresh(), _train(calls))
    assert calls == [1] and len(list(runs.rglob("checkpoint.pt"))) == 1


def test_grading_refuses_to_train_and_writes_nothing(runs, monkeypatch):
    monkeypatch.setenv(NO_TRAINING_ENV, "1")
    with pytest.raises(UnpreparedRun, match="toy/c.*prepare the chapter first"):
        train_once("toy/c", {}, _fresh(), _train([]))
    assert not list(runs.rglob("*.pt"))


def test_a_file_written_for_another_config_is_refused(runs):
    train_once("toy/d", {"lr": 1}, _fresh(), _train([]))
    other = runs / "toy"
    (first,) = other.iterdir()
    train_once("toy/d", {"lr": 2}, _fresh(), _train([]))
    second = next(p for p in other.iterdir() if p != first)
    (second / "checkpoint.pt").write_bytes((first / "checkpoint.pt").read_bytes())
    with pytest.raises(ValueError, match="another configuration"):
        train_once("toy/d", {"lr": 2}, _fresh(), _train([]))


def test_chapter_12s_passkey_model_is_the_same_trained_or_loaded(monkeypatch):
    config = recipe.PasskeyConfig(steps=5, batch_size=4)
    trained = recipe.train_passkey(config, progress=False)
    after_training = torch.get_rng_state()

    def no_batches(*args, **kwargs):
        raise AssertionError("a loaded passkey model drew training batches")

    monkeypatch.setattr(recipe, "passkey_batch", no_batches)
    loaded = recipe.train_passkey(config, progress=False)
    assert torch.equal(torch.get_rng_state(), after_training)   # what the chapter draws next
    assert not loaded.training
    for key, value in trained.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
