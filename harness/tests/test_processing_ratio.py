"""The matrix's server-side processing / model-only ratios: paired per cell, closest in time."""

from __future__ import annotations

from harness.measuring.matrix.pairs import processing_ratios, render_processing_ratios


def _row(benchmark, c, items, when, generator="harness-asyncio (tritonclient grpc.aio)", mode="local"):
    return {
        "measured": True,
        "benchmark": benchmark,
        "target": "cpu",
        "server_mode": mode,
        "concurrency": c,
        "generator": generator,
        "items_per_second": items,
        "timestamp": f"2026-12-01T{when}:00+00:00",
    }


MODEL_ONLY = {"classify-jpeg": "model-b1"}


def test_each_entry_row_is_divided_by_the_model_only_row_of_its_cell_closest_in_time():
    rows = [
        _row("model-b1", 1, 100.0, "01:00"),
        _row("model-b1", 1, 50.0, "05:00"),
        _row("model-b1", 4, 200.0, "05:00"),
        _row("classify-jpeg", 1, 40.0, "05:01"),
        _row("classify-jpeg", 4, 180.0, "05:01"),
    ]
    pairs = {p["concurrency"]: p for p in processing_ratios(rows, MODEL_ONLY)}
    assert pairs[1]["alone"] == 50.0 and abs(pairs[1]["ratio"] - 0.8) < 1e-9
    assert abs(pairs[4]["ratio"] - 0.9) < 1e-9 and pairs[4]["hours_apart"] < 0.1


def test_other_generators_modes_and_unmeasured_rows_are_not_paired():
    rows = [
        _row("model-b1", 1, 100.0, "05:00", generator="wrk debian/4.1.0"),
        _row("model-b1", 1, 100.0, "05:00", mode="docker"),
        _row("classify-jpeg", 1, 90.0, "05:01"),
        {**_row("model-b1", 1, 100.0, "05:00"), "measured": False},
    ]
    assert processing_ratios(rows, MODEL_ONLY) == []
    assert render_processing_ratios(rows, MODEL_ONLY) == []


def test_the_table_flags_ratios_below_the_goal():
    rows = [_row("model-b1", 1, 100.0, "05:00"), _row("classify-jpeg", 1, 42.0, "05:00")]
    text = "\n".join(render_processing_ratios(rows, MODEL_ONLY))
    assert "| classify-jpeg" in text and "0.42 (below goal)" in text


def test_a_pinned_row_says_its_cores_in_the_generator_column():
    from harness.measuring.matrix.cells import pinning_label

    assert pinning_label({"pinning": "server cpus 1 (12 processes), generator cpus 0"}) == (
        "server cpus 1, generator cpus 0"
    )
    assert pinning_label({"pinning": "none"}) == pinning_label({}) == ""


def test_container_cost_pairs_only_records_pinned_alike():
    from harness.measuring.matrix.pairs import container_cost

    docker = _row("model-b1", 1, 100.0, "05:00", mode="docker")
    pinned_local = {**_row("model-b1", 1, 40.0, "05:00"), "pinning": "server cpus 1 (9 processes), generator cpus 0"}
    assert container_cost([docker, pinned_local]) == [], "one core against two is no container cost"
    (pair,) = container_cost([docker, pinned_local, _row("model-b1", 1, 80.0, "04:50")])
    assert pair["local"] == 80.0 and abs(pair["ratio"] - 1.25) < 1e-9


def test_container_cost_pairs_nothing_taken_hours_apart():
    from harness.measuring.matrix.pairs import container_cost

    docker = _row("model-b1", 1, 100.0, "05:00", mode="docker")
    assert container_cost([docker, _row("model-b1", 1, 80.0, "03:00")]) == []


def test_a_ratio_just_below_the_goal_is_not_shown_as_the_goal():
    from harness.measuring.matrix.pairs import ratio_cell

    assert ratio_cell(0.8491) == "0.849 (below goal)"
    assert ratio_cell(0.42) == "0.42 (below goal)" and ratio_cell(0.85) == "0.85" and ratio_cell(1.234) == "1.23"


# -- side-by-side pair runs (python -m harness pair-bench --manifest --record-results) ------------
def _pair(entry, c, ratios, run, when, mode="local", deployment="resnet_npu", cpu=(0.9, 0.8, 0.85)):
    return {
        "comparison": "processing-pair",
        "deployment": deployment,
        "benchmark": f"pair:{entry}",
        "entry_benchmark": entry,
        "model_only_benchmark": "model-b1",
        "target": "cpu",
        "server_mode": mode,
        "concurrency": c,
        "generator": "harness-asyncio (tritonclient grpc.aio)",
        "pinning": "server cpus 1 (9 processes), generator cpus 0",
        "run_id": run,
        "rounds": len(ratios),
        "rounds_ratio": list(ratios),
        "ratio": sorted(ratios)[len(ratios) // 2],
        "rounds_cpu_ratio": list(cpu),
        "cpu_ratio": sorted(cpu)[len(cpu) // 2],
        "rounds_triton_cpu_ratio": [0.6, 0.7, 0.65],
        "triton_cpu_ratio": 0.65,
        "items_per_second": 40.0,
        "model_only_items_per_second": 50.0,
        "timestamp": f"2026-12-01T{when}:00+00:00",
    }


def test_the_latest_pair_run_of_each_server_mode_is_shown_and_only_for_its_deployment():
    from harness.measuring.matrix.pairs import paired_records

    records = [
        _pair("classify-jpeg", 1, (0.7, 0.8, 0.9), "old", "01:00"),
        _pair("classify-jpeg", 1, (0.6, 0.7, 0.8), "new", "05:00"),
        _pair("classify-jpeg", 4, (0.9, 0.9, 0.9), "new", "05:01"),
        _pair("classify-jpeg", 1, (1.0, 1.0, 1.0), "dock", "03:00", mode="docker"),
        _pair("classify-jpeg", 1, (1.0, 1.0, 1.0), "other", "06:00", deployment="cn_clip"),
        _row("classify-jpeg", 1, 40.0, "07:00"),
    ]
    shown = paired_records(records, "resnet_npu")
    assert sorted((r["run_id"], r["concurrency"]) for r in shown) == [("dock", 1), ("new", 1), ("new", 4)]


def test_the_pair_table_shows_the_median_every_round_and_the_goal():
    from harness.measuring.matrix.pairs import render_paired_ratios

    text = "\n".join(render_paired_ratios([_pair("classify-jpeg", 1, (0.62, 0.71, 0.93), "r1", "05:00")]))
    assert "| classify-jpeg" in text and "0.71 (below goal)" in text
    assert "0.62, 0.71, 0.93" in text and "0.85 (0.90, 0.80, 0.85)" in text
    assert "0.65 (0.60, 0.70, 0.65)" in text and "Triton-only" in text
    assert "server cpus 1, generator cpus 0" in text and "3 rounds" in text
    assert render_paired_ratios([]) == []


def test_pair_records_stay_out_of_the_deployments_rows_and_other_records():
    from harness.deployments import get_deployment
    from harness.measuring.matrix.rows import build

    deployment = get_deployment("resnet_npu")
    record = {
        **_pair("classify_efficientnet_lite0-jpeg", 1, (0.7, 0.8), "r1", "05:00"),
        "model": "classify_efficientnet_lite0",
        "variant": "x",
    }
    data = build([record], [deployment], [])["resnet_npu"]
    assert data["extra"] == [] and not any(r.get("comparison") for r in data["rows"])
    assert data["processing_pairs"] == [record]
