"""The ``server`` marker: tests using a fixture of ``SERVER_FIXTURES`` or marked themselves start a
tritonserver; an unmarked test that starts one fails (``pytest -m "not server"`` stays fast)."""

from __future__ import annotations

import pytest

#: Fixtures (conftest's and the test modules') whose value is a started server or a stack of them.
SERVER_FIXTURES = frozenset(
    {
        "server_pool",
        "server",
        "running_server",
        "explicit_server",
        "default_server",
        "echo_server",
        "gated",
        "gated_container",
        "double_session",
        "packed",
        "embedding_limits_server",
        "stack",
    }
)


def mark_server_tests(items: list[pytest.Item]) -> None:
    """Add the ``server`` marker to every item whose fixture closure starts a server."""
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


class UnmarkedServerStart(RuntimeError):
    pass


def refuse_server_starts(monkeypatch: pytest.MonkeyPatch, node_id: str) -> None:
    """Make every launcher's ``start`` fail for the unmarked test ``node_id``."""
    from harness.serving.launchers import DockerTritonServer, LocalTritonServer

    def refuse(self, *args, **kwargs):
        raise UnmarkedServerStart(
            f"{node_id} starts a tritonserver but is not marked: add @pytest.mark.server (or use a fixture "
            "listed in harness/testing/markers.py SERVER_FIXTURES)"
        )

    for launcher in (LocalTritonServer, DockerTritonServer):
        monkeypatch.setattr(launcher, "start", refuse)
