"""Character-level text for the language-model chapter: the course or a UTF-8 file."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attncourse.data.vocab import Vocabulary

#: The course's chapters that form the default corpus: notebooks whose names sort before this.
CORPUS_CHAPTERS_BEFORE = "07"
#: Those chapters as the language-model chapters' claims were measured on (27 November
#: 2026), joined as :func:`course_text` joins them.
SNAPSHOT = Path(__file__).resolve().parent / "corpus" / "chapters_01-06.txt"


def course_text(notebooks: str | Path | None = None) -> str:
    """The chapters 1-6 of the course, concatenated in file-name order.

    Raises FileNotFoundError if ``notebooks`` holds no chapter.
    """
    if notebooks is None:
        return SNAPSHOT.read_text(encoding="utf-8")
    folder = Path(notebooks)
    files = sorted(p for p in folder.glob("*.md") if p.name < CORPUS_CHAPTERS_BEFORE)
    if not files:
        raise FileNotFoundError(f"no chapters (*.md before {CORPUS_CHAPTERS_BEFORE}) in {str(folder)!r}; "
                                "give a UTF-8 text file instead")
    return "\n".join(p.read_text(encoding="utf-8") for p in files)


def text_digest(text: str) -> str:
    """Twelve hex digits of the text's SHA-256: names the corpus in a run's config."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@dataclass
class CharCorpus:
    """A text as character ids, split by position: train (n_train,), valid (n_valid,)."""

    vocab: Vocabulary
    train: torch.Tensor
    valid: torch.Tensor

    def encode(self, text: str) -> torch.Tensor:
        """``(len(text),)`` int64 ids; unseen characters become ``<unk>``."""
        return torch.tensor(self.vocab.encode(list(text)), dtype=torch.long)

    def decode(self, ids) -> str:
        """The characters of ``ids`` (special tokens left out)."""
        return "".join(self.vocab.decode([int(i) for i in ids]))


#: Characters encoded at a time: bounds the encoding's temporary arrays (about 30 bytes a character) to
#: a few tens of MB whatever the text's length.
ENCODE_CHUNK = 1 << 18


def char_corpus(text: str, valid_fraction: float = 0.1, vocab: Vocabulary | None = None,
                compact: bool = False) -> CharCorpus:
    """Split ``text`` by position and map characters to ids.

    Raises ValueError if ``valid_fraction`` is outside (0, 1) or a part has fewer than 2
    characters.
    """
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must lie in (0, 1), got {valid_fraction}")
    cut = int(round(len(text) * (1.0 - valid_fraction)))
    if cut < 2 or len(text) - cut < 2:
        raise ValueError(f"the text has {len(text)} characters: too few to split into training and held-out text")
    if vocab is None:
        # Vocabulary.build's order: most frequent first, ties by the character (= code point order)
        counts: dict[int, int] = {}
        for start in range(0, cut, ENCODE_CHUNK):
            chars, n = np.unique(_code_points(text[start:min(cut, start + ENCODE_CHUNK)]), return_counts=True)
            for c, k in zip(chars.tolist(), n.tolist()):
                counts[c] = counts.get(c, 0) + k
        chars = np.array(sorted(counts), dtype=np.int64)
        totals = np.array([counts[c] for c in chars.tolist()], dtype=np.int64)
        vocab = Vocabulary([chr(c) for c in chars[np.lexsort((chars, -totals))]])
    table_chars = np.array([ord(t) for t in vocab.tokens if len(t) == 1], dtype=np.uint32)
    table_ids = np.array([vocab.id_of(chr(c)) for c in table_chars], dtype=np.int64)
    order = np.argsort(table_chars)
    table_chars, table_ids = table_chars[order], table_ids[order]

    def encode(first: int, last: int, dtype: np.dtype) -> torch.Tensor:
        ids = np.empty(last - first, dtype=dtype)
        for start in range(first, last, ENCODE_CHUNK):  # a chunk at a time: bounded temporaries
            part = _code_points(text[start:min(last, start + ENCODE_CHUNK)])
            if table_chars.size == 0:
                ids[start - first:start - first + part.size] = Vocabulary.unk_id
                continue
            where = np.minimum(np.searchsorted(table_chars, part), table_chars.size - 1)
            ids[start - first:start - first + part.size] = np.where(
                table_chars[where] == part, table_ids[where], Vocabulary.unk_id)
        return torch.from_numpy(ids)

    small = np.int16 if len(vocab) <= np.iinfo(np.int16).max else np.int32
    return CharCorpus(vocab=vocab, train=encode(0, cut, small if compact else np.int64),
                      valid=encode(cut, len(text), np.int64))


def _code_points(text: str) -> np.ndarray:
    """``(len(text),)`` uint32: the code point of each character (lone surrogates included)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def read_utf8(path: str | Path, max_bytes: int | None = None, option: str = "the file") -> str:
    """The UTF-8 text of a file, read with ``newline=""``.

    Raises ValueError naming the byte offset and line of the first invalid byte; OSError
    if the file cannot be read.
    """
    with open(path, "rb") as f:
        data = f.read() if max_bytes is None else f.read(max_bytes)
    cut = max_bytes is not None and len(data) == max_bytes
    try:
        return data.decode("utf-8", "strict")
    except UnicodeDecodeError as err:
        if cut and err.start >= len(data) - 3 and err.reason == "unexpected end of data":
            return data[:err.start].decode("utf-8")
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(f"{option} {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start:,}, "
                         f"line {line:,})") from None


def random_windows(ids: torch.Tensor, context: int, batch_size: int,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next tokens ``(batch_size, context)`` int64 from random windows of ``ids``.

    Raises ValueError if ``ids`` holds no window of ``context + 1`` tokens.
    """
    if ids.numel() < context + 1:
        raise ValueError(f"a text of {ids.numel()} tokens holds no window of context + 1 = {context + 1}")
    starts = torch.randint(0, ids.numel() - context, (batch_size,), generator=generator)
    windows = ids[starts[:, None] + torch.arange(context + 1)].long()  # compact ids (int16) too
    return windows[:, :-1], windows[:, 1:]


def bigram_bits_per_char(train: torch.Tensor, valid: torch.Tensor, vocab_size: int, alpha: float = 0.1) -> float:
    """Held-out cross-entropy, in bits per character, of an add-alpha bigram model."""
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    train, valid = train.long(), valid.long()  # compact ids too
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    counts.index_put_((train[:-1], train[1:]), torch.ones(train.numel() - 1, dtype=torch.float64), accumulate=True)
    probs = (counts + alpha) / (counts.sum(1, keepdim=True) + alpha * vocab_size)
    return float(-probs[valid[:-1], valid[1:]].log().mean() / math.log(2))
