"""Rubrics of chapter 7's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-decoder-cache-size": Rubric(
        "512 KiB per token, 4 GiB per sequence, 9 sequences in 40 GB with multi-head; 4 times "
        "less with 8 key/value heads: 1 GiB, 37 sequences.",
        "The multi-head size right but the grouped-query case wrong (or the reverse), or a "
        "factor 2 (keys and values) missed throughout.",
        "No correct size."),
    "ex-decoder-extrapolation": Rubric(
        "Runs the experiment (max_len 64 raises a ValueError naming max_len; untrained rows add "
        "noise); ALiBi's bias depends on distance only and far keys get little weight, so "
        "nothing new appears; RoPE meets rotation angles (offsets of 64 and more) that training "
        "never produced.",
        "Two of the three parts (experiment, ALiBi, RoPE).",
        "At most one part, or claims a learned table extrapolates."),
}
