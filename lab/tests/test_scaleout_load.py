"""The scale-out load takes its tensors from the model's config (text in, vector out) or refuses the
model, naming its tensors; answers are checked on the output it names."""

from __future__ import annotations

import pytest

from harness.deployments import get_deployment
from harness_lab.manifest import lab_manifest
from harness_lab.scaleout.load import Load
from harness_lab.text_models import text_tensors


def test_tensors_of_the_scaleout_model_come_from_its_config():
    deployment = get_deployment("embedding_cpu")
    assert text_tensors(deployment.model_repository, lab_manifest(deployment).scaleout.model) == ("TEXT", "EMBEDDING")


def test_a_model_that_is_not_text_to_one_vector_is_refused_by_name():
    repository = get_deployment("embedding_cpu").model_repository
    with pytest.raises(ValueError, match=r"pipeline_orchestrator: .*\['RAW_FILE'\].*CHUNK_COUNT"):
        text_tensors(repository, "pipeline_orchestrator")


def test_answers_are_checked_on_the_named_output():
    load = Load("http://127.0.0.1:1", "m", 1, ("SENTENCE", "VECTOR"))
    assert load.check({"outputs": [{"name": "VECTOR", "data": [0.6, 0.8]}]}) is None
    assert load.check({"outputs": [{"name": "EMBEDDING", "data": [0.6, 0.8]}]}) == "no VECTOR in ['EMBEDDING']"
    assert (
        load.check({"outputs": [{"name": "VECTOR", "data": [0.8, -0.6]}]}) == "VECTOR differs from the first response"
    )
    assert b'"name": "SENTENCE"' in load.body
