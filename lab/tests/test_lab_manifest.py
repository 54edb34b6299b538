"""The lab's tables (lab/deployments/<deployment>.toml) are typed like deployment.toml: unknown keys,
wrong types and names the deployment does not have are refused with the file and the key."""

from __future__ import annotations

import pytest

from harness.deployments import ManifestError
from harness.manifest import read_manifest
from harness_lab.manifest import (
    LAB_DEPLOYMENTS,
    LabManifest,
    PeerModel,
    PeerRatio,
    ReliabilitySpec,
    ScaleoutSpec,
    declaring,
    lab_manifest,
    read_lab_manifest,
    resolve,
)

DEPLOYMENT = """
name = "toy"
entry_models = ["m"]

[[benchmarks]]
id = "m-b1"
workload = "checks.py:workload"
config = { m = { instance_count = 2 } }
"""

TABLES = """
[reliability]
model = "m"

[scaleout]
model = "m"
rolled_models = ["m"]

[peers]
default_models = ["m"]
ceiling_onnx = { onnx-fp32 = "model_repository/m/1/model.onnx" }
ceiling_follows = "m"
embedding = "toy.py:peers_embedding"

[peers.models.m]
request = "text"
ceiling = "onnx-fp32"

[peers.variants.v]
benchmark = "m-b1"
models = ["m"]

[[peers.ratios]]
label = "m / ceiling"
top = "m"
bottom = "ceiling"
goal = 1
"""


def _read(tmp_path, text: str) -> LabManifest:
    (tmp_path / "deployment.toml").write_text(DEPLOYMENT)
    (tmp_path / "toy.toml").write_text(text)
    return read_lab_manifest(tmp_path / "toy.toml", read_manifest(tmp_path / "deployment.toml"))


def test_every_lab_file_reads_against_its_deployment():
    files = sorted(LAB_DEPLOYMENTS.glob("*.toml"))
    assert files, f"no lab file in {LAB_DEPLOYMENTS}"
    for path in files:
        tables = lab_manifest(path.stem)
        assert tables != LabManifest(), f"{path}: no table"
        if tables.peers:
            assert callable(resolve(path.stem, tables.peers.embedding))


def test_a_deployment_without_a_lab_file_has_no_lab_tables(tmp_path):
    assert lab_manifest("toy", folder=tmp_path) == LabManifest()


def test_the_lab_tables_are_typed(tmp_path):
    tables = _read(tmp_path, TABLES)
    assert tables.reliability == ReliabilitySpec(model="m")
    assert tables.scaleout == ScaleoutSpec(model="m", rolled_models=["m"])
    assert tables.peers.models == {"m": PeerModel(request="text", ceiling="onnx-fp32")}
    assert tables.peers.ratios == [PeerRatio(label="m / ceiling", top="m", bottom="ceiling", goal=1.0)]
    assert isinstance(tables.peers.ratios[0].goal, float) and tables.peers.peer_onnx == "onnx-fp32"


@pytest.mark.parametrize(
    "change, message",
    [
        (
            ('[reliability]\nmodel = "m"', '[reliability]\nmodel = "m"\nworkloads = "x"'),
            "reliability.workloads: unknown key",
        ),
        (
            ('[reliability]\nmodel = "m"', '[reliability]\nmodel = "other"'),
            "[reliability] model = 'other' is no entry model",
        ),
        (('rolled_models = ["m"]', 'rolled_model = ["m"]'), "scaleout.rolled_model: unknown key"),
        (('rolled_models = ["m"]', 'rolled_models = "m"'), "scaleout.rolled_models: input should be a valid list"),
        (
            ('request = "text"', 'request = "json"'),
            "peers.models.m.request: input should be 'text' or 'tokens', not 'json'",
        ),
        (('ceiling = "onnx-fp32"\n', 'ceiling = "onnx-int8"\n'), "ceiling = 'onnx-int8': one of"),
        (('default_models = ["m"]', 'default_models = ["n"]'), "[peers] default_models: 'n' is not in [peers.models]"),
        (("goal = 1", 'goal = "high"'), "peers.ratios[0].goal: input should be a valid number"),
        (('benchmark = "m-b1"', 'benchmark = "m-b2"'), "[peers.variants.v] benchmark = 'm-b2' is no benchmark"),
        (("[scaleout]", "[scale_out]"), "scale_out: unknown key"),
        (("goal = 1", "goal = "), "not valid TOML"),
    ],
)
def test_bad_lab_tables_are_refused_naming_file_and_key(tmp_path, change, message):
    with pytest.raises(ManifestError) as refused:
        _read(tmp_path, TABLES.replace(*change, 1))
    assert str(tmp_path / "toy.toml") in str(refused.value) and message in str(refused.value), str(refused.value)


def test_a_tool_without_deployment_takes_the_one_declaring_its_table(tmp_path):
    root, folder = tmp_path / "deployments", tmp_path / "lab"
    folder.mkdir()
    for name in ("a", "b"):
        (root / name / "model_repository" / "m").mkdir(parents=True)
        (root / name / "deployment.toml").write_text(DEPLOYMENT.replace('"toy"', f'"{name}"'))
    (folder / "a.toml").write_text(TABLES)
    assert declaring("reliability", root, folder).name == "a"
    assert declaring("scaleout.model", root, folder).name == "a"
    (folder / "b.toml").write_text(TABLES)
    with pytest.raises(ManifestError, match=r"2 deployments declare \[peers\] in .* \(a, b\): pass --deployment"):
        declaring("peers", root, folder)


def test_a_lab_file_of_no_deployment_is_refused(tmp_path):
    (tmp_path / "no_such_deployment.toml").write_text(TABLES)
    with pytest.raises(ManifestError, match="no deployment 'no_such_deployment'"):
        lab_manifest("no_such_deployment", folder=tmp_path)
