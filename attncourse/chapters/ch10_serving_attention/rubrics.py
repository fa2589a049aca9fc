"""Rubrics of chapter 10's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-serving-draft-length": Rubric(
        "Time per token (kc + 1)(1 - alpha) / (1 - alpha^(k+1)); about 0.41 target passes at "
        "k = 5-7 with k = 6 best (2.5 times faster); with c = 1 it is at least 1 for every k, "
        "since 1 - alpha^(k+1) <= (k + 1)(1 - alpha): no gain.",
        "The right formula but a wrong optimum, or the c = 1 case missing or unexplained.",
        "No formula for the tokens emitted per round, or claims a longer draft always helps."),
    "ex-serving-sharing": Rubric(
        "62 full prompt blocks stored once, 40 x 13 blocks for each request's half block and "
        "own tokens: 582 blocks against 40 x 75 = 3,000 without sharing; the half block is "
        "copied on write, 39 copies (the last request keeps the original).",
        "The idea right (full blocks shared, last one copied) with an arithmetic slip, or the "
        "copies not counted.",
        "Shares nothing, or shares the partly filled block without copying it."),
}
