"""Shared by the docker-mode tests (their ``image`` fixture is in conftest.py): the engine (None when
none answers), the ``needs_engine`` skip, and the check that a start fails at once with a one-line error.

Tests that need an engine are skipped, with the reason, only when no Docker engine answers
(`make docker-engine` starts one); where an engine answers, the image must have been built
(`make image`): a missing image is a failure, not a skip.
"""

from __future__ import annotations

import time

import pytest

from harness.serving.launchers.docker_engine import DockerStartError, engine

START_BUDGET_S = 15  # every pre-flight error must come this fast: no waiting for readiness


def _engine_or_none():
    try:
        return engine(timeout_s=5)
    except DockerStartError:
        return None


ENGINE = _engine_or_none()
needs_engine = pytest.mark.skipif(ENGINE is None, reason="no Docker engine answers: `make docker-engine` starts one")


def assert_one_line_error(server, *needles: str) -> str:
    """``server.start()`` fails within START_BUDGET_S with a one-line DockerStartError naming ``needles``."""
    began = time.monotonic()
    with pytest.raises(DockerStartError) as caught:
        server.start()
    elapsed = time.monotonic() - began
    message = str(caught.value)
    assert "\n" not in message, f"not one line: {message!r}"
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert elapsed < START_BUDGET_S, f"the error took {elapsed:.1f} s"
    assert server.container is None
    return message
