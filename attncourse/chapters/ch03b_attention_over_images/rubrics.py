"""Rubrics of chapter 3b's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-images-baseline": Rubric(
        "E[grad log p] = grad of sum p = grad 1 = 0, so a constant b adds nothing on average "
        "(the estimator stays unbiased); b lowers the variance, so that good samples push up "
        "and bad ones down.",
        "The zero expectation shown, without why the baseline helps (or the variance "
        "argument without the proof).",
        "No derivation and no variance argument, or claims the baseline changes the mean."),
    "ex-images-temperature": Rubric(
        "Reports the accuracy measured (usually lower) and explains that the decoder was "
        "trained on blended contexts, so near one-hot contexts are inputs it never saw; a hard "
        "model learned its decoder on single locations from the start.",
        "The measurement or the explanation, not both.",
        "No measurement and no explanation, or says it is the same as hard attention."),
    "ex-images-gumbel": Rubric(
        "Trains the three seeds, adds the curves to the figure, and compares exact match and "
        "speed of learning with soft and hard attention, explaining the straight-through "
        "estimator: one sampled location forward, a softened sample's gradient backward.",
        "Runs the experiment but compares only partly, or explains without running it.",
        "Neither runs the experiment nor explains the estimator."),
}
