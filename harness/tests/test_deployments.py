"""Every deployment's checks and benchmark scenarios, as tests ids ``<deployment>-<name>``.

``pytest harness/ -k <deployment>`` runs exactly that deployment's correctness, bad-input and
throughput tests against a real server.
"""

from __future__ import annotations

import http.client
import json

import pytest

from harness.deployments import discover_with_errors
from harness.measuring.bench import run_benchmark
from harness.repository import config_from_json
from harness.session import variant_key
from harness.tests.standard_checks import KINDS, bad_requests
from triton_gate.validate import DEFAULT_MAX_BODY, body_limit

DEPLOYMENTS, BROKEN = discover_with_errors()


@pytest.mark.parametrize("folder", sorted(BROKEN), ids=[p.name for p in sorted(BROKEN)])
def test_deployment_manifest_loads(folder):
    """A deployment folder that cannot be loaded fails here, with its error; the others still run."""
    pytest.fail(BROKEN[folder], pytrace=False)


CHECKS = [
    pytest.param(deployment, name, id=f"{deployment.name}-{name}")
    for deployment in DEPLOYMENTS
    for name in deployment.checks()
]

# A benchmark of a config variant (its own server per variant) is marked ``variant_benchmark``:
# `make test` leaves these smokes to `make test-variants` (a CI stage of its own).
BENCHMARKS = [
    pytest.param(
        deployment,
        benchmark,
        id=f"{deployment.name}-{benchmark.id}",
        marks=[pytest.mark.variant_benchmark] if benchmark.config else [],
    )
    for deployment in DEPLOYMENTS
    for benchmark in deployment.benchmarks
]


def _context(server_pool, deployment, request, config=None, models=()):
    target = request.config.getoption("--target")
    if target not in deployment.targets:
        pytest.skip(f"{deployment.name} does not support target {target}")
    return server_pool.context(deployment, config, models)


def _skip_unexported(deployment, config) -> None:
    """Skip a config variant whose model file this machine's export did not write (its gate)."""
    missing = deployment.unexported_files(config)
    if missing:
        pytest.skip(
            f"{', '.join(missing)} was not exported here (its export step or gate; see {deployment.name}'s README)"
        )


def _checked_config(deployment, request):
    """The config overrides ``--config-variant`` names for this deployment (None: its own configs)."""
    variant = request.config.getoption("--config-variant")
    if not variant:
        return None
    found = [b for b in deployment.benchmarks if b.id == variant]
    if not found or not found[0].config:
        pytest.skip(f"{deployment.name} has no config variant {variant!r}")
    _skip_unexported(deployment, found[0].config)
    return found[0].config


@pytest.mark.parametrize(("deployment", "check"), CHECKS)
def test_check(server_pool, deployment, check, request):
    """One correctness or bad-input check of a deployment, on its real server (or on the config
    variant ``--config-variant`` names, every model loaded)."""
    ctx = _context(server_pool, deployment, request, _checked_config(deployment, request))
    deployment.checks()[check](ctx)


@pytest.mark.benchmark
@pytest.mark.parametrize(("deployment", "benchmark"), BENCHMARKS)
def test_benchmark(server_pool, deployment, benchmark, request):
    """A short run of one benchmark scenario: no errors under load, records written."""
    target = request.config.getoption("--target")
    if benchmark.targets and target not in benchmark.targets:
        pytest.skip(f"{benchmark.id} is not defined for target {target}")
    if benchmark.config and request.config.getoption("--server-mode") == "external":
        pytest.skip(f"{benchmark.id} measures a config variant: needs a server the harness starts")
    _skip_unexported(deployment, benchmark.config)
    ctx = _context(server_pool, deployment, request, benchmark.config, benchmark.models)
    duration = request.config.getoption("--bench-duration")
    try:
        records = run_benchmark(ctx, benchmark, duration_s=duration, warmup_s=min(1.0, duration / 2))
    finally:
        if benchmark.config:
            server_pool.release(variant_key(deployment, benchmark.config))
    for row in records:
        assert row["errors"] == 0, f"{benchmark.id} at concurrency {row['concurrency']}: {row['first_error']}"
        assert row["requests"] > 0, f"{benchmark.id} at concurrency {row['concurrency']}: no request completed"


STANDARD = [
    pytest.param(deployment, model, kind, id=f"{deployment.name}-{model}-{kind}")
    for deployment in DEPLOYMENTS
    for model in deployment.entry_models
    for kind in KINDS
]


@pytest.mark.parametrize(("deployment", "model", "kind"), STANDARD)
def test_standard_bad_input(server_pool, deployment, model, kind, request):
    """Empty, undecodable and oversized requests to every entry model (harness.tests.standard_checks):
    a 4xx that says what is wrong (``empty`` may also be answered), never a 5xx; the server stays ready."""
    ctx = _context(server_pool, deployment, request, _checked_config(deployment, request))
    with ctx.http_client() as client:
        config = config_from_json(client.get_model_config(model))
    cases = {case.kind: case for case in bad_requests(config)}
    if kind not in cases:
        pytest.skip(f"{model} has no input that can be {kind}")
    case = cases[kind]
    host, port = ctx.server.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        connection.putrequest("POST", f"/v2/models/{model}/infer")
        if case.body is None:
            if not getattr(ctx.server, "gate", False):
                pytest.skip("no front gate in front of this server: nothing bounds the body")
            policy = ctx.server.options.gate_policy
            limit = body_limit(config, DEFAULT_MAX_BODY, policy.max_body_bytes.get(model) if policy else None)
            connection.putheader("Content-Length", str(limit + 1))
            connection.endheaders(b"{")
        else:
            connection.putheader("Content-Length", str(len(case.body)))
            if case.header_length is not None:
                connection.putheader("Inference-Header-Content-Length", str(case.header_length))
            connection.endheaders(case.body)
        response = connection.getresponse()
        status, text = response.status, response.read().decode(errors="replace")
    finally:
        connection.close()
    assert status in case.statuses, f"{model} {kind}: HTTP {status} {text[:300]}"
    if status != 200:
        assert json.loads(text).get("error"), f"{model} {kind}: no error message in {text[:300]}"
    ctx.assert_healthy()
