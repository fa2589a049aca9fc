"""attncourse/nn/old_files.py: the one place that reads files written before DecoderSpec."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attncourse.nn.gpt import GPT
from attncourse.nn.old_files import RETRAIN, SAVED_FIELDS, spec_from_keywords
from attncourse.nn.spec import DecoderSpec
from attncourse.recipes.lm import OPTIONAL_FIELDS, LMConfig
from attncourse.train.checkpoint import load_model, save_checkpoint


def test_a_keyword_config_rebuilds_the_spec_it_was_written_from():
    model = GPT(50, d_model=32, num_heads=4, num_layers=1, d_ff=64, positional="alibi", num_kv_heads=2, window=5)
    assert set(model.config) == {"vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_len",
                                 "positional", "num_kv_heads", "causal", "window", "dropout"}
    again = GPT.from_config(model.config)
    assert again.spec == model.spec and again.config == model.config
    spec, config = spec_from_keywords(50, 32, 4, 1, 64, 256, "alibi", 2, True, 5, 0.0, None, None, False)
    assert spec == model.spec and config == model.config


def test_a_spec_config_is_read_as_the_spec():
    spec = GPT(50, d_model=32, num_heads=4, num_layers=1, d_ff=64).spec
    model = GPT(spec=dataclasses.replace(spec, dropout=0.1))
    assert set(model.config) == {"spec"}
    assert GPT.from_config(model.config).spec == model.spec == DecoderSpec(**model.config["spec"])


@pytest.mark.parametrize("config", [{"spec": {}, "d_model": 8}, {"d_model": 8}, {"vocab_size": 9, "heads": 2}, [1]])
def test_any_other_config_is_refused_in_one_line_saying_how_to_retrain(config):
    with pytest.raises(ValueError) as info:
        GPT.from_config(config)
    message = str(info.value)
    assert "\n" not in message and RETRAIN in message and "{'spec': ...} or GPT's keywords" in message


def test_a_file_of_neither_form_is_refused_naming_the_file(tmp_path):
    model = GPT(20, d_model=16, num_heads=2, num_layers=1, d_ff=32)
    path = tmp_path / "old.pt"
    save_checkpoint(path, model=model, extra={})
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["model_config"] = {"spec": model.spec.to_dict(), "d_model": 16}
    torch.save(checkpoint, path)
    with pytest.raises(ValueError) as info:
        load_model(path)
    assert str(path) in str(info.value) and "train the model again" in str(info.value)


def test_the_saved_fields_are_the_first_fields_of_the_run_config():
    # The settings every run held when runs were first cached: LMConfig's fields up to corpus;
    # every field added since is optional (in the settings only when set).
    names = [f.name for f in dataclasses.fields(LMConfig)]
    assert tuple(names[:len(SAVED_FIELDS)]) == SAVED_FIELDS
    assert tuple(names[len(SAVED_FIELDS):]) == OPTIONAL_FIELDS
