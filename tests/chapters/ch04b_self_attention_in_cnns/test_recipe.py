"""Training the plain and the attention CNN on the digit-relation task: cached runs, a shared stem, accuracy."""

import pytest
import torch
from torch import nn

import attncourse.chapters.ch04b_self_attention_in_cnns.recipe as relation
from attncourse.chapters.ch04b_self_attention_in_cnns.recipe import (
    RelationConfig,
    load_relation_canvases,
    relation_accuracy,
    train_relation_classifier,
)
from attncourse.nn.conv_attention import AttentionCNN, PlainCNN


@pytest.fixture(autouse=True)
def _one_thread_tmp_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _tiny(**changes):
    settings = dict(n_train=64, n_valid=32, n_test=8, channels=8, key_channels=4, epochs=2, batch_size=32,
                    pretrain_epochs=1, pretrain_canvases=64, pretrain_batch_size=32)
    settings.update(changes)
    return RelationConfig(**settings)


def test_trains_then_loads_identical_weights_without_training(monkeypatch):
    config = _tiny(model="attention")
    run = train_relation_classifier(config, progress=False, device="cpu")
    assert isinstance(run.model, AttentionCNN)
    assert [row["epoch"] for row in run.history] == [1, 2]
    for row in run.history:
        assert {"train_loss", "train_accuracy", "valid_accuracy", "seconds"} <= set(row)
        assert 0.0 <= row["valid_accuracy"] <= 1.0
    assert run.out_dir.name.startswith("attention-seed0-")

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run must load, not train")

    monkeypatch.setattr(relation, "_run_batches", no_training)
    again = train_relation_classifier(config, progress=False, device="cpu")
    assert again.history == run.history
    for (name, value), (_, loaded) in zip(run.model.state_dict().items(), again.model.state_dict().items()):
        assert torch.equal(value, loaded), name


def test_both_models_share_the_frozen_pretrained_stem():
    plain = train_relation_classifier(_tiny(model="plain"), progress=False, device="cpu").model
    attention = train_relation_classifier(_tiny(model="attention"), progress=False, device="cpu").model
    assert isinstance(plain, PlainCNN)
    stem = relation.pretrain_stem(_tiny(), progress=False, device="cpu").model.stem.state_dict()
    for name, value in stem.items():
        assert torch.equal(plain.stem.state_dict()[name], value), name
        assert torch.equal(attention.stem.state_dict()[name], value), name
    # a fresh stem differs: the pretrained weights really were loaded
    torch.manual_seed(0)
    assert not torch.equal(PlainCNN(channels=8).stem[0].weight, stem["0.weight"])


def test_same_splits_for_both_models():
    a = load_relation_canvases(_tiny(model="plain", seed=3))
    b = load_relation_canvases(_tiny(model="attention"))
    assert torch.equal(a.valid.tensors()[0], b.valid.tensors()[0])
    assert a.train.images.shape == (64, 1, 16, 48)


class _FirstPixel(nn.Module):
    """logits (-x, x) with x the top-left pixel minus 0.5: class 1 iff that pixel is bright."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))

    def forward(self, images):
        x = images[:, 0, 0, 0] - 0.5
        return torch.stack([-x, x], dim=1)


def test_accuracy_on_a_hand_case():
    images = torch.zeros(5, 1, 4, 4)
    images[[0, 2], 0, 0, 0] = 1.0  # predicted 1 for canvases 0 and 2, 0 for the rest
    labels = torch.tensor([1, 1, 1, 0, 0])
    # right: 0, 2, 3, 4 -> 4 of 5, whatever the batch size
    assert relation_accuracy(_FirstPixel(), images, labels, batch_size=2) == pytest.approx(0.8)
    assert relation_accuracy(_FirstPixel(), images, labels) == pytest.approx(0.8)
    with pytest.raises(ValueError, match=r"\(5, 1, 4, 4\).*\(4,\)"):
        relation_accuracy(_FirstPixel(), images, labels[:4])


def test_config_rejects_bad_settings():
    with pytest.raises(ValueError, match="model"):
        RelationConfig(model="resnet")
    with pytest.raises(ValueError, match="pretrain_epochs"):
        RelationConfig(pretrain_epochs=0, freeze_stem=True)
    assert RelationConfig(pretrain_epochs=0, freeze_stem=False).run_name == "relation/attention-seed0"


def test_unfrozen_stem_from_scratch_trains_every_weight():
    config = _tiny(model="plain", pretrain_epochs=0, freeze_stem=False, epochs=1)
    torch.manual_seed(0)
    fresh = PlainCNN(channels=8)
    model = train_relation_classifier(config, progress=False, device="cpu").model
    assert not torch.equal(model.stem[0].weight, fresh.stem[0].weight)
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("model", ["plain", "attention"])
def test_frozen_stem_validation_equals_scoring_the_whole_model(monkeypatch, model):
    # the stem's validation features are computed once: every epoch's score must be exactly
    # relation_accuracy's, which runs the whole model (batches of 10: several, the last one short)
    monkeypatch.setattr(relation, "_EVAL_BATCH", 10)
    config = _tiny(model=model, n_valid=32)
    valid_images, valid_labels = load_relation_canvases(config).valid.tensors()
    scores = []
    train_epochs = relation.train_epochs

    def checked(name, settings, build, train_epoch, evaluate, *args, **kwargs):
        if name != config.run_name:  # the stem's pretraining
            return train_epochs(name, settings, build, train_epoch, evaluate, *args, **kwargs)

        def both(net):
            scores.append((evaluate(net)["valid_accuracy"],
                           relation_accuracy(net, valid_images, valid_labels, batch_size=10)))
            return {"valid_accuracy": scores[-1][0]}
        return train_epochs(name, settings, build, train_epoch, both, *args, **kwargs)

    monkeypatch.setattr(relation, "train_epochs", checked)
    run = train_relation_classifier(config, progress=False, device="cpu")
    assert len(scores) == 2 and all(cached == whole for cached, whole in scores)
    assert [row["valid_accuracy"] for row in run.history] == [cached for cached, _ in scores]
