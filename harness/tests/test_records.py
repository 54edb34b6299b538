"""The record type: required keys refused when missing, schema version stamped on every line."""

from __future__ import annotations

import pytest

from harness.measuring.records import REQUIRED, SCHEMA, RecordError, append_record, read_records

COMPLETE = {
    "deployment": "d",
    "benchmark": "b",
    "model": "m",
    "variant": "v",
    "target": "cpu",
    "generator": "wrk",
    "concurrency": 4,
    "items_per_second": 12.5,
}


def test_a_record_gets_schema_timestamp_and_machine(tmp_path):
    path = append_record(dict(COMPLETE), tmp_path / "records.jsonl")
    (line,) = read_records(path)
    assert line["schema"] == SCHEMA and line["timestamp"] and line["machine"]["cpu_cores"] >= 1
    assert line["load_average_1m"] >= 0, "every record says how busy the machine was"
    assert {k: line[k] for k in COMPLETE} == COMPLETE


@pytest.mark.parametrize("key", REQUIRED)
def test_a_record_without_a_required_key_is_refused_naming_it(tmp_path, key):
    record = {k: v for k, v in COMPLETE.items() if k != key}
    with pytest.raises(RecordError, match=key):
        append_record(record, tmp_path / "records.jsonl")
    assert not (tmp_path / "records.jsonl").exists()
