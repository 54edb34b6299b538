"""client.py outside the repository: the folder copied elsewhere, the ensemble served from the copy,
the client run there (harness.testing.standalone) prints the reference's detections (the checks'
match rule), at the reference's thresholds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.deployments import get_deployment
from harness.testing.standalone import run_client, served_copy

FOLDER = Path(__file__).resolve().parents[1]


@pytest.mark.server
def test_client_outside_the_repository_prints_the_reference_detections(tmp_path):
    deployment = get_deployment(FOLDER.name, FOLDER.parent)
    checks = deployment.checks_module
    fixtures = json.loads((deployment.fixtures_path / "expected_detections.json").read_text())
    image = max(fixtures["images"], key=lambda name: len(fixtures["images"][name]["detections"]))
    thresholds = ["--conf", str(fixtures["conf"]), "--iou", str(fixtures["iou"]), "--max-det", str(fixtures["max_det"])]
    with served_copy(deployment, tmp_path, [checks.ENSEMBLE]) as (copy, server):
        done = run_client(copy, f"fixtures/images/{image}", "--json", *thresholds, "--url", server.http_url)
    printed = json.loads(done.stdout.splitlines()[0])
    found = printed["detections"]
    assert tuple(printed["image_size"]) == tuple(fixtures["images"][image]["size"]), printed["image_size"]
    got = checks.client.Detections(
        np.array([d["box"] for d in found], np.float32).reshape(-1, 4),
        np.array([d["score"] for d in found], np.float32),
        np.array([d["class_id"] for d in found]),
        [d["class_name"] for d in found],
        tuple(printed["image_size"]),
    )
    checks.match_detections(got, fixtures["images"][image]["detections"], f"client.py outside the repository, {image}")
