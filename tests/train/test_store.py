"""The store of trained runs (attncourse.train.store): key, folder, lock, atomic writes, grading."""

import hashlib
import threading
from types import SimpleNamespace

import pytest
import torch

import attncourse.train.checkpoint as checkpoint_module
from attncourse.chapters.ch12_long_context import recipe
from attncourse.runtime import NO_TRAINING_ENV, UnpreparedRun
from attncourse.train import store
from attncourse.train.store import train_once


@pytest.fixture(autouse=True)
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv(NO_TRAINING_ENV, "0")
    monkeypatch.setenv(store.FIT_CACHE_ENV, "0")
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
    with pytest.raises(ValueError, match="holds a run of another config .*lr: 1 .* 2.*delete the folder"):
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


def test_the_key_changes_with_spec_initial_weights_data_and_settings():
    model, data = _fresh(0), torch.arange(6)
    key = store.run_key({"lr": 1}, weights=model, data=[data], settings={"epochs": 2})
    assert key == store.run_key({"lr": 1}, weights=_fresh(0), data=[data.clone()], settings={"epochs": 2})
    assert len(key) == store.KEY_DIGITS and int(key, 16) >= 0
    others = [store.run_key({"lr": 2}, weights=model, data=[data], settings={"epochs": 2}),
              store.run_key({"lr": 1}, weights=_fresh(1), data=[data], settings={"epochs": 2}),
              store.run_key({"lr": 1}, weights=model, data=[data + 1], settings={"epochs": 2}),
              store.run_key({"lr": 1}, weights=model, data=[data.view(2, 3)], settings={"epochs": 2}),
              store.run_key({"lr": 1}, weights=model, data=[data], settings={"epochs": 3}),
              store.run_key({"lr": 1})]
    assert len({key, *others}) == 7
    assert store.run_name("toy/a", {"lr": 1}) == f"toy/a-{store.run_key({'lr': 1})}"


def test_tensor_and_batch_digests_against_hashlib():
    a, b = torch.tensor([[1, 2], [3, 4]]), torch.tensor([5.0])
    expected = hashlib.sha256()
    for t, raw in ((a, a.numpy().tobytes()), (b, b.numpy().tobytes())):
        expected.update(str(tuple(t.shape)).encode())
        expected.update(raw)
    assert store.tensor_digest([a, b]) == expected.hexdigest()
    batch = SimpleNamespace(src=a.to(torch.int32), tgt=torch.tensor([[7]]))
    assert store.batches_fingerprint([batch]) == store.tensor_digest([a, torch.tensor([[7]])])


def test_a_stored_run_is_locked_and_a_second_writer_waits(runs):
    inside, release, order = threading.Event(), threading.Event(), []

    def first():
        with store.open_run("toy/lock") as folder:
            order.append(("first", folder))
            inside.set()
            release.wait(10)

    def second():
        with store.open_run("toy/lock") as folder:
            order.append(("second", folder))

    one = threading.Thread(target=first)
    one.start()
    assert inside.wait(10)
    two = threading.Thread(target=second)
    two.start()
    two.join(0.5)
    assert two.is_alive() and [o[0] for o in order] == ["first"], "the second writer did not wait"
    release.set()
    one.join(10)
    two.join(10)
    assert [o[0] for o in order] == ["first", "second"]
    assert order[0][1] == order[1][1] == runs / "toy" / "lock"
    assert (runs / "toy" / "lock" / ".lock").is_file()


def test_a_folder_the_caller_chose_is_used_as_given_and_not_locked(tmp_path):
    with store.open_run("toy/mine", tmp_path / "mine") as folder:
        assert folder == tmp_path / "mine"
        with store.open_run("toy/mine", tmp_path / "mine"):   # no lock: no deadlock
            pass
    assert not (tmp_path / "mine").exists()


def test_an_interrupted_write_leaves_the_previous_checkpoint_whole(runs, monkeypatch):
    folder = runs / "toy"
    folder.mkdir(parents=True)
    model = _fresh(0)
    store.save_run(folder, {"lr": 1}, model=model, epoch=1)
    before = (folder / store.CHECKPOINT).read_bytes()

    def half_then_interrupted(obj, name):
        with open(name, "wb") as f:
            f.write(before[: len(before) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint_module.torch, "save", half_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.save_run(folder, {"lr": 1}, model=_fresh(1), epoch=2)
    assert sorted(p.name for p in folder.iterdir()) == [store.CHECKPOINT]
    assert (folder / store.CHECKPOINT).read_bytes() == before
    assert store.load_run(folder, {"lr": 1})["epoch"] == 1


def test_a_run_loads_with_weights_only_and_resumes_where_it_stopped(runs, monkeypatch):
    folder = runs / "toy"
    folder.mkdir(parents=True)
    assert store.load_run(folder, {"lr": 1}) is None
    model = _fresh(3)
    store.save_run(folder, {"lr": 1, "steps": 5}, model=model, epoch=2, extra={"name": "toy"})
    calls = []
    real_load = torch.load
    monkeypatch.setattr(checkpoint_module.torch, "load",
                        lambda *a, **k: calls.append(k.get("weights_only")) or real_load(*a, **k))
    saved = store.load_run(folder, {"lr": 1, "steps": 9}, extendable=("steps",))
    assert calls == [True]
    assert saved["epoch"] == 2 and saved["extra"] == {"config": {"lr": 1, "steps": 5}, "name": "toy"}
    assert torch.equal(saved["model_state"]["weight"], model.weight)
    one_line = r"^\S+ holds a run of another config \(config lr: 1 in the checkpoint, 2 in this run\); delete"
    with pytest.raises(ValueError, match=one_line):
        store.load_run(folder, {"lr": 2, "steps": 5})


def test_grading_refuses_to_train_a_stored_run(monkeypatch):
    store.refuse_while_grading("toy/x", 1, 3)                    # not grading: nothing to refuse
    monkeypatch.setenv(NO_TRAINING_ENV, "1")
    with pytest.raises(UnpreparedRun, match="toy/x holds 1 of the run's 3 epochs"):
        store.refuse_while_grading("toy/x", 1, 3)


@pytest.mark.parametrize(("cache", "grading", "kept"), [("0", "0", False), ("1", "0", True), ("0", "1", True)])
def test_fits_are_kept_while_preparing_or_grading(monkeypatch, cache, grading, kept):
    monkeypatch.setenv(store.FIT_CACHE_ENV, cache)
    monkeypatch.setenv(NO_TRAINING_ENV, grading)
    assert store.keeps_fits() is kept
