"""Rubrics of chapter 9's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-heads-previous": Rubric(
        "Builds the positional scores P W_Q^h (P W_K^h)^T from the learned table and the head's "
        "rows of w_q and w_k, masks keys after the query, counts the rows whose maximum is at "
        "i - 1, and compares the counts with the measured previous-token scores, noting what "
        "the positional part leaves out (the token embeddings).",
        "The right computation without the comparison, or the comparison made on the full "
        "attention weights instead of the weights alone.",
        "Runs the model on text to find the head, or no computation."),
    "ex-heads-one-layer": Rubric(
        "(a) yes, by position; (c) yes, by spreading attention over earlier tokens and copying; "
        "(b) no: a key holds only its own token and position, so matching the token before it "
        "needs an earlier layer (K-composition); relates (c) to the one-layer model's loss, "
        "below chance but far above the two-layer model's.",
        "The three answers right with the reason for (b) missing or vague.",
        "Claims one layer can do (b), or no reasons."),
    "ex-heads-fool": Rubric(
        "A sequence with two different successors of the same token (A B ... A C ... A); shows "
        "the induction heads' attention from the last A split over B and C and the probability "
        "shared between them; explains that the repeat task rewards the successor S places back, "
        "never the most recent occurrence's.",
        "The sequence and the measurement without the explanation, or the explanation without "
        "measuring.",
        "No sequence that makes two continuations compete."),
    "ex-heads-text": Rubric(
        "Trains the attention-only model on the text with a stated budget, plots the layer-2 "
        "prefix-matching scores and the held-out loss against the step, says whether and when "
        "an induction head formed (looking for a loss bump as the score rises), and compares "
        "the held-out loss with chapter 7's GPT.",
        "Trains and reports the final scores without the curves or the comparison.",
        "No run, or a conclusion without a measurement."),
}
