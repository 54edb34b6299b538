"""embedding_cpu checks (correctness against sentence-transformers, bad input) and workloads."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
from embedding_cpu_processing.text_embedding import EmbeddingModelInfo, default_model_dir, tokenize
from tritonclient.utils import InferenceServerException

from harness import provenance
from harness.deployments import load_module
from harness.fixtures import read_fixture
from harness.measuring.engines import cpu_session
from harness.measuring.loadgen import Workload
from harness.repository import read_config

HERE = Path(__file__).resolve().parent
DOCUMENTS = HERE / "fixtures" / "documents"
client = load_module(HERE / "client.py", "embedding_cpu_client")
export = load_module(HERE / "export.py", "embedding_cpu_export")
REPOSITORY = HERE / "model_repository"
SHORT_SENTENCES = [
    "Triton batches requests on the server.",
    "A quick sentence about the weather today.",
    "How many instances should a CPU model run?",
    "今天的会议改到下午三点。",
    "Embeddings map text to vectors.",
    "The cat sat on the mat.",
    "Throughput grows with the batch size.",
    "Short text.",
]
MIN_COSINE = {
    "embedding_py": 0.9999,
    "embedding_onnx": 0.999,
    "embedding_onnx_text": 0.999,
    "embedding_onnx_text_ensemble": 0.999,
    "embedding_onnx_int8": 0.99,
}


def _assert_served_weights(repository, fixture: dict) -> None:
    """Every model of the fixture that this deployment serves serves its weights: the ONNX files'
    stamps, and for a model with no ONNX file the installed files sentence-transformers loads
    (harness.provenance)."""
    installed = export.weights_identity(default_model_dir())
    for model in fixture[provenance.FIXTURES_KEY]["models"]:
        if not (REPOSITORY / model).is_dir():
            continue  # a copy that kept only some models
        served = None if provenance.served_onnx_files(REPOSITORY, model) else installed
        provenance.assert_served_weights(repository, model, provenance.fixtures_identity(fixture, model), served)


@cache
def _fixture(name: str = "expected_embeddings.json") -> dict:
    fixture = read_fixture(HERE / "fixtures" / name)
    _assert_served_weights(REPOSITORY, fixture)
    return fixture


def token_limits(model_dir: Path | None = None) -> tuple[int, int]:
    """The transformer's vocabulary size and its positions (the longest token-id row it takes), from
    the model folder's own config.json."""
    info = EmbeddingModelInfo.read(model_dir)
    modules = json.loads((info.model_dir / "modules.json").read_text())
    transformer = next(m["path"] for m in modules if m["type"].endswith("Transformer"))
    config = json.loads((info.model_dir / transformer / "config.json").read_text())
    return int(config["vocab_size"]), int(config["max_position_embeddings"])


def manifest_values(deployment) -> dict[str, object]:
    """deployment.toml's values that follow from the model (``python -m harness refresh`` writes
    them): the pooling, normalisation and vocabulary size of every /v1 token-id path and the gate's
    bound on token-id rows."""
    info = EmbeddingModelInfo.read()
    vocab_size, positions = token_limits()
    routes = deployment.manifest.openai.models if deployment.manifest.openai else {}
    values: dict[str, object] = {}
    for name in (name for name, spec in routes.items() if spec.tokens):
        values |= {
            f"openai.models.{name}.tokens.pooling": info.pooling,
            f"openai.models.{name}.tokens.normalize": info.normalize,
            f"openai.models.{name}.tokens.vocab_size": vocab_size,
        }
    for model in client.TOKEN_MODELS:
        values |= {f"gate.max_dims.{model}.{name}": [positions] for name in ("input_ids", "attention_mask")}
        rows = read_config(deployment.model_repository / model / "config.pbtxt").max_batch_size
        values[f"gate.max_bytes_in_flight.{model}"] = (
            largest_json_ids(rows, positions, vocab_size) + SHORT_REQUESTS_ROOM
        )
    return values


#: What the gate's bytes-in-flight budget of a token-id model holds beside its largest request.
SHORT_REQUESTS_ROOM = 32 * 1024


def largest_json_ids(rows: int, positions: int, vocab_size: int) -> int:
    """Bytes of the largest token-id request as JSON (tritonclient's): every id as wide as the
    vocabulary's last, a comma after each, and ``1,`` for each mask value."""
    return rows * positions * (len(str(vocab_size - 1)) + 1 + 2)


def _cosines(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    actual = actual / np.linalg.norm(actual, axis=-1, keepdims=True)
    expected = expected / np.linalg.norm(expected, axis=-1, keepdims=True)
    return (actual * expected).sum(axis=-1)


def _assert_close(name: str, labels: list[str], actual: np.ndarray, expected: np.ndarray, minimum: float):
    assert_reference_not_degenerate(name, expected)
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape}, expected {expected.shape}"
    cosines = np.atleast_1d(_cosines(actual, expected))
    worst = int(np.argmin(cosines))
    assert cosines.min() >= minimum, f"{name}: cosine {cosines[worst]:.6f} < {minimum} for {labels[worst][:60]!r}"


def assert_reference_not_degenerate(name: str, expected: np.ndarray) -> None:
    """Reference vectors not finite, all 0, or all the same (at their own scale) would let any answer
    pass a cosine bound (or none): fail, saying why and what to do, before comparing."""
    rows = np.atleast_2d(expected)
    remedy = f"check the model folder's weights, then regenerate the fixtures: python -m harness refresh {HERE.name}"
    assert np.isfinite(rows).all(), f"{name}: the reference vectors hold NaN or inf (broken weights); {remedy}"
    scale = float(np.abs(rows).max())
    assert scale > 0, f"{name}: the reference vectors are all 0 (the model's output ignores its input); {remedy}"
    spread = float((rows.max(axis=0) - rows.min(axis=0)).max())
    assert len(rows) == 1 or spread > 1e-4 * scale, (
        f"{name}: the reference gives {len(rows)} inputs one and the same vector (spread {spread:.2e} at scale "
        f"{scale:.2e}): the model's output ignores its input; {remedy}"
    )


def _url(ctx, protocol: str) -> str:
    return ctx.server.http_url if protocol == "http" else ctx.server.grpc_url


def _check_sentence_model(ctx, model: str, skip_empty: bool = False) -> None:
    fixture = _fixture()
    keep = [i for i, s in enumerate(fixture["sentences"]) if s or not skip_empty]
    sentences = [fixture["sentences"][i] for i in keep]
    expected = np.asarray(fixture["embeddings"], np.float32)[keep]
    for protocol in ("http", "grpc"):
        with client.connect(_url(ctx, protocol), protocol) as c:
            actual = client.embed_texts(c, sentences, model)
        _assert_close(f"{model}/{protocol}", sentences, actual, expected, MIN_COSINE[model])


def check_served_weights_match_fixtures(ctx):
    """The ONNX stamps and the installed weights are those both fixture files were made with."""
    for name in ("expected_embeddings.json", "expected_documents.json"):
        _assert_served_weights(ctx, read_fixture(ctx.deployment.fixtures_path / name))


def check_embedding_py_matches_reference(ctx):
    _check_sentence_model(ctx, "embedding_py")


def check_embedding_onnx_client_tokenized_matches_reference(ctx):
    _check_sentence_model(ctx, "embedding_onnx")


def check_embedding_onnx_text_matches_reference(ctx):
    _check_sentence_model(ctx, "embedding_onnx_text")


def check_embedding_onnx_text_token_count_matches_reference(ctx):
    """TOKEN_COUNT (asked for beside EMBEDDING, what /v1/embeddings' usage sums) is each text's
    tokens after truncation by transformers' tokenizer of the model folder; a request that asks
    for EMBEDDING only gets no TOKEN_COUNT."""
    from transformers import AutoTokenizer

    info = EmbeddingModelInfo.read()
    long_text = " ".join(SHORT_SENTENCES * 20)  # past max_seq_length: truncated
    texts = [s for s in _fixture()["sentences"] if s] + [long_text]
    reference = AutoTokenizer.from_pretrained(str(info.model_dir))
    want = [sum(m) for m in reference(texts, truncation=True, max_length=info.max_seq_length)["attention_mask"]]
    assert max(want) == info.max_seq_length, "the long text should reach the truncation length"
    for protocol in ("http", "grpc"):
        with client.connect(_url(ctx, protocol), protocol) as c:
            module = client._module(c)
            inputs = [client.text_input(module, texts)]
            outputs = [module.InferRequestedOutput(n) for n in ("EMBEDDING", "TOKEN_COUNT")]
            result = c.infer("embedding_onnx_text", inputs, outputs=outputs)
            counts = result.as_numpy("TOKEN_COUNT")
            assert counts is not None and counts.shape == (len(texts), 1), f"{protocol}: TOKEN_COUNT {counts}"
            assert counts[:, 0].tolist() == want, f"{protocol}: TOKEN_COUNT {counts[:, 0].tolist()}, want {want}"
            only = c.infer("embedding_onnx_text", inputs, outputs=[module.InferRequestedOutput("EMBEDDING")])
            assert only.as_numpy("TOKEN_COUNT") is None and only.as_numpy("EMBEDDING").shape[0] == len(texts)


def check_openai_route_from_text_and_token_ids_matches_reference(ctx):
    """POST /v1/embeddings (the gate) for every [openai] model: text in, and token ids in where the
    manifest maps them, pooled as the model folder says (the manifest's pooling and normalize must
    be the folder's: ``python -m harness refresh`` writes them, manifest_values)."""
    info = EmbeddingModelInfo.read()
    fixture = _fixture()
    sentences = [s for s in fixture["sentences"] if s]
    expected = np.asarray([e for s, e in zip(fixture["sentences"], fixture["embeddings"]) if s], np.float32)
    ids = [row[row > 0].tolist() for row in tokenize(sentences)["input_ids"]]  # padding id 0 dropped
    for name, spec in ctx.deployment.manifest.openai.models.items():
        if spec.tokens is not None:
            want = (info.pooling, info.normalize)
            assert (spec.tokens.pooling, spec.tokens.normalize) == want, (
                f"deployment.toml [openai.models.{name}] tokens: pooling = {spec.tokens.pooling!r}, normalize = "
                f"{str(spec.tokens.normalize).lower()}; {info.model_dir} pools {want[0]!r}, normalize {want[1]} "
                f"(`python -m harness refresh {ctx.deployment.name}` writes the folder's)"
            )
        inputs = {"text": sentences} if spec.text or spec.tokenizer else {}
        if spec.tokens is not None:
            inputs["token ids"] = ids
        for label, given in inputs.items():
            request = urllib.request.Request(
                f"http://{ctx.server.http_url}/v1/embeddings",
                data=json.dumps({"model": name, "input": given}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=120) as response:
                vectors = np.asarray([d["embedding"] for d in json.loads(response.read())["data"]], np.float32)
            bound = min(MIN_COSINE.get(name, 0.999), 0.999)
            _assert_close(f"/v1 {name} from {label}", sentences, vectors, expected, bound)


def check_embedding_onnx_text_ensemble_matches_reference(ctx):
    _check_sentence_model(ctx, "embedding_onnx_text_ensemble")


def _embed_with(run_hidden, texts: list[str]) -> np.ndarray:
    """Client tokenization + ``run_hidden`` ({input_ids, attention_mask} -> last_hidden_state) in
    this process + pooling: the same batch the served model gets from ``client.embed_texts``."""
    tokens = tokenize(texts)
    hidden = run_hidden({k: tokens[k] for k in ("input_ids", "attention_mask")})
    return EmbeddingModelInfo.read().pool(hidden, tokens["attention_mask"])


def _in_process(precision: str, texts: list[str]) -> np.ndarray:
    """The exported ONNX file (FP32 or onnxruntime's INT8) on onnxruntime, see ``_embed_with``."""
    return _embed_with(lambda feeds: _session(precision, 0).run(["last_hidden_state"], feeds)[0], texts)


@lru_cache(maxsize=4)
def _openvino_model(filename: str, precision: str | None):
    import openvino as ov

    path = HERE / "model_repository" / "embedding_onnx_int8" / "1" / filename
    return ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": precision} if precision else {})


def _served_int8_in_process(ctx):
    """The INT8 file the server serves, run in this process: onnxruntime's dynamic INT8
    ``model.onnx`` by default; on a config with ``backend: "openvino"`` (the NNCF variant), its
    ``default_model_filename`` on OpenVINO at the config's precision (else the engine's default)."""
    with ctx.http_client() as c:
        config = c.get_model_config("embedding_onnx_int8")
    if config.get("backend") != "openvino":
        return lambda texts: _in_process("int8", texts)
    parameters = {k: v.get("string_value") for k, v in config.get("parameters", {}).items()}
    compiled = _openvino_model(
        config.get("default_model_filename") or "model.xml", parameters.get("INFERENCE_PRECISION_HINT")
    )
    return lambda texts: _embed_with(lambda feeds: compiled(feeds)[0], texts)


def check_embedding_onnx_int8_serves_its_model_exactly(ctx):
    """Serving adds no error: the served INT8 vectors equal the same INT8 file run in this process
    on the same batch (dynamic quantization makes a vector depend on its batch-mates, so the
    batch is the request: one request at a time, alone and together)."""
    sentences = [s for s in _fixture()["sentences"] if s]
    in_process = _served_int8_in_process(ctx)
    with client.connect(ctx.server.http_url, "http") as c:
        for batch in [sentences] + [[s] for s in sentences]:
            served = client.embed_texts(c, batch, "embedding_onnx_int8")
            _assert_close("embedding_onnx_int8 served vs in-process", batch, served, in_process(batch), 0.99999)


def check_embedding_onnx_int8_within_tolerance(ctx):
    """INT8 vs the FP32 reference, alone and in a batch. The bound (0.99; 0.97 for the empty
    string, ``[CLS][SEP]`` only) is set from measurements on VNNI and plain-AVX2 kernels (README)."""
    _check_sentence_model(ctx, "embedding_onnx_int8", skip_empty=True)
    fixture = _fixture()
    expected = dict(zip(fixture["sentences"], np.asarray(fixture["embeddings"], np.float32)))
    with client.connect(ctx.server.http_url, "http") as c:
        for sentence in fixture["sentences"]:
            alone = client.embed_texts(c, [sentence], "embedding_onnx_int8")
            _assert_close(
                "embedding_onnx_int8 alone",
                [sentence],
                alone,
                expected[sentence][None],
                MIN_COSINE["embedding_onnx_int8"] if sentence else 0.97,
            )


def check_asyncio_clients_send_text_over_http_and_grpc(ctx):
    fixture = _fixture()
    expected = np.asarray(fixture["embeddings"], np.float32)
    for protocol in ("http", "grpc"):
        for model in ("embedding_py", "embedding_onnx_text"):
            actual = asyncio.run(client.embed_texts_async(_url(ctx, protocol), protocol, fixture["sentences"], model))
            _assert_close(f"{model}/{protocol}.aio", fixture["sentences"], actual, expected, MIN_COSINE[model])


def check_one_sentence_per_request_equals_batch(ctx):
    fixture = _fixture()
    expected = np.asarray(fixture["embeddings"], np.float32)
    with client.connect(ctx.server.http_url, "http") as c:
        for model in ("embedding_py", "embedding_onnx_text"):
            singles = np.concatenate([client.embed_texts(c, [s], model) for s in fixture["sentences"]])
            _assert_close(f"{model} one per request", fixture["sentences"], singles, expected, MIN_COSINE[model])


def check_concurrent_texts_of_different_lengths_share_executions(ctx):
    """Requests of very different token lengths sent together are batched by the server (fewer
    executions than requests; the model pads each length bucket, not the whole batch, to its
    longest text) and each still gets its own reference vector."""
    fixture = _fixture()
    expected = dict(zip(fixture["sentences"], np.asarray(fixture["embeddings"], np.float32)))
    texts = [s for s in fixture["sentences"] if s] * 3
    for model in ("embedding_onnx_text", "embedding_onnx_text_ensemble"):
        with client.connect(ctx.server.http_url, "http") as c:
            before = c.get_inference_statistics(model)["model_stats"][0]

        def send(text, model=model):
            with client.connect(ctx.server.http_url, "http") as c:
                return client.embed_texts(c, [text], model)

        with ThreadPoolExecutor(len(texts)) as pool:
            vectors = np.concatenate(list(pool.map(send, texts)))
        deadline = time.monotonic() + 10  # statistics are updated after the responses are sent
        with client.connect(ctx.server.http_url, "http") as c:
            while True:
                after = c.get_inference_statistics(model)["model_stats"][0]
                if after["inference_count"] - before["inference_count"] >= len(texts) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        _assert_close(
            f"{model} concurrent mixed lengths",
            texts,
            vectors,
            np.stack([expected[t] for t in texts]),
            MIN_COSINE[model],
        )
        requests = after["inference_count"] - before["inference_count"]
        executions = after["execution_count"] - before["execution_count"]
        assert requests == len(texts), f"{model}: {requests} inferences counted for {len(texts)} requests"
        if model == "embedding_onnx_text":  # an ensemble counts one execution per request; its steps batch
            assert executions < requests, f"{model}: {requests} concurrent requests ran as {executions} executions"


def _document_cases():
    fixture = _fixture("expected_documents.json")
    for case in fixture["cases"]:
        yield case, (DOCUMENTS / case["file"]).read_bytes()


def check_pipelines_match_reference_and_each_other(ctx):
    with client.connect(ctx.server.grpc_url, "grpc") as c:
        for case, data in _document_cases():
            label = f"{case['file']} @ {case['chunk_tokens']} tokens"
            expected = np.asarray(case["final_embedding"], np.float32)
            finals = {}
            for model in client.FILE_MODELS:
                out = client.embed_file(c, data, model, chunk_tokens=case["chunk_tokens"])
                assert int(out["CHUNK_COUNT"][0, 0]) == len(case["chunks"]), (
                    f"{model} {label}: {out['CHUNK_COUNT'][0, 0]} chunks, reference chunker made {len(case['chunks'])}"
                )
                finals[model] = out["FINAL_EMBEDDING"][0]
                _assert_close(f"{model} {label}", [label], finals[model], expected, 0.999)
            _assert_close(
                f"pipelines agree on {label}",
                [label],
                finals["full_pipeline_py"],
                finals["pipeline_orchestrator"],
                0.999,
            )


def check_pipelines_return_chunk_vectors_without_aggregation(ctx):
    case, data = next(
        c for c in _document_cases() if c[0]["file"] == "serving_notes.txt" and c[0]["chunk_size"] == "small"
    )
    expected = np.asarray(case["chunk_embeddings"], np.float32)
    with client.connect(ctx.server.http_url, "http") as c:
        for model in client.FILE_MODELS:
            out = client.embed_file(c, data, model, chunk_tokens=case["chunk_tokens"], aggregation="none")
            _assert_close(f"{model} chunk vectors", case["chunks"], out["CHUNK_EMBEDDINGS"][0], expected, 0.999)


def check_pipeline_contract_with_plain_http_json(ctx):
    """A client that knows only the SPEC contract: HTTP/JSON, RAW_FILE as a BYTES string."""
    case, data = next(
        c for c in _document_cases() if c[0]["file"] == "serving_notes.txt" and c[0]["chunk_size"] == "default"
    )
    body = json.dumps(
        {
            "inputs": [{"name": "RAW_FILE", "shape": [1, 1], "datatype": "BYTES", "data": [data.decode("utf-8")]}],
            "outputs": [{"name": "FINAL_EMBEDDING"}],
        }
    ).encode()
    for model in client.FILE_MODELS:
        request = urllib.request.Request(
            f"http://{ctx.server.http_url}/v2/models/{model}/infer",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        output = next(o for o in answer["outputs"] if o["name"] == "FINAL_EMBEDDING")
        assert output["datatype"] == "FP32" and output["shape"] == [1, EmbeddingModelInfo.read().dimension], output[
            "shape"
        ]
        _assert_close(
            f"{model} via JSON",
            ["serving_notes.txt"],
            np.asarray(output["data"], np.float32),
            np.asarray(case["final_embedding"], np.float32),
            0.999,
        )


def check_bad_sentence_input_is_rejected_clearly(ctx):
    for model in ("embedding_py", "embedding_onnx_text", "embedding_onnx_text_ensemble"):
        ctx.expect_error(model, {"TEXT": np.ones((1, 1), np.float32)}, "data-type", "datatype", "expected")
        ctx.expect_error(model, {"TEXT": np.array([b"a", b"b"], dtype=object)}, "shape")
        message = ctx.expect_error(model, {"TEXT": np.array([[b"\xff\xfe bad"]], dtype=object)}, "UTF-8")
        assert "internal error" not in message, message
        ctx.expect_error(
            model, {"WRONG": np.array([[b"x"]], dtype=object)}, "unexpected inference input", "expected", "TEXT"
        )
        ctx.expect_error(model, {"TEXT": np.array([[b"x" * ((1 << 20) + 1)]], dtype=object)}, "limit")
    for model in ("embedding_onnx", "embedding_onnx_int8"):
        ctx.expect_error(
            model,
            {"input_ids": np.ones((1, 4), np.float32), "attention_mask": np.ones((1, 4), np.int64)},
            "data-type",
            "datatype",
        )
        ctx.expect_error(model, {"input_ids": np.ones((1, 4), np.int64)}, "attention_mask", "expected")
    ctx.assert_healthy()


def _corrupt_pdf() -> bytes:
    data = (DOCUMENTS / "two_pages.pdf").read_bytes()
    return data[: len(data) // 3]


def check_bad_files_get_clear_errors_in_bounded_time(ctx):
    cases = [
        (b"", {}, ("empty",)),
        (bytes(range(256)) * 64, {}, ("UTF-8", "binary")),
        ("café au lait".encode("latin-1"), {}, ("UTF-8",)),
        (_corrupt_pdf(), {}, ("PDF",)),
        ((DOCUMENTS / "encrypted.pdf").read_bytes(), {}, ("encrypted",)),
        (b"a" * (50 * 1024 * 1024), {}, ("limit",)),
        ("".join(f"paragraph {i}.\n\n" for i in range(100_000)).encode(), {"chunk_tokens": 8}, ("limit",)),
        (b"fine text", {"chunk_tokens": 1}, ("chunk_tokens",)),
        (b"fine text", {"aggregation": "max"}, ("aggregation",)),
        (b"fine text", {"colour": "blue"}, ("unknown request parameters",)),
    ]
    for model in client.FILE_MODELS:
        for data, parameters, fragments in cases:
            ctx.expect_error(
                model,
                {"RAW_FILE": np.array([[data]], dtype=object)},
                *fragments,
                parameters=parameters or None,
                within_s=30,
            )
    ctx.assert_healthy()


def check_bad_request_does_not_break_its_batch(ctx):
    notes = (DOCUMENTS / "serving_notes.txt").read_bytes()
    text_models = ("embedding_py", "embedding_onnx_text", "embedding_onnx_text_ensemble")
    jobs = [("TEXT", m, [s.encode()], True) for m in text_models for s in SHORT_SENTENCES]
    jobs += [("TEXT", m, [b"\xc3\x28 invalid"], False) for m in text_models] * 3
    jobs += [("RAW_FILE", m, [notes], True) for m in client.FILE_MODELS] * 3
    jobs += [("RAW_FILE", m, [b"\x00\x01\x02 garbage"], False) for m in client.FILE_MODELS] * 2

    def send(job):
        name, model, items, good = job
        try:
            return job, ctx.infer(model, {name: np.array([items], dtype=object)})
        except InferenceServerException as exc:
            return job, exc

    with ThreadPoolExecutor(max_workers=16) as workers:
        outcomes = list(workers.map(send, jobs))
    for (name, model, items, good), outcome in outcomes:
        if good:
            assert isinstance(outcome, dict), f"{model}: a good request in a mixed batch failed: {outcome}"
        else:
            assert isinstance(outcome, InferenceServerException), f"{model} accepted {items[0][:20]!r}"
    ctx.assert_healthy()


def _text_rows(batch: int) -> np.ndarray:
    return np.array([[SHORT_SENTENCES[i % len(SHORT_SENTENCES)].encode()] for i in range(batch)], dtype=object)


@lru_cache(maxsize=4)
def _session(precision: str, copy: int):
    name = "embedding_onnx" if precision == "fp32" else "embedding_onnx_int8"
    return cpu_session(HERE / "model_repository" / name / "1" / "model.onnx")


def _ceiling(precision: str, instances: int = 2):
    """Tokenize + ONNX + pool in this process, laid out like the served model: ``instances``
    sessions of one thread each (embedding_onnx's instance_group), running in parallel,
    the ``n`` items split between them."""
    from concurrent.futures import ThreadPoolExecutor

    info = EmbeddingModelInfo.read()
    workers = ThreadPoolExecutor(max_workers=instances)

    def for_batch(n: int):
        shares = [n // instances + (1 if i < n % instances else 0) for i in range(instances)]
        jobs = [
            (_session(precision, i), [SHORT_SENTENCES[j % len(SHORT_SENTENCES)] for j in range(k)])
            for i, k in enumerate(shares)
            if k
        ]

        def one(job):
            session, texts = job
            tokens = tokenize(texts)
            info.pool(session.run(["last_hidden_state"], tokens)[0], tokens["attention_mask"])

        return lambda: list(workers.map(one, jobs))

    return for_batch


def workload_embedding_py_sentence(ctx) -> Workload:
    return Workload(
        model="embedding_py",
        inputs={"TEXT": _text_rows(1)},
        outputs=["EMBEDDING"],
        variant="embedding_py (sentence-transformers, python backend)",
    )


def workload_embedding_onnx_text_sentence(ctx) -> Workload:
    return Workload(
        model="embedding_onnx_text",
        inputs={"TEXT": _text_rows(1)},
        outputs=["EMBEDDING"],
        variant="embedding_onnx_text fp32 (server tokenizes + pools, BLS)",
        ceiling=_ceiling("fp32"),
    )


def workload_embedding_onnx_text_ensemble_sentence(ctx) -> Workload:
    return Workload(
        model="embedding_onnx_text_ensemble",
        inputs={"TEXT": _text_rows(1)},
        outputs=["EMBEDDING"],
        variant="embedding_onnx_text_ensemble fp32 (tokenize -> onnx -> pool ensemble)",
        ceiling=_ceiling("fp32"),
    )


#: The mixed-length workload: one request in four is a passage of 200-500 tokens (cut from the
#: fixture notes, served truncated to the model's 256), the others short queries; seeded.
MIXED_PASSAGE_SHARE = 0.25


@cache
def mixed_texts(count: int = 1024, seed: int = 0) -> list[str]:
    """``count`` texts in a seeded order: short queries and, at ``MIXED_PASSAGE_SHARE``, passages
    of 200-500 tokens each (cut at a token boundary of the notes read as a ring)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    notes = " ".join((DOCUMENTS / "serving_notes.txt").read_text().split())
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):
        if rng.random() >= MIXED_PASSAGE_SHARE:
            texts.append(SHORT_SENTENCES[int(rng.integers(len(SHORT_SENTENCES)))])
            continue
        start = int(rng.integers(len(notes)))
        ring = (notes[start:] + " " + notes[:start] + " ") * 2
        offsets = tokenizer.encode(ring, add_special_tokens=False).offsets
        texts.append(ring[: offsets[int(rng.integers(200, 501)) - 1][1]])
    return texts


def workload_embedding_onnx_text_mixed(ctx) -> Workload:
    """One text a request, short queries and 200-500-token passages mixed (``mixed_texts``)."""
    texts = mixed_texts()
    counter = iter(range(1 << 62))

    def prepare():
        return {"TEXT": np.array([[texts[next(counter) % len(texts)].encode()]], dtype=object)}

    return Workload(
        model="embedding_onnx_text",
        prepare=prepare,
        outputs=["EMBEDDING"],
        variant=f"embedding_onnx_text fp32, mixed lengths ({MIXED_PASSAGE_SHARE:.0%} passages of 200-500 tokens)",
    )


def _client_tokenized(model: str, variant: str, precision: str) -> Workload:
    """Client tokenizes every request and pools the result: its time is in the latency."""
    info = EmbeddingModelInfo.read()
    counter = iter(range(1 << 62))

    def prepare():
        return tokenize([SHORT_SENTENCES[next(counter) % len(SHORT_SENTENCES)]])

    def finish(outputs):
        hidden = outputs["last_hidden_state"]
        info.pool(hidden, np.ones(hidden.shape[:2], np.int64))

    return Workload(
        model=model,
        prepare=prepare,
        finish=finish,
        outputs=["last_hidden_state"],
        variant=variant,
        ceiling=_ceiling(precision),
    )


def workload_embedding_onnx_sentence(ctx) -> Workload:
    return _client_tokenized("embedding_onnx", "embedding_onnx fp32 (client tokenizes + pools)", "fp32")


def workload_embedding_onnx_int8_sentence(ctx) -> Workload:
    return _client_tokenized("embedding_onnx_int8", "embedding_onnx_int8 (client tokenizes + pools)", "int8")


def _document_workload(model: str) -> Workload:
    data = (DOCUMENTS / "serving_notes.txt").read_bytes()
    return Workload(
        model=model,
        inputs={"RAW_FILE": np.array([[data]], dtype=object)},
        outputs=["FINAL_EMBEDDING"],
        variant=f"{model} (serving_notes.txt, {len(data)} bytes, 2 chunks)",
    )


def workload_full_pipeline_py_document(ctx) -> Workload:
    return _document_workload("full_pipeline_py")


def workload_pipeline_orchestrator_document(ctx) -> Workload:
    return _document_workload("pipeline_orchestrator")
