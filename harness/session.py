"""Serving deployments: export what is missing, start a server per deployment, hand out contexts;
``for_each_scenario`` is the one loop over benchmark scenarios that every runner uses."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.context import DeploymentContext
from harness.deployments import Benchmark, Deployment, discover, get_deployment
from harness.manifest import ConfigOverrides
from harness.serving.launchers import create_server, default_mode
from harness.serving.launchers.base import ServerStartError
from harness.variants import describe, variant_repository


def variant_key(deployment: Deployment, config: dict[str, ConfigOverrides] | None = None) -> str:
    """Server key of a deployment, or of one config variant of it."""
    return f"{deployment.name}{describe(config) if config else ''}"


@dataclass(eq=False)
class ServerPool:
    """One server per deployment, started lazily on first use and stopped by ``close``."""

    mode: str | None = None
    target: str = "cpu"
    url: str | None = None
    grpc_url: str | None = None
    image: str | None = None
    #: Seconds each server took to become ready, by key.
    start_times: dict[str, float] = field(default_factory=dict, init=False)
    _contexts: dict[str, DeploymentContext] = field(default_factory=dict, init=False, repr=False)
    _variant_dirs: dict[str, Path] = field(default_factory=dict, init=False, repr=False)
    _failures: dict[str, BaseException] = field(default_factory=dict, init=False, repr=False)

    def context(
        self, deployment: Deployment, config: dict[str, ConfigOverrides] | None = None, models: tuple[str, ...] = ()
    ) -> DeploymentContext:
        """The deployment served on a ready server (export and start on first call).

        ``config`` overrides (see ``harness.variants``) serve a variant of the repository on
        its own server (only ``models`` when given); release it with ``release(key)`` where
        key is ``variant_key(...)``.
        """
        key = variant_key(deployment, config)
        if key in self._failures:
            raise ServerStartError(f"{key}: its server failed to start earlier in this session:\n{self._failures[key]}")
        if key not in self._contexts:
            try:
                self._contexts[key] = self._start(deployment, config, models, key)
            except Exception as exc:
                self._failures[key] = exc  # not retried in this session
                raise
        return self._contexts[key]

    def _start(
        self, deployment: Deployment, config: dict[str, ConfigOverrides] | None, models: tuple[str, ...], key: str
    ):
        """Export (a server the harness starts), write the variant's repository, start and wait ready."""
        mode = self.mode or default_mode()
        if config and mode == "external":
            raise ValueError("config variants need a server the harness starts (local or docker mode)")
        overrides = {}
        if config:
            deployment.export()  # before the variant links the exported files
            repository = variant_repository(deployment.model_repository, config, models=models)
            self._variant_dirs[key] = repository.parent
            overrides["model_repository"] = str(repository)
            if models:
                overrides["required_models"] = [m for m in deployment.entry_models if m in models]
        options = deployment.serving_options(mode, self.target, self.image, **overrides)
        server = create_server(self.mode, options, url=self.url, grpc_url=self.grpc_url)
        began = time.monotonic()
        try:
            server.start()
            server.wait_ready()
        except BaseException:
            server.stop()
            raise
        self.start_times[key] = time.monotonic() - began
        return DeploymentContext(deployment, server, self.target)

    def release(self, name: str) -> None:
        """Stop the server of one deployment."""
        context = self._contexts.pop(name, None)
        if context is not None:
            context.server.stop()
        variant_dir = self._variant_dirs.pop(name, None)
        if variant_dir is not None:
            shutil.rmtree(variant_dir, ignore_errors=True)

    def close(self) -> None:
        """Stop every server this pool started."""
        for name in list(self._contexts):
            self.release(name)


def for_each_scenario(
    pool: ServerPool,
    run: Callable[[Deployment, Benchmark, DeploymentContext], None],
    *,
    deployments: list[str] | None = None,
    target: str = "cpu",
    only: list[str] | None = None,
) -> list[str]:
    """Call ``run(deployment, benchmark, ctx)`` for each benchmark scenario of ``deployments`` (default:
    all) on ``target``, each on a server of ``pool`` (config variants on their own server, stopped
    after the scenario; a deployment's server stopped after its last scenario; a variant whose model
    file the export's gate did not write, skipped). One failing scenario does not stop the others:
    returns ``"<deployment>/<benchmark>: <error>"`` for each that failed. An ``only`` id that none
    of ``deployments`` has is refused before anything runs."""
    failed = []
    chosen = [get_deployment(name) for name in deployments] if deployments else discover()
    known = {b.id for deployment in chosen for b in deployment.benchmarks}
    unknown = sorted(set(only or ()) - known)
    if unknown:
        raise ValueError(f"--only: no benchmark {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    for deployment in chosen:
        if target not in deployment.targets:
            print(f"{deployment.name}: target {target} not supported, skipped", flush=True)
            continue
        for benchmark in deployment.benchmarks:
            if (benchmark.targets and target not in benchmark.targets) or (only and benchmark.id not in only):
                continue
            missing = deployment.unexported_files(benchmark.config)
            if missing:
                print(f"{deployment.name}/{benchmark.id}: skipped, not exported here: {', '.join(missing)}", flush=True)
                continue
            try:
                run(deployment, benchmark, pool.context(deployment, benchmark.config, benchmark.models))
            except Exception as exc:  # noqa: BLE001 - one broken scenario must not hide the others
                failed.append(f"{deployment.name}/{benchmark.id}: {type(exc).__name__}: {exc}")
                print(f"FAILED {failed[-1]}", file=sys.stderr, flush=True)
            finally:
                if benchmark.config:
                    pool.release(variant_key(deployment, benchmark.config))
        pool.release(deployment.name)
    return failed
