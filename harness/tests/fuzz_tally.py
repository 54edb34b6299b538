"""Bookkeeping of the hostile-input fuzz (test_fuzz_preprocessing_*.py): the hypothesis settings, one
``attempt`` per case (a result or an InputError within the time bound, anything else fails), and the
counts written to ``results/reliability/fuzz.json`` for lab/docs/reliability.md (``make reliability``).

Bounded for the default suite: ``FUZZ_EXAMPLES`` (default 40) examples per property.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from triton_helpers.errors import InputError

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
TIME_BOUND_S = float(os.environ.get("FUZZ_TIME_BOUND_S", "10"))
RESULTS = Path(__file__).resolve().parents[2] / "results" / "reliability" / "fuzz.json"
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)

TALLY: dict = {"per_function": {}, "results": 0, "input_errors": 0, "slowest_s": 0.0}
#: Requests sent to served entry models (test_fuzz_preprocessing_served.py) and how they ended.
SERVED: dict = {"requests": 0, "models": set(), "outcomes": {}}


def attempt(name: str, function, *args, **kwargs):
    """Run one case: a result or an InputError within the time bound; anything else fails."""
    began = time.perf_counter()
    try:
        outcome = function(*args, **kwargs)
        TALLY["results"] += 1
    except InputError as exc:
        assert str(exc), f"{name}: InputError without a message"
        outcome = exc
        TALLY["input_errors"] += 1
    finally:
        elapsed = time.perf_counter() - began
        TALLY["per_function"][name] = TALLY["per_function"].get(name, 0) + 1
        TALLY["slowest_s"] = round(max(TALLY["slowest_s"], elapsed), 3)
    if elapsed >= TIME_BOUND_S:
        saved = _save_case(name, args)
        raise AssertionError(
            f"{name} took {elapsed:.1f} s on one input (bound {TIME_BOUND_S} s); input saved to {saved}"
        )
    return outcome


def _save_case(name: str, args) -> str | None:
    """Keep a slow input for reproduction (results/reliability/fuzz-slow-<function>-<crc>.bin)."""
    data = next((a for a in args if isinstance(a, (bytes, bytearray))), None)
    if data is None:
        return None
    path = RESULTS.parent / f"fuzz-slow-{name}-{zlib.crc32(data):08x}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


@pytest.fixture(scope="module", autouse=True)
def write_tally():
    """After each fuzz module: the counts so far into results/reliability/fuzz.json (autouse where imported)."""
    yield
    if not TALLY["per_function"] and not SERVED["requests"]:
        return
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    tally = TALLY if TALLY["per_function"] else {k: previous.get(k, TALLY[k]) for k in TALLY}
    record = {
        **tally,
        "total": sum(tally["per_function"].values()),
        "examples_per_property": EXAMPLES,
        "time_bound_s": TIME_BOUND_S,
        "served": previous.get("served"),
    }
    if SERVED["requests"]:
        record["served"] = {
            "requests": SERVED["requests"],
            "models": len(SERVED["models"]),
            "outcomes": SERVED["outcomes"],
        }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")
