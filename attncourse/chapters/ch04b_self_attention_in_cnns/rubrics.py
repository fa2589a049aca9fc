"""Rubrics of chapter 4b's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-cnn-cost": Rubric(
        "About 16.8 million weights (67 MB in float32) at 64x64, 65,536 (262 kB) at 16x16; "
        "the cost grows with the fourth power of the side, so the block goes on small maps "
        "where each position already covers a large patch.",
        "The counts right but memory or the reason missing.",
        "Counts wrong (e.g. N instead of N^2) and no reason."),
    "ex-cnn-gate": Rubric(
        "dL/dgamma = sum_i dL/dy_i . o_i, generally non-zero; every other parameter of the "
        "block enters through gamma o_i, so its gradient has a factor gamma = 0 and only gamma "
        "learns in the first step; the recipe opens the gate (gamma = 1) so W_q, W_k, W_v learn "
        "from the start, as the gate stayed shut in trials.",
        "The gradients right but not why the recipe opens the gate (or the reverse).",
        "Says all parameters learn from the first step, or no gradients."),
}
