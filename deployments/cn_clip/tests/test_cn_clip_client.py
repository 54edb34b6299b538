"""client.py outside the repository: the folder copied elsewhere, its models served from the copy,
the client run there (harness.testing.standalone) prints the reference's text embeddings."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from harness.testing.standalone import assert_vector_summary, client_outside, deployment_of

PRINTED = re.compile(r"^(.*): dim (\d+), \|v\| = ([\d.]+), head \[(.*)\]$")


@pytest.mark.server
def test_client_outside_the_repository_prints_the_reference_embeddings(tmp_path):
    deployment = deployment_of(__file__)
    reference = json.loads((deployment.fixtures_path / "reference.json").read_text())
    texts = [entry["text"] for entry in reference["texts"][:2]]
    with np.load(deployment.fixtures_path / "reference.npz") as arrays:
        expected = arrays["text_embeddings"][: len(texts)]
    [stdout] = client_outside(deployment, tmp_path, ["text_embedding"], ["text", *texts])
    printed = [PRINTED.match(line) for line in stdout.splitlines()]
    assert [m.group(1) for m in printed if m] == texts, stdout
    for match, vector in zip(printed, expected):
        assert_vector_summary(match.group(2), match.group(3), match.group(4).split(), vector, match.group(0))
