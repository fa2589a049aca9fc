"""Checks of the Triton kernel exercises: right answers pass, stubs and typical bugs get hints."""

import math
from pathlib import Path

import jupytext
import pytest

from attncourse.chapters.ch08_attention_at_scale.kernel_checks import (
    check_causal_early_exit,
    check_flash_hbm_bytes,
)
from attncourse.kernels import TRITON_AVAILABLE
from tests.check_helpers import assert_failed

CHAPTER = Path(__file__).resolve().parents[3] / "notebooks" / "08_attention_at_scale.md"


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


def chapter_kernel(name, edit=("", "")):
    """A kernel the chapter defines, from its source, with an optional text replacement."""
    nb = jupytext.read(CHAPTER)
    source = next(c.source for c in nb.cells if c.cell_type == "code"
                  and c.source.startswith(f"@jit\ndef {name}(") and "# your code here" not in c.source)
    source = source.split("\n\n\n")[0]   # the kernel, not the code after it
    assert edit[0] in source
    namespace = {}
    exec("from attncourse.kernels.triton_setup import jit, tl\n" + source.replace(*edit), namespace)
    return namespace[name]


@pytest.mark.skipif(not TRITON_AVAILABLE, reason="triton is not installed here")
@pytest.mark.filterwarnings("ignore:All-NaN slice")
def test_causal_early_exit_right_answer_stub_and_bugs():
    assert check_causal_early_exit(chapter_kernel("my_causal_kernel")).passed   # the solution
    stub = check_causal_early_exit(lambda *args: None)
    assert not stub.passed and stub.cases_passed == 0 and "triton.jit" in stub.hint
    # The chapter's kernel has the right values but loads the tiles after the diagonal.
    assert_failed(check_causal_early_exit(chapter_kernel("flash_forward_kernel")), 4, "0 * NaN = NaN")
    # Stopping after (i + 1) key blocks instead of (i + 1) query blocks' rows.
    early = chapter_kernel("my_causal_kernel", ("(i + 1) * BLOCK_M", "(i + 1) * BLOCK_N"))
    assert_failed(check_causal_early_exit(early), 3, "diagonal block")
