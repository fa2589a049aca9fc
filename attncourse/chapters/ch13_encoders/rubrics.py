"""Rubrics of chapter 13's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-enc-801010": Rubric(
        "Names the mismatch (no [MASK] in downstream text, so a model trained on [MASK] only is "
        "used on inputs unlike its training and keeps no representation of unmasked tokens); says "
        "the random 10 % force every token to be checked against its context and the unchanged "
        "10 % keep the output at a normal token close to that token; says the loss at unchosen "
        "positions would be copying the visible input.",
        "Two of the three parts right (the mismatch, the role of random/unchanged, the loss).",
        "Says only that 80/10/10 is BERT's choice, or that masking everything would be fine."),
}
