"""pytest plugin: the outcome of every deployment check, appended to ``results/test_outcomes.jsonl``
for the results matrix's ``correctness`` column (registered by harness/conftest.py;
``pytest -p harness.testing.outcomes`` elsewhere)."""

from __future__ import annotations

import datetime as dt
import json

from harness.measuring.records import OUTCOMES_FILE, results_dir


class OutcomeRecorder:
    """Appends one JSON line per ``test_check[...]`` outcome (its call, or a setup that failed)."""

    def __init__(self, config):
        self.config = config
        self.path = results_dir() / OUTCOMES_FILE

    def _option(self, name: str, default: str) -> str:
        return self.config.getoption(name, default) or default

    def pytest_runtest_logreport(self, report):
        if "::test_check[" not in report.nodeid:
            return
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            param = report.nodeid.split("[", 1)[1].rstrip("]")
            row = {
                "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "nodeid": report.nodeid,
                "param": param,
                "outcome": report.outcome,
                "duration_s": round(report.duration, 3),
                "target": self._option("--target", "cpu"),
                "server_mode": self._option("--server-mode", "local"),
            }
            if self._option("--config-variant", ""):
                row["config_variant"] = self._option("--config-variant", "")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as handle:
                handle.write(json.dumps(row) + "\n")


def pytest_configure(config):
    """Register the outcome recorder once."""
    if not config.pluginmanager.has_plugin("harness-outcomes"):
        config.pluginmanager.register(OutcomeRecorder(config), "harness-outcomes")
