"""attncourse: the helper package of an interactive course on attention mechanisms.

A part imports only parts on levels above its own (``tests/project/test_layers.py`` checks)::

    0  lazy        the packages' re-exports, imported on first use (PEP 562)
    1  functional  the attention maths: tensors in, tensors out
       kernels     the same maths as Triton kernels (FlashAttention-2)
       data        the tasks, their vocabularies and batches
       runtime     device choice, seeding, progress bars, the trained-model folder
    2  nn          the models, as torch.nn.Modules
       viz         static figures
    3  decode      inference: greedy and beam search, sampling from the GPT
       pretrained  a real model's GGUF file: weights, tokenizer, chat template
    4  train       the training engine: fit, the epoch loop, checkpoints, metrics
    5  widgets     the interactive explorers (on viz and decode)
       recipes     what several chapters train (Experiment, the LM)
       checks      instant feedback on the exercises
    6  cli         the command line, ``python -m attncourse``
       chapters    each chapter's own checks, recipe, explorer, figures and rubrics
    7  course      student editions, nbgrader, the instructor's guide (reads rubrics)
"""

__version__ = "0.1.0"
