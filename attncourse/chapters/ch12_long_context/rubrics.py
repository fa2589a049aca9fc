"""Rubrics of chapter 12's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-long-nope": Rubric(
        "The causal mask gives query i exactly i + 1 keys: a uniform head outputs a mean over i + 1 "
        "values (the first token's share is 1/(i + 1), spreads shrink with i), so the output "
        "carries the position and later layers can read it; past L nothing is out of range (no "
        "unseen angle or table row), the same signals only keep shrinking and attention spreads "
        "over more keys, so the loss drifts up slowly.",
        "One of the two: how the mask encodes the position, or why the loss degrades gently.",
        "Says NoPE cannot know positions, or that it extrapolates perfectly, without a reason."),
    "ex-long-memory": Rubric(
        "327,680 bytes per token and about 40 GiB (43 GB) for 131,072 tokens; attention equals the "
        "rest at about 107,000 tokens (counted with the 64 query heads, not the 8 key/value "
        "heads); the streaming cache is 4,096 tokens, about 1.25 GiB, independent of the length.",
        "Two of the three numbers right, or all three with one slip (e.g. the key/value heads "
        "used for the FLOPs).",
        "Counts without the factor 2 for keys and values and the 2 bytes, and no crossover."),
    "ex-long-gate": Rubric(
        "Names what makes sinks appear (depth, training length, context, heads with nothing to "
        "do), changes one thing at a time on at least two seeds, measures the first-token share "
        "by layer against the uniform value and the largest activation, then compares the gated "
        "model at the same settings; runs the cheapest version and reports its numbers honestly "
        "(a null result included).",
        "A sound design without a run, or a run without the uniform baseline or a second seed.",
        "No experiment, or a claim about the gate without a measurement."),
}
