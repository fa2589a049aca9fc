"""train-lm and sample with chapter 12's options: --rope-scaling, --rope-factor, --attention gated.

Each is one field (of LMConfig or of sample's options); the clashes are refused in one line
before anything is written, and a stretched sample is chapter 12's ``with_spec`` model.
"""

# ruff: noqa: F811 (the fixture text_file is imported, then named as a parameter)
import json

import pytest
import torch

from attncourse.cli.commands import main
from attncourse.cli.lm import _load_lm, _read_vocab
from attncourse.nn.gpt import GPT
from attncourse.recipes.lm import (
    LMConfig,
    build_lm,
    lm_settings,
    lm_spec,
    with_spec,
)
from tests.cli.test_lm import SMALL as LM_SMALL
from tests.cli.test_lm import (
    refused_in_one_line,
    text_file,  # noqa: F401 (the fixture)
)

#: test_cli_lm's tiny model, trained 20 steps (one epoch) here.
SMALL = ["--steps", "20", *LM_SMALL[2:]]


def test_the_run_is_named_by_its_settings():
    assert LMConfig().run_name == "lm/rope-default-causal-seed0"
    stretched = LMConfig(rope_scaling="yarn", rope_factor=4, attention="gated")
    assert {"rope_scaling": "yarn", "rope_factor": 4, "attention": "gated"}.items() <= lm_settings(stretched).items()
    assert stretched.run_name == "lm/rope-yarn4-gated-causal-seed0"


def test_build_lm_applies_the_scaling_and_the_gate():
    config = LMConfig(d_model=16, num_heads=2, num_layers=1, d_ff=32, rope_scaling="pi", rope_factor=2.0,
                      attention="gated", context=16)
    spec = build_lm(config, 30).spec
    assert (spec.positions.rope_scaling, spec.positions.rope_factor, spec.positions.original_len) == ("pi", 2.0, 16)
    assert spec.attention.name == "gated"
    assert lm_spec(LMConfig(), 30) == build_lm(LMConfig(), 30).spec  # unset: chapter 7's model


@pytest.mark.parametrize("changes, words", [
    (dict(positional="alibi", rope_scaling="pi", rope_factor=2.0), "positions 'rope'"),
    (dict(rope_factor=2.0), "needs rope_scaling"),
    (dict(latent_dim=8, attention="gated"), "has no option 'latent_dim'"),
])
def test_lm_spec_refuses_clashes(changes, words):
    with pytest.raises(ValueError, match=words):
        lm_spec(LMConfig(**changes), 30)


@pytest.mark.parametrize("extra, words", [
    (["--positional", "alibi", "--rope-scaling", "pi", "--rope-factor", "2"], "positions 'rope'"),
    (["--rope-factor", "2"], "needs rope_scaling"),
    (["--rope-scaling", "ntk", "--rope-factor", "0.5"], "--rope-factor"),
    (["--rope-scaling", "linear"], "--rope-scaling"),
    (["--attention", "gated", "--latent-dim", "8"], "has no option 'latent_dim'"),
])
def test_train_lm_refuses_clashes_in_one_line(extra, words, tmp_path, text_file, capsys):
    out = tmp_path / "run"
    err = refused_in_one_line(["train-lm", "--text", str(text_file), "--out", str(out), *SMALL, *extra], capsys)
    assert words in err, err
    assert not out.exists()


def test_gated_yarn_run_trains_and_samples(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    argv = ["train-lm", "--text", str(text_file), "--out", str(out), *SMALL, "--rope-scaling", "yarn",
            "--rope-factor", "2", "--attention", "gated"]
    assert main(argv) == 0
    settings = json.loads((out / "config.json").read_text())
    assert (settings["rope_scaling"], settings["rope_factor"], settings["attention"]) == ("yarn", 2.0, "gated")
    capsys.readouterr()
    assert main(["sample", str(out), "--prompt", "hello", "--length", "20", "--seed", "1"]) == 0
    assert capsys.readouterr().out.startswith("hello")


def test_sample_stretches_a_rope_run_zero_shot(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert main(["train-lm", "--text", str(text_file), "--out", str(out), *SMALL]) == 0
    capsys.readouterr()
    argv = ["sample", str(out), "--prompt", "hello", "--length", "60", "--rope-scaling", "pi", "--rope-factor", "4"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("hello")
    plain, _ = _load_lm(out, "cpu")
    stretched, _ = _load_lm(out, "cpu", "pi", 4.0)
    positions = stretched.spec.positions
    assert (positions.rope_scaling, positions.rope_factor, positions.original_len) == ("pi", 4.0, 16)
    x = torch.randint(0, len(_read_vocab(out / "vocab.json")), (1, 64))
    assert not torch.allclose(stretched(x)[0], plain(x)[0])  # positions a quarter as far apart


@pytest.mark.parametrize("extra, words", [
    (["--rope-factor", "2"], "needs rope_scaling"),
    (["--rope-scaling", "ntk", "--rope-factor", "2"], "not rotary"),
])
def test_sample_refuses_clashes_in_one_line(extra, words, tmp_path, text_file, capsys):
    out = tmp_path / "run"
    assert main(["train-lm", "--text", str(text_file), "--out", str(out), *SMALL, "--positional", "alibi"]) == 0
    capsys.readouterr()
    err = refused_in_one_line(["sample", str(out), "--prompt", "hello", "--length", "5", *extra], capsys)
    assert words in err, err


def test_with_spec_equals_the_model_built_stretched():
    # sample's zero-shot stretch (with_spec on a trained model) is the model train-lm builds with
    # the same options, given the same weights
    small = dict(d_model=16, num_heads=2, num_layers=1, d_ff=32, context=16)
    torch.manual_seed(0)
    model = build_lm(LMConfig(**small), 30).eval()
    spec = lm_spec(LMConfig(**small, rope_scaling="ntk", rope_factor=4.0), 30)
    stretched = with_spec(model, positions=spec.positions)
    built = GPT(spec=spec).eval()
    built.load_state_dict(model.state_dict())
    x = torch.randint(0, 30, (2, 40))
    assert torch.equal(stretched(x)[0], built(x)[0])
    assert not torch.allclose(stretched(x)[0], model(x)[0])  # the stretch changes what it computes
