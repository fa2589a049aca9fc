"""Loops that are quick on a fast machine and slow on a laptop show a bar only when slow.

Reading the real model, generating, timing tokens and speculative decoding run through
:func:`attncourse.runtime.quiet_progress`: no output before ``QUIET_PROGRESS_DELAY_S``,
steps with rate and time left after it.
"""

import pytest
import torch

import attncourse.runtime as runtime
from attncourse.decode.generation import generate, seconds_per_token, trace_generation
from attncourse.decode.speculative import speculative_generate
from attncourse.nn.gpt import GPT
from attncourse.nn.spec import DecoderSpec


def _gpt():
    torch.manual_seed(0)
    return GPT.from_spec(DecoderSpec(20, 16, 2, 1, max_len=64))


PROMPT = torch.tensor([1, 2, 3])
RUNS = {
    "generating": lambda m: generate(m, PROMPT, 6, temperature=1e-4),
    "timing": lambda m: seconds_per_token(m, PROMPT, 6, use_cache=True),
    "trace": lambda m: trace_generation(m, PROMPT, 6, k=3),
    "speculative decoding": lambda m: speculative_generate(m, m, PROMPT, 6, k=2)[0],
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_slow_loop_shows_tokens_and_a_fast_one_prints_nothing(name, monkeypatch, capsys):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    model = _gpt()
    RUNS[name](model)                                   # fast: under the delay
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(runtime, "QUIET_PROGRESS_DELAY_S", 0.0)  # as on a slow machine
    RUNS[name](model)
    err = capsys.readouterr().err
    assert "/6 [" in err and "token/s" in err, err


def test_the_bar_counts_every_emitted_token_once_in_speculative_decoding(monkeypatch):
    progress_bar = runtime.progress_bar
    bars = []

    def recorded(*args, **kwargs):
        bars.append(progress_bar(*args, **kwargs))
        return bars[-1]

    monkeypatch.setattr(runtime, "progress_bar", recorded)
    speculative_generate(_gpt(), _gpt(), PROMPT, 7, k=3)   # rounds emit up to 4 tokens
    assert [(bar.n, bar.total) for bar in bars] == [(7, 7)]
