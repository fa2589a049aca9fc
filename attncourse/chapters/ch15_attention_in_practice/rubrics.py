"""Rubrics of chapter 15's written exercises (collected by :mod:`attncourse.course.rubrics`)."""

from attncourse.chapters.rubric import Rubric

RUBRICS: dict[str, Rubric] = {
    "ex-practice-backend": Rubric(
        "Names a backend for each case with the rule that decides it: (a) a fused kernel "
        "(FlashAttention by default; cuDNN forced on Hopper, measured against it); (b) dropout "
        "is taken by FlashAttention and memory-efficient on the GPU, while on the CPU it sends "
        "the call to math; (c) float32 with a padding mask: memory-efficient (FlashAttention "
        "takes neither), math as fallback; (d) head size 512: beyond FlashAttention's 256, so "
        "memory-efficient or math; and says a timing must name the backend that ran, checking "
        "the CPU half with the chapter's accepts.",
        "Right backends for most cases without the rule (dtype, head size, mask, dropout) "
        "behind each, or the GPU half right and no check on this machine.",
        "No reasons, or a backend that refuses the call (FlashAttention for float32 or a "
        "dense mask, or for head size 512)."),
}
