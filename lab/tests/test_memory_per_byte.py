"""python -m harness memory-per-byte: its arithmetic and request growing (no server), and one
short run on the toy echo model behind the gate."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from harness.testing.toy_models import echo_repository
from harness.tests.repositories import ready_server
from harness_lab.reliability.memory_per_byte import (
    MIB,
    arguments,
    batch_sizes,
    bytes_per_byte,
    flat_image,
    growers,
    longer_element,
    markdown,
    measure_model,
    mixed_requests,
    noise_image,
    peak_growth,
    safe_limit,
    summarize,
    target_sizes,
)

GIB = 2**30


def test_peak_ratio_and_limit_arithmetic():
    assert peak_growth([100.0, 130.0, 120.0], 100.0) == 30.0
    assert peak_growth([90.0, 95.0], 100.0) == 0.0  # RSS fell: no growth
    assert bytes_per_byte(300 * MIB, 60 * MIB) == 5.0
    assert bytes_per_byte(600 * MIB, 60 * MIB, concurrency=4) == 2.5
    assert bytes_per_byte(5 * MIB, 0) == 0.0
    # 12 GiB for 4 requests of 5 bytes per byte: 614.4 MiB each.
    assert safe_limit(12 * GIB, 4, 5.0) == int(12 * GIB / 20)
    assert safe_limit(12 * GIB, 4, 0.0) is None


def test_sizes_grow_geometrically_to_just_under_the_limit():
    sizes = target_sizes(1000, 64 * MIB, steps=4)
    assert len(sizes) == 4 and sizes == sorted(sizes) and sizes[-1] == int(0.95 * 64 * MIB)
    assert all(b / a > 10 for a, b in zip(sizes, sizes[1:]))
    assert target_sizes(64 * MIB, 64 * MIB) == []
    assert batch_sizes(8, 3) == [2, 4, 8]
    assert batch_sizes(1) == [] and batch_sizes(0) == []


def row(mode, request_bytes, concurrency, growth_mib):
    ratio = bytes_per_byte(growth_mib * MIB, request_bytes, concurrency)
    return {
        "mode": mode,
        "request_bytes": request_bytes,
        "concurrency": concurrency,
        "peak_growth_mib": growth_mib,
        "server_growth_mib": growth_mib / 2,
        "bytes_per_byte": ratio,
    }


def test_summary_takes_the_worst_ratio_over_large_bodies_and_judges_the_limit():
    rows = [
        row("base", 200, 1, 5.0),  # 26,000 B/B: within the sampling noise, not counted
        row("long:TEXT", 60 * MIB, 1, 300.0),  # 5 B/B
        row("long:TEXT", 60 * MIB, 4, 720.0),  # 3 B/B
        row("pixels:IMAGE", 900_000, 1, 150.0),  # worst single request, under min_bytes
        {"mode": "long:TEXT", "refused_by_gate": "over the limit"},
    ]
    summary = summarize(rows, 64 * MIB, budget_bytes=12 * GIB, concurrency=4, min_bytes=MIB)
    assert summary["worst_bytes_per_byte"] == 5.0 and summary["worst_server_bytes_per_byte"] == 2.5
    assert summary["worst_at"] == {"mode": "long:TEXT", "request_bytes": 60 * MIB, "concurrency": 1}
    assert summary["safe_limit_bytes"] == int(12 * GIB / 20)
    assert summary["current_limit_safe"] is True and summary["safe_basis"] == "measured up to the limit"
    aborted = summarize(rows, 64 * MIB, budget_bytes=12 * GIB, concurrency=4, min_bytes=MIB, aborted=True)
    assert aborted["current_limit_safe"] is False and aborted["safe_basis"] == "aborted"
    assert summary["worst_request_growth_mib"] == 300.0
    assert summary["largest_accepted_bytes"] == 60 * MIB
    # A 1 GiB limit (not measured up to it) would let 4 requests of 5 B/B take 20 GiB: not safe.
    assert summarize(rows, GIB, budget_bytes=12 * GIB, concurrency=4, min_bytes=MIB)["current_limit_safe"] is False
    # A small request that grows 4 GiB: 4 of them exceed the budget whatever the body limit.
    heavy = [*rows, row("pixels:IMAGE", 900_000, 1, 4096.0)]
    assert (
        summarize(heavy, 64 * MIB, budget_bytes=12 * GIB, concurrency=4, min_bytes=MIB)["current_limit_safe"] is False
    )
    assert (
        summarize(rows[:1], 64 * MIB, budget_bytes=12 * GIB, concurrency=4, min_bytes=MIB)["current_limit_safe"] is None
    )


def test_grown_elements_stay_valid_text_and_images():
    text = "一只狗在草地上奔跑".encode()
    longer = longer_element(text, 10_000)
    assert 9_000 < len(longer) <= 10_000 and longer.decode("utf-8").split(" ")[0] == text.decode()
    jpeg = noise_image("JPEG", 200_000)
    assert jpeg[:3] == b"\xff\xd8\xff" and 100_000 < len(jpeg) < 400_000
    assert longer_element(jpeg, 50_000)[:3] == b"\xff\xd8\xff"
    flat = flat_image("PNG", 1_000_000)
    with Image.open(io.BytesIO(flat)) as image:
        assert image.size == (1000, 1000)
    assert len(flat) < 100_000  # large decode, small body


def test_growers_follow_the_config():
    config = {
        "max_batch_size": 8,
        "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [-1]}],
    }
    base = {"TEXT": np.array([[b"hello world"]], dtype=np.object_)}
    made = {g.mode: g for g in growers(config, base, 200, 10 * MIB, 3)}
    assert set(made) == {"batch", "elements:TEXT", "long:TEXT"}
    assert made["batch"].targets == [2, 4, 8] and made["batch"].make(4)["TEXT"].shape == (4, 1)
    assert made["elements:TEXT"].make(2000)["TEXT"].shape == (1, 10)
    assert len(made["long:TEXT"].make(100_000)["TEXT"][0, 0]) > 90_000
    tensors = {
        "max_batch_size": 0,
        "input": [{"name": "input_ids", "data_type": "TYPE_INT64", "dims": [-1, -1]}],
    }
    grown = growers(tensors, {"input_ids": np.ones((1, 16), np.int64)}, 200, MIB, 2)
    assert [g.mode for g in grown] == ["length:input_ids"]
    assert grown[0].make(2000)["input_ids"].shape == (10, 16)  # first variable dim


def test_mixed_bursts_are_half_base_half_full_batches_of_long_rows():
    text_config = {"max_batch_size": 8, "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}]}
    base = {"TEXT": np.array([[b"a short query"]], dtype=np.object_)}
    burst = mixed_requests(text_config, base, None, 4)
    longs = [r for r in burst if r is not base]
    assert len(burst) == 4 and len(longs) == 2
    lengths = [len(t) for t in longs[0]["TEXT"].reshape(-1)]
    assert longs[0]["TEXT"].shape == (8, 1) and min(lengths) >= 1024 and len(set(lengths)) > 1
    ids_config = {
        "max_batch_size": 4,
        "input": [
            {"name": "input_ids", "data_type": "TYPE_INT64", "dims": [-1]},
            {"name": "attention_mask", "data_type": "TYPE_INT64", "dims": [-1]},
        ],
    }
    ids = {"input_ids": np.arange(6).reshape(1, 6), "attention_mask": np.ones((1, 6), np.int64)}
    for request in mixed_requests(ids_config, ids, {"input_ids": [512], "attention_mask": [512]}, 3):
        if request is ids:
            continue
        assert request["input_ids"].shape == request["attention_mask"].shape
        rows, length = request["input_ids"].shape
        assert rows == 4 and 128 <= length <= 512 and request["input_ids"][0, 7] == 1
    assert mixed_requests({"max_batch_size": 0, "input": []}, ids, None, 4) is None


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    repo = echo_repository(tmp_path_factory.mktemp("memory-per-byte"))
    with ready_server(repo, ["echo"]) as server:
        yield server


@pytest.mark.timeout(120)
def test_echo_behind_the_gate_grows_with_its_requests(echo_server):
    args = arguments().parse_args(["--steps", "2", "--max-bytes", str(4 * MIB), "--concurrency", "2", "--warmup", "1"])
    report = measure_model(echo_server, None, "echo", args, budget_bytes=12 * GIB)
    modes = {r["mode"] for r in report["rows"] if "peak_growth_mib" in r}
    assert {"base", "batch", "long:TEXT"} <= modes, report["rows"]
    sent = [r for r in report["rows"] if "peak_growth_mib" in r]
    assert all(r["statuses"] == ["200"] for r in sent), sent
    largest = max(sent, key=lambda r: r["request_bytes"])
    assert 3 * MIB < largest["request_bytes"] <= 4 * MIB
    # The echo model holds its input in tritonserver and the stub (and answers it back): it grows.
    assert largest["peak_growth_mib"] > 1 and largest["samples"] > 1
    assert report["current_limit_bytes"] > 4 * MIB and report["worst_bytes_per_byte"] > 0
    table = markdown(
        {
            "budget_fraction": 0.5,
            "machine_memory_gib": 24,
            "budget_gib": 12,
            "budget_concurrency": 4,
            "min_bytes": MIB,
            "models": [{"deployment": "toy", **report}],
        }
    )
    assert "| toy | echo |" in table
