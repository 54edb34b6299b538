"""client.py outside the repository: the folder copied elsewhere, its models served from the copy,
the client run there (harness.testing.standalone) prints the reference's text embeddings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from harness.deployments import get_deployment
from harness.testing.standalone import run_client, served_copy

FOLDER = Path(__file__).resolve().parents[1]
PRINTED = re.compile(r"^(.*): dim (\d+), \|v\| = ([\d.]+), head \[(.*)\]$")


@pytest.mark.server
def test_client_outside_the_repository_prints_the_reference_embeddings(tmp_path):
    deployment = get_deployment(FOLDER.name, FOLDER.parent)
    reference = json.loads((deployment.fixtures_path / "reference.json").read_text())
    texts = [entry["text"] for entry in reference["texts"][:2]]
    with np.load(deployment.fixtures_path / "reference.npz") as arrays:
        expected = arrays["text_embeddings"][: len(texts)]
    with served_copy(deployment, tmp_path, ["text_embedding"]) as (copy, server):
        done = run_client(copy, "text", *texts, "--url", server.http_url)
    printed = [PRINTED.match(line) for line in done.stdout.splitlines()]
    assert [m.group(1) for m in printed if m] == texts, done.stdout
    for match, vector in zip(printed, expected):
        assert int(match.group(2)) == len(vector), match.group(0)
        assert abs(float(match.group(3)) - np.linalg.norm(vector)) <= 1e-3, match.group(0)
        head = np.array(match.group(4).split(), dtype=float)
        np.testing.assert_allclose(head, vector[: len(head)], atol=1e-3)
