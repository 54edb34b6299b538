"""Expected embeddings from the REFERENCE: sentence-transformers ``encode`` on the same weights.

Run after changing the sentence list or the weights:
``python deployments/embedding_cpu/make_fixtures.py`` (``python -m harness refresh embedding_cpu``
runs export, this, then the NNCF gate, in that order). The model is ``default_model_dir()``: the
deployment's ``model/`` folder when ``export.py --model-dir`` wrote one. A fixture over 1 MiB
of JSON (a larger model's vectors) is written as NPZ instead (harness.fixtures). The fixtures record the weights' identity
(harness.provenance, the installed model.safetensors) under ``"weights"`` for every model that
serves them, so checks fail loudly, not subtly, when the model changes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness import provenance
from harness.fixtures import write_fixture

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from export import weights_identity  # noqa: E402

REGENERATE = "python -m harness refresh embedding_cpu"
#: The models whose weights the fixtures describe: ONNX files (stamped) and Python models (installed files).
SERVED = ("embedding_py", "full_pipeline_py", "embedding_onnx", "embedding_onnx_int8")
FIXTURE = HERE / "fixtures" / "expected_embeddings.json"
DOCUMENTS = HERE / "fixtures" / "documents"
DOCUMENT_FIXTURE = HERE / "fixtures" / "expected_documents.json"
CHUNK_SIZES = {"default": None, "small": 48}

PARAGRAPHS = [
    "Triton Inference Server runs models from many frameworks behind one HTTP and gRPC API. "
    "Its dynamic batcher groups requests that arrive close together so the model runs fewer, larger batches.",
    "On a CPU server the number of model instances and the threads per instance decide how the cores are used. "
    "Too many threads per instance and the instances fight over the same cores.",
    "A document pipeline parses a file, cuts it into chunks that fit the model, embeds every chunk, "
    "and averages the chunk vectors into one vector for the whole document.",
    "Python pre-processing is convenient but can become the bottleneck; measure it with the server's statistics.",
]
MARKDOWN = """# 部署笔记

## 动态批处理
Triton 的动态批处理会把同时到达的请求合并成一个批次，从而提高吞吐量。

## Instances
- Use one instance per core for small models.
- Keep **one thread** per instance.

> 测量之后再调整参数。
"""

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


def write_documents() -> dict[str, bytes]:
    """The document fixtures: plain text, Markdown (Chinese + English), a two-page PDF."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["pdf.fonttype"] = 42
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    DOCUMENTS.mkdir(parents=True, exist_ok=True)
    (DOCUMENTS / "serving_notes.txt").write_text("\n\n".join(PARAGRAPHS * 3) + "\n", encoding="utf-8")
    (DOCUMENTS / "deployment_notes.md").write_text(MARKDOWN, encoding="utf-8")
    with PdfPages(DOCUMENTS / "two_pages.pdf", metadata={"CreationDate": None, "ModDate": None}) as pdf:
        for number, paragraph in enumerate(PARAGRAPHS[:2], start=1):
            figure = plt.figure(figsize=(8.27, 11.69))
            figure.text(0.08, 0.9, f"Page {number}", fontsize=14)
            figure.text(0.08, 0.85, paragraph[:90] + "\n" + paragraph[90:], fontsize=9)
            pdf.savefig(figure)
            plt.close(figure)
    write_encrypted_pdf(DOCUMENTS / "two_pages.pdf", DOCUMENTS / "encrypted.pdf")
    return {p.name: p.read_bytes() for p in sorted(DOCUMENTS.iterdir()) if p.name != "encrypted.pdf"}


def write_encrypted_pdf(source: Path, target: Path) -> None:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(source).pages:
        writer.add_page(page)
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    with target.open("wb") as handle:
        writer.write(handle)


def document_fixture(model, model_dir: Path) -> dict:
    """Chunks (the pipelines' own chunker) embedded by sentence-transformers, mean, L2-normalised."""
    import numpy as np
    from embedding_cpu_processing.documents import aggregate, chunk_text, extract_text
    from embedding_cpu_processing.text_embedding import EmbeddingModelInfo

    info = EmbeddingModelInfo.read(model_dir)
    cases = []
    for name, data in write_documents().items():
        for label, size in CHUNK_SIZES.items():
            chunk_tokens = size or info.max_seq_length - 2
            chunks = chunk_text(extract_text(data), str(model_dir / "tokenizer.json"), chunk_tokens, 4096)
            vectors = model.encode(chunks, convert_to_numpy=True)
            cases.append(
                {
                    "file": name,
                    "chunk_tokens": chunk_tokens,
                    "chunk_size": label,
                    "chunks": chunks,
                    "final_embedding": [round(float(x), 7) for x in aggregate(vectors)],
                    "chunk_embeddings": [[round(float(x), 7) for x in row] for row in np.asarray(vectors)],
                }
            )
    return {"aggregation": "mean of the chunk vectors, L2-normalised", "cases": cases}


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import sentence_transformers
    from embedding_cpu_processing.text_embedding import default_model_dir
    from sentence_transformers import SentenceTransformer

    model_dir = default_model_dir()
    model = SentenceTransformer(str(model_dir), device="cpu")
    weights = provenance.fixtures_record(dict.fromkeys(SERVED, weights_identity(model_dir)), REGENERATE)
    vectors = model.encode(SENTENCES, convert_to_numpy=True)
    written = write_fixture(
        FIXTURE,
        {
            "reference": f"sentence-transformers {sentence_transformers.__version__} encode()",
            "model": f"{model_dir.parent.name}/{model_dir.name}",
            provenance.FIXTURES_KEY: weights,
            "sentences": SENTENCES,
            "embeddings": [[round(float(x), 7) for x in row] for row in vectors],
        },
    )
    print(f"wrote {written} ({len(SENTENCES)} sentences, dim {vectors.shape[1]})")
    documents = document_fixture(model, model_dir)
    reference = f"sentence-transformers {sentence_transformers.__version__} encode() on the chunks"
    written = write_fixture(DOCUMENT_FIXTURE, {"reference": reference, provenance.FIXTURES_KEY: weights, **documents})
    print(f"wrote {written} ({len(documents['cases'])} cases)")


if __name__ == "__main__":
    main()
