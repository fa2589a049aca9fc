"""The tokenizer and the chat template of a GGUF file, rebuilt from its metadata with ``tokenizers``.

A GGUF file carries its tokenizer as metadata rather than as a ``tokenizer.json``:
``tokenizer.ggml.model`` names the algorithm (``gpt2``: byte-level BPE, Radford et
al. 2019, section 2.2), ``tokenizer.ggml.tokens`` the vocabulary in id order,
``tokenizer.ggml.merges`` the BPE merges in the order they were learned (Sennrich
et al. 2016), ``tokenizer.ggml.token_type`` which tokens are control tokens
(``<|im_start|>``...), ``tokenizer.ggml.pre`` how text is split into words before
BPE, and ``tokenizer.chat_template`` a Jinja template that writes a conversation as
one string. :func:`tokenizer_from_metadata` builds the same tokenizer with
Hugging Face's ``tokenizers``:

1. **pre-tokenisation** ``smollm`` (llama.cpp's ``LLAMA_VOCAB_PRE_TYPE_SMOLLM``, and
   SmolLM2's own ``tokenizer.json``): every digit on its own, then GPT-2's split into
   words, numbers, punctuation and spaces, with a space kept at the start of the word
   it precedes;
2. **bytes to symbols**: each byte of UTF-8 becomes one of 256 printable characters
   (a space is ``Ġ``, a newline ``Ċ``), so any text, in any script, has a spelling
   in the vocabulary and nothing is ever unknown;
3. **BPE**: the merges are applied in their order within each word;
4. control tokens are matched whole in the text before all of this, so
   ``<|im_start|>`` is one id, never seven pieces.

Decoding maps the symbols back to bytes and the bytes to text, so ``decode(encode(s))
== s`` for every string.
"""

from __future__ import annotations

from collections.abc import Sequence

from attncourse.pretrained.config import GGUFError

#: ``tokenizer.ggml.token_type`` values (llama.cpp's ``llama_token_type``).
CONTROL, USER_DEFINED = 3, 4
#: The ``tokenizer.ggml.pre`` values read here.
PRE_TOKENIZERS = ("smollm", "gpt-2")
TOKENIZERS_PIN = "tokenizers==0.23.3"


def _tokenizers():
    try:
        import tokenizers
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"the tokenizer needs Hugging Face's tokenizers: pip install {TOKENIZERS_PIN}",
            name="tokenizers",
        ) from error
    return tokenizers


class GGUFTokenizer:
    """A GGUF file's tokenizer and chat template; build it with :func:`tokenizer_from_metadata`.

    Attributes
    ----------
    tokenizer : tokenizers.Tokenizer
        The byte-level BPE tokenizer itself.
    bos_id, eos_id : int
        ``tokenizer.ggml.bos_token_id`` and ``eos_token_id``. In SmolLM2-Instruct they are
        ``<|im_start|>`` (1) and ``<|im_end|>`` (2): an assistant's turn ends with ``<|im_end|>``.
    add_bos : bool
        Whether :meth:`encode` puts ``bos_id`` first (``tokenizer.ggml.add_bos_token``; False in SmolLM2).
    chat_template : str or None
        The Jinja source of ``tokenizer.chat_template``.
    """

    def __init__(
        self,
        tokenizer,
        bos_id: int,
        eos_id: int,
        add_bos: bool,
        chat_template: str | None,
    ) -> None:
        self.tokenizer = tokenizer
        self.bos_id, self.eos_id, self.add_bos = bos_id, eos_id, add_bos
        self.chat_template = chat_template

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (control tokens written in it, like ``<|im_end|>``, are one id each).

        Raises
        ------
        TypeError
            If ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode needs a string, got {type(text).__name__}")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if self.add_bos else ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of token ids; control tokens are written out unless ``skip_special_tokens``.

        Raises
        ------
        ValueError
            If an id is outside ``0 .. vocab_size - 1``.
        """
        ids = [int(i) for i in ids]
        wrong = [i for i in ids if not 0 <= i < self.vocab_size]
        if wrong:
            raise ValueError(
                f"token ids must be in 0..{self.vocab_size - 1}, got {wrong[0]}"
            )
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def token(self, token_id: int) -> str:
        """The vocabulary's spelling of one id (byte-level symbols: a leading space shows as ``Ġ``)."""
        return self.tokenizer.id_to_token(int(token_id))

    def render_chat(
        self, messages: Sequence[dict], add_generation_prompt: bool = True
    ) -> str:
        """A conversation written as the model was trained to read it, by the file's chat template.

        SmolLM2-Instruct's template is ChatML: each message becomes
        ``<|im_start|>{role}\\n{content}<|im_end|>\\n``, a default system message comes
        first when the conversation has none, and ``add_generation_prompt`` ends the
        text with ``<|im_start|>assistant\\n`` for the model to go on from.

        Parameters
        ----------
        messages : sequence of dict
            ``{"role": "system" | "user" | "assistant", "content": str}`` each.
        add_generation_prompt : bool

        Raises
        ------
        ValueError
            If the file has no chat template, or a message is not a dict with string
            ``role`` and ``content``.
        """
        if not self.chat_template:
            raise ValueError(
                "this GGUF file has no chat template (tokenizer.chat_template)"
            )
        for message in messages:
            if not (
                isinstance(message, dict)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)
            ):
                raise ValueError(
                    f"each message must be a dict with string 'role' and 'content', got {message!r}"
                )
        try:
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                "the chat template needs jinja2: pip install jinja2", name="jinja2"
            ) from error
        # The settings transformers renders chat templates with (trim_blocks, lstrip_blocks),
        # in a sandbox: the template is code that comes with a downloaded file.
        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True
        )
        template = environment.from_string(self.chat_template)
        return template.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.token(self.bos_id),
            eos_token=self.token(self.eos_id),
        )

    def encode_chat(
        self, messages: Sequence[dict], add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of :meth:`render_chat`'s text."""
        return self.encode(self.render_chat(messages, add_generation_prompt))


def tokenizer_from_metadata(metadata: dict) -> GGUFTokenizer:
    """Build a GGUF file's byte-level BPE tokenizer from its metadata.

    Parameters
    ----------
    metadata : dict
        :attr:`~attncourse.pretrained.reader.GGUFFile.metadata`.

    Returns
    -------
    GGUFTokenizer

    Raises
    ------
    GGUFError
        If the tokenizer is not byte-level BPE (``tokenizer.ggml.model`` other than
        ``gpt2``), its pre-tokeniser is not one of :data:`PRE_TOKENIZERS`, or a key is missing.
    ModuleNotFoundError
        If ``tokenizers`` is not installed (the message gives the command).
    """
    model = metadata.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise GGUFError(
            f"tokenizer {model!r} (tokenizer.ggml.model) is not read here: only byte-level BPE, 'gpt2'"
        )
    pre = metadata.get("tokenizer.ggml.pre", "gpt-2")
    if pre not in PRE_TOKENIZERS:
        raise GGUFError(
            f"pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not read here: "
            f"only {', '.join(PRE_TOKENIZERS)}"
        )
    for key in ("tokens", "merges", "bos_token_id", "eos_token_id"):
        if f"tokenizer.ggml.{key}" not in metadata:
            raise GGUFError(f"the file has no tokenizer.ggml.{key} in its metadata")
    tk = _tokenizers()
    tokens = list(metadata["tokenizer.ggml.tokens"])
    merges = [tuple(merge.split(" ")) for merge in metadata["tokenizer.ggml.merges"]]
    tokenizer = tk.Tokenizer(
        tk.models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=merges)
    )
    byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.pre_tokenizer = (
        tk.pre_tokenizers.Sequence(
            [tk.pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
        if pre == "smollm"
        else byte_level
    )
    tokenizer.decoder = tk.decoders.ByteLevel()
    types = list(metadata.get("tokenizer.ggml.token_type", ()))
    tokenizer.add_special_tokens(
        [
            tk.AddedToken(token, special=True, normalized=False)
            for token, kind in zip(tokens, types)
            if kind == CONTROL
        ]
    )
    tokenizer.add_tokens(
        [
            tk.AddedToken(token, special=False, normalized=False)
            for token, kind in zip(tokens, types)
            if kind == USER_DEFINED
        ]
    )
    return GGUFTokenizer(
        tokenizer,
        bos_id=int(metadata["tokenizer.ggml.bos_token_id"]),
        eos_id=int(metadata["tokenizer.ggml.eos_token_id"]),
        add_bos=bool(metadata.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=metadata.get("tokenizer.chat_template"),
    )
