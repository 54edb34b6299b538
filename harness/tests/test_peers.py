"""Side-by-side bench logic: ratios taken round by round, length buckets of mixed-length batches."""

from __future__ import annotations

import pytest
from embedding_cpu_processing.bls import plan_batches

from harness.measuring.matrix import side_by_side as ratios


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


def test_latest_run_is_the_newest_one_with_the_text_model():
    old = [_record("embedding_onnx_text", [1], [1], run="old")]
    new = [dict(_record("embedding_onnx_text", [2], [1], run="new"), timestamp="2026-12-02T00:00:00+00:00")]
    peers_only = [dict(_record("infinity-torch", [3], [1], run="peers"), timestamp="2026-12-03T00:00:00+00:00")]
    assert ratios.latest_run(old + new + peers_only) == new
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
