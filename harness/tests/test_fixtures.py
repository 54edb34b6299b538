"""harness.fixtures: a fixture over the JSON limit is written as NPZ and read back the same."""

from __future__ import annotations

import numpy as np

from harness.fixtures import read_fixture, write_fixture


def test_small_fixture_is_json_large_one_npz_and_both_read_back(tmp_path):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(40, 384)).astype(np.float32)
    data = {"sentences": ["a", "b"], "embeddings": vectors.tolist(), "counts": [3, 4], "weights": {"m": "x"}}
    path = tmp_path / "expected.json"
    small = write_fixture(path, {"sentences": ["a"], "embeddings": vectors[:1].tolist()})
    assert small == path and read_fixture(path)["embeddings"] == vectors[:1].tolist()
    large = write_fixture(path, data, max_json_bytes=64 << 10)
    assert large == path.with_suffix(".npz") and not path.exists(), "the stale JSON file stays"
    assert large.stat().st_size < 0.5 * len(str(data)), "NPZ not smaller than the JSON text"
    back = read_fixture(path)
    assert back["sentences"] == ["a", "b"] and back["counts"] == [3, 4] and back["weights"] == {"m": "x"}
    np.testing.assert_array_equal(np.asarray(back["embeddings"], np.float32), vectors)
    write_fixture(path, {"small": [1.5]})
    assert path.exists() and not large.exists() and read_fixture(path) == {"small": [1.5]}
