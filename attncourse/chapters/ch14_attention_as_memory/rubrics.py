"""Rubrics of chapter 14's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-mem-random-keys": Rubric(
        "A write moves the read at an earlier key k_i by (k_i . k_t) times its correction: zero "
        "for orthogonal keys, about 1/sqrt(d_k) for random ones, and these moves accumulate in "
        "the oldest pairs, where the sum's crosstalk averages out; several passes (Kaczmarz's "
        "method) make the delta rule solve K S = V where it can be solved (up to d_k "
        "independent keys), and settle on a fixed cycle, not the least-squares fit, where it "
        "cannot; measured: recall at 16 pairs rises above 0.9, at 32 pairs it stays at about "
        "0.63 however many passes, below the plain sum's and far below least squares'.",
        "The mechanism right without a measurement, or the measurement without the mechanism.",
        "No mechanism, or a claim that more passes store any number of pairs, or that they "
        "reach the least-squares fit."),
}
