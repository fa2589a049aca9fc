"""A GGUF file's byte-level BPE tokenizer and chat template.

Source: Radford et al. (2019), "Language Models are Unsupervised Multitask Learners",
section 2.2 (byte-level BPE).
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
    """A GGUF file's tokenizer, ``bos_id``/``eos_id`` and chat template."""

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
        """Token ids of ``text``, control tokens one id each; TypeError if not str."""
        if not isinstance(text, str):
            raise TypeError(f"encode needs a string, got {type(text).__name__}")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if self.add_bos else ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of token ids; ``ValueError`` for an id outside the vocabulary."""
        ids = [int(i) for i in ids]
        wrong = [i for i in ids if not 0 <= i < self.vocab_size]
        if wrong:
            raise ValueError(
                f"token ids must be in 0..{self.vocab_size - 1}, got {wrong[0]}"
            )
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def token(self, token_id: int) -> str:
        """The vocabulary's spelling of one id (a leading space shows as ``Ġ``)."""
        return self.tokenizer.id_to_token(int(token_id))

    def render_chat(
        self, messages: Sequence[dict], add_generation_prompt: bool = True
    ) -> str:
        """``messages`` ({role, content} dicts) written by the chat template.

        Raises ``ValueError`` without a template or for a malformed message.
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

    Raises ``GGUFError`` if it is not ``gpt2`` BPE, its pre-tokeniser is not in
    :data:`PRE_TOKENIZERS` or a key is missing; ``ModuleNotFoundError`` without
    ``tokenizers``.
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
