"""harness.provenance: stamp a real (tiny) ONNX file, read it back, compare with fixtures."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import numpy as np
import pytest

from harness import provenance
from harness.provenance import WeightsIdentity

REGENERATE = "python -m harness export toy --force && python deployments/toy/make_fixtures.py"


def _tiny_onnx(path, metadata: dict | None = None):
    """A one-node Identity graph, optionally with metadata_props."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "tiny",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph)
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _fixtures(identity: WeightsIdentity, model: str = "toy") -> dict:
    """A fixtures file as make_fixtures.py writes it, through JSON and back."""
    record = {"images": {}, provenance.FIXTURES_KEY: provenance.fixtures_record({model: identity}, REGENERATE)}
    return json.loads(json.dumps(record))


def test_tensors_sha256_is_the_documented_definition():
    tensors = {"b": np.arange(3, dtype=np.int64), "a": np.ones((2, 2), np.float32)}
    want = hashlib.sha256()
    want.update(b"a|float32|(2, 2)|" + tensors["a"].tobytes())
    want.update(b"b|int64|(3,)|" + tensors["b"].tobytes())
    assert provenance.tensors_sha256(tensors) == want.hexdigest()
    changed = {**tensors, "a": np.full((2, 2), 1.0001, np.float32)}
    assert provenance.tensors_sha256(changed) != want.hexdigest()


def test_tensors_sha256_same_for_torch_and_numpy():
    torch = pytest.importorskip("torch")
    state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(), "n": torch.tensor(7)}
    as_numpy = {k: v.contiguous().numpy() for k, v in state.items()}
    assert provenance.tensors_sha256(state) == provenance.tensors_sha256(as_numpy)
    half = {"w": torch.ones(2, dtype=torch.bfloat16)}
    assert provenance.tensors_sha256(half) != provenance.tensors_sha256({"w": torch.ones(2)})


def test_file_sha256_is_sha256sum(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x00weights" * 300_000)
    assert provenance.file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert provenance.file_identity(path, "installed:x").sha256 == provenance.file_sha256(path)


def test_stamp_and_read_back_keeps_other_metadata(tmp_path):
    path = _tiny_onnx(tmp_path / "repo" / "toy" / "1" / "model.onnx", {"producer_note": "kept"})
    assert provenance.read_stamp(path) is None
    first = WeightsIdentity("a" * 64, "seeded:toy")
    provenance.stamp_onnx(path, first, "deployments/toy/export.py")
    stamp = provenance.read_stamp(path)
    assert (stamp.sha256, stamp.source, stamp.exported_by) == ("a" * 64, "seeded:toy", "deployments/toy/export.py")
    provenance.stamp_onnx(path, WeightsIdentity("b" * 64, "checkpoint:x.pt"), "deployments/toy/export.py")
    import onnx

    props = [(p.key, p.value) for p in onnx.load(str(path)).metadata_props]
    assert sorted(k for k, _ in props) == ["exported_by", "producer_note", "weights_sha256", "weights_source"]
    assert dict(props)["producer_note"] == "kept"
    assert provenance.read_stamp(path).sha256 == "b" * 64


def test_assert_served_weights_passes_on_the_same_weights(tmp_path):
    repo = tmp_path / "repo"
    identity = WeightsIdentity(provenance.tensors_sha256({"w": np.ones(4, np.float32)}), "seeded:toy")
    for version in ("1", "2"):
        provenance.stamp_onnx(_tiny_onnx(repo / "toy" / version / "model.onnx"), identity, "export.py")
    fixtures = provenance.fixtures_identity(_fixtures(identity), "toy")
    provenance.assert_served_weights(repo, "toy", fixtures)
    ctx = SimpleNamespace(deployment=SimpleNamespace(model_repository=repo))
    provenance.assert_served_weights(ctx, "toy", fixtures)


def test_mismatch_names_both_identities_and_the_command(tmp_path):
    repo = tmp_path / "repo"
    served = WeightsIdentity("1" * 64, "checkpoint:other.pt")
    provenance.stamp_onnx(_tiny_onnx(repo / "toy" / "1" / "model.onnx"), served, "deployments/toy/export.py")
    fixtures = provenance.fixtures_identity(_fixtures(WeightsIdentity("2" * 64, "seeded:toy")), "toy")
    with pytest.raises(AssertionError) as failure:
        provenance.assert_served_weights(repo, "toy", fixtures)
    message = str(failure.value)
    for part in ("1" * 64, "checkpoint:other.pt", "deployments/toy/export.py", "2" * 64, "seeded:toy", REGENERATE):
        assert part in message, f"{part!r} missing from: {message}"
    assert str(repo / "toy" / "1" / "model.onnx") in message


def test_one_stale_version_fails(tmp_path):
    repo = tmp_path / "repo"
    good = WeightsIdentity("3" * 64, "seeded:toy")
    provenance.stamp_onnx(_tiny_onnx(repo / "toy" / "1" / "model.onnx"), good, "export.py")
    provenance.stamp_onnx(_tiny_onnx(repo / "toy" / "2" / "model.onnx"), WeightsIdentity("4" * 64, "old"), "export.py")
    with pytest.raises(AssertionError, match="toy/2/model.onnx"):
        provenance.assert_served_weights(repo, "toy", provenance.fixtures_identity(_fixtures(good), "toy"))


def test_unstamped_or_missing_file_fails_with_the_command(tmp_path):
    repo = tmp_path / "repo"
    fixtures = provenance.fixtures_identity(_fixtures(WeightsIdentity("5" * 64, "seeded:toy")), "toy")
    with pytest.raises(AssertionError, match="no ONNX file") as failure:
        provenance.assert_served_weights(repo, "toy", fixtures)
    assert REGENERATE in str(failure.value)
    _tiny_onnx(repo / "toy" / "1" / "model.onnx")
    with pytest.raises(AssertionError, match="carries no weights stamp") as failure:
        provenance.assert_served_weights(repo, "toy", fixtures)
    assert REGENERATE in str(failure.value)


def test_model_served_from_installed_files(tmp_path):
    weights = tmp_path / "installed" / "model.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"installed weights")
    installed = provenance.file_identity(weights, "installed:toy/model.safetensors")
    fixtures = provenance.fixtures_identity(_fixtures(installed, "toy_py"), "toy_py")
    provenance.assert_served_weights(tmp_path, "toy_py", fixtures, served=installed)
    weights.write_bytes(b"other weights")
    changed = provenance.file_identity(weights, "installed:toy/model.safetensors")
    with pytest.raises(AssertionError, match="installed files"):
        provenance.assert_served_weights(tmp_path, "toy_py", fixtures, served=changed)


def test_fixtures_without_identity_fail():
    with pytest.raises(AssertionError, match="no weights identity for 'toy'"):
        provenance.fixtures_identity({"weights_sha256": "x"}, "toy")


def test_every_deployment_uses_the_one_mechanism():
    """Fixtures record identities under "weights" for models of the repository, export.py stamps
    with stamp_onnx and checks.py asserts with assert_served_weights (no second mechanism)."""
    from harness import PROJECT_ROOT
    from harness.deployments import discover

    deployments = discover(PROJECT_ROOT / "deployments")
    assert deployments
    for deployment in deployments:
        records = {p.name: json.loads(p.read_text()) for p in sorted(deployment.fixtures_path.glob("*.json"))}
        recorded = [name for name, record in records.items() if provenance.FIXTURES_KEY in record]
        assert recorded, f"{deployment.name}: no fixtures file records a weights identity"
        for name, record in records.items():
            assert "weights_sha256" not in record, f"{deployment.name}/{name}: weights_sha256 outside 'weights'"
        for name in recorded:
            for model in records[name][provenance.FIXTURES_KEY]["models"]:
                provenance.fixtures_identity(records[name], model)
                assert (deployment.model_repository / model / "config.pbtxt").exists(), (
                    f"{deployment.name}/{name}: {model!r} is not a model of the repository"
                )
        checks = (deployment.path / deployment.manifest.tests.module).read_text()
        assert "provenance.assert_served_weights(" in checks, f"{deployment.name}: checks do not assert the weights"
        export = deployment.path / "export.py"
        if export.exists():
            assert "provenance.stamp_onnx(" in export.read_text(), f"{deployment.name}: export.py stamps nothing"
