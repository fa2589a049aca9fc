"""Rubrics of chapter 8's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-scale-bytes": Rubric(
        "About 3.4e10 FLOPs (35 us), 545 MB textbook (163 us), 273 MB tiled (81 us); both are "
        "limited by memory traffic (intensity below the ridge), and tiling halves it.",
        "The FLOPs and one byte count right, or all counts right without saying which limit "
        "applies.",
        "No correct count."),
    "ex-scale-window": Rubric(
        "About 1/8 of the scores per layer; up to 12 * 511 = 6,132 positions after 12 layers, "
        "but only through a chain of tokens; a global token connects any two tokens in two "
        "steps within one layer, at the cost of two extra rows and columns of scores.",
        "Two of the three parts.",
        "At most one part."),
}
