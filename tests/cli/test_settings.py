"""One source for every command's settings: every option of every command is a field.

The parsers are generated from the :func:`~attncourse.train.config.setting` fields
of the classes :data:`attncourse.cli.option_fields.COMMANDS` lists. These tests hold every
command, present and future, to that: no option written by hand, every
:class:`LMConfig` field an option of ``train-lm``, and a field added to a command's
class an option with its help and range, checked with a one-line error.
"""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from attncourse.cli import option_fields
from attncourse.cli.commands import build_parser, main
from attncourse.cli.limits import LIMITS, validate_limits
from attncourse.cli.parsing import CHECKS, option_flag
from attncourse.recipes.lm import VARIANT_OPTIONS, LMConfig, lm_settings
from attncourse.train.config import Limit, format_number, setting


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return parser._subparsers._group_actions[0].choices


def _actions(command: str) -> dict[str, argparse.Action]:
    return {a.dest: a for a in _subparsers(build_parser())[command]._actions if a.dest != "help"}


def test_every_command_is_generated_from_its_fields():
    parser = build_parser()
    assert set(_subparsers(parser)) == set(option_fields.COMMANDS)
    for name, command in option_fields.COMMANDS.items():
        fields = {f.name: f for f in command.fields()}
        actions = {a.dest: a for a in _subparsers(parser)[name]._actions if a.dest != "help"}
        assert set(actions) == set(fields), name  # no option without a field, no field without an option
        for dest, action in actions.items():
            meta = fields[dest].metadata
            assert action.help.startswith(meta["help"]), (name, dest)
            if meta["limit"] is not None:
                assert action.help.endswith(f"[at most {format_number(meta['limit'].high)}]"), (name, dest)
            if meta["positional"]:
                assert not action.option_strings
            else:
                assert action.option_strings[0] == option_flag(fields[dest])
            if meta["check"] not in (None, "switch") and not isinstance(fields[dest].default, bool):
                assert action.type is CHECKS[meta["check"]], (name, dest)


def test_every_lmconfig_field_but_the_corpus_digest_is_a_train_lm_option_with_its_default():
    actions = _actions("train-lm")
    for f in dataclasses.fields(LMConfig):
        if f.name == "corpus":  # set by train_lm from --text's digest
            assert f.name not in actions
            continue
        assert actions[f.name].default == f.default, f.name
    # the four fields that once had no option: now they have one, with the field's default
    args = build_parser().parse_args(["train-lm", "--out", "x", "--no-causal", "--weight-decay", "0.1",
                                      "--clip-norm", "2", "--dropout", "0.2"])
    assert (args.causal, args.weight_decay, args.clip_norm, args.dropout) == (False, 0.1, 2.0, 0.2)


@dataclasses.dataclass(frozen=True)
class LMWithGate(LMConfig):
    """LMConfig and one more field, as a future option (say --gate-heads) would add it."""

    gate_heads: int | None = setting(None, "gated attention on the first N heads (a test's option)",
                                     check="positive_int", limit=Limit(1, 8, "a test's range"), group="model",
                                     metavar="N")


def test_a_field_added_to_lmconfig_is_a_train_lm_option_with_its_help_and_range(monkeypatch, tmp_path, capsys):
    assert "gate_heads" not in _actions("train-lm")
    command = option_fields.COMMANDS["train-lm"]
    monkeypatch.setitem(option_fields.COMMANDS, "train-lm", dataclasses.replace(
        command, classes=(option_fields.TrainLMOptions, LMWithGate)))
    action = _actions("train-lm")["gate_heads"]
    assert action.option_strings == ["--gate-heads"] and action.default is None
    assert action.help == "gated attention on the first N heads (a test's option) [at most 8]"
    help_text = " ".join(_subparsers(build_parser())["train-lm"].format_help().split())
    assert "--gate-heads N gated attention on the first N heads (a test's option) [at most 8]" in help_text
    args = build_parser().parse_args(["train-lm", "--out", "x", "--gate-heads", "3"])
    assert args.gate_heads == 3
    config = LMWithGate(**{k: v for k, v in vars(args).items() if k in {f.name for f in
                                                                         dataclasses.fields(LMWithGate)}})
    assert config.gate_heads == 3
    # its range is checked, in one line naming the option; nothing is written
    out = tmp_path / "run"
    assert main(["train-lm", "--out", str(out), "--gate-heads", "9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("attncourse: error: --gate-heads must be at least 1 and at "
                                                   "most 8 (a test's range), got 9")
    assert not out.exists()
    # and its check (a positive whole number)
    assert main(["train-lm", "--out", str(out), "--gate-heads", "0"]) == 2
    assert "--gate-heads: expected a number >= 1, got 0" in capsys.readouterr().err


def test_a_field_added_to_sample_is_its_option(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class SampleWithScaling(option_fields.SampleOptions):
        rope_factor: float = setting(1.0, "stretch RoPE's positions by F (a test's option)", check="positive_float",
                                     limit=Limit(0.0, 64.0, "a test's range", open_low=True), metavar="F")

    monkeypatch.setitem(option_fields.COMMANDS, "sample", dataclasses.replace(option_fields.COMMANDS["sample"],
                                                                     classes=(SampleWithScaling,)))
    args = build_parser().parse_args(["sample", "run", "--rope-factor", "100"])
    assert args.rope_factor == 100.0
    assert validate_limits(args) == "--rope-factor must be above 0 and at most 64 (a test's range), got 100"
    assert _actions("sample")["rope_factor"].help.endswith("[at most 64]")


def test_limits_are_the_fields_and_train_keeps_its_own():
    fields = {f.name: f for f in option_fields.COMMANDS["train"].fields()}
    for name, f in fields.items():
        if f.metadata["limit"] is not None:
            assert LIMITS[name] is f.metadata["limit"]
    # a checkpoint's sizes are held to the LM's ranges too (max_len is train-lm's only)
    assert LIMITS["max_len"] is LMConfig.__dataclass_fields__["max_len"].metadata["limit"]


def test_variant_options_left_unset_do_not_name_the_run():
    assert {"num_kv_heads", "window", "latent_dim", "rope_dim", "chunk_size"} <= set(VARIANT_OPTIONS)
    assert set(lm_settings(LMConfig())) == {f.name for f in dataclasses.fields(LMConfig)} - set(VARIANT_OPTIONS)


@pytest.mark.parametrize("command", sorted(option_fields.COMMANDS))
def test_every_command_has_help(command):
    for action in _actions(command).values():
        assert action.help, (command, action.dest)


#: Options of one name that mean another quantity in one command: generate's --max-tokens counts tokens
#: to generate (train's and evaluate's: a pair's length), its --temperature takes 0 (greedy).
OWN_RANGES = {("generate", "max_tokens"), ("generate", "temperature")}


def test_an_option_of_several_commands_has_its_range_declared_once():
    seen: dict[str, tuple[str, Limit]] = {}
    for name, command in option_fields.COMMANDS.items():
        for f in command.fields():
            limit = f.metadata["limit"]
            if limit is None or (name, f.name) in OWN_RANGES:
                continue
            first = seen.setdefault(f.name, (name, limit))
            assert first[1] is limit, f"{name} --{f.name}: another Limit than {first[0]}'s"
    assert {"batch_size", "lr", "warmup", "d_model", "num_heads", "threads", "draft_tokens"} <= set(seen)
