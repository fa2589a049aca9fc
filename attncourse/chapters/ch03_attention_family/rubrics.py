"""Rubrics of chapter 3's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
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
}
