"""The naive way to serve an embedding model: FastAPI + uvicorn around sentence-transformers.

What a user writes first, kept that way on purpose (the baseline of ``make bench-peers``): one
process, one ``SentenceTransformer``, a synchronous route that FastAPI runs in its threadpool,
each request encoded on its own (no batching across requests), the reply a JSON float list
(``base64`` too, as OpenAI's clients ask for it by default), no token count.

    NAIVE_MODEL_DIR=<sentence-transformers folder> uvicorn harness_lab.peers.naive_app:app --port 8080
    curl -d '{"input": ["a sentence"], "model": "embedding-model"}' 127.0.0.1:8080/v1/embeddings
"""

import base64
import os
from typing import Literal

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from sentence_transformers import SentenceTransformer

#: The name the route answers with (it serves one model, whatever a request asks for).
SERVED_NAME = os.environ.get("NAIVE_SERVED_NAME", "embedding-model")
model = SentenceTransformer(os.environ["NAIVE_MODEL_DIR"], device="cpu")
app = FastAPI()


class EmbeddingRequest(BaseModel):
    input: str | list[str]
    model: str = SERVED_NAME
    encoding_format: Literal["float", "base64"] = "float"


@app.get("/health")
def health() -> dict:
    return {"status": "ok"}


@app.post("/v1/embeddings")
def embeddings(request: EmbeddingRequest) -> dict:
    texts = [request.input] if isinstance(request.input, str) else request.input
    if not texts:
        raise HTTPException(status_code=400, detail="input must not be empty")
    vectors = model.encode(texts, convert_to_numpy=True)
    if request.encoding_format == "base64":
        encoded = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors]
    else:
        encoded = [v.tolist() for v in vectors]
    return {
        "object": "list",
        "data": [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(encoded)],
        "model": SERVED_NAME,
    }
