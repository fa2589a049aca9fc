"""Rubrics of chapter 5's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-mh-wide": Rubric(
        "1,048,576 weights with d_k = 64 against 8,388,608 with full-width heads (8 times); "
        "scores 1,280,000 against 10,240,000 multiply-adds (8 times); narrow heads make h heads "
        "cost one.",
        "The weights or the score counts right, not both.",
        "Neither count right."),
    "ex-mh-rotation": Rubric(
        "R = [[cos kw, -sin kw], [sin kw, cos kw]] derived from the two identities; it depends "
        "only on k w, not on pos, so one matrix shifts every position; a learned table's rows "
        "have no such relation unless training happens to learn it.",
        "R right but the two explanations missing or vague (or the reverse).",
        "R wrong and no explanation."),
    "ex-mh-crossover": Rubric(
        "Attention is cheaper when n < d = 512; about 32 M against 47 M multiply-adds at n = 30, "
        "about 74 G against 13 G at n = 8000; notes that the GRU's steps are sequential.",
        "The crossover right but one comparison wrong, or both comparisons right without the "
        "crossover.",
        "Crossover wrong and no comparison."),
}
