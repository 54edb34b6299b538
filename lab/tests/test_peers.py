"""Side-by-side bench logic: ratios taken round by round, length buckets of mixed-length batches."""

from __future__ import annotations

import re

import pytest
from embedding_cpu_processing.bls import plan_batches

from harness_lab.matrix_sections import side_by_side as ratios


def _record(model, rounds, ceiling_rounds, kind="onnx-fp32", batch=1, concurrency=8, run="r1"):
    return {
        "comparison": "side-by-side",
        "deployment": "embedding_cpu",  # its [[peers.ratios]] are the ratios taken
        "run_id": run,
        "model": model,
        "items_per_request": batch,
        "concurrency": concurrency,
        "rounds_items_per_second": rounds,
        "ceiling_kind": kind,
        "rounds_ceiling_items_per_second": ceiling_rounds,
        "timestamp": "2026-12-01T00:00:00+00:00",
        "generator": "wrk",
        "items_per_second": sum(rounds) / len(rounds),
    }


def test_ratios_are_medians_of_per_round_quotients_and_best_peer_is_per_round():
    run = [
        _record("embedding_onnx_text", [100, 300, 200], [200, 200, 250]),
        _record("embedding_py", [50, 100, 400], [10, 10, 10], kind="sentence-transformers"),
        _record("infinity-optimum", [80, 100, 50], [200, 200, 250]),
        _record("infinity-torch", [40, 200, 100], [10, 10, 10], kind="sentence-transformers"),
    ]
    found = {r["ratio"]: r for r in ratios.ratios(run)}
    onnx_over_py = found["ONNX text / Python (embedding_onnx_text / embedding_py)"]
    assert onnx_over_py["rounds"] == [2.0, 3.0, 0.5] and onnx_over_py["value"] == 2.0
    peer = found["Triton / best infinity-emb (embedding_onnx_text / max peer)"]
    assert peer["rounds"] == [100 / 80, 300 / 200, 200 / 100]
    assert found["embedding_onnx_text / ceiling"]["rounds"] == [0.5, 1.5, 0.8]
    assert "INT8 / FP32 served (embedding_onnx_int8 / embedding_onnx)" not in found


def test_cpu_time_ratios_invert_cpu_ms_per_sentence_and_are_absent_without_them():
    text = dict(
        _record("embedding_onnx_text", [100, 100], [200, 200]),
        rounds_cpu_ms_per_item=[5.0, 4.0],
        rounds_ceiling_cpu_ms_per_item=[4.0, 4.0],
    )
    py = dict(_record("embedding_py", [50, 50], [60, 60], kind="sentence-transformers"), rounds_cpu_ms_per_item=[10, 6])
    found = {r["ratio"]: r for r in ratios.ratios([text, py])}
    assert found["embedding_onnx_text / ceiling"]["cpu_value"] == pytest.approx((0.8 + 1.0) / 2)
    assert found["ONNX text / Python (embedding_onnx_text / embedding_py)"]["cpu_value"] == pytest.approx(1.75)
    assert found["embedding_py / ceiling"]["cpu_value"] is None


def test_mixed_lengths_are_a_workload_of_their_own_after_the_uniform_batches():
    uniform = [_record("embedding_onnx_text", [100, 100], [200, 200], batch=b) for b in (32, 1)]
    mixed = [
        dict(_record(model, rounds, [150, 150]), workload="mixed")
        for model, rounds in (("embedding_onnx_text", [90, 120]), ("infinity-optimum", [60, 60]))
    ]
    run = uniform + mixed
    assert list(ratios.workloads_of(run)) == [(1, 8), (32, 8), ("mixed", 8)]
    found = {(r["batch"], r["ratio"]): r for r in ratios.ratios(run)}
    assert found["mixed", "Triton / best infinity-emb (embedding_onnx_text / max peer)"]["rounds"] == [1.5, 2.0]
    assert [w["batch"] for w in ratios.serving_lesson(run)["workloads"]] == [1, 32]
    assert re.search(r"^\| mixed +\| 8 +\| embedding_onnx_text ", "\n".join(ratios.render(run)), re.M)


def test_latest_run_is_the_newest_one_with_the_text_model():
    old = [_record("embedding_onnx_text", [1], [1], run="old")]
    new = [dict(_record("embedding_onnx_text", [2], [1], run="new"), timestamp="2026-12-02T00:00:00+00:00")]
    peers_only = [dict(_record("infinity-torch", [3], [1], run="peers"), timestamp="2026-12-03T00:00:00+00:00")]
    assert ratios.latest_peers_run(old + new + peers_only) == new
    text = "\n".join(ratios.render(old + new))
    assert "run `new`" in text and "run `old`" not in text
    assert any(
        l.startswith("| 1 ") and "embedding_onnx_text / ceiling" in l and "| 2.00 " in l and "| met" in l
        for l in text.splitlines()
    )


@pytest.mark.parametrize("lengths, rows", [([12] * 10, 4), ([10, 12, 14, 9, 11, 30, 31, 200, 8], 64), ([], 4)])
def test_length_buckets_cover_every_text_once_within_row_and_padding_bounds(lengths, rows):
    batches = plan_batches(lengths, rows)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= rows
        widths = [lengths[i] for i in batch]
        assert len(batch) == 1 or max(widths) * len(batch) <= 1.5 * sum(widths)


def test_short_and_long_texts_do_not_share_a_bucket():
    batches = plan_batches([8, 9, 10, 200, 210], 64)
    assert sorted(map(sorted, batches)) == [[0, 1, 2], [3, 4]]


def _path_run(native, openai, optimum, torch, batch=1, concurrency=8):
    """One workload of native, OpenAI-path and infinity records (what ``harness peers`` writes)."""
    fields = {"batch": batch, "concurrency": concurrency}
    return [
        dict(_record("embedding_onnx_text", native, [200] * len(native), **fields), path="native", gate=True),
        dict(_record("openai:embedding_onnx_text", openai, [200] * len(openai), **fields), path="openai", gate=True),
        dict(_record("infinity-optimum", optimum, [200] * len(optimum), **fields), path="peer", peer="infinity-emb"),
        dict(
            _record("infinity-torch", torch, [10] * len(torch), kind="sentence-transformers", **fields),
            path="peer",
            peer="infinity-emb",
        ),
    ]


OPENAI_OVER_NATIVE = "OpenAI path / native (openai:embedding_onnx_text / embedding_onnx_text)"
OPENAI_OVER_INFINITY = "OpenAI path / best infinity-emb (openai:embedding_onnx_text / max peer)"


def test_openai_path_ratios_are_per_round_and_the_infinity_goal_holds_only_where_native_is_ahead():
    ahead = _path_run([100, 100], [95, 125], [80, 120], [50, 50], batch=1)
    behind = _path_run([100, 100], [90, 90], [150, 160], [50, 50], batch=32)
    found = {(r["batch"], r["ratio"]): r for r in ratios.ratios(ahead + behind)}
    assert found[1, OPENAI_OVER_NATIVE]["rounds"] == [0.95, 1.25]
    assert found[1, OPENAI_OVER_NATIVE]["value"] == pytest.approx(1.1)
    assert ratios._verdict(found[1, OPENAI_OVER_NATIVE]) == "met"
    assert ratios._verdict(found[32, OPENAI_OVER_NATIVE]) == "NOT met"
    infinity = found[1, OPENAI_OVER_INFINITY]
    assert infinity["rounds"] == [95 / 80, 125 / 120]  # the faster engine of each round
    assert infinity["applies"] and infinity["condition"] == pytest.approx((100 / 80 + 100 / 120) / 2)
    assert ratios._verdict(infinity) == "met"
    behind_row = found[32, OPENAI_OVER_INFINITY]
    assert not behind_row["applies"] and ratios._verdict(behind_row).startswith("n/a (embedding_onnx_text behind")


def test_the_serving_paths_are_ratios_taken_round_by_round_against_the_best_infinity_engine():
    run = _path_run([100, 120], [95, 110], [80, 130], [50, 50])
    found = {r["ratio"]: r for r in ratios.ratios(run)}
    assert found[OPENAI_OVER_NATIVE]["value"] == pytest.approx((0.95 + 110 / 120) / 2)
    assert found[OPENAI_OVER_INFINITY]["value"] == pytest.approx((95 / 80 + 110 / 130) / 2)
    text = "\n".join(ratios.render(run))
    assert "behind the front gate" in text and "without the front gate" not in text
    line = next(l for l in text.splitlines() if l.startswith("| 1 ") and OPENAI_OVER_NATIVE in l)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3] == f"{found[OPENAI_OVER_NATIVE]['value']:.2f}", cells
    assert re.search(r"^\| 1 +\| 8 +\| infinity-torch +\| 50\.0 +\| 50, 50 ", text, re.M)


def test_a_run_without_the_gate_or_the_openai_path_says_so():
    run = [dict(r, gate=False) for r in _path_run([100], [95], [80], [50]) if r["path"] != "openai"]
    text = "\n".join(ratios.render(run))
    assert "tritonserver without the front gate" in text
    assert not any(r["ratio"] == OPENAI_OVER_NATIVE for r in ratios.ratios(run))
    assert OPENAI_OVER_NATIVE not in text


def test_check_openai_accepts_floats_and_base64_of_the_dimension_in_order():
    import base64
    import json

    import numpy as np

    from harness_lab.peers.targets import check_openai

    vectors = np.arange(6, dtype="<f4").reshape(2, 3)
    floats = {"data": [{"embedding": v.tolist(), "index": i} for i, v in enumerate(vectors)]}
    encoded = {
        "data": [{"embedding": base64.b64encode(v.tobytes()).decode(), "index": i} for i, v in enumerate(vectors)]
    }
    for reply in (floats, encoded):
        check_openai(json.dumps(reply).encode(), 2, 3)
        with pytest.raises(AssertionError):
            check_openai(json.dumps(reply).encode(), 2, 4)
        with pytest.raises(AssertionError):
            check_openai(json.dumps(reply).encode(), 3, 3)
    swapped = {"data": floats["data"][::-1]}
    with pytest.raises(AssertionError, match="indexes"):
        check_openai(json.dumps(swapped).encode(), 2, 3)


def test_every_openai_style_target_gets_the_same_body_shape(tmp_path):
    import json

    from harness_lab.peers import workloads
    from harness_lab.peers.processes import PeerServer

    ours = json.loads(workloads.openai_body(["a", "b"], "m"))
    peer = PeerServer(cores=None, threads=1)
    try:
        theirs = json.loads(peer.body(["a", "b"]))
        assert set(ours) == set(theirs) == {"input", "model"} and ours["input"] == theirs["input"] == ["a", "b"]
        assert json.loads(peer.body(["a"], "base64"))["encoding_format"] == "base64"
    finally:
        peer.work_dir.rmdir()


def test_openai_models_must_be_peers_models(tmp_path):
    from harness.deployments import ManifestError
    from harness_lab.manifest import LAB_DEPLOYMENTS, lab_manifest

    text = (LAB_DEPLOYMENTS / "embedding_cpu.toml").read_text()
    assert "openai_models = { embedding_onnx_text =" in text
    bad = text.replace("openai_models = { embedding_onnx_text =", "openai_models = { no_such_model =")
    (tmp_path / "embedding_cpu.toml").write_text(bad)
    with pytest.raises(ManifestError, match="openai_models: 'no_such_model' is not in"):
        lab_manifest("embedding_cpu", folder=tmp_path)


def test_declared_variants_are_served_where_the_cpu_has_their_flags_and_say_what_runs():
    from harness.deployments import get_deployment
    from harness_lab.manifest import lab_manifest
    from harness_lab.peers.targets import declared_variants

    deployment = get_deployment("embedding_cpu")
    spec = lab_manifest(deployment).peers
    declared = spec.variants["openvino-bf16"]
    assert (declared.engine, declared.precision, declared.models) == ("openvino", "bf16", ["embedding_onnx_text"])
    both = ["embedding_onnx_text", "embedding_py"]
    (served,), skipped = declared_variants(deployment, spec, both, None, ["avx512_bf16"])
    assert not skipped and (served.name, served.models, served.declared) == (
        "openvino-bf16",
        ["embedding_onnx_text"],
        declared,
    )
    parameters = served.config["embedding_onnx_text"].parameters
    assert parameters == {"in_process_engine": "openvino"}
    assert declared_variants(deployment, spec, ["embedding_onnx_text"], None, ["amx_bf16"])[0], "AMX has BF16 too"
    assert declared_variants(deployment, spec, ["embedding_py"], None, ["avx512_bf16"]) == ([], []), "not its model"
    assert declared_variants(deployment, spec, ["embedding_onnx_text"], [], ["avx512_bf16"]) == ([], []), "none chosen"
    served, skipped = declared_variants(deployment, spec, ["embedding_onnx_text"], None, ["avx2", "avx512_vnni"])
    assert served == [] and skipped == ["variant openvino-bf16 not served: this CPU has none of avx512_bf16, amx_bf16"]


def test_an_openvino_variant_is_compared_with_its_onnx_file_on_openvino():
    from harness.deployments import get_deployment
    from harness_lab.manifest import PeerVariant, lab_manifest
    from harness_lab.peers.ceiling import kinds
    from harness_lab.peers.targets import variant_ceiling

    deployment = get_deployment("embedding_cpu")
    declared = lab_manifest(deployment).peers.variants["openvino-bf16"]
    assert variant_ceiling("onnx-fp32", declared) == "onnx-fp32@openvino" in kinds(deployment)
    assert variant_ceiling("onnx-fp32", None) == "onnx-fp32", "a --variant: the model's own"
    other = PeerVariant(benchmark="b", models=["m"], engine="onnxruntime")
    assert variant_ceiling("onnx-int8", other) == "onnx-int8"
    assert variant_ceiling("sentence-transformers", declared) == "sentence-transformers"


@pytest.mark.parametrize(
    "edit, error",
    [
        ('benchmark = "embedding_onnx_text-mixed-openvino-bf16"', "is no benchmark with a config"),
        ('models = ["embedding_onnx_text"]\ncpu_flags', "variants.openvino-bf16.models: 'no_such_model' is not in"),
    ],
)
def test_a_declared_variant_names_a_config_benchmark_and_peers_models(tmp_path, edit, error):
    from harness.deployments import ManifestError
    from harness_lab.manifest import LAB_DEPLOYMENTS, lab_manifest

    text = (LAB_DEPLOYMENTS / "embedding_cpu.toml").read_text()
    assert edit in text
    broken = edit.replace("embedding_onnx_text-mixed-openvino-bf16", "embedding_onnx_text-mixed")
    broken = broken.replace('["embedding_onnx_text"]', '["no_such_model"]')
    (tmp_path / "embedding_cpu.toml").write_text(text.replace(edit, broken))
    with pytest.raises(ManifestError, match=error):
        lab_manifest("embedding_cpu", folder=tmp_path)


@pytest.mark.server
def test_a_short_peers_run_records_native_and_openai_paths_behind_the_gate(tmp_path, monkeypatch):
    """``harness peers`` end to end, as small as it goes: one workload, one round, our native and
    OpenAI paths on one gated tritonserver, no peer (and, on a CPU with BF16, the text model on
    OpenVINO BF16 on a server of its own); every target answered without errors and each record
    names its path; the matrix section shows them side by side."""
    import json
    import shutil

    from harness.measuring.engines import cpu_flags
    from harness_lab.peers.__main__ import main

    if not shutil.which("wrk"):
        pytest.skip("wrk is not installed (make wrk)")
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path))
    argv = ["--deployment", "embedding_cpu", "--models", "embedding_onnx_text", "--peers", ""]
    assert main(argv + ["--batch", "2,mixed", "--concurrency", "2", "--rounds", "1", "--duration", "1"]) == 0
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    for record in records:
        assert record["errors"] == 0 and record["requests"] > 0, record
    bf16 = [r for r in records if r["model"] == "embedding_onnx_text[openvino-bf16]"]
    assert bool(bf16) == bool({"avx512_bf16", "amx_bf16"} & set(cpu_flags()))
    for record in bf16:
        assert (record["engine"], record["precision"], record["path"]) == ("openvino", "bf16", "native")
        assert "OpenVINO BF16" in record["variant"] and record["config_benchmark"].endswith("-openvino-bf16")
        assert (record["ceiling_kind"], record["ceiling_precision"]) == ("onnx-fp32@openvino", "bf16")
    records = [r for r in records if r not in bf16]
    by_target = {r["model"]: r for r in records}
    assert {n: (r["path"], r["gate"]) for n, r in by_target.items()} == {
        "embedding_onnx_text": ("native", True),
        "openai:embedding_onnx_text": ("openai", True),
    }
    assert by_target["openai:embedding_onnx_text"]["endpoint"] == "/v1/embeddings"
    assert by_target["embedding_onnx_text"]["reply"] == "binary"  # as tritonclient asks
    (parts,) = by_target["embedding_onnx_text"]["rounds_cpu_ms_per_item_by_process"]
    assert {"gate", "tritonserver", "stub:embedding_onnx_text"} <= set(parts), parts
    text = "\n".join(ratios.render(records))
    assert "behind the front gate" in text and OPENAI_OVER_NATIVE in text
    assert {r.get("workload") for r in records} == {"uniform", "mixed"}


def test_native_text_replies_are_checked_on_the_output_the_config_names():
    from harness_lab.peers.targets import check_triton_text

    reply = b'{"outputs":[{"name":"VECTOR","shape":[2,3],"datatype":"FP32","data":[0,0,0,0,0,0]}]}'
    check_triton_text(reply, 2, 3, output="VECTOR")
    with pytest.raises(AssertionError, match=r"VECTOR shape \[2, 3\], expected \[2, 4\]"):
        check_triton_text(reply, 2, 4, output="VECTOR")
    with pytest.raises(AssertionError, match=r"no EMBEDDING in \['VECTOR'\]"):
        check_triton_text(reply, 2, 3, output="EMBEDDING")
    header = b'{"outputs":[{"name":"VECTOR","shape":[2,3],"datatype":"FP32","parameters":{"binary_data_size":24}}]}'
    check_triton_text(header + bytes(range(200, 224)), 2, 3, output="VECTOR")  # binary data after the header
    with pytest.raises(AssertionError, match="VECTOR: 24 bytes of vectors, expected 32"):
        check_triton_text(header.replace(b"[2,3]", b"[2,4]") + bytes(24), 2, 4, output="VECTOR")


def test_served_models_get_no_more_instances_than_the_server_cores():
    from harness.deployments import get_deployment
    from harness.manifest import ConfigOverrides
    from harness.repository import configs
    from harness_lab.peers.__main__ import fitted_to_cores

    deployment = get_deployment("embedding_cpu")
    counts = {m: sum(g.count for g in c.instance_group) for m, c in configs(deployment.model_repository).items()}
    chosen = ConfigOverrides(instance_count=2, dynamic_batching=False)
    fitted = fitted_to_cores(deployment, {"embedding_py": chosen}, 1)
    assert fitted["embedding_py"] == chosen, "what the caller set is kept"
    capped = {m for m, c in counts.items() if c > 1 and m != "embedding_py"}
    assert capped and all(fitted[m] == ConfigOverrides(instance_count=1) for m in capped), fitted
    assert not set(fitted) - capped - {"embedding_py"}, "models within the cores are left as they are"
    assert fitted_to_cores(deployment, None, max(counts.values())) == {}


def test_a_target_record_takes_its_rounds_median_and_the_target_s_own_fields():
    """The record of a target's rounds: sentences/s is the median round's (not the median run's wrk
    figure), errors are summed over the rounds, the target's fields (a variant's config) win over the
    run's, and the ratio to the ceiling is taken on the medians."""
    from harness_lab.peers.measure import CeilingRounds, Cell, TargetRounds, side_by_side_record
    from harness_lab.peers.targets import Target
    from harness_lab.peers.wrk import WrkResult

    def run(requests: int, errors: int = 0) -> WrkResult:
        return WrkResult("http://x", 2, 1.0, requests, errors, {"p50": 1.0}, 100.0, 50.0)

    rounds = TargetRounds(runs=[run(10), run(30, errors=1), run(20)], cpu_ms=[2.0, 4.0, 0.0], cpu_parts=[{}, {}, {}])
    ceiling = CeilingRounds(rates=[100.0, 80.0, 120.0], cpu_ms=[1.0, 1.0, 1.0])
    server = {"path": "native", "config_overrides": {"m": {"instance_count": 1}}}
    target = Target("m[v]", "http://x", bytes, "onnx-int8", "m on v", server, lambda *_: None)
    fields = {"deployment": "d", "run_id": "r", "generator": "wrk", "server_cores": "1", "generator_cores": "0"}
    fields |= {"config_overrides": None, "label": ""}
    record = side_by_side_record(fields, target, Cell("uniform", 2, 2, 3, 1.0), rounds, ceiling, "").as_dict()
    assert record["rounds_items_per_second"] == [20.0, 60.0, 40.0] and record["items_per_second"] == 40.0
    assert record["errors"] == 1 and record["requests"] == 20, "the median run's own wrk figures"
    assert record["ceiling_items_per_second"] == 100.0 and record["served_over_ceiling"] == 0.4
    assert record["cpu_ceiling_over_served"] == 0.375, "median of 1/2 and 1/4; a round without CPU left out"
    assert record["config_overrides"] == {"m": {"instance_count": 1}} and record["base_model"] == "m"
    assert record["ceiling_batch_size"] == 4 and record["ceiling_precision"] is None and "kernel_path" in record


def test_a_run_plan_takes_the_table_s_defaults_and_refuses_unknown_models():
    from harness_lab.peers.__main__ import parser, plan

    arguments = parser()
    run = plan(arguments, arguments.parse_args(["--deployment", "embedding_cpu", "--declared-variants", ""]))
    assert run.models == ["embedding_onnx_text", "embedding_py", "embedding_onnx", "embedding_onnx_int8"]
    assert run.openai_models == ["embedding_onnx_text"] and run.variants == []
    assert run.batches == [("uniform", 1), ("uniform", 8), ("uniform", 32), ("mixed", 1)]
    assert run.engines == ["optimum", "torch"]
    assert not run.server_cores & run.generator_cores or run.server_cores == run.generator_cores
    no_gate = plan(arguments, arguments.parse_args(["--deployment", "embedding_cpu", "--no-gate"]))
    assert no_gate.openai_models == [], "no /v1 without the gate"
    with pytest.raises(SystemExit):
        plan(arguments, arguments.parse_args(["--deployment", "embedding_cpu", "--models", "no_such_model"]))
