"""Vocabularies: the map between tokens and the integer ids a model sees."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

#: The special tokens, in id order.
SPECIALS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")


class Vocabulary:
    """A token <-> id map with the four special tokens at ids 0-3.

    Raises ValueError if a token repeats or is special; TypeError if it is not a string.
    """

    PAD = "<pad>"
    BOS = "<bos>"
    EOS = "<eos>"
    UNK = "<unk>"
    pad_id = 0
    bos_id = 1
    eos_id = 2
    unk_id = 3

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        itos = list(SPECIALS)
        stoi = {t: i for i, t in enumerate(itos)}
        for token in tokens:
            if not isinstance(token, str):
                raise TypeError(f"vocabulary tokens must be str, got {type(token).__name__}: {token!r}")
            if token in stoi:
                kind = "special token" if token in SPECIALS else "token"
                raise ValueError(f"{kind} {token!r} appears twice in the vocabulary")
            stoi[token] = len(itos)
            itos.append(token)
        self._itos = itos
        self._stoi = stoi

    @classmethod
    def build(cls, token_lists: Iterable[Sequence[str]], min_freq: int = 1) -> Vocabulary:
        """Count tokens and keep those seen at least ``min_freq`` times.

        Raises ValueError if ``min_freq < 1``; TypeError if an element is a single string.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be at least 1, got {min_freq}")
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            if isinstance(tokens, str):
                raise TypeError(
                    f"Vocabulary.build expects lists of tokens, got the string {tokens!r}; "
                    "tokenize it first"
                )
            counts.update(tokens)
        kept = [t for t, c in counts.items() if c >= min_freq and t not in SPECIALS]
        kept.sort(key=lambda t: (-counts[t], t))
        return cls(kept)

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order, specials first (a copy)."""
        return list(self._itos)

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, token: object) -> bool:
        return token in self._stoi

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self._itos == other._itos

    def __repr__(self) -> str:
        preview = ", ".join(repr(t) for t in self._itos[len(SPECIALS) : len(SPECIALS) + 6])
        more = ", ..." if len(self) > len(SPECIALS) + 6 else ""
        return f"Vocabulary(size={len(self)}, tokens=[{preview}{more}])"

    def id_of(self, token: str) -> int:
        """The id of ``token``, or :attr:`unk_id` if it is unknown."""
        return self._stoi.get(token, self.unk_id)

    def token_of(self, idx: int) -> str:
        """The token with id ``idx``.

        Raises ValueError if ``idx`` is not in ``range(len(self))``.
        """
        if not 0 <= idx < len(self._itos):
            raise ValueError(f"id {idx} is outside the vocabulary (size {len(self)})")
        return self._itos[idx]

    def encode(self, tokens: Sequence[str], add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Map tokens to ids; unknown tokens map to :attr:`unk_id`.

        Raises TypeError if ``tokens`` is a single string.
        """
        if isinstance(tokens, str):
            raise TypeError(
                f"encode expects a sequence of tokens, got the string {tokens!r}; "
                "use tokenize(text, level) first"
            )
        ids = [self._stoi.get(t, self.unk_id) for t in tokens]
        if add_bos:
            ids.insert(0, self.bos_id)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int], strip_special: bool = True) -> list[str]:
        """Map ids (a list, 1-d tensor or array) back to tokens.

        Raises ValueError if an id is outside ``range(len(self))``.
        """
        if hasattr(ids, "tolist"):  # torch tensors and numpy arrays
            ids = ids.tolist()
        out = []
        for i in ids:
            i = int(i)
            if strip_special:
                if i == self.eos_id:
                    break
                if i in (self.pad_id, self.bos_id):
                    continue
            out.append(self.token_of(i))
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description, for checkpoints."""
        return {"tokens": list(self._itos)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vocabulary:
        """Rebuild a vocabulary saved with :meth:`to_dict`.

        Raises ValueError if ``data`` lacks a ``"tokens"`` list that starts with the specials.
        """
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise ValueError("expected a dict with a 'tokens' list, as written by Vocabulary.to_dict()")
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(
                f"a saved vocabulary must start with {list(SPECIALS)}, got {tokens[: len(SPECIALS)]}"
            )
        return cls(tokens[len(SPECIALS) :])
