"""``POST /v1/embeddings`` and ``GET /v1/models`` on a harness-started server (the gate's
``openai_api``), through the clients RAG stacks use unchanged: the official ``openai`` client,
langchain-openai's ``OpenAIEmbeddings`` and LlamaIndex's ``OpenAILikeEmbedding``.

Expected vectors come from the reference, sentence-transformers (embedding_cpu's fixture file,
made by its make_fixtures.py), and from the native Triton path (tritonclient); token counts from
the model's own tokenizer.json in this process. One embedding_cpu server serves every test here
(the session's pool: the same server test_deployments uses); the API-key tests run a gate on two
toy models.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import openai
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from harness.deployments import discover, get_deployment
from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.tests.gate_cases import GATE_POLICY, make_gate_repository

if "embedding_cpu" not in {
    d.name for d in discover()
}:  # a tree without it (e.g. a `make new` walk that keeps one deployment)
    pytest.skip("no embedding_cpu deployment in this tree", allow_module_level=True)
DEPLOYMENT = get_deployment("embedding_cpu")
MIN_COSINE = {"embedding_onnx_text": 0.9999, "embedding_py": 0.9999, "embedding_onnx_int8": 0.99, "tokens": 0.999}


@pytest.fixture(scope="module")
def fixture():
    """The reference: sentence-transformers' vectors of the fixture sentences (OpenAI refuses "")."""
    table = json.loads((DEPLOYMENT.path / "fixtures" / "expected_embeddings.json").read_text())
    pairs = [(s, v) for s, v in zip(table["sentences"], table["embeddings"]) if s]
    return [s for s, _ in pairs], np.asarray([v for _, v in pairs], np.float32)


@pytest.fixture(scope="module")
def server(server_pool):
    return server_pool.context(DEPLOYMENT).server


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0)


def cosines(actual, expected) -> np.ndarray:
    actual = np.asarray(actual, np.float32)
    actual = actual / np.linalg.norm(actual, axis=-1, keepdims=True)
    expected = expected / np.linalg.norm(expected, axis=-1, keepdims=True)
    return (actual * expected).sum(axis=-1)


def reference_tokens(texts: list[str]) -> list[list[int]]:
    """The model's own tokenizer (tokenizer.json, truncation at max_seq_length), unpadded."""
    from embedding_cpu_processing.text_embedding import tokenize

    tokens = tokenize(texts)
    return [ids[mask == 1].tolist() for ids, mask in zip(tokens["input_ids"], tokens["attention_mask"])]


def native(server, texts: list[str], model: str = "embedding_onnx_text") -> np.ndarray:
    """The native Triton path: tritonclient over HTTP, the model's own TEXT -> EMBEDDING, 64 a request."""
    out = []
    with httpclient.InferenceServerClient(server.http_url) as c:
        for i in range(0, len(texts), 64):
            chunk = texts[i : i + 64]
            tensor = httpclient.InferInput("TEXT", [len(chunk), 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[t.encode()] for t in chunk], dtype=object))
            out.append(c.infer(model, [tensor]).as_numpy("EMBEDDING"))
    return np.concatenate(out)


@pytest.mark.parametrize("model", ["embedding_onnx_text", "embedding_py", "embedding_onnx_int8"])
@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_openai_client_matches_sentence_transformers(client, fixture, model, encoding):
    sentences, expected = fixture
    kwargs = {} if encoding == "base64" else {"encoding_format": "float"}  # the client asks base64 by default
    response = client.embeddings.create(model=model, input=sentences, **kwargs)
    assert response.model == model and [d.index for d in response.data] == list(range(len(sentences)))
    vectors = np.asarray([d.embedding for d in response.data], np.float32)
    assert vectors.shape == expected.shape
    assert cosines(vectors, expected).min() >= MIN_COSINE[model]
    want = sum(len(t) for t in reference_tokens(sentences))
    assert response.usage.prompt_tokens == response.usage.total_tokens == want


def test_base64_is_the_float_vectors_exactly(client, server, fixture):
    sentences, _ = fixture
    floats = client.embeddings.create(model="embedding_onnx_text", input=sentences, encoding_format="float")
    raw = requests.post(
        f"http://{server.http_url}/v1/embeddings",
        json={"model": "embedding_onnx_text", "input": sentences, "encoding_format": "base64"},
        timeout=60,
    ).json()
    for item, row in zip(raw["data"], floats.data):
        decoded = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
        assert decoded.tolist() == np.asarray(row.embedding, np.float32).tolist()


def test_more_inputs_than_max_batch_size_come_back_in_order(client, server, fixture):
    """150 inputs (max_batch_size 64: three Triton requests at once), each equal to its native
    Triton vector and to the reference."""
    sentences, expected = fixture
    order = [(i * 5) % len(sentences) for i in range(150)]
    texts = [sentences[i] for i in order]
    response = client.embeddings.create(model="embedding_onnx_text", input=texts)
    vectors = np.asarray([d.embedding for d in response.data], np.float32)
    assert [d.index for d in response.data] == list(range(150))
    assert cosines(vectors, expected[order]).min() >= MIN_COSINE["embedding_onnx_text"]
    np.testing.assert_allclose(vectors, native(server, texts), atol=1e-5)
    assert response.usage.prompt_tokens == sum(len(t) for t in reference_tokens(texts))


def test_usage_comes_from_the_text_models_token_count(client, server, fixture):
    """The text model's TOKEN_COUNT output gives usage (the [openai] table maps no tokenizer for
    it): no request reaches the tokenizer model, and the counts are the reference tokenizer's,
    a text past the truncation length included."""
    mapped = DEPLOYMENT.gate_policy().openai.models["embedding_onnx_text"]
    assert mapped.text.tokens_output == "TOKEN_COUNT" and mapped.tokenizer is None
    sentences, _ = fixture
    texts = sentences + [" ".join(sentences * 20)]

    def tokenizer_requests() -> int:
        with httpclient.InferenceServerClient(server.http_url) as c:
            return int(c.get_inference_statistics("tokenize")["model_stats"][0]["inference_count"])

    before = tokenizer_requests()
    response = client.embeddings.create(model="embedding_onnx_text", input=texts)
    assert tokenizer_requests() == before
    from embedding_cpu_processing.text_embedding import EmbeddingModelInfo

    lengths = [len(t) for t in reference_tokens(texts)]
    assert max(lengths) == EmbeddingModelInfo.read().max_seq_length  # the long text is truncated
    assert response.usage.prompt_tokens == sum(lengths)


def test_token_ids_go_to_the_token_in_model(client, fixture):
    sentences, expected = fixture
    ids = reference_tokens(sentences)
    response = client.embeddings.create(model="embedding_onnx_text", input=ids, encoding_format="float")
    assert cosines([d.embedding for d in response.data], expected).min() >= MIN_COSINE["tokens"]
    assert response.usage.prompt_tokens == sum(map(len, ids))
    one = client.embeddings.create(model="embedding_onnx_text", input=ids[0], encoding_format="float")
    assert cosines([one.data[0].embedding], expected[:1]).min() >= MIN_COSINE["tokens"]
    with pytest.raises(openai.BadRequestError, match="takes text only"):
        client.embeddings.create(model="embedding_py", input=ids)


def test_bad_input_is_the_clients_own_exception(client):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.embeddings.create(model="no-such-model", input="x")
    with pytest.raises(openai.BadRequestError, match="empty"):
        client.embeddings.create(model="embedding_onnx_text", input=[])
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        client.embeddings.create(model="embedding_onnx_text", input="x", dimensions=128)
    assert len(client.embeddings.create(model="embedding_onnx_text", input="x", dimensions=384).data) == 1
    with pytest.raises(openai.BadRequestError, match="more than the 2048"):
        client.embeddings.create(model="embedding_onnx_text", input=["x"] * 2049)


def test_models_are_listed(client):
    assert [m.id for m in client.models.list()] == ["embedding_onnx_text", "embedding_py", "embedding_onnx_int8"]
    assert client.models.retrieve("embedding_py").id == "embedding_py"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_langchain_openai_embeddings(server, fixture):
    """No tiktoken download: ``check_embedding_ctx_length=False`` sends the texts as they are."""
    from langchain_openai import OpenAIEmbeddings

    sentences, expected = fixture
    embeddings = OpenAIEmbeddings(
        model="embedding_onnx_text",
        base_url=f"http://{server.http_url}/v1",
        api_key="unused",
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    assert cosines(embeddings.embed_documents(sentences), expected).min() >= 0.9999
    assert cosines([embeddings.embed_query(sentences[2])], expected[2:3]).min() >= 0.9999
    with pytest.raises(openai.NotFoundError):
        OpenAIEmbeddings(
            model="no-such-model",
            base_url=f"http://{server.http_url}/v1",
            api_key="unused",
            check_embedding_ctx_length=False,
            max_retries=0,
        ).embed_query("x")


def test_llamaindex_openai_like_embedding(server, fixture):
    from llama_index.embeddings.openai_like import OpenAILikeEmbedding

    sentences, expected = fixture
    embedding = OpenAILikeEmbedding(
        model_name="embedding_py", api_base=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    )
    assert cosines(embedding.get_text_embedding_batch(sentences), expected).min() >= 0.9999
    assert cosines([embedding.get_query_embedding(sentences[0])], expected[:1]).min() >= 0.9999
    bad = OpenAILikeEmbedding(
        model_name="no-such-model", api_base=f"http://{server.http_url}/v1", api_key="unused", max_retries=0
    )
    with pytest.raises(openai.NotFoundError):
        bad.get_query_embedding("x")


BAD_BODIES = [
    (b"{not json", 400),
    (b'{"input": "x", "input": "y"}', 400),
    (b"[1, 2]", 400),
    (b"{}", 400),
    (json.dumps({"input": 5}).encode(), 400),
    (json.dumps({"input": [1.5]}).encode(), 400),
    (json.dumps({"input": ["a", 1]}).encode(), 400),
    (json.dumps({"input": [[1, "a"]]}).encode(), 400),
    (json.dumps({"input": [True]}).encode(), 400),
    (json.dumps({"input": ""}).encode(), 400),
    (json.dumps({"input": ["a", ""]}).encode(), 400),
    (json.dumps({"input": [[]]}).encode(), 400),
    (json.dumps({"input": "x", "model": 3}).encode(), 400),
    (json.dumps({"input": "x", "encoding_format": "hex"}).encode(), 400),
    (json.dumps({"input": "x", "dimensions": "384"}).encode(), 400),
    (json.dumps({"input": "x", "user": 1}).encode(), 400),
    (json.dumps({"input": "x", "extra": 1}).encode(), 400),
    (json.dumps({"input": [[101, 999999, 102]]}).encode(), 400),
    (json.dumps({"input": [[-1, 102]]}).encode(), 400),
    (json.dumps({"input": [[101, 1 << 70]]}).encode(), 400),
    (b'{"input": ["ok", "\\ud800"]}', 400),
    (json.dumps({"input": [[101] * 513]}).encode(), 400),
    (json.dumps({"input": [[101, 102]], "model": "embedding_py"}).encode(), 400),
    (json.dumps({"input": "x" * (1 << 20) + "y"}).encode(), 400),  # over the model's max_text_bytes
    (json.dumps({"input": "x", "model": "nope"}).encode(), 404),
    (json.dumps({"input": ["x" * 1000] * 9000}).encode(), 413),
]


@pytest.mark.parametrize("body, status", BAD_BODIES, ids=[f"{i}-{s}" for i, (_, s) in enumerate(BAD_BODIES)])
def test_bad_requests_get_openai_errors_never_500(server, client, body, status):
    response = requests.post(
        f"http://{server.http_url}/v1/embeddings",
        data=body,
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == "invalid_request_error"
    assert client.embeddings.create(model="embedding_onnx_text", input="still serving").data


def test_wrong_method_and_path_are_openai_errors(server):
    base = f"http://{server.http_url}/v1"
    assert requests.get(base + "/embeddings", timeout=10).status_code == 405
    response = requests.get(base + "/chat/completions", timeout=10)
    assert response.status_code == 404 and "error" in response.json()


# -- API keys (triton_gate.auth), on a gate in front of two toy models ------------------


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    repo = make_gate_repository(tmp_path_factory.mktemp("keyed"))
    options = ServerOptions(
        str(repo), gate_policy=GATE_POLICY, api_keys=["key-one", "key-two"], required_models=["echo"]
    )
    with LocalTritonServer(options) as server:  # wait_ready sends the first key to read model readiness
        yield server


@pytest.mark.server
def test_api_keys_guard_every_route_but_the_probes(keyed_server):
    base = f"http://{keyed_server.http_url}"
    text = {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["x"]}]}
    assert requests.get(base + "/v2/health/ready", timeout=10).status_code == 200
    assert requests.get(base + "/v2/health/live", timeout=10).status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "key-one"}):
        response = requests.post(base + "/v2/models/echo/infer", json=text, headers=headers, timeout=10)
        assert response.status_code == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
        assert requests.get(base + "/v2/models/echo/config", headers=headers, timeout=10).status_code == 401
        response = requests.get(base + "/v1/models", headers=headers, timeout=10)
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    for key in ("key-one", "key-two"):
        headers = {"Authorization": f"Bearer {key}"}
        assert requests.post(base + "/v2/models/echo/infer", json=text, headers=headers, timeout=10).status_code == 200
        assert requests.get(base + "/v1/models", headers=headers, timeout=10).status_code == 404  # no [openai]
    with httpclient.InferenceServerClient(keyed_server.http_url) as c:
        with pytest.raises(Exception, match="401|API key"):
            c.get_model_metadata("echo")
        assert c.get_model_metadata("echo", headers={"Authorization": "Bearer key-one"})["name"] == "echo"
    with grpcclient.InferenceServerClient(keyed_server.grpc_url) as c:
        assert c.is_server_ready() and c.is_server_live()
        with pytest.raises(Exception, match="API key"):
            c.get_model_metadata("echo")
        assert c.get_model_metadata("echo", headers={"authorization": "Bearer key-two"}).name == "echo"


@pytest.mark.server
def test_openai_route_with_an_api_key(keyed_server):
    """The openai client sends its api_key as the bearer token."""
    c = openai.OpenAI(base_url=f"http://{keyed_server.http_url}/v1", api_key="key-one", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        c.models.list()
    bad = openai.OpenAI(base_url=f"http://{keyed_server.http_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_cn_clip_text_embedding_matches_its_reference(server_pool):
    """cn_clip's text_embedding (text and token ids) vs Chinese-CLIP's own vectors and token ids
    (its fixtures, made by torch cn_clip)."""
    deployment = get_deployment("cn_clip")
    reference = json.loads((deployment.fixtures_path / "reference.json").read_text())
    with np.load(deployment.fixtures_path / "reference.npz") as data:
        vectors = data["text_embeddings"]
    keep = [i for i, t in enumerate(reference["texts"]) if t["text"].strip()]
    texts = [reference["texts"][i]["text"] for i in keep]
    ids = [[t for t in reference["texts"][i]["token_ids"] if t] for i in keep]
    server = server_pool.context(deployment).server
    c = openai.OpenAI(base_url=f"http://{server.http_url}/v1", api_key="unused", max_retries=0)
    response = c.embeddings.create(model="text_embedding", input=texts)
    assert response.model == "text_embedding"
    assert cosines([d.embedding for d in response.data], vectors[keep]).min() >= 0.9999
    assert response.usage.prompt_tokens == sum(map(len, ids))
    by_ids = c.embeddings.create(model="text_embedding", input=ids, encoding_format="float")
    assert cosines([d.embedding for d in by_ids.data], vectors[keep]).min() >= 0.9999
    with pytest.raises(openai.BadRequestError):
        c.embeddings.create(
            model="text_embedding", input=["   "]
        )  # no token at all: refused by the deployment's tokenize
    with pytest.raises(openai.BadRequestError, match="more than the model's 52"):
        c.embeddings.create(model="text_embedding", input=[[101] * 53])
