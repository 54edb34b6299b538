"""Config variants: protobuf edits of config.pbtxt in a linked copy of the repository."""

from __future__ import annotations

import pytest

from harness import PROJECT_ROOT
from harness.manifest import ConfigOverrides, overrides_table
from harness.repository import read_config
from harness.variants import apply_overrides, variant_repository

REPOSITORY = PROJECT_ROOT / "deployments" / "embedding_cpu" / "model_repository"


def test_overrides_change_only_the_named_fields():
    original = read_config(REPOSITORY / "embedding_onnx" / "config.pbtxt")
    changed = apply_overrides(
        read_config(REPOSITORY / "embedding_onnx" / "config.pbtxt"),
        ConfigOverrides(
            instance_count=1,
            max_queue_delay_microseconds=500,
            preferred_batch_size=[8, 16],
            parameters={"intra_op_thread_count": "2"},
            max_batch_size=32,
        ),
    )
    assert [g.count for g in changed.instance_group] == [1]
    assert changed.dynamic_batching.max_queue_delay_microseconds == 500
    assert list(changed.dynamic_batching.preferred_batch_size) == [8, 16]
    assert changed.parameters["intra_op_thread_count"].string_value == "2"
    assert changed.parameters["inter_op_thread_count"] == original.parameters["inter_op_thread_count"]
    assert changed.max_batch_size == 32 and list(changed.input) == list(original.input)


def test_dynamic_batching_can_be_switched_off():
    config = apply_overrides(
        read_config(REPOSITORY / "embedding_py" / "config.pbtxt"), ConfigOverrides(dynamic_batching=False)
    )
    assert not config.HasField("dynamic_batching")


def test_a_variant_can_move_a_model_to_another_backend_without_batching():
    config = apply_overrides(
        read_config(REPOSITORY / "embedding_onnx" / "config.pbtxt"),
        ConfigOverrides(backend="openvino", default_model_filename="model.onnx", max_batch_size=0),
    )
    assert (config.backend, config.default_model_filename, config.max_batch_size) == ("openvino", "model.onnx", 0)
    assert [list(i.dims) for i in config.input] == [[-1, -1], [-1, -1]]  # the batch moved into the dims
    assert list(config.output[0].dims) == [-1, -1, 384] and not config.HasField("dynamic_batching")


def test_unknown_override_is_refused():
    with pytest.raises(ValueError, match="config overrides: embedding_py.instances: unknown key"):
        overrides_table({"embedding_py": {"instances": 3}})
    with pytest.raises(ValueError, match="instance_count: input should be a valid integer"):
        overrides_table({"embedding_py": {"instance_count": True}})


def test_variant_repository_links_files_and_rewrites_configs(tmp_path):
    repo = variant_repository(REPOSITORY, {"embedding_py": ConfigOverrides(instance_count=1)}, tmp_path)
    assert (repo / "embedding_py" / "1" / "model.py").is_symlink()
    assert not (repo / "embedding_py" / "config.pbtxt").is_symlink()
    assert read_config(repo / "embedding_py" / "config.pbtxt").instance_group[0].count == 1
    assert (repo / "embedding_onnx" / "config.pbtxt").is_symlink()
    with pytest.raises(ValueError, match="does not have"):
        variant_repository(REPOSITORY, {"no_such_model": ConfigOverrides(instance_count=1)}, tmp_path / "other")
