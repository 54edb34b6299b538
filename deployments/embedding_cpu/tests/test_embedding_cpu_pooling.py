"""Pooling as the model folder declares it, against sentence-transformers' own Pooling module, and
the checks' refusal of a degenerate reference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from embedding_cpu_processing.text_embedding import EmbeddingModelInfo, default_model_dir, pool

from harness.deployments import get_deployment


@pytest.mark.parametrize("mode", ["mean", "cls", "lasttoken"])
def test_pool_equals_sentence_transformers_pooling(mode):
    import torch
    from sentence_transformers.models import Pooling

    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(3, 7, 16)).astype(np.float32)
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5], np.int64)
    features = {"token_embeddings": torch.from_numpy(hidden), "attention_mask": torch.from_numpy(mask)}
    want = Pooling(16, pooling_mode=mode)(features)["sentence_embedding"].numpy()
    np.testing.assert_allclose(pool(hidden, mask, False, mode), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"attention_mask \[3, 6\]: want \[batch, tokens, dim\] and \[batch, tokens\]"):
        pool(hidden, mask[:, :6], False, mode)


def _folder(tmp_path: Path, pooling: dict, normalize: bool) -> Path:
    """The installed folder's configs with another Pooling config (and without Normalize)."""
    source = default_model_dir()
    folder = tmp_path / "model"
    (folder / "1_Pooling").mkdir(parents=True)
    for name in ("sentence_bert_config.json", "tokenizer_config.json"):
        shutil.copy(source / name, folder / name)
    modules = [
        m for m in json.loads((source / "modules.json").read_text()) if normalize or "Normalize" not in m["type"]
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return folder


def test_info_reads_both_pooling_formats_and_refuses_others(tmp_path):
    v2 = _folder(tmp_path / "v2", {"word_embedding_dimension": 128, "pooling_mode_cls_token": True}, False)
    assert (EmbeddingModelInfo.read(v2).pooling, EmbeddingModelInfo.read(v2).normalize) == ("cls", False)
    v5 = _folder(tmp_path / "v5", {"embedding_dimension": 64, "pooling_mode": "lasttoken"}, True)
    assert (EmbeddingModelInfo.read(v5).pooling, EmbeddingModelInfo.read(v5).dimension) == ("lasttoken", 64)
    maxed = _folder(tmp_path / "max", {"embedding_dimension": 64, "pooling_mode": "max"}, True)
    with pytest.raises(ValueError, match=r"1_Pooling/config.json: pooling \['max'\]; supported: one of mean, cls"):
        EmbeddingModelInfo.read(maxed)


def test_checks_refuse_a_degenerate_reference():
    checks = get_deployment("embedding_cpu").checks_module
    vectors = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    checks.assert_reference_not_degenerate("ok", vectors)
    checks.assert_reference_not_degenerate("small", vectors * 1e-7)  # the scale is the reference's own
    with pytest.raises(AssertionError, match="all 0"):
        checks.assert_reference_not_degenerate("zeros", np.zeros((4, 8), np.float32))
    with pytest.raises(AssertionError, match="NaN"):
        checks.assert_reference_not_degenerate("nan", np.full((4, 8), np.nan, np.float32))
    with pytest.raises(AssertionError, match="one and the same vector"):
        checks.assert_reference_not_degenerate("constant", np.tile(vectors[:1], (4, 1)))
