"""Rubrics of chapter 11's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-real-sink": Rubric(
        "Softmax weights sum to 1, so a head with nothing to read must still attend somewhere; "
        "the first token, seen by every query, becomes the learned parking place, its value "
        "ignored downstream. Dropping it pushes that mass onto informative recent tokens and "
        "distorts later layers; a few first tokens restore it. Weights allowed to sum below 1 "
        "(an extra zero logit, a learned sink) would remove the need.",
        "The sum-to-1 argument without why the first token is chosen, or the streaming failure "
        "explained without the repair, or the last question missing.",
        "Says the first token is attended because it is informative, or no mechanism."),
    "ex-real-keys": Rubric(
        "A per-token scale is set by the token's largest entry, so an outlier channel makes the "
        "step coarse for all the other channels of that key, which lose most of their levels; "
        "per-channel scales give each channel its own range. Values have no such channels, so "
        "per-token scales suit them (and their errors average out in the weighted sum).",
        "The per-token problem right but no reason values escape it, or the reverse.",
        "No link between the scale and the largest entry."),
    "ex-real-draft-depth": Rubric(
        "Shallow: cheap but low acceptance, so about one target pass per token remains; deep: "
        "high acceptance but k draft passes cost nearly as much as the target passes saved. "
        "Minimise (1 + k n / 30)(1 - alpha) / (1 - alpha^(k+1)) over n and k from measured "
        "acceptance rates, then confirm with wall-clock time.",
        "Both failure modes named without a way to choose n, or the cost formula without the "
        "two extremes.",
        "Claims the deepest (or shallowest) draft is always best."),
}
