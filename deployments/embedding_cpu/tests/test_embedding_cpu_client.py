"""client.py outside the repository: the folder copied elsewhere, its models served from the copy,
the client run there (harness.testing.standalone) prints the reference's vectors, for a text model
and for a token model (tokenized by the client)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from harness.testing.standalone import assert_vector_summary, client_outside, deployment_of

PRINTED = re.compile(r"dim=(\d+) norm=([\d.]+) \[(.*), \.\.\.\]$")
MODELS = ["embedding_onnx_text", "embedding_onnx"]


@pytest.mark.server
def test_client_outside_the_repository_prints_the_reference_vectors(tmp_path):
    deployment = deployment_of(__file__)
    fixture = json.loads((deployment.fixtures_path / "expected_embeddings.json").read_text())
    sentences, expected = fixture["sentences"][:2], np.array(fixture["embeddings"][:2])
    runs = [["sentences", *sentences, "--model", model] for model in MODELS]
    for model, stdout in zip(MODELS, client_outside(deployment, tmp_path, MODELS, *runs)):
        printed = [PRINTED.search(line) for line in stdout.splitlines()]
        assert len(printed) == len(sentences) and all(printed), stdout
        for match, vector in zip(printed, expected):
            assert_vector_summary(match.group(1), match.group(2), match.group(3).split(", "), vector, model)
