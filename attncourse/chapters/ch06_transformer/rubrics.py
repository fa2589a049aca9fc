"""Rubrics of chapter 6's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-transformer-params": Rubric(
        "Encoder layer 3,152,384, decoder layer 4,204,032, stack 44,138,496, checked against "
        "count_parameters.",
        "The method right (attention, feed-forward, LayerNorms) with an arithmetic slip, or "
        "biases or a LayerNorm left out.",
        "No method, or counts off by more than a missing term."),
}
