"""Rubrics of chapter 14's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-mem-why-hybrid": Rubric(
        "Better: a cache of fixed size whatever the length (and linear time, in matrix products "
        "by chunks), and replacing an outdated pair. Cannot: recall more pairs than the state "
        "holds (recall falls past a few times d_k pairs, where softmax keeps every pair). Cost "
        "of softmax layers: a KV cache growing with every token and quadratic time; one layer "
        "in four keeps exact recall at a quarter of that cost.",
        "Two of the three parts, or all three with one inexact (e.g. no reference to the "
        "measured fall of recall).",
        "Says the delta rule stores everything, or that softmax layers are free."),
    "ex-mem-random-keys": Rubric(
        "A write moves the read at an earlier key k_i by (k_i . k_t) times its correction: zero "
        "for orthogonal keys, about 1/sqrt(d_k) for random ones, and these moves accumulate in "
        "the oldest pairs, where the sum's crosstalk averages out; several passes make the delta "
        "rule a least-squares fit (exact up to d_k independent keys); measured: recall at 16 "
        "pairs rises above 0.9, at 32 pairs stays below the plain sum's.",
        "The mechanism right without a measurement, or the measurement without the mechanism.",
        "No mechanism, or a claim that more passes store any number of pairs."),
}
