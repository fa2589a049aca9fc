"""Data for the course, all generated offline and deterministic given a seed."""

from attncourse.data.toy import SENTENCES, embed, projections, tokenize

__all__ = ["SENTENCES", "embed", "projections", "tokenize"]
