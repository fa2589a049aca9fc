"""Checks of the Triton kernel exercises: right answers pass, stubs and typical bugs get hints."""

import math

import pytest
import torch
import torch.nn.functional as F
from check_helpers import assert_failed

from attncourse.checks import check_causal_early_exit, check_flash_hbm_bytes
from attncourse.kernels import TRITON_AVAILABLE, triton_flash_attention


def kernel_bytes(n, d, block_q, block_k, bytes_per_element):
    return (2 * n * d + 2 * n * d * math.ceil(n / block_q)) * bytes_per_element + 4 * n


def test_hbm_bytes_right_answer_stub_and_bugs():
    assert check_flash_hbm_bytes(kernel_bytes).passed
    stub = check_flash_hbm_bytes(lambda n, d, block_q, block_k, bytes_per_element: ...)
    assert not stub.passed and stub.cases_passed == 0 and stub.hint
    assert_failed(check_flash_hbm_bytes(lambda n, d, bq, bk, s: (4 * n * d + 4 * n * n) * s), 1,
                  "textbook count")
    assert_failed(check_flash_hbm_bytes(lambda n, d, bq, bk, s: kernel_bytes(n, d, bq, bk, s) - 4 * n),
                  1, "Do not forget L")
    assert_failed(check_flash_hbm_bytes(lambda n, d, bq, bk, s: kernel_bytes(n, d, bk, bk, s)), 2,
                  "*query* blocks")
    assert_failed(check_flash_hbm_bytes(
        lambda n, d, bq, bk, s: (2 * n * d + 2 * n * d * n / bq) * s + 4 * n), 4, "math.ceil")
    assert_failed(check_flash_hbm_bytes(
        lambda n, d, bq, bk, s: kernel_bytes(n, d, bq, bk, s) + (s - 4) * n), 1, "float32")


def sdpa_causal_loading_everything(q, k, v):
    # The masked computation reads every key, the unseen ones included: 0 * NaN = NaN.
    allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


@pytest.mark.skipif(not TRITON_AVAILABLE, reason="triton is not installed here")
@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_causal_early_exit_right_answer_stub_and_bugs():
    def good(q, k, v):
        return triton_flash_attention(q, k, v, is_causal=True, block_q=32, block_k=32)

    assert check_causal_early_exit(good).passed
    stub = check_causal_early_exit(lambda q, k, v: None)
    assert not stub.passed and stub.cases_passed == 0 and "stop the loop" in stub.hint
    assert_failed(check_causal_early_exit(sdpa_causal_loading_everything), 3, "0 * NaN = NaN")
    assert_failed(check_causal_early_exit(lambda q, k, v: (good(q, k, v), None)), 1, "output tensor only")
    not_causal = check_causal_early_exit(
        lambda q, k, v: triton_flash_attention(q, k, v, block_q=32, block_k=32))
    assert_failed(not_causal, 1, "stop the loop")
