"""Checks for the exercises of chapter 10 (serving attention): the cache bytes of a model,
the block-table lookup of a paged cache, per-channel int8 quantisation of keys, and the
residual distribution of speculative sampling.

Each check runs the learner's function on hidden cases; where a typical bug is recognised
(keys counted without values, the rotary key counted per head, the logical block used as
the physical one, one scale per token instead of per channel, the residual not
normalised) the hint names it.

References
----------
DeepSeek-AI (2024), "DeepSeek-V2", section 2.1.4 (cache per token, table 1).
Kwon et al. (2023), "PagedAttention", section 4.2.
Liu et al. (2024), "KIVI", section 3.
Leviathan, Kalman, Matias (2023), section 3 (algorithm 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attncourse.checks.core import Case, CheckResult, run_cases, same_values
from attncourse.checks.guard import allowing
from attncourse.decode.paged import block_lookup
from attncourse.decode.speculative import residual_distribution
from attncourse.functional.quantize import dequantize_int8, quantize_int8

# --------------------------------------------------------------------------- cache bytes

BYTES_HINT = (
    "Per token and layer, multi-head and grouped-query attention cache a key and a value of d_head "
    "numbers for each of the num_kv_heads heads; MLA caches the latent and the one shared "
    "rotary key, both widths together. Multiply by the layers and the bytes per number."
)
BYTES_NO_VALUES_HINT = "Both keys and values are cached: count 2 vectors per key/value head."
BYTES_ROPE_PER_HEAD_HINT = "MLA's rotary key k^R is shared by all heads (eq. 16): count rope_dim once, not per head."


def reference_cache_bytes(config: dict) -> int:
    """Bytes of KV cache per token and sequence for a config dict (see :func:`check_cache_bytes`)."""
    per_layer = (config["latent_dim"] + config["rope_dim"] if config.get("latent_dim")
                 else 2 * config["num_kv_heads"] * config["d_head"])
    return config["num_layers"] * per_layer * config["bytes"]


def _bytes_diagnose(got: Any, case: Case) -> str | None:
    config = case.args["config"]
    if config.get("latent_dim"):
        wrong = config["num_layers"] * (config["latent_dim"] + config["num_heads"] * config["rope_dim"])
        return BYTES_ROPE_PER_HEAD_HINT if same_values(got, np.array(wrong * config["bytes"]), case) else None
    half = reference_cache_bytes(config) // 2
    return BYTES_NO_VALUES_HINT if same_values(got, np.array(half), case) else None


def cache_bytes_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_cache_bytes`; with ``seed`` (the grade of record's), a
    grouped-query and an MLA model of sizes drawn from it."""
    def case(description: str, **config) -> Case:
        return Case(description=description, args={"config": config},
                    expected=np.array(reference_cache_bytes(config)), atol=0, rtol=0, hint=BYTES_HINT,
                    diagnose=_bytes_diagnose)

    return [
        case("multi-head, 2 layers, 8 heads of 8, float32", num_layers=2, num_heads=8, d_head=8,
             num_kv_heads=8, latent_dim=None, rope_dim=0, bytes=4),
        case("grouped-query, 32 layers, 32 heads of 128, 8 kv heads, bf16", num_layers=32, num_heads=32,
             d_head=128, num_kv_heads=8, latent_dim=None, rope_dim=0, bytes=2),
        case("MLA as DeepSeek-V2: 60 layers, 128 heads, d_c = 512, d_h^R = 64, bf16", num_layers=60,
             num_heads=128, d_head=128, num_kv_heads=None, latent_dim=512, rope_dim=64, bytes=2),
        case("MLA without a rotary part, 2 layers, d_c = 16, float32", num_layers=2, num_heads=8, d_head=8,
             num_kv_heads=None, latent_dim=16, rope_dim=0, bytes=4),
    ] + [case(f"drawn when graded: {config}", **config) for config in _drawn_configs(seed)]


def _drawn_configs(seed: int | None) -> list[dict]:
    """A grouped-query and an MLA config drawn from the grading seed (none without one)."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    kv = int(2 ** rng.integers(0, 4))
    shared = {"num_layers": int(rng.integers(1, 81)), "d_head": int(2 ** rng.integers(4, 9)),
              "bytes": int(rng.choice([1, 2, 4]))}
    return [{**shared, "num_heads": kv * int(2 ** rng.integers(0, 4)), "num_kv_heads": kv, "latent_dim": None,
             "rope_dim": 0},
            {**shared, "num_heads": int(rng.integers(1, 129)), "num_kv_heads": None,
             "latent_dim": int(rng.integers(16, 1025)), "rope_dim": int(rng.choice([0, 32, 64]))}]


@allowing("Python arithmetic on the dict's entries.")
def check_cache_bytes(fn: Callable[[dict], Any]) -> CheckResult:
    """Check a learner's ``my_cache_bytes(config)``: KV-cache bytes per token and sequence.

    Parameters
    ----------
    fn : callable
        Called with a dict of ``num_layers``, ``num_heads``, ``d_head``, ``num_kv_heads``
        (None for MLA), ``latent_dim`` (None unless MLA), ``rope_dim`` and ``bytes`` (per
        number); returns an int.
    """
    return run_cases("check_cache_bytes", fn, cache_bytes_cases(), references=(reference_cache_bytes,))


# --------------------------------------------------------------------------- block lookup

LOOKUP_HINT = (
    "A token's position tells which logical block of its sequence holds it, and which slot inside"
    ' that block (integer division and remainder by the block size); the block table turns the '
    'logical block into the physical one.'
)
LOOKUP_LOGICAL_HINT = (
    'You returned the logical block: the cache stores it in the physical block the block table '
    'names.'
)


def _lookup_diagnose(got: Any, case: Case) -> str | None:
    table, t, size = case.args["block_table"], case.args["position"], case.args["block_size"]
    if isinstance(got, tuple) and len(got) == 2 and int(np.asarray(got[0])) == t // size != table[t // size]:
        return LOOKUP_LOGICAL_HINT
    return None


def block_lookup_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_block_lookup`; with ``seed`` (the grade of record's),
    two more tables, positions and block sizes drawn from it."""
    def case(description: str, table: list[int], position: int, size: int) -> Case:
        block, slot = block_lookup(table, position, size)
        return Case(description=description, args={"block_table": table, "position": position,
                                                   "block_size": size},
                    expected=(np.array(block), np.array(slot)), output_names=("block", "slot"),
                    atol=0, rtol=0, hint=LOOKUP_HINT, diagnose=_lookup_diagnose)

    return [
        case("first token", [3, 0, 5], 0, 4),
        case("last slot of the first block", [3, 0, 5], 3, 4),
        case("second block, slot 1", [3, 0, 5], 5, 4),
        case("block size 16, token 40", [9, 2, 7, 1], 40, 16),
        case("block size 1: one token per block", [4, 2, 0], 2, 1),
    ] + [case(f"drawn when graded: table {table}, token {position}, block size {size}", table, position, size)
         for table, position, size in _drawn_tables(seed)]


def _drawn_tables(seed: int | None) -> list[tuple[list[int], int, int]]:
    """Two ``(block_table, position, block_size)`` drawn from the grading seed (none without one)."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    drawn = []
    for _ in range(2):
        blocks, size = int(rng.integers(1, 9)), int(rng.choice([1, 2, 4, 8, 16, 32]))
        table = [int(b) for b in rng.permutation(4 * blocks)[:blocks]]
        drawn.append((table, int(rng.integers(0, blocks * size)), size))
    return drawn


@allowing("Python integer division (//) and remainder (%), and indexing.")
def check_block_lookup(fn: Callable[[list, int, int], Any]) -> CheckResult:
    """Check a learner's ``lookup(block_table, position, block_size) -> (physical block, slot)``."""
    return run_cases("check_block_lookup", fn, block_lookup_cases(), references=(block_lookup,))


# --------------------------------------------------------------------------- per-channel int8

CHANNEL_HINT = ("One scale per channel: the channel's largest magnitude over the tokens maps to 127; "
                "each entry is divided by its channel's scale, rounded and clamped to -127..127 (an "
                "all-zero channel keeps scale 1); return the codes times their scales.")
CHANNEL_PER_TOKEN_HINT = "You scaled each token (row) by its own maximum: reduce over the tokens (axis 0) instead."


def reference_per_channel_int8(x: torch.Tensor) -> torch.Tensor:
    """``x (seq_len, d)`` quantised to int8 with one scale per channel, and read back."""
    return dequantize_int8(*quantize_int8(x, dim=-2))


def _channel_diagnose(got: Any, case: Case) -> str | None:
    per_token = dequantize_int8(*quantize_int8(case.args["x"], dim=-1)).numpy()
    return CHANNEL_PER_TOKEN_HINT if same_values(got, per_token, case) else None


def per_channel_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_per_channel_int8`; with ``seed`` (the grade of record's),
    two more matrices, one channel of each an outlier, drawn from it."""
    def case(description: str, x: torch.Tensor) -> Case:
        return Case(description=description, args={"x": x}, expected=reference_per_channel_int8(x).numpy(),
                    atol=1e-12, rtol=0, hint=CHANNEL_HINT, diagnose=_channel_diagnose)

    g = torch.Generator().manual_seed(0)
    outlier = torch.randn(6, 4, generator=g, dtype=torch.float64)
    outlier[:, 2] *= 40
    zero = torch.randn(3, 3, generator=g, dtype=torch.float64)
    zero[:, 1] = 0
    return [
        case("6 tokens, 4 channels, channel 2 an outlier", outlier),
        case("a channel of zeros", zero),
        case("one token", torch.randn(1, 5, generator=g, dtype=torch.float64)),
    ] + [case(f"drawn when graded: {x.shape[0]} tokens, {x.shape[1]} channels", x) for x in _drawn_keys(seed)]


def _drawn_keys(seed: int | None) -> list[torch.Tensor]:
    """Two ``(seq_len, d)`` float64 matrices, one channel scaled up, drawn from the grading seed."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    drawn = []
    for _ in range(2):
        x = rng.normal(size=(int(rng.integers(1, 10)), int(rng.integers(1, 9))))
        x[:, int(rng.integers(x.shape[1]))] *= rng.uniform(5, 60)
        drawn.append(torch.from_numpy(x))
    return drawn


@allowing("torch operations: abs, amax, division, round, clamp and where.",
          library=("torch:quantize_per_channel", "torch:fake_quantize_per_channel_affine",
                   "torch:quantize_per_tensor", "torch:fake_quantize_per_tensor_affine"))
def check_per_channel_int8(fn: Callable[[torch.Tensor], Any]) -> CheckResult:
    """Check a learner's ``per_channel_int8(x)``: ``x (seq_len, d)`` float64 -> the dequantised values."""
    return run_cases("check_per_channel_int8", fn, per_channel_cases(),
                     references=(reference_per_channel_int8, quantize_int8))


# --------------------------------------------------------------------------- residual distribution

RESIDUAL_HINT = ("After a rejection the token comes from the part of the target's probabilities "
                 "that exceeds the draft's (zero where it does not), normalised to sum 1; where the "
                 "target never exceeds the draft (equal distributions) return zeros: that branch "
                 "is never taken.")
RESIDUAL_UNNORMALISED_HINT = "Normalise the positive part by its sum: the residual is a distribution."
RESIDUAL_ABS_HINT = ("Keep only where the target's probability exceeds the draft's, zero elsewhere, "
                     "not the size of the difference.")


def _residual_diagnose(got: Any, case: Case) -> str | None:
    p, q = case.args["p"], case.args["q"]
    if same_values(got, (p - q).clamp(min=0).numpy(), case):
        return RESIDUAL_UNNORMALISED_HINT
    absolute = (p - q).abs()
    if same_values(got, (absolute / absolute.sum(-1, keepdim=True)).numpy(), case):
        return RESIDUAL_ABS_HINT
    return None


def residual_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_residual_distribution`; with ``seed`` (the grade of
    record's), two more pairs of distributions drawn from it."""
    def case(description: str, p: list, q: list) -> Case:
        p_t, q_t = torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)
        return Case(description=description, args={"p": p_t, "q": q_t},
                    expected=residual_distribution(p_t, q_t).numpy(), atol=1e-12, rtol=0,
                    hint=RESIDUAL_HINT, diagnose=_residual_diagnose)

    return [
        case("3 tokens", [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]),
        case("the draft never proposes token 0", [0.1, 0.6, 0.3], [0.0, 0.5, 0.5]),
        case("p = q: no residual", [0.25, 0.25, 0.5], [0.25, 0.25, 0.5]),
    ] + [case(f"drawn when graded: a vocabulary of {len(p)}", p, q) for p, q in _drawn_distributions(seed)]


def _drawn_distributions(seed: int | None) -> list[tuple[list[float], list[float]]]:
    """Two ``(p, q)`` of a drawn vocabulary size (Dirichlet draws), from the grading seed."""
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 12, size=2)
    return [(rng.dirichlet(np.ones(n)).tolist(), rng.dirichlet(np.ones(n)).tolist()) for n in sizes]


@allowing("torch operations: subtraction, clamp, sum and division.")
def check_residual_distribution(fn: Callable[[torch.Tensor, torch.Tensor], Any]) -> CheckResult:
    """Check a learner's ``residual(p, q)``: ``(vocab,)`` float64 probabilities -> norm(max(0, p - q))."""
    return run_cases("check_residual_distribution", fn, residual_cases(), references=(residual_distribution,))


__all__ = ["check_block_lookup", "check_cache_bytes", "check_per_channel_int8", "check_residual_distribution"]
