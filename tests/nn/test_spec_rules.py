"""Each rule of a decoder's description is checked in one place, the spec, and a clash is refused
in the spec's words whatever describes the model: a DecoderSpec, GPT's keywords, an LMConfig's
spec (:func:`attncourse.recipes.lm.lm_spec`), the train-lm command."""

import pytest

from attncourse.cli.commands import main
from attncourse.nn.gpt import GPT
from attncourse.nn.spec import AttentionSpec, DecoderSpec, PositionSpec
from attncourse.recipes.lm import LMConfig, lm_spec

SMALL = ["--steps", "2", "--steps-per-epoch", "1", "--context", "8", "--d-model", "16", "--num-heads", "2",
         "--num-layers", "1", "--d-ff", "16", "--no-progress"]


def _spec(attention=("gqa", None), positions="rope", **scaling):
    """A DecoderSpec to build when the test runs: ``attention`` is (name, options)."""
    return lambda: DecoderSpec(30, d_model=16, num_heads=2, attention=AttentionSpec(*attention),
                               positions=PositionSpec(positions, **scaling))


#: rule -> (the spec's refusal, GPT's keywords or None, LMConfig's fields, train-lm's options)
RULES = {
    "a factor needs a scaling": (_spec(rope_factor=2.0), None, dict(rope_factor=2.0), ["--rope-factor", "2"]),
    "a scaling needs RoPE": (_spec(positions="alibi", rope_scaling="pi", rope_factor=2.0), None,
                             dict(positional="alibi", rope_scaling="pi", rope_factor=2.0),
                             ["--positional", "alibi", "--rope-scaling", "pi", "--rope-factor", "2"]),
    "MLA has no window": (_spec(("mla", {"window": 3})), dict(latent_dim=8, window=3),
                          dict(latent_dim=8, window=3), ["--latent-dim", "8", "--window", "3"]),
    "MLA has no kv heads": (_spec(("mla", {"num_kv_heads": 1})), dict(latent_dim=8, num_kv_heads=1),
                            dict(latent_dim=8, num_kv_heads=1), ["--latent-dim", "8", "--num-kv-heads", "1"]),
    "MLA without ALiBi": (_spec(("mla", {"latent_dim": 8}), "alibi"),
                          dict(latent_dim=8, positional="alibi"), dict(latent_dim=8, positional="alibi"),
                          ["--latent-dim", "8", "--positional", "alibi"]),
    "MLA's rotary part needs RoPE": (_spec(("mla", {"latent_dim": 8, "rope_dim": 4}), "learned"),
                                     dict(latent_dim=8, rope_dim=4, positional="learned"),
                                     dict(latent_dim=8, rope_dim=4, positional="learned"),
                                     ["--latent-dim", "8", "--rope-dim", "4", "--positional", "learned"]),
    "MLA's rotary part is even": (_spec(("mla", {"latent_dim": 8, "rope_dim": 3})),
                                  dict(latent_dim=8, rope_dim=3), dict(latent_dim=8, rope_dim=3),
                                  ["--latent-dim", "8", "--rope-dim", "3"]),
    "no gate on MLA": (_spec(("gated", {"latent_dim": 8})), None, dict(latent_dim=8, attention="gated"),
                       ["--latent-dim", "8", "--attention", "gated"]),
}


def _refusal(build) -> str:
    with pytest.raises(ValueError) as err:
        build()
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_a_clash_is_refused_in_the_specs_words_whatever_the_entry_point(rule, tmp_path, capsys):
    spec, keywords, fields, options = RULES[rule]
    words = _refusal(spec)
    if keywords is not None:
        assert _refusal(lambda: GPT(30, d_model=16, num_heads=2, **keywords)) == words
    assert _refusal(lambda: lm_spec(LMConfig(d_model=16, num_heads=2, **fields), 30)) == words
    assert main(["train-lm", "--out", str(tmp_path / "run"), *SMALL, *options]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, (err, words)
    assert not (tmp_path / "run").exists()


def test_the_spec_checks_the_variant_when_it_is_described_not_when_it_is_built():
    # MLA's rules are its builder's (mla_dims); the spec runs the builder on the meta device.
    with pytest.raises(ValueError, match="ALiBi"):
        DecoderSpec(30, attention=AttentionSpec("mla"), positions=PositionSpec("alibi"))
    assert DecoderSpec(30, attention=AttentionSpec("mla"), positions=PositionSpec("learned")).attention.name == "mla"
