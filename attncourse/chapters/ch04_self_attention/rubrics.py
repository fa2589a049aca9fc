"""Rubrics of chapter 4's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-sa-scale": Rubric(
        "Standard deviation 8 unscaled and 1 scaled; weights about 0.9997 and 0.73; unscaled "
        "the softmax has already made a hard choice (saturation).",
        "The standard deviations right but the weights wrong or missing (or the reverse).",
        "Variance and standard deviation confused throughout, or no numbers."),
    "ex-sa-cost": Rubric(
        "10^6 scores computed, 500,500 non-zero (about half); the full matrix is one regular "
        "matrix product, much faster on hardware than the ragged triangle (fused kernels skip "
        "masked blocks).",
        "Both counts without the reason, or the reason with a counting slip (e.g. n^2/2).",
        "Counts wrong and no reason."),
}
