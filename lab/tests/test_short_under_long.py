"""short-under-long: short queries probed alone and behind passages on a real server, every answer checked."""

from __future__ import annotations

import pytest

from harness_lab.reliability.short_under_long import LONG_FACTOR, main, split_texts


def test_split_keeps_order_and_puts_only_texts_far_over_the_median_on_the_long_side():
    texts = ["a query"] * 6 + ["x" * 400, "another query", "y" * 500]
    short, long = split_texts(texts)
    assert long == ["x" * 400, "y" * 500]
    assert short == ["a query"] * 6 + ["another query"]
    assert all(len(t) > LONG_FACTOR * len("a query") for t in long)


@pytest.mark.server
@pytest.mark.timeout(300)
def test_a_short_run_probes_its_query_lane_idle_and_loaded_and_reports_both(tmp_path):
    import json

    report = tmp_path / "short_under_long.json"
    argv = ["--deployment", "embedding_cpu", "--model", "embedding_onnx_text", "--rounds", "1", "--query-lane", "1"]
    assert main([*argv, "--duration", "1.5", "--warmup", "0.5", "--long-concurrency", "2", "--json", str(report)]) == 0
    found = json.loads(report.read_text())
    assert found["query_lane"] == {"model": "embedding_onnx_text_queries", "instances": 1, "config_overrides": None}
    row = found["rows"][0]
    assert row["idle"]["n"] > 0 and row["loaded"]["n"] > 0, row
    assert row["long_per_s"] > 0, row
    assert found["long_texts"] > 0 and found["short_texts"] > found["long_texts"]
    assert found["p99_loaded_over_idle"] == round(found["loaded_p99_ms_median"] / found["idle_p99_ms_median"], 2)


@pytest.mark.server
@pytest.mark.timeout(300)
def test_a_v1_client_reaches_the_query_lane_by_its_openai_model_name():
    """The lane mapped to an OpenAI model name of its own (as docs/deployments/embedding_cpu.md
    shows): /v1/embeddings with that name runs the lane, and its vectors match the reference."""
    import numpy as np
    import requests

    from harness.deployments import get_deployment
    from harness.testing.servers import deployment_server, started, stop_server
    from harness_lab.reliability.short_under_long import add_query_lane
    from triton_gate.policy import OpenAIModel, OpenAIText

    checks = get_deployment("embedding_cpu").checks_module
    fixture = checks._fixture()
    texts = [t for t in fixture["sentences"] if t]
    expected = np.asarray([e for t, e in zip(fixture["sentences"], fixture["embeddings"]) if t], np.float32)
    server = deployment_server("embedding_cpu", ["embedding_onnx_text"])
    lane = add_query_lane(server, "embedding_onnx_text", 1)
    policy = server.options.gate_policy
    models = {**policy.openai.models, lane: OpenAIModel(text=OpenAIText(model=lane, tokens_output="TOKEN_COUNT"))}
    server.options.gate_policy = policy.model_copy(
        update={"openai": policy.openai.model_copy(update={"models": models})}
    )
    started(server)
    try:
        reply = requests.post(
            f"http://{server.http_url}/v1/embeddings", json={"model": lane, "input": texts}, timeout=60
        )
        assert reply.status_code == 200, reply.text
        stats = requests.get(f"http://{server.http_url}/v2/models/{lane}/stats", timeout=10).json()
    finally:
        stop_server(server)
    actual = np.asarray([item["embedding"] for item in reply.json()["data"]], np.float32)
    checks._assert_close(f"/v1 {lane}", texts, actual, expected, checks.MIN_COSINE["embedding_onnx_text"])
    assert stats["model_stats"][0]["inference_count"] == len(texts), stats
