"""client.py outside the repository: the folder copied elsewhere, its models served from the copy,
the client run there (harness.testing.standalone) prints the reference's vectors, for a text model
and for a token model (tokenized by the client)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from harness.deployments import get_deployment
from harness.testing.standalone import run_client, served_copy

FOLDER = Path(__file__).resolve().parents[1]
PRINTED = re.compile(r"dim=(\d+) norm=([\d.]+) \[(.*), \.\.\.\]$")


@pytest.mark.server
def test_client_outside_the_repository_prints_the_reference_vectors(tmp_path):
    deployment = get_deployment(FOLDER.name, FOLDER.parent)
    fixture = json.loads((deployment.fixtures_path / "expected_embeddings.json").read_text())
    sentences, expected = fixture["sentences"][:2], np.array(fixture["embeddings"][:2])
    with served_copy(deployment, tmp_path, ["embedding_onnx", "embedding_onnx_text"]) as (copy, server):
        for model in ("embedding_onnx_text", "embedding_onnx"):
            done = run_client(copy, "sentences", *sentences, "--model", model, "--url", server.http_url)
            printed = [PRINTED.search(line) for line in done.stdout.splitlines()]
            assert len(printed) == len(sentences) and all(printed), done.stdout
            for match, vector in zip(printed, expected):
                assert int(match.group(1)) == len(vector), (model, match.group(0))
                assert abs(float(match.group(2)) - np.linalg.norm(vector)) <= 1e-3, (model, match.group(0))
                head = np.array([float(x) for x in match.group(3).split(", ")])
                np.testing.assert_allclose(head, vector[: len(head)], atol=1e-3, err_msg=model)
