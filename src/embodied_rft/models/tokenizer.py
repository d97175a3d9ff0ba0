"""Train the tiny models' byte-level BPE tokenizer on the project's own text.

Input: an iterable of strings (prompts and responses: the corpus the model will see), a vocabulary size and
the special tokens. Output: a ``PreTrainedTokenizerFast`` with the ChatML template installed, ``<|im_end|>``
as end-of-sequence and ``<|endoftext|>`` as padding (Qwen2.5-Instruct's convention), ready for
``save_pretrained``.

Byte-level BPE (GPT-2 / Qwen style: all 256 byte symbols in the base alphabet) so any text, even text never
seen in training, tokenises without unknown tokens. A task-specific vocabulary keeps sequences short (shorter than a
generic vocabulary's: docs/calibration.md §3.2), which is most of what makes CPU training fast. Training is
deterministic for a given corpus order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from .chat_template import END_OF_TEXT, IM_END, TEXT_SPECIAL_TOKENS, VISION_SPECIAL_TOKENS, chatml_template

log = logging.getLogger(__name__)


class EmptyCorpusError(ValueError):
    """The corpus held no text to learn a vocabulary from."""


def _counted(corpus: Iterable[str], counter: list[int]) -> Iterator[str]:
    for text in corpus:
        if not isinstance(text, str):
            raise TypeError(f"corpus item {counter[0]}: expected str, got {type(text).__name__}")
        counter[0] += 1
        if text:
            yield text


# pre_split="phrases": CamelCase names (object and receptacle names, with an optional _N instance suffix) and
# numbers (action ids, step counts) are pieces of their own, so the prompt and the answer share those tokens
# and the model can copy them; the rest splits only after a line break or ", " ". " "; " ": " (the separator
# stays with the text before it), so merges may span words there: a JSON key with its quotes, "pick up the ".
NAME_OR_NUMBER = r"[A-Z][a-z]+(?:[A-Z][a-z]*)*(?:_\d+)?|\d+"
PHRASE_BOUNDARY = r"\n|[,.;:] "


def _pre_tokenizer(pre_split: str):
    from tokenizers import Regex, pre_tokenizers

    if pre_split == "words":
        # The GPT-2 split keeps words, numbers and punctuation apart, so merges never glue a JSON brace onto a
        # word and a chat turn's first content character starts a token of its own.
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre_split == "phrases":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(NAME_OR_NUMBER), "isolated"),
                pre_tokenizers.Split(Regex(PHRASE_BOUNDARY), "merged_with_previous"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    raise ValueError(f"model.pre_split: expected 'words' or 'phrases', got {pre_split!r}")


def train_tokenizer(
    corpus: Iterable[str],
    *,
    vocab_size: int,
    min_frequency: int = 2,
    vision: bool = False,
    max_length: int = 2048,
    pre_split: str = "words",
):
    """A byte-level BPE tokenizer trained on ``corpus`` (see the module docstring).

    ``pre_split`` decides where merges may not cross: ``words`` (GPT-2's split) or ``phrases`` (names and
    numbers apart, otherwise only at phrase boundaries; see ``NAME_OR_NUMBER``). On the tiny default's distilled
    corpus ``phrases`` makes samples far shorter than ``words``, and CPU training time scales with length
    (docs/experiments.md, "Earlier rounds"). Merging across names as well, shorter still, made a tiny model stop
    grounding its plan in the prompt: a name in the answer no longer shared a token with the same name in the
    observation.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(TEXT_SPECIAL_TOKENS) + (list(VISION_SPECIAL_TOKENS) if vision else [])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _pre_tokenizer(pre_split)
    tok.decoder = decoders.ByteLevel()
    # trim_offsets=False keeps character offsets exact; the assistant mask is built from them.
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    seen = [0]
    tok.train_from_iterator(_counted(corpus, seen), trainer=trainer)
    if seen[0] == 0:
        raise EmptyCorpusError("the tokenizer corpus is empty: pass the prompts and responses the model will train on")
    log.info(
        "trained a byte-level BPE tokenizer: %d texts, vocab %d (asked %d)", seen[0], tok.get_vocab_size(), vocab_size
    )

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[t for t in specials if t not in (IM_END, END_OF_TEXT)],
        model_max_length=max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = chatml_template(vision=vision)
    return fast


# from_pretrained arguments that describe the loading environment, not the tokenizer
_LOAD_ONLY_KWARGS = ("local_files_only",)


def forget_load_kwargs(tok_or_processor: Any) -> Any:
    """Drop what transformers recorded about *how* a tokenizer was loaded (``local_files_only``, from
    HF_HUB_OFFLINE) from the init kwargs ``save_pretrained`` writes back, for a tokenizer or a processor's
    tokenizer. Otherwise the same run saves a different ``tokenizer_config.json`` -- and a new DVC hash for
    ``models/sft`` -- under `make repro` (offline) than under a bare `dvc repro`."""
    for tok in (tok_or_processor, getattr(tok_or_processor, "tokenizer", None)):
        kwargs = getattr(tok, "init_kwargs", None)
        if isinstance(kwargs, dict):
            for key in _LOAD_ONLY_KWARGS:
                kwargs.pop(key, None)
    return tok_or_processor
