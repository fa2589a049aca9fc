"""Rubrics of chapter 1's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-bottleneck-reverse": Rubric(
        "Reversing puts the first source words next to the first target words that depend on "
        "them, so many dependencies become short (few recurrent steps, short gradient paths) "
        "while the average distance is unchanged; and a bidirectional encoder gains little, "
        "since it already reads both ways.",
        "Says short dependencies make learning easier but not why the first words matter, or "
        "omits (or gets wrong) the bidirectional case.",
        "Claims reversing shortens every dependency or adds information, or gives no reason "
        "in terms of distance."),
    "ex-bottleneck-context": Rubric(
        "Feeding c at every step keeps the source information available instead of letting it "
        "fade through the decoder's updates; it is still one fixed-size vector computed before "
        "decoding, the same at every step, so it cannot hold more or adapt to step t.",
        "One of the two halves: the benefit, or why the bottleneck remains.",
        "Says feeding c at every step removes the bottleneck, or gives neither reason."),
}
