"""Data for the course, all generated offline and deterministic given a seed.

- toy sentences and embeddings for the self-attention chapter (:mod:`.toy`);
- sequence-to-sequence tasks: number translation (:mod:`.numbers`), date
  normalisation (:mod:`.dates`) and your own TSV pairs (:mod:`.pairs`);
- vocabularies (:mod:`.vocab`) and padded, length-bucketed batches (:mod:`.batching`);
- toy copy/reverse/sort tasks (:mod:`.toy_tasks`) and digit canvases built from
  scikit-learn's bundled 8x8 digits (:mod:`.canvases`);
- character-level text for language models, by default the course's own chapters 1-6
  (:mod:`.text`).
- associative recall, N (key, value) pairs and a query (:mod:`.recall`), and its multi-query
  form (MQAR, :mod:`.mqar`).

``tokenize`` here is the toy sentences' word splitter; the pairs' level-aware
splitter is :func:`attncourse.data.pairs.tokenize`.
"""

from attncourse.lazy import lazy_exports

# Each public name is imported from its module when first read (PEP 562): importing one module
# of the package loads no other.
__getattr__, __dir__ = lazy_exports(__name__, {
    "batching": ("Batch", "build_vocabs", "collate", "encode_pairs", "make_batches"),
    "canvases": ("RELATIONS", "CanvasDataset", "CanvasSplits", "digit_canvas_task", "digit_relation_task",
        "load_digit_images", "source_pools"),
    "dates": ("date_task",),
    "numbers": ("number_pairs", "number_task", "number_words"),
    "pairs": ("PairDataset", "Splits", "TSVError", "detokenize", "load_tsv", "read_tsv", "save_tsv"),
    "mqar": ("MQARBatch", "multi_query_recall"),
    "recall": ("RecallBatch", "associative_recall"),
    "text": ("CharCorpus", "bigram_bits_per_char", "char_corpus", "course_text", "random_windows"),
    "toy": ("SENTENCES", "embed", "projections", "tokenize"),
    "toy_tasks": ("TOY_KINDS", "toy_target", "toy_task"),
    "vocab": ("Vocabulary",),
})

__all__ = [
    "CharCorpus",
    "bigram_bits_per_char",
    "char_corpus",
    "course_text",
    "random_windows",
    "RecallBatch",
    "associative_recall",
    "MQARBatch",
    "multi_query_recall",
    "CanvasDataset",
    "CanvasSplits",
    "RELATIONS",
    "digit_canvas_task",
    "digit_relation_task",
    "load_digit_images",
    "source_pools",
    "Batch",
    "PairDataset",
    "SENTENCES",
    "TOY_KINDS",
    "Splits",
    "TSVError",
    "Vocabulary",
    "build_vocabs",
    "collate",
    "date_task",
    "detokenize",
    "embed",
    "encode_pairs",
    "load_tsv",
    "make_batches",
    "number_pairs",
    "number_task",
    "number_words",
    "projections",
    "read_tsv",
    "save_tsv",
    "tokenize",
    "toy_target",
    "toy_task",
]
