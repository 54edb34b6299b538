"""cn_clip's tokenizer without torch, laid out as ``cn_clip.clip.tokenize`` lays it out.

``CnClipTokenizer`` runs cn_clip's own ``FullTokenizer`` (its BERT vocabulary, lower casing,
CJK splitting, WordPiece): ``[CLS] ids[:context_length - 2] [SEP]`` then zero padding.
cn_clip's tokenizer file is loaded by path, because ``import cn_clip.clip`` imports torch and
builds the model code, which a tokenizing stub does not need (seconds of start-up and
hundreds of MB each). The tokenize model imports this file from its version folder.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Sequence

import numpy as np

from triton_helpers.errors import InputError

CONTEXT_LENGTH = 52
DEFAULT_MAX_TEXT_BYTES = 16 * 1024


def _cn_clip_dir() -> str:
    spec = importlib.util.find_spec("cn_clip")  # finds the package without executing it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the cn_clip package is not installed: pip install --no-deps cn-clip==1.6.0")
    return os.path.join(list(spec.submodule_search_locations)[0], "clip")


def _load_bert_tokenizer_module():
    """Import ``cn_clip/clip/bert_tokenizer.py`` alone (it needs only ``six``), not ``cn_clip.clip``."""
    path = os.path.join(_cn_clip_dir(), "bert_tokenizer.py")
    spec = importlib.util.spec_from_file_location("_cn_clip_bert_tokenizer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CnClipTokenizer:
    """cn_clip's tokenizer with ``cn_clip.clip.tokenize``'s layout, plus request limits."""

    def __init__(self, context_length: int = CONTEXT_LENGTH, vocab_file: str | None = None):
        if context_length < 2:
            raise ValueError("context_length must be at least 2 ([CLS] and [SEP])")
        module = _load_bert_tokenizer_module()
        vocab_file = vocab_file or os.path.join(_cn_clip_dir(), "vocab.txt")
        self._tokenizer = module.FullTokenizer(vocab_file=vocab_file)
        self.context_length = context_length
        self.cls_id = self._tokenizer.vocab["[CLS]"]
        self.sep_id = self._tokenizer.vocab["[SEP]"]
        self.pad_id = self._tokenizer.vocab["[PAD]"]

    def token_ids(self, text: str) -> list[int]:
        """WordPiece ids of ``text`` without [CLS]/[SEP] and without truncation."""
        return self._tokenizer.convert_tokens_to_ids(self._tokenizer.tokenize(text))

    def encode(self, texts: Iterable[str]) -> np.ndarray:
        """``cn_clip.clip.tokenize(texts, context_length)`` as an int64 array ``[n, context_length]``."""
        rows = [[self.cls_id] + self.token_ids(text)[: self.context_length - 2] + [self.sep_id] for text in texts]
        out = np.zeros((len(rows), self.context_length), dtype=np.int64)
        for i, row in enumerate(rows):
            out[i, : len(row)] = row
        return out

    def encode_checked(
        self,
        texts: Sequence[str],
        name: str = "TEXT",
        *,
        max_bytes: int = DEFAULT_MAX_TEXT_BYTES,
        reject_empty: bool = True,
    ) -> np.ndarray:
        """``encode`` for server input: refuses over-long texts and (optionally) texts with no token.

        ``max_bytes`` bounds the tokenizer's work per item (it is pure Python); anything past
        the first ``context_length - 2`` tokens is dropped anyway, as cn_clip does.
        """
        for i, text in enumerate(texts):
            size = len(text.encode("utf-8"))
            if size > max_bytes:
                raise InputError(
                    f"input '{name}' item {i} is {size} bytes of UTF-8, over the limit of {max_bytes} "
                    f"(the model reads only the first {self.context_length - 2} tokens)"
                )
        ids = self.encode(texts)
        if reject_empty:
            for i, row in enumerate(ids):
                if row[1] == self.sep_id:
                    raise InputError(
                        f"input '{name}' item {i} is empty: it has no token after whitespace and "
                        f"control characters are removed"
                    )
        return ids
