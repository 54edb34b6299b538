"""Unit tests of the cn_clip models' own code (tokenizer, image transform, zero-shot scores)
against cn_clip itself and the committed fixtures (no server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.deployments import load_module
from harness.serving.launchers.local import pytriton_root
from triton_helpers.errors import InputError

cn_clip = pytest.importorskip("cn_clip")

DEPLOYMENT = Path(__file__).resolve().parents[1]
FIXTURES = DEPLOYMENT / "fixtures"
REPOSITORY = DEPLOYMENT / "model_repository"
TOKENIZER_FILE = REPOSITORY / "tokenize" / "1" / "cn_clip_tokenizer.py"


def _version_module(model: str, file: str):
    """``model_repository/<model>/1/<file>``, imported by path (the stub imports it from sys.path)."""
    return load_module(REPOSITORY / model / "1" / file, f"{DEPLOYMENT.name}_{model}_{Path(file).stem}")


tokenizing = _version_module("tokenize", "cn_clip_tokenizer.py")
cn_clip_transform = _version_module("preprocess_image", "cn_clip_transform.py")


@pytest.fixture(scope="module")
def zero_shot_model():
    """zero_shot's model.py, imported beside the wheel's triton_python_backend_utils."""
    sys.path.insert(0, str(pytriton_root() / "backends" / "python"))
    try:
        return _version_module("zero_shot", "model.py")
    finally:
        sys.path.pop(0)


TEXTS = [
    "一只猫",
    "A photo of a DOG!",
    "皮卡丘 Pikachu 😀🐱",
    "",
    "   ",
    "\x00\u200b\t\n",
    "x" * 300,
    "很长的句子，" * 40,
    "café naïve résumé",
    "𠀀𪜀 rare CJK",
    "Ünïcödé ﬁ ligature",
    "1,234.56元 (RMB)",
]


@pytest.fixture(scope="module")
def tokenizer():
    return tokenizing.CnClipTokenizer()


def test_tokenizer_does_not_import_torch(tokenizer):
    import subprocess
    import sys

    code = (
        f"import sys; sys.path.insert(0, {str(TOKENIZER_FILE.parent)!r}); from cn_clip_tokenizer import CnClipTokenizer; "
        "CnClipTokenizer(); print('torch' in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


def test_token_ids_identical_to_cn_clip_tokenize(tokenizer):
    from cn_clip.clip import tokenize

    np.testing.assert_array_equal(tokenizer.encode(TEXTS), tokenize(TEXTS).numpy())


def test_token_ids_match_fixtures(tokenizer):
    texts = json.loads((FIXTURES / "reference.json").read_text())["texts"]
    got = tokenizer.encode([t["text"] for t in texts])
    assert got.tolist() == [t["token_ids"] for t in texts]


def test_encode_checked_refuses_empty_and_long(tokenizer):
    with pytest.raises(InputError, match="empty"):
        tokenizer.encode_checked(["ok", " \t"])
    with pytest.raises(InputError, match="over the limit"):
        tokenizer.encode_checked(["长" * 10_000], max_bytes=16384)
    assert tokenizer.encode_checked([""], reject_empty=False).tolist()[0][:3] == [101, 102, 0]


def test_context_length_truncates_like_cn_clip(tokenizer):
    from cn_clip.clip import tokenize

    short = tokenizing.CnClipTokenizer(context_length=8)
    np.testing.assert_array_equal(short.encode(TEXTS), tokenize(TEXTS, context_length=8).numpy())


def test_preprocess_identical_to_cn_clip_transform():
    from cn_clip.clip.utils import image_transform
    from PIL import Image

    transform = image_transform(224)
    for path in sorted((FIXTURES / "images").iterdir()):
        data = path.read_bytes()
        want = transform(Image.open(path)).numpy()
        got = cn_clip_transform.preprocess_image(data)
        assert got.dtype == np.float32 and got.shape == (3, 224, 224)
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=path.name)


def test_preprocess_bad_image():
    with pytest.raises(InputError, match="cannot decode"):
        cn_clip_transform.preprocess_image(b"not an image")


def test_zero_shot_probabilities(zero_shot_model):
    image = np.array([1.0, 0.0], dtype=np.float32)
    labels = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    probs = zero_shot_model.zero_shot_probabilities(image, labels, 100.0)
    assert probs.shape == (2,) and abs(float(probs.sum()) - 1) < 1e-6 and probs[0] > 0.999
