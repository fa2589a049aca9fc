"""Vocabularies: the map between tokens and the integer ids a model sees.

Four special tokens come first, at fixed ids, in every vocabulary of the course:

===========  ====  ==============================================================
token        id    role
===========  ====  ==============================================================
``<pad>``    0     fills short sequences up to the batch's length; never predicted
``<bos>``    1     "begin of sequence": the decoder's first input y_0
``<eos>``    2     "end of sequence": the decoder predicts it to stop
``<unk>``    3     stands for any token the training data did not contain
===========  ====  ==============================================================

Fixed ids mean a model, a loss (``ignore_index=Vocabulary.pad_id``) and a
checkpoint can rely on them without looking the tokens up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

#: The special tokens, in id order.
SPECIALS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")


class Vocabulary:
    """A token <-> id map with the four special tokens at ids 0-3.

    Parameters
    ----------
    tokens : iterable of str
        The regular (non-special) tokens in id order; they get ids 4, 5, ...
        Build from data with :meth:`build` rather than by hand.

    Raises
    ------
    ValueError
        If a token repeats or a special token is among ``tokens``.
    TypeError
        If a token is not a string.

    Examples
    --------
    >>> v = Vocabulary.build([["a", "b", "a"]])
    >>> v.tokens
    ['<pad>', '<bos>', '<eos>', '<unk>', 'a', 'b']
    >>> v.encode(["a", "z"], add_eos=True)
    [4, 3, 2]
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

        The order is deterministic: by frequency, most frequent first, ties
        broken by the token's string order. Special tokens that occur in the
        data are not counted; they keep their fixed ids.

        Parameters
        ----------
        token_lists : iterable of sequences of str
            One token sequence per example, e.g. the sources of a training set.
        min_freq : int
            Rarer tokens are left out and will encode to ``<unk>``.

        Returns
        -------
        Vocabulary

        Raises
        ------
        ValueError
            If ``min_freq < 1``.
        TypeError
            If an element of ``token_lists`` is a single string (pass a list
            of tokens, e.g. ``[tokenize(s, "word") for s in texts]``).
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

        Raises
        ------
        ValueError
            If ``idx`` is not in ``range(len(self))``.
        """
        if not 0 <= idx < len(self._itos):
            raise ValueError(f"id {idx} is outside the vocabulary (size {len(self)})")
        return self._itos[idx]

    def encode(self, tokens: Sequence[str], add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Map tokens to ids; unknown tokens map to :attr:`unk_id`.

        Parameters
        ----------
        tokens : sequence of str, length L
        add_bos, add_eos : bool
            Put ``<bos>`` in front / ``<eos>`` at the end.

        Returns
        -------
        list of int, length L + add_bos + add_eos

        Raises
        ------
        TypeError
            If ``tokens`` is a single string: its characters would silently
            become tokens. Pass ``list(text)`` for characters on purpose.
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
        """Map ids back to tokens.

        Parameters
        ----------
        ids : iterable of int, e.g. a list, a 1-d tensor or array (length L)
        strip_special : bool
            If True (default) read ``ids`` as a model's output: stop at the
            first ``<eos>`` and drop ``<pad>`` and ``<bos>``; ``<unk>`` is kept,
            because it stands for a real token. If False, map every id.

        Returns
        -------
        list of str, length at most L

        Raises
        ------
        ValueError
            If an id is outside ``range(len(self))``.
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
        """A JSON-serialisable description, for checkpoints.

        Returns
        -------
        dict
            ``{"tokens": [...]}`` with every token in id order, specials first.
        """
        return {"tokens": list(self._itos)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vocabulary:
        """Rebuild a vocabulary saved with :meth:`to_dict`.

        Raises
        ------
        ValueError
            If ``data`` has no ``"tokens"`` list or it does not start with the
            four special tokens in order.
        """
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise ValueError("expected a dict with a 'tokens' list, as written by Vocabulary.to_dict()")
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(
                f"a saved vocabulary must start with {list(SPECIALS)}, got {tokens[: len(SPECIALS)]}"
            )
        return cls(tokens[len(SPECIALS) :])
