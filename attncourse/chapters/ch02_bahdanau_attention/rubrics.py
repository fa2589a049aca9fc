"""Rubrics of chapter 2's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-bahdanau-init": Rubric(
        "Uniform weights 1/S (context = average of the encoder states); the gradients of W_a "
        "and U_a are zero because they reach the scores only through v_a; v_a's gradient, "
        "tanh(W_a s + U_a h_j), is not zero, so v_a moves first and the others follow.",
        "Uniform weights and zero gradients for W_a, U_a, but not why training still starts "
        "(or the reverse).",
        "Says training is stuck, or that the weights are random or one-hot."),
    "ex-bahdanau-cost": Rubric(
        "S*T = 2500 scores; the numbers for S = T = 50, d = 128 (scores about 0.3 M "
        "multiply-adds against about 5 M for the recurrent networks, same order of magnitude "
        "accepted); U_a h_j is computed once per sentence.",
        "The count S*T and one of: the comparison with numbers, or which part is precomputed.",
        "A count other than S*T, or no comparison and no precomputed part."),
}
