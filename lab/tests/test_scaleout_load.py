"""The scale-out load takes its tensors from the model's config (text in, vector out) or refuses the
model, naming its tensors; answers are checked on the output it names."""

from __future__ import annotations

import numpy as np
import pytest

from harness.deployments import get_deployment
from harness_lab.manifest import lab_manifest
from harness_lab.text_models import sentence_workload, text_tensors


def test_tensors_of_the_scaleout_model_come_from_its_config():
    deployment = get_deployment("embedding_cpu")
    assert text_tensors(deployment.model_repository, lab_manifest(deployment).scaleout.model) == ("TEXT", "EMBEDDING")


def test_a_model_that_is_not_text_to_one_vector_is_refused_by_name():
    repository = get_deployment("embedding_cpu").model_repository
    with pytest.raises(ValueError, match=r"pipeline_orchestrator: .*\['RAW_FILE'\].*CHUNK_COUNT"):
        text_tensors(repository, "pipeline_orchestrator")


def test_answers_are_checked_on_the_named_output():
    workload = sentence_workload("m", ("SENTENCE", "VECTOR"), "a sentence")
    assert workload.check({"VECTOR": np.array([[0.6, 0.8]])}, None) is None
    assert workload.check({"EMBEDDING": np.array([[0.6, 0.8]])}, None) == "no VECTOR in ['EMBEDDING']"
    assert workload.check({"VECTOR": np.array([[0.8, -0.6]])}, None) == "VECTOR differs from the first response"
    assert workload.check({"VECTOR": np.array([[0.6, 0.8, 0.0]])}, None) == "VECTOR of shape (3,) or not finite"
    assert list(workload.inputs) == ["SENTENCE"] and workload.outputs == ["VECTOR"]
