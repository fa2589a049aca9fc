"""One source for a run's settings : adding a setting is one edit.

A setting is a field made with :func:`attncourse.train.config.setting`. These
tests hold every such field, present and future, to what the one edit must
give: an option of ``train`` with the same name, default, help, check and
limit; a field of :class:`Experiment` and of :class:`FitConfig` when it is part
of the training settings; a FitConfig derived from an Experiment that carries it.
"""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from attncourse.cli.limits import LIMITS
from attncourse.cli.options import (
    CHECKS,
    PRESET_OPTIONS,
    RNN_DEFAULTS,
    RNN_OPTIONS,
    SETTINGS,
    TRANSFORMER_OPTIONS,
    add_settings,
    build_parser,
    flag,
)
from attncourse.recipes.experiment import Experiment, transformer_preset
from attncourse.train.config import (
    FitConfig,
    Limit,
    TrainingSettings,
    fit_config_from,
    format_number,
    setting,
    settings,
)


def _train_actions() -> dict[str, argparse.Action]:
    sub = build_parser()._subparsers._group_actions[0].choices["train"]
    return {a.dest: a for a in sub._actions}


@pytest.mark.parametrize("f", SETTINGS, ids=lambda f: f.name)
def test_every_setting_is_a_train_option_with_its_default_help_check_and_limit(f):
    action = _train_actions()[f.name]
    meta = f.metadata
    assert action.option_strings[0] == (meta["flag"] or "--" + f.name.replace("_", "-"))
    assert action.default == (None if meta["preset"] else f.default)
    assert action.help.startswith(meta["help"])
    if isinstance(f.default, bool):
        assert isinstance(action, argparse.BooleanOptionalAction)
    elif meta["choices"]:
        assert tuple(action.choices) == meta["choices"]
    else:
        assert action.type is CHECKS[meta["check"]]
    if meta["limit"] is not None:
        assert LIMITS[f.name] is meta["limit"]
        assert action.help.endswith(f"[at most {format_number(meta['limit'].high)}]")


def test_the_training_settings_are_in_experiment_and_fitconfig_and_reaches_fit():
    experiment_fields = {f.name: f for f in dataclasses.fields(Experiment)}
    config_fields = {f.name for f in dataclasses.fields(FitConfig)}
    for f in dataclasses.fields(TrainingSettings):
        assert f.name in experiment_fields and f.name in config_fields
        assert experiment_fields[f.name].metadata == f.metadata  # help and limit too
    # a value away from its default in an Experiment reaches the engine
    changed = {"epochs": 3, "lr": 0.01, "batch_size": 8, "warmup": 7, "lr_scale": 0.5, "optimizer": "adamw",
               "betas": (0.8, 0.9), "eps": 1e-6, "weight_decay": 0.1, "label_smoothing": 0.2, "clip_norm": None,
               "amp": "bf16", "fused": True, "compile": True, "time_budget": 9.0, "length_buckets": 2,
               "patience": 2, "seed": 5, "schedule": "noam"}
    assert set(changed) == {f.name for f in dataclasses.fields(TrainingSettings)}
    config = Experiment(**changed).fit_config()
    assert {name: getattr(config, name) for name in changed} == changed


def test_the_command_line_defaults_are_the_dataclasses():
    # the RNN defaults of `train`, as they were written by hand before the fields made them
    assert RNN_DEFAULTS == {
        "emb_dim": 64, "hidden_dim": 128, "dropout": 0.0, "epochs": 10, "batch_size": 64, "lr": 1e-3,
        "clip_norm": 1.0, "label_smoothing": 0.0, "schedule": None, "warmup": 4000, "lr_scale": 1.0,
        "optimizer": "adam", "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amp": None,
        "fused": False, "compile": False, "length_buckets": None, "time_budget": None,
    }
    assert set(TRANSFORMER_OPTIONS) == {"d_model", "num_heads", "num_layers", "d_ff", "norm_first", "positional",
                                        "tie_embeddings"}
    assert RNN_OPTIONS == ("emb_dim", "hidden_dim")
    assert "lr" not in PRESET_OPTIONS and set(TRANSFORMER_OPTIONS) < set(PRESET_OPTIONS)
    assert all(hasattr(transformer_preset("cpu"), name) for name in PRESET_OPTIONS)
    assert flag("num_heads") == "--heads" and flag("eps") == "--adam-eps" and flag("max_len") == "--max-len"


def test_a_new_setting_is_one_edit():
    """A setting declared once becomes an option that parses, checks and reaches FitConfig."""

    @dataclasses.dataclass(frozen=True)
    class WithWarmupRatio(FitConfig):
        warmup_ratio: float = setting(0.1, "share of the steps spent warming up (default 0.1)",
                                      check="probability", limit=Limit(0.0, 1.0, "a share"), metavar="R")

    parser = argparse.ArgumentParser()
    new = [f for f in settings(WithWarmupRatio) if f.name == "warmup_ratio"]
    add_settings(parser, "training", new)
    assert parser.parse_args([]).warmup_ratio == 0.1
    args = parser.parse_args(["--warmup-ratio", "0.25"])
    assert args.warmup_ratio == 0.25
    assert "share of the steps" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--warmup-ratio", "2"])  # the check: a probability
    source = argparse.Namespace(epochs=2, warmup_ratio=0.25)
    values = {f.name: getattr(source, f.name) for f in dataclasses.fields(WithWarmupRatio)
              if hasattr(source, f.name)}
    assert WithWarmupRatio(**values).warmup_ratio == 0.25
    assert fit_config_from(source).epochs == 2


def test_a_run_folder_is_named_by_every_setting():
    import re

    name = Experiment(model="transformer").name
    assert re.fullmatch(r"numbers-en-fr/transformer-all-d128-[0-9a-f]{12}", name)
    # every field names the run, at its default or not
    assert len({Experiment().name, Experiment(epochs=3).name, Experiment(seed=2).name,
                Experiment(amp="bf16").name, Experiment(data_seed=5).name}) == 5
    assert transformer_preset("gpu").name != transformer_preset("cpu").name
