"""harness.repository: configs parsed as protobufs, dependencies, derived repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import PROJECT_ROOT, repository
from harness.serving.packenv import check_repository, local_python, packed_repository
from harness.testing.toy_models import write_model

ENSEMBLE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
# backend: "python"   <- a comment, not a field
input [ { name: "RAW" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "step_a" model_version: -1 input_map { key: "IN" value: "RAW" } output_map { key: "MID" value: "m" } },
  { model_name: "step_b" model_version: -1 input_map { key: "IN" value: "m" } output_map { key: "OUT" value: "OUT" } }
] }
"""
PYTHON = """
name: "{name}"
backend: "python"
parameters {{ key: "note" value: {{ string_value: "a # in a string, and step_c" }} }}
{extra}
"""


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    write_model(root, "pipeline", ENSEMBLE, model_py="")
    write_model(root, "step_a", PYTHON.format(name="step_a", extra=""), model_py="")
    # a BLS caller names the model it calls in a parameter
    calls = 'parameters { key: "calls" value: { string_value: "step_c" } }'
    write_model(root, "step_b", PYTHON.format(name="step_b", extra=calls), model_py="")
    write_model(root, "step_c", 'name: "step_c"\nbackend: "onnxruntime"\n', model_py="")
    write_model(root, "unrelated", PYTHON.format(name="unrelated", extra=""), model_py="")
    return root


def test_configs_are_parsed_not_pattern_matched(repo):
    configs = repository.configs(repo)
    assert configs["pipeline"].platform == "ensemble" and configs["pipeline"].backend == "", (
        "a commented-out field is not a field"
    )
    assert repository.parameter(configs["step_a"], "note") == "a # in a string, and step_c"
    assert repository.python_models(repo) == ["step_a", "step_b", "unrelated"]


def test_a_broken_config_names_its_file(tmp_path):
    write_model(tmp_path, "bad", 'name: "bad"\nbackend: "python"\ninput [ { name: "X" ', model_py="")
    with pytest.raises(repository.RepositoryError, match=r"bad/config.pbtxt"):
        repository.configs(tmp_path)


def test_dependencies_follow_ensemble_steps_and_bls_parameters(repo):
    assert repository.dependencies(repo, ["pipeline"]) == ["pipeline", "step_a", "step_b", "step_c"]
    assert repository.dependencies(repo, ["step_a"]) == ["step_a"], (
        "a string that merely mentions a model is not a call"
    )
    with pytest.raises(repository.RepositoryError, match="no model 'nosuch'"):
        repository.dependencies(repo, ["nosuch"])


def test_derive_links_files_and_writes_only_edited_configs(repo, tmp_path):
    def bump(model, path, config):
        return repository.set_parameter(config, "EXECUTION_ENV_PATH", "x") if model == "step_a" else None

    copy = repository.derive(repo, tmp_path / "out", models=["step_a", "step_c"], edit=bump)
    assert sorted(p.name for p in copy.iterdir()) == ["step_a", "step_c"]
    assert (copy / "step_c" / "config.pbtxt").is_symlink() and (copy / "step_a" / "1" / "model.py").is_symlink()
    assert not (copy / "step_a" / "config.pbtxt").is_symlink()
    assert repository.parameter(repository.read_config(copy / "step_a" / "config.pbtxt"), "EXECUTION_ENV_PATH") == "x"
    assert "EXECUTION_ENV_PATH" not in (repo / "step_a" / "config.pbtxt").read_text(), "the source must not change"


def test_every_shipped_config_parses_and_its_dependencies_exist():
    for repo in sorted(PROJECT_ROOT.glob("deployments/*/model_repository")):
        found = repository.configs(repo)
        assert found, repo
        for name in found:
            repository.dependencies(repo, [name])


def test_a_subset_of_a_shipped_deployment_follows_its_bls_and_ensemble_references(tmp_path):
    """What the reliability runs serve: an entry model and what it calls, as links."""
    repo = PROJECT_ROOT / "deployments" / "embedding_cpu" / "model_repository"
    assert repository.dependencies(repo, ["embedding_onnx_text"]) == ["embedding_onnx", "embedding_onnx_text"]
    wanted = repository.dependencies(repo, ["pipeline_orchestrator"])
    subset = repository.derive(repo, tmp_path, models=wanted)
    assert sorted(p.name for p in subset.iterdir()) == ["embedding_onnx", "pipeline_orchestrator"]
    assert (subset / "embedding_onnx" / "config.pbtxt").is_symlink()


def test_packed_copy_of_a_path_with_a_hash_keeps_the_whole_path(repo, tmp_path):
    """The regex reader cut every string at '#'; the parser does not."""
    import tarfile

    tarball = tmp_path / "env#1.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        info = tarfile.TarInfo(f"lib/python{local_python()}/site-packages/numpy-1.26.4.dist-info/METADATA")
        archive.addfile(info)
    copy = packed_repository(repo, tarball, tmp_path / "packed")
    value = repository.parameter(repository.read_config(copy / "step_a" / "config.pbtxt"), "EXECUTION_ENV_PATH")
    assert value == "$$TRITON_MODEL_DIRECTORY/../../envs/env#1.tar.gz"
    assert check_repository(copy, local_python()) == []


def test_hard_copy_of_a_variant_has_no_symlinks(repo, tmp_path):
    """A variant is links; its hard copy (mounted into a container) must hold the files themselves."""
    variant = repository.derive(repo, tmp_path / "variant", models=["pipeline", "step_a", "step_b", "step_c"])
    assert (variant / "pipeline" / "config.pbtxt").is_symlink()
    copy = repository.derive(variant, tmp_path / "hard", link="hard")
    assert not [p for p in copy.rglob("*") if p.is_symlink()]
    assert repository.configs(copy)["pipeline"].platform == "ensemble"
