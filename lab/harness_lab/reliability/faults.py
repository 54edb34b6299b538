"""Faults under verified load (``harness.measuring.loadgen``): kill a Python stub, unload +
reload a model, stop + restart the server; what the clients saw (errors, their window, when service
was back, wrong answers). What tritonserver does in each: lab/docs/reliability.md.

    python -m harness faults --deployment <d>   # all scenarios on the model of <d>'s [reliability] table
    python -m harness faults --deployment <d> --scenario kill_stub --model <entry model>
    python -m harness faults --write-docs       # only regenerate lab/docs/reliability.md's results
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections import Counter

import tritonclient.http as httpclient

from harness.measuring.loadgen import LoadLog, Workload, run_checked_load
from harness.testing.processes import stub_processes
from harness.testing.servers import model_server, restarted, started, stop_server
from harness_lab.reliability.report import NoReports, faults_section, write_docs, write_json
from harness_lab.reliability.servers import checked_workload, chosen_target, target_parser

SCENARIOS = ("kill_stub", "unload_reload", "restart_server")


# -- what the clients saw -------------------------------------------------------------------
def client_view(log: LoadLog, fault_at: float) -> dict:
    """Errors after the fault, their window, the time until service was back, wrong answers."""
    after = log.select(ended_from=fault_at)
    bad = [r for r in after if r.status != "ok"]
    messages = Counter(r.detail.split("\n")[0][:160] for r in bad)
    last_bad_end = max((r.end for r in bad), default=None)
    back = None
    if last_bad_end is not None:
        oks = [r.end for r in after if r.status == "ok" and r.start >= last_bad_end - 1e-3]
        back = round(min(oks) - fault_at, 2) if oks else None
    return {
        "requests_total": log.count(),
        "ok_total": log.count("ok"),
        "requests_after_fault": len(after),
        "errors": sum(1 for r in bad if r.status == "error"),
        "timeouts": sum(1 for r in bad if r.status == "timeout"),
        "wrong_answers": log.count("wrong"),
        "first_error_s": round(min(r.end for r in bad) - fault_at, 2) if bad else None,
        "last_error_s": round(last_bad_end - fault_at, 2) if bad else None,
        "service_back_s": back if bad else 0.0,
        "error_messages": dict(messages.most_common(5)),
        "wrong_examples": [r.detail for r in log.select("wrong")][:3],
    }


def _outcome(info: dict, log: LoadLog, marks: dict[str, str], back: str) -> dict:
    """``info`` with what the clients saw, each of ``marks`` (key: event) in seconds after the fault,
    and ``recovered``: no error after event ``back`` (when it happened), else none after the fault."""
    info.update(client_view(log, log.events["fault"]))
    info.update(
        {key: round(log.events[event] - log.events["fault"], 2) for key, event in marks.items() if event in log.events}
    )
    if back in log.events:
        info[f"errors_after_{back}"] = log.count("failed", started_from=log.events[back])
    info["recovered"] = info.get(f"errors_after_{back}", info["errors"]) == 0
    return info


def _reload(server, client, model: str, log: LoadLog, unloaded: str, loaded: str) -> None:
    """Unload ``model``, wait until it is gone (event ``unloaded``), load it again (event ``loaded``)."""
    admin = dict(getattr(server, "admin_headers", {}) or {})
    client.unload_model(model, headers=admin)
    _wait(lambda: not client.is_model_ready(model), 60)
    log.events[unloaded] = time.monotonic()
    client.load_model(model, headers=admin)
    log.events[loaded] = time.monotonic()


def _wait(predicate, timeout_s: float | None, interval_s: float = 0.1, stop: threading.Event | None = None) -> bool:
    """Poll ``predicate`` every ``interval_s`` until it is true (True), or ``timeout_s`` passed or
    ``stop`` was set (False); a predicate that raises counts as false (server busy or restarting)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while (deadline is None or time.monotonic() < deadline) and not (stop and stop.is_set()):
        try:
            if predicate():
                return True
        except Exception:  # noqa: BLE001 - server busy or restarting
            pass
        time.sleep(interval_s)
    return False


class ReadinessWatch(threading.Thread):
    """Polls ``/v2/health/ready`` (what probes and load balancers read) every ``interval_s``
    from ``since``: when it first answered not-ready, and when it was ready again after that."""

    STATES = {"not_ready_after_s": False, "ready_again_after_s": True}

    def __init__(self, http_url: str, since: float, interval_s: float = 0.05):
        super().__init__(daemon=True)
        self.url, self.since, self.interval_s = http_url, since, interval_s
        self.seen: dict[str, float] = {}
        self.halt = threading.Event()
        self.start()

    def run(self) -> None:
        with httpclient.InferenceServerClient(self.url, connection_timeout=1, network_timeout=1) as client:

            def ready() -> bool:
                try:
                    return bool(client.is_server_ready())
                except Exception:  # noqa: BLE001 - a server that does not answer is not ready
                    return False

            for key, wanted in self.STATES.items():
                if not _wait(lambda wanted=wanted: ready() == wanted, None, self.interval_s, self.halt):
                    return
                self.seen[key] = round(time.monotonic() - self.since, 2)

    def stop(self) -> dict:
        self.halt.set()
        self.join(5)
        return {key: self.seen.get(key) for key in self.STATES}


# -- scenarios --------------------------------------------------------------------------------
def _unattended_then_remedy(server, stub_model: str, log: LoadLog, info: dict, unattended_s: float) -> None:
    """After a stub was killed: ``unattended_s`` of watching whether Triton replaced it and the errors
    stopped; if not, the operator's remedy (unload + load of ``stub_model``). Findings into ``info``."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        time.sleep(unattended_s)
        info["ready_flag_while_broken"] = bool(client.is_model_ready(stub_model))
        window_end = time.monotonic()
        info["errors_in_last_second_unattended"] = log.count(
            "failed", ended_from=window_end - 1.0, ended_before=window_end
        )
        info["stub_restarted_by_triton"] = any(
            p.pid not in info["stubs_before"] for p in stub_processes(server.process.pid, stub_model)
        )
        # Recovered only when the dead stub was replaced: a quiet second proves nothing, since
        # the dynamic batcher may not have sent a batch to the dead instance in it.
        info["recovered_by_itself"] = info["stub_restarted_by_triton"] and info["errors_in_last_second_unattended"] == 0
        if info["recovered_by_itself"]:
            return
        # A plain load of the (unchanged) loaded model was seen to return at once without
        # replacing the dead stub; unload + load always replaced it.
        log.events["remedy"] = time.monotonic()
        _reload(server, client, stub_model, log, "remedy_unloaded", "remedy_done")
        info["remedy"] = f"unload + load of {stub_model} (POST /v2/repository/models/{stub_model}/unload, /load)"
        info["remedy_call_s"] = round(log.events["remedy_done"] - log.events["remedy"], 2)


def kill_stub(
    server,
    workload: Workload,
    *,
    stub_model: str | None = None,
    concurrency: int = 16,
    before_s: float = 2.0,
    unattended_s: float = 4.0,
    after_s: float = 3.0,
) -> dict:
    """SIGKILL one stub process of ``stub_model`` (default: the workload's model) under load;
    watch ``unattended_s`` for self-recovery (behind the harness's gate: readiness false and an
    automatic reload); then reload the model (the operator's remedy) if still broken. Also
    records when ``/v2/health/ready`` first said not-ready and when it was ready again."""
    stub_model = stub_model or workload.model
    info: dict = {
        "scenario": "kill_stub",
        "model": workload.model,
        "killed_stub_of": stub_model,
        "concurrency": concurrency,
    }

    def during(log: LoadLog) -> None:
        time.sleep(before_s)
        stubs = stub_processes(server.process.pid, stub_model)
        if not stubs:
            raise RuntimeError(f"no stub process of {stub_model} under server {server.process.pid}")
        info["stubs_before"] = [p.pid for p in stubs]
        victim = stubs[0]
        log.events["fault"] = time.monotonic()
        watch = ReadinessWatch(server.http_url, log.events["fault"])
        victim.send_signal(signal.SIGKILL)
        info["killed_pid"] = victim.pid
        _unattended_then_remedy(server, stub_model, log, info, unattended_s)
        time.sleep(after_s)
        info.update(watch.stop())
        info["gate"] = bool(getattr(server, "gate", False))
        info["stubs_after"] = [p.pid for p in stub_processes(server.process.pid, stub_model)]

    log = run_checked_load(workload, server.http_url, concurrency=concurrency, during=during)
    _outcome(info, log, {"remedy_at_s": "remedy"}, "remedy_done")
    info["recovered"] = info["recovered"] or info["recovered_by_itself"]
    return info


def unload_reload(
    server, workload: Workload, *, concurrency: int = 16, before_s: float = 2.0, after_s: float = 3.0
) -> dict:
    """Unload the model under load, wait until it is gone, load it again."""
    info: dict = {"scenario": "unload_reload", "model": workload.model, "concurrency": concurrency}

    def during(log: LoadLog) -> None:
        time.sleep(before_s)
        with httpclient.InferenceServerClient(server.http_url, network_timeout=300) as client:
            log.events["fault"] = time.monotonic()
            _reload(server, client, workload.model, log, "unloaded", "load_returned")
        time.sleep(after_s)

    log = run_checked_load(workload, server.http_url, concurrency=concurrency, during=during)
    return _outcome(info, log, {"unload_s": "unloaded", "load_returned_s": "load_returned"}, "load_returned")


def restart_server(
    server,
    workload: Workload,
    *,
    concurrency: int = 16,
    before_s: float = 2.0,
    after_s: float = 3.0,
) -> tuple[dict, object]:
    """Stop the server (SIGTERM, as an orchestrator does) under load and start a new one on the
    same ports. Returns (report, the new server)."""
    info: dict = {"scenario": "restart_server", "model": workload.model, "concurrency": concurrency}
    holder = {"server": server}

    def during(log: LoadLog) -> None:
        time.sleep(before_s)
        log.events["fault"] = time.monotonic()
        old = holder["server"]
        old.stop()
        log.events["stopped"] = time.monotonic()
        new = restarted(old)
        holder["server"] = new
        new.start()
        new.wait_ready()
        log.events["ready"] = time.monotonic()
        time.sleep(after_s)

    log = run_checked_load(workload, server.http_url, concurrency=concurrency, during=during)
    return _outcome(info, log, {"stop_s": "stopped", "ready_again_s": "ready"}, "ready"), holder["server"]


# -- CLI ------------------------------------------------------------------------------------------
def run_all(
    deployment: str,
    model: str,
    scenarios: list[str],
    concurrency: int,
    stub_model: str | None = None,
    workload_reference: str | None = None,
) -> list[dict]:
    """Every scenario on one server of ``deployment`` (subset: ``model`` + dependencies, explicit mode)."""
    server = started(model_server(deployment, model, model_control_mode="explicit"))
    reports = []
    try:
        workload = checked_workload(deployment, model, server.http_url, workload_reference)
        for name in scenarios:
            began = time.monotonic()
            if name == "kill_stub":
                report = kill_stub(server, workload, stub_model=stub_model, concurrency=concurrency)
            elif name == "unload_reload":
                report = unload_reload(server, workload, concurrency=concurrency)
            else:
                report, server = restart_server(server, workload, concurrency=concurrency)
            report.update(
                deployment=deployment, concurrency=concurrency, scenario_wall_s=round(time.monotonic() - began, 1)
            )
            reports.append(report)
            print(format_fault(report), flush=True)
    finally:
        stop_server(server)
    return reports


def format_fault(r: dict) -> str:
    """One scenario's report as the docs' faults section gives it (``report.faults_section``)."""
    return "\n".join(faults_section([r]))


def main(argv: list[str] | None = None) -> int:
    parser = target_parser(__doc__, "faults.json", concurrency=16)
    parser.add_argument("--stub-model", default=None, help="whose stub to kill (default: --model)")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS)
    parser.add_argument("--write-docs", action="store_true", help="only regenerate lab/docs/reliability.md's results")
    args = parser.parse_args(argv)
    if args.write_docs:
        try:
            print(write_docs())
        except NoReports as exc:
            print(exc, file=sys.stderr)
            return 2
        return 0
    deployment, model = chosen_target(parser, args)
    scenarios = args.scenario or list(SCENARIOS)
    reports = run_all(deployment, model, scenarios, args.concurrency, args.stub_model, args.workload)
    write_json(reports, args.json)
    return 0 if all(r["recovered"] and not r["wrong_answers"] for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
