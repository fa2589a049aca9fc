"""Rubrics for the written exercises: what a full, a partial and a no-credit answer says.

For the instructor edition only (``instructor/rubrics.md`` and a *Rubric* cell after each
written solution in ``instructor/<chapter>.ipynb``); never in the book or the student
editions. Each written exercise is worth :data:`attncourse.course.nbgrader_source.WRITTEN_POINTS`
point: full credit 1, partial credit 0.5, no credit 0. A unit test checks that every
written exercise of every chapter has a rubric, and that no rubric is left over.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rubric:
    """What answers at each level say."""

    full: str
    partial: str
    none: str

    def markdown(self, title: str = "") -> str:
        """The rubric as a Markdown list, under a bold title if given."""
        head = [f"**Rubric{': ' + title if title else ''}**", ""]
        return "\n".join(head + [f"- *Full credit (1)*: {self.full}", f"- *Partial credit (0.5)*: {self.partial}",
                                 f"- *No credit (0)*: {self.none}"])


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
    "ex-family-dot": Rubric(
        "The dot product needs vectors of one length and one shared coordinate space; W_a in "
        "the general score maps the encoder's space to the decoder's, so a rectangular "
        "(d_dec, d_enc) W_a frees the two widths, at d_dec * d_enc parameters.",
        "Equal lengths for the dot product, but not what a rectangular W_a buys (or no "
        "mention of the shared space).",
        "No reason for the equal widths, or says general also needs them."),
    "ex-family-cost": Rubric(
        "Global T*S = 800,000, local T*(2D+1) = 4,200 scores; local never computes more: below "
        "S = 2D+1 the window is clipped to the sentence and local attention becomes global "
        "(with the Gaussian for local-p).",
        "Both counts right but the short-source case wrong or missing, or one count wrong with "
        "the right reasoning.",
        "Counts wrong and no reasoning about the window."),
    "ex-family-temperature": Rubric(
        "The chain rule through z = e/tau gives (1/tau) alpha_i (delta_ij - alpha_j); as tau "
        "goes to 0 the weights go one-hot and the derivative goes to 0 (exponentially, faster "
        "than 1/tau grows); so backpropagation cannot train a hard choice, which needs "
        "REINFORCE or a relaxation such as Gumbel-softmax.",
        "The derivative and its limit, without the consequence for hard attention (or the "
        "consequence without the derivation).",
        "Claims the gradient grows as tau goes to 0, or no derivation."),
    "ex-images-baseline": Rubric(
        "E[grad log p] = grad of sum p = grad 1 = 0, so a constant b adds nothing on average "
        "(the estimator stays unbiased); b lowers the variance, so that good samples push up "
        "and bad ones down.",
        "The zero expectation shown, without why the baseline helps (or the variance "
        "argument without the proof).",
        "No derivation and no variance argument, or claims the baseline changes the mean."),
    "ex-images-temperature": Rubric(
        "Reports the accuracy measured (usually lower) and explains that the decoder was "
        "trained on blended contexts, so near one-hot contexts are inputs it never saw; a hard "
        "model learned its decoder on single locations from the start.",
        "The measurement or the explanation, not both.",
        "No measurement and no explanation, or says it is the same as hard attention."),
    "ex-images-gumbel": Rubric(
        "Trains the three seeds, adds the curves to the figure, and compares exact match and "
        "speed of learning with soft and hard attention, explaining the straight-through "
        "estimator: one sampled location forward, a softened sample's gradient backward.",
        "Runs the experiment but compares only partly, or explains without running it.",
        "Neither runs the experiment nor explains the estimator."),
    "ex-sa-scale": Rubric(
        "Standard deviation 8 unscaled and 1 scaled; weights about 0.9997 and 0.73; unscaled "
        "the softmax has already made a hard choice (saturation).",
        "The standard deviations right but the weights wrong or missing (or the reverse).",
        "Variance and standard deviation confused throughout, or no numbers."),
    "ex-sa-cost": Rubric(
        "10^6 scores computed, 500,500 non-zero (about half); the full matrix is one regular "
        "matrix product, much faster on hardware than the ragged triangle (fused kernels skip "
        "masked blocks).",
        "Both counts without the reason, or the reason with a counting slip (e.g. n^2/2).",
        "Counts wrong and no reason."),
    "ex-cnn-cost": Rubric(
        "About 16.8 million weights (67 MB in float32) at 64x64, 65,536 (262 kB) at 16x16; "
        "the cost grows with the fourth power of the side, so the block goes on small maps "
        "where each position already covers a large patch.",
        "The counts right but memory or the reason missing.",
        "Counts wrong (e.g. N instead of N^2) and no reason."),
    "ex-cnn-gate": Rubric(
        "dL/dgamma = sum_i dL/dy_i . o_i, generally non-zero; every other parameter of the "
        "block enters through gamma o_i, so its gradient has a factor gamma = 0 and only gamma "
        "learns in the first step; the recipe opens the gate (gamma = 1) so W_q, W_k, W_v learn "
        "from the start, as the gate stayed shut in trials.",
        "The gradients right but not why the recipe opens the gate (or the reverse).",
        "Says all parameters learn from the first step, or no gradients."),
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
    "ex-transformer-params": Rubric(
        "Encoder layer 3,152,384, decoder layer 4,204,032, stack 44,138,496, checked against "
        "count_parameters.",
        "The method right (attention, feed-forward, LayerNorms) with an arithmetic slip, or "
        "biases or a LayerNorm left out.",
        "No method, or counts off by more than a missing term."),
    "ex-decoder-cache-size": Rubric(
        "512 KiB per token, 4 GiB per sequence, 9 sequences in 40 GB with multi-head; 4 times "
        "less with 8 key/value heads: 1 GiB, 37 sequences.",
        "The multi-head size right but the grouped-query case wrong (or the reverse), or a "
        "factor 2 (keys and values) missed throughout.",
        "No correct size."),
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
    "ex-decoder-extrapolation": Rubric(
        "Runs the experiment (max_len 64 raises a ValueError naming max_len; untrained rows add "
        "noise); ALiBi's bias depends on distance only and far keys get little weight, so "
        "nothing new appears; RoPE meets rotation angles (offsets of 64 and more) that training "
        "never produced.",
        "Two of the three parts (experiment, ALiBi, RoPE).",
        "At most one part, or claims a learned table extrapolates."),
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


def rubrics_markdown(exercises: list, titles: dict[str, str] | None = None) -> str:
    """``rubrics.md`` of the instructor edition: one section per written exercise given."""
    lines = ["# Rubrics for the written exercises", "",
             "For instructors only. Each written exercise is worth 1 point: full credit 1, "
             "partial credit 0.5, no credit 0. Read the reference answer in the instructor "
             "edition beside each rubric.", ""]
    chapter = None
    for ex in exercises:
        if ex.kind != "written" or ex.label not in RUBRICS:
            continue
        if ex.chapter != chapter:
            chapter = ex.chapter
            lines += [f"## {chapter}", ""]
        lines += [f"### {ex.title} ({ex.label})", "", RUBRICS[ex.label].markdown(), ""]
    return "\n".join(lines)


__all__ = ["RUBRICS", "Rubric", "rubrics_markdown"]
