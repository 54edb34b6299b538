"""embedding_cpu's pieces for the lab's side-by-side run (``[peers] embedding`` of embedding_cpu.toml)."""

from __future__ import annotations

from types import SimpleNamespace

from harness.deployments import get_deployment


def peers_embedding() -> SimpleNamespace:
    """The sentence-transformers folder the peer and the torch ceiling load, its vector size, the
    client tokenizer, the ONNX ceiling's tokenize + run + pool (and the served model's OpenVINO
    compile), the sentences every target gets, and the mixed-length texts (short queries and
    200-500-token passages, seeded) of the deployment's mixed benchmark."""
    from embedding_cpu_processing.bls import embed_texts_local, openvino_run
    from embedding_cpu_processing.text_embedding import EmbeddingModelInfo, tokenize

    checks = get_deployment("embedding_cpu").checks_module
    info = EmbeddingModelInfo.read()

    def embed(run, texts: list[str], max_rows: int):
        return embed_texts_local(run, texts, max_rows=max_rows, normalize=info.normalize, pooling=info.pooling)

    return SimpleNamespace(
        model_dir=info.model_dir,
        dimension=info.dimension,
        tokenize=tokenize,
        embed=embed,
        openvino_run=openvino_run,  # the served model's OpenVINO engine, for `<kind>@openvino` ceilings
        sentences=checks.SHORT_SENTENCES,
        mixed=checks.mixed_texts(),
    )
