"""client.py outside the repository: the folder copied elsewhere, its JPEG-in ensemble served from
the copy, the client run there (harness.testing.standalone) prints the reference's top classes."""

from __future__ import annotations

import json
import re

import pytest

from harness.testing.standalone import client_outside, deployment_of

PRINTED = re.compile(r"^\s+(\d+)\. (.*?)\s+([\d.]+)%\s+\(class (\d+)\)$")


@pytest.mark.server
def test_client_outside_the_repository_prints_the_reference_classes(tmp_path):
    deployment = deployment_of(__file__)
    fixtures = json.loads((deployment.fixtures_path / "expected.json").read_text())
    model, reference = next(iter(fixtures["models"].items()))  # the first model the fixtures describe
    image, expected = next(iter(reference["images"].items()))
    args = [f"fixtures/images/{image}", "--model", f"classify_{model}", "--top-k", "3"]
    [stdout] = client_outside(deployment, tmp_path, [f"classify_{model}"], args)
    rows = [m for m in map(PRINTED.match, stdout.splitlines()) if m]
    assert len(rows) == 3, stdout
    probability = dict(zip(expected["top5_ids"], expected["top5_probabilities"]))
    assert int(rows[0].group(4)) == expected["top5_ids"][0], stdout
    for row in rows:
        class_id = int(row.group(4))
        assert row.group(2) == expected["top5_labels"][expected["top5_ids"].index(class_id)], row.group(0)
        assert abs(float(row.group(3)) / 100 - probability[class_id]) <= 2e-3, row.group(0)
