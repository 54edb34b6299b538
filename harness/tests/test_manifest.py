"""deployment.toml is typed: unknown keys, wrong types and missing keys are named with their file."""

from __future__ import annotations

import pytest

from harness import PROJECT_ROOT
from harness.manifest import Benchmark, ManifestError, TargetSettings, read_manifest

GOOD = """
name = "toy"
entry_models = ["m"]
targets = ["cpu", "npu"]

[target.npu]
image = "ascend:8.3"
device_ids = [0, 1]
stub_python = "3.10"

[[benchmarks]]
id = "m-b1"
workload = "checks.py:workload"
concurrency = [1, 4]
config = { m = { instance_count = 2 } }
"""


def _read(tmp_path, text):
    path = tmp_path / "deployment.toml"
    path.write_text(text)
    return path, read_manifest(path)


def test_a_good_manifest_is_typed(tmp_path):
    _, manifest = _read(tmp_path, GOOD)
    assert manifest.target["npu"] == TargetSettings(image="ascend:8.3", device_ids=[0, 1], stub_python="3.10")
    assert manifest.benchmarks == [
        Benchmark(id="m-b1", workload="checks.py:workload", concurrency=(1, 4), config={"m": {"instance_count": 2}})
    ]
    assert manifest.export is None and manifest.tests.module is None and manifest.summary == ""


@pytest.mark.parametrize(
    "change, message",
    [
        (("concurrency = [1, 4]", "concurency = [1, 4]"), "unknown key benchmarks[0].'concurency'"),
        (('stub_python = "3.10"', 'stub_pyhton = "3.10"'), "unknown key target.npu.'stub_pyhton'"),
        (('name = "toy"', 'name = "toy"\nsumary = "x"'), "unknown key 'sumary'"),
        (("concurrency = [1, 4]", 'concurrency = ["1"]'), "benchmarks[0].concurrency[0] must be int"),
        (("device_ids = [0, 1]", 'device_ids = "0,1"'), "target.npu.device_ids must be a list"),
        (('id = "m-b1"\n', ""), "missing required key 'benchmarks[0].id'"),
        (('targets = ["cpu", "npu"]', 'targets = ["cpu"]'), "[target.npu] is not in targets"),
        (('name = "toy"', "name = toy"), "not valid TOML"),
        (("concurrency = [1, 4]", 'model_only = "m-b8"'), "model_only = 'm-b8' is no benchmark id"),
    ],
)
def test_bad_manifests_are_refused_naming_file_and_key(tmp_path, change, message):
    path = tmp_path / "deployment.toml"
    path.write_text(GOOD.replace(*change))
    with pytest.raises(ManifestError) as refused:
        read_manifest(path)
    assert str(path) in str(refused.value) and message in str(refused.value), str(refused.value)


def test_every_shipped_manifest_reads():
    for path in sorted(PROJECT_ROOT.glob("deployments/*/deployment.toml")):
        assert read_manifest(path).name == path.parent.name
