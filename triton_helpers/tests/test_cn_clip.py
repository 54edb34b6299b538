"""Unit tests of triton_helpers.cn_clip against cn_clip itself and the committed fixtures (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from triton_helpers.errors import InputError

cn_clip = pytest.importorskip("cn_clip")
helpers = pytest.importorskip("triton_helpers.cn_clip")

FIXTURES = Path(__file__).resolve().parents[2] / "deployments" / "cn_clip" / "fixtures"

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
    return helpers.CnClipTokenizer()


def test_tokenizer_does_not_import_torch(tokenizer):
    import subprocess
    import sys

    code = "import sys; from triton_helpers.cn_clip import CnClipTokenizer; CnClipTokenizer(); print('torch' in sys.modules)"
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

    short = helpers.CnClipTokenizer(context_length=8)
    np.testing.assert_array_equal(short.encode(TEXTS), tokenize(TEXTS, context_length=8).numpy())


def test_preprocess_identical_to_cn_clip_transform():
    from cn_clip.clip.utils import image_transform
    from PIL import Image

    transform = image_transform(224)
    for path in sorted((FIXTURES / "images").iterdir()):
        data = path.read_bytes()
        want = transform(Image.open(path)).numpy()
        got = helpers.preprocess_image(data)
        assert got.dtype == np.float32 and got.shape == (3, 224, 224)
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=path.name)


def test_preprocess_bad_image():
    with pytest.raises(InputError, match="cannot decode"):
        helpers.preprocess_image(b"not an image")


def test_zero_shot_probabilities():
    image = np.array([1.0, 0.0], dtype=np.float32)
    labels = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    probs = helpers.zero_shot_probabilities(image, labels, 100.0)
    assert probs.shape == (2,) and abs(float(probs.sum()) - 1) < 1e-6 and probs[0] > 0.999
