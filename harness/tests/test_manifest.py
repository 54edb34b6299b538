"""deployment.toml is typed: unknown keys, wrong types and missing keys are named with their file."""

from __future__ import annotations

import pytest

from harness import PROJECT_ROOT
from harness.manifest import (
    Benchmark,
    ConfigOverrides,
    ManifestError,
    TargetSettings,
    read_manifest,
)

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
        Benchmark(
            id="m-b1",
            workload="checks.py:workload",
            concurrency=[1, 4],
            config={"m": ConfigOverrides(instance_count=2)},
        )
    ]
    assert manifest.benchmarks[0].overrides == {"m": {"instance_count": 2}}
    assert manifest.export is None and manifest.tests.module is None and manifest.summary == ""


@pytest.mark.parametrize(
    "change, message",
    [
        (("concurrency = [1, 4]", "concurency = [1, 4]"), "benchmarks[0].concurency: unknown key"),
        (('stub_python = "3.10"', 'stub_pyhton = "3.10"'), "target.npu.stub_pyhton: unknown key"),
        (('name = "toy"', 'name = "toy"\nsumary = "x"'), ": sumary: unknown key"),
        (
            ("concurrency = [1, 4]", 'concurrency = ["1"]'),
            "benchmarks[0].concurrency[0]: input should be a valid integer, not '1'",
        ),
        (
            ("device_ids = [0, 1]", 'device_ids = "0,1"'),
            "target.npu.device_ids: input should be a valid list, not '0,1'",
        ),
        (('id = "m-b1"\n', ""), "benchmarks[0].id: missing required key"),
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


def test_the_documented_manifest_reads(tmp_path):
    """docs/adding-a-deployment.md's annotated deployment.toml is a manifest the schema takes."""
    doc = (PROJECT_ROOT / "docs" / "adding-a-deployment.md").read_text()
    example = doc.split("## deployment.toml", 1)[1].split("```toml", 1)[1].split("```", 1)[0]
    _, manifest = _read(tmp_path, example)
    assert manifest.benchmarks and manifest.profiles


@pytest.mark.parametrize(
    "table, message",
    [
        ('[server]\nargs = ["--log-verbose=1"]\n', ": server: unknown key"),
        ('fixtures = "expected"\n', ": fixtures: unknown key"),
        ('[target.cpu]\nserver_args = ["--x"]\n', "target.cpu.server_args: unknown key"),
        # the lab's tables live in lab/deployments/<deployment>.toml (harness_lab.manifest)
        ('[reliability]\nmodel = "m"\n', ": reliability: unknown key"),
        ("[scaleout]\nreplicas = 2\n", ": scaleout: unknown key"),
    ],
)
def test_keys_nothing_reads_are_refused(tmp_path, table, message):
    path = tmp_path / "deployment.toml"
    path.write_text(table + GOOD if not table.startswith("[") else GOOD + table)
    with pytest.raises(ManifestError) as refused:
        read_manifest(path)
    assert message in str(refused.value), str(refused.value)


OPENAI = """
[openai]
default = "m"

[openai.models.m]
text = { model = "m" }
tokenizer = { model = "tok", ids = "input_ids", mask = "attention_mask" }
tokens = { model = "m", output = "last_hidden_state", normalize = true, vocab_size = 100 }
"""


def test_the_openai_table_becomes_the_gate_policy(tmp_path):
    from harness.deployments import Deployment
    from triton_gate.policy import GatePolicy, OpenAIText

    path, manifest = _read(tmp_path, GOOD + OPENAI)
    assert manifest.openai.models["m"].tokens.normalize is True
    policy = Deployment(tmp_path, manifest).gate_policy()
    assert policy.public == ["m"] and policy.openai.default == "m"
    assert policy.openai.models["m"].text == OpenAIText(model="m", input="TEXT", output="EMBEDDING")
    assert policy.openai.models["m"].tokens.pooling == "mean" and policy.openai.models["m"].tokens.pad_id is None
    assert GatePolicy.model_validate_json(policy.model_dump_json()) == policy  # as it travels to the gate
    with pytest.raises(ValueError, match="maps neither"):
        GatePolicy.model_validate({"openai": {"models": {"x": {"tokenizer": {"model": "t", "ids": "i"}}}}})
    with pytest.raises(ValueError, match="default"):
        GatePolicy.model_validate({"openai": {"default": "y", "models": {"x": {"text": {"model": "m"}}}}})
    counted = {"model": "m", "input": "T", "output": "E", "tokens_output": "TOKEN_COUNT"}
    assert GatePolicy.model_validate({"openai": {"models": {"x": {"text": counted}}}}).openai.models["x"].text == (
        OpenAIText(**counted)
    )
    with pytest.raises(ValueError, match="text.tokens_output"):
        GatePolicy.model_validate_json('{"openai": {"models": {"x": {"text": {"model": "m", "tokens_output": 1}}}}}')
    with pytest.raises(ValueError, match="max_body_bytes"):
        GatePolicy.model_validate({"max_body_bytes": {"m": True}})


@pytest.mark.parametrize(
    "change, message",
    [
        (('default = "m"', 'default = "n"'), "[openai] default = 'n' is not in [openai.models]"),
        (
            ('text = { model = "m" }', 'text = { model = "other" }'),
            "[openai.models.m] text.model = 'other' is no entry model",
        ),
        (
            ("normalize = true", 'normalize = "yes"'),
            "openai.models.m.tokens.normalize: input should be a valid boolean, not 'yes'",
        ),
        (("vocab_size = 100", "vocab = 100"), "openai.models.m.tokens.vocab: unknown key"),
        (
            ('text = { model = "m" }', 'text = { model = "m", tokens_output = 1 }'),
            "openai.models.m.text.tokens_output: input should be a valid string, not 1",
        ),
        (
            ('tokens = { model = "m", output', 'tokens = { model = "m", pooling = "max", output'),
            "openai.models.m.tokens.pooling: input should be 'mean'",
        ),
    ],
)
def test_bad_openai_tables_are_refused(tmp_path, change, message):
    path = tmp_path / "deployment.toml"
    path.write_text((GOOD + OPENAI).replace(*change, 1))
    with pytest.raises(ManifestError) as refused:
        read_manifest(path)
    assert message in str(refused.value), str(refused.value)


PROFILES = """
[profiles]
openvino = { backend = "openvino", parameters = { NUM_STREAMS = "1", INFERENCE_NUM_THREADS = "2" } }
padded = { max_batch_size = 16, parameters = { ENABLE_BATCH_PADDING = "YES" } }
"""


def test_profiles_apply_in_order_then_the_benchmarks_own_keys(tmp_path):
    text = GOOD.replace(
        "config = { m = { instance_count = 2 } }",
        'config = { m = { profiles = ["openvino", "padded"], max_batch_size = 8, parameters = { NUM_STREAMS = "2" } } }',
    )
    _, manifest = _read(tmp_path, text + PROFILES)
    assert manifest.benchmarks[0].overrides == {
        "m": {
            "backend": "openvino",
            "max_batch_size": 8,
            "parameters": {"NUM_STREAMS": "2", "INFERENCE_NUM_THREADS": "2", "ENABLE_BATCH_PADDING": "YES"},
        }
    }


@pytest.mark.parametrize(
    "change, message",
    [
        (("instance_count = 2", 'profiles = ["openvno"]'), "benchmark 'm-b1': no [profiles.openvno]"),
        (
            ("max_batch_size = 16", "max_batch_size = true"),
            "profiles.padded.max_batch_size: input should be a valid integer",
        ),
        (("max_batch_size = 16", 'profiles = ["openvino"]'), "[profiles.padded] names profiles"),
    ],
)
def test_bad_profiles_are_refused(tmp_path, change, message):
    path = tmp_path / "deployment.toml"
    path.write_text((GOOD + PROFILES).replace(*change, 1))
    with pytest.raises(ManifestError) as refused:
        read_manifest(path)
    assert str(path) in str(refused.value) and message in str(refused.value), str(refused.value)
