"""The harness's pytest plugin (harness/conftest.py and lab/conftest.py load it): options, one server per
deployment per session (started lazily), the ``server`` marker kept honest: tests using a fixture of
``SERVER_FIXTURES`` or marked themselves start a tritonserver; an unmarked test that starts one fails
(``pytest -m "not server"`` stays fast)."""

from __future__ import annotations

import os

import pytest

from harness import PROJECT_ROOT
from harness.serving.launchers import MODES, DockerTritonServer, LocalTritonServer, default_mode
from harness.session import ServerPool
from harness.testing import outcomes as pytest_outcomes

TEST_RUN_RESULTS = PROJECT_ROOT / "results" / "test-runs"
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


class UnmarkedServerStart(RuntimeError):
    pass


def pytest_addoption(parser):
    group = parser.getgroup("triton harness")
    env = os.environ.get
    options = {
        ("--server-mode", "--mode"): dict(
            dest="server_mode",
            choices=MODES,
            default=default_mode(),
            help="how to get a tritonserver (default: $TRITON_SERVER_MODE or local)",
        ),
        ("--target",): dict(
            default=env("TRITON_TARGET", "cpu"), help="cpu / gpu / npu (default: $TRITON_TARGET or cpu)"
        ),
        ("--server-url",): dict(
            default=env("TRITON_SERVER_URL"), help="HTTP host:port of a running server (external mode)"
        ),
        ("--grpc-url",): dict(
            default=env("TRITON_GRPC_URL"), help="gRPC host:port of a running server (external mode)"
        ),
        ("--image",): dict(
            default=env("TRITON_IMAGE"),
            help="docker mode: the tritonserver image (default: $TRITON_IMAGE, else the target's: "
            "the CPU image of `make image` for cpu)",
        ),
        ("--record-results",): dict(
            action="store_true",
            help="append benchmark records and check outcomes to results/ for `make matrix` "
            "(default: results/test-runs/, which the matrix does not read)",
        ),
        ("--config-variant",): dict(
            default=None,
            metavar="BENCHMARK",
            help="run the checks and bad-input tests on the config variant of the deployment's benchmark "
            "BENCHMARK ([benchmarks.config.*]: e.g. a model on the openvino backend), all models loaded; "
            "deployments without that benchmark are skipped",
        ),
        ("--bench-duration",): dict(
            type=float,
            default=float(env("BENCH_DURATION", "2")),
            help="seconds measured per concurrency level in benchmark tests (default 2)",
        ),
    }
    for flags, settings in options.items():
        group.addoption(*flags, **settings)


@pytest.fixture(scope="session")
def server_pool(request):
    """Servers by deployment; each started on first use, all stopped at the end."""
    config = request.config
    pool = ServerPool(
        mode=config.getoption("--server-mode"),
        target=config.getoption("--target"),
        url=config.getoption("--server-url"),
        grpc_url=config.getoption("--grpc-url"),
        image=config.getoption("--image"),
    )
    config.stash[START_TIMES] = pool.start_times
    yield pool
    pool.close()


START_TIMES = pytest.StashKey[dict]()


def pytest_terminal_summary(terminalreporter, config):
    """Print how long each deployment's server took from start to ready."""
    times = config.stash.get(START_TIMES, {})
    if times:
        terminalreporter.section("tritonserver start to ready")
        for key, seconds in times.items():
            terminalreporter.write_line(f"{seconds:6.1f} s  {key}")


def pytest_configure(config):
    """Test runs write their records and check outcomes to results/test-runs/ (never read by
    `make matrix`) unless --record-results or $HARNESS_RESULTS_DIR says otherwise."""
    if not config.getoption("--record-results") and not os.environ.get("HARNESS_RESULTS_DIR"):
        os.environ["HARNESS_RESULTS_DIR"] = str(TEST_RUN_RESULTS)
    pytest_outcomes.pytest_configure(config)


def pytest_collection_modifyitems(config, items):
    """Mark the tests that start a tritonserver ``server`` (``pytest -m "not server"``: unit tests only):
    those whose fixture closure holds one of ``SERVER_FIXTURES``."""
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


@pytest.fixture(autouse=True)
def _unmarked_tests_start_no_server(request, monkeypatch):
    """An unmarked test that starts a server fails, so that ``-m "not server"`` stays fast and honest."""
    if request.node.get_closest_marker("server") is not None:
        return
    node_id = request.node.nodeid

    def refuse(self, *args, **kwargs):
        raise UnmarkedServerStart(
            f"{node_id} starts a tritonserver but is not marked: add @pytest.mark.server (or use a fixture "
            "listed in harness/testing/pytest_plugin.py SERVER_FIXTURES)"
        )

    for launcher in (LocalTritonServer, DockerTritonServer):
        monkeypatch.setattr(launcher, "start", refuse)
