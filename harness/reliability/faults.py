"""Faults under load: kill a Python stub, unload + reload a model, stop + restart the server.

Each scenario holds verified load (``harness.reliability.soak.run_checked_load``: every request's answer
is checked against its own expected answer) on one model, injects the fault, applies the
operator's remedy where Triton does not recover by itself, and reports what the clients saw:
how many errors, from when to when after the fault, how long until service was back, and
whether any request got a wrong answer or another request's answer (must be none).

Findings on tritonserver 2.51 (measured by these scenarios; see docs/reliability.md):

- A killed stub is NOT restarted: the model stays READY (``/v2/models/<m>/ready`` says true)
  while every request routed to the dead instance fails with ``Stub process '<m>_<i>' is not
  healthy``. The remedy is an unload + load of the model (explicit mode; a plain load of the
  unchanged model may be a no-op), or restarting the server (``--model-control-mode=none``).
- Unload during load: in-flight requests finish; new ones fail (``... is not found`` /
  ``unavailable``) until the load call returns.
- Stop during load: the server drains in-flight requests, refuses new ones, exits; clients
  see connection errors until the new server is ready.

    python -m harness.reliability.faults                          # all scenarios on embedding_cpu / embedding_onnx_text
    python -m harness.reliability.faults --scenario kill_stub --model embedding_onnx_text
    python -m harness.reliability.faults --write-docs             # only regenerate docs/reliability.md's results
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path

import tritonclient.http as httpclient

from harness.reliability.soak import (
    RESULTS_DIR,
    CheckedWorkload,
    LoadLog,
    deployment_server,
    echo_workload,
    run_checked_load,
    stop_server,
    stub_processes,
    text_embedding_workload,
    write_json,
)

SCENARIOS = ("kill_stub", "unload_reload", "restart_server")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"
BEGIN, END = "<!-- reliability-results:begin -->", "<!-- reliability-results:end -->"

ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 16
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
dynamic_batching { max_queue_delay_microseconds: 1000 }
"""

ECHO_MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Returns its input, one response per request of the (dynamic) batch."""

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TEXT_OUT", pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy())])
                for r in requests]
'''


def echo_repository(root: Path) -> Path:
    """A repository with one ``echo`` Python model: 2 instances, dynamic batching."""
    repo = Path(root) / "model_repository"
    (repo / "echo" / "1").mkdir(parents=True, exist_ok=True)
    (repo / "echo" / "config.pbtxt").write_text(ECHO_CONFIG)
    (repo / "echo" / "1" / "model.py").write_text(ECHO_MODEL)
    return repo


# -- what the clients saw -------------------------------------------------------------------
def client_view(log: LoadLog, fault_at: float) -> dict:
    """Errors after the fault, their window, the time until service was back, wrong answers."""
    after = [r for r in log.records if r.end >= fault_at]
    bad = [r for r in after if r.status != "ok"]
    messages: dict[str, int] = {}
    for r in bad:
        short = r.detail.split("\n")[0][:160]
        messages[short] = messages.get(short, 0) + 1
    last_bad_end = max((r.end for r in bad), default=None)
    back = None
    if last_bad_end is not None:
        oks = [r.end for r in after if r.status == "ok" and r.start >= last_bad_end - 1e-3]
        back = round(min(oks) - fault_at, 2) if oks else None
    return {
        "requests_total": len(log.records),
        "ok_total": sum(1 for r in log.records if r.status == "ok"),
        "requests_after_fault": len(after),
        "errors": sum(1 for r in bad if r.status == "error"),
        "timeouts": sum(1 for r in bad if r.status == "timeout"),
        "wrong_answers": sum(1 for r in log.records if r.status == "wrong"),
        "first_error_s": round(min(r.end for r in bad) - fault_at, 2) if bad else None,
        "last_error_s": round(last_bad_end - fault_at, 2) if bad else None,
        "service_back_s": back if bad else 0.0,
        "error_messages": dict(sorted(messages.items(), key=lambda kv: -kv[1])[:5]),
        "wrong_examples": [r.detail for r in log.records if r.status == "wrong"][:3],
    }


def _rel(log: LoadLog, at: float) -> float:
    return round(at - log.events["fault"], 2)


def _admin(server) -> dict:
    return dict(getattr(server, "admin_headers", {}) or {})


def _wait(predicate, timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # noqa: BLE001 - server busy or restarting
            pass
        time.sleep(interval_s)
    return False


def _errors_between(log: LoadLog, since: float, until: float) -> int:
    return sum(1 for r in list(log.records) if r.status != "ok" and since <= r.end < until)


class ReadinessWatch:
    """Polls ``/v2/health/ready`` (what probes and load balancers read) every ``interval_s``
    from ``since``: when it first answered not-ready, and when it was ready again after that."""

    def __init__(self, http_url: str, since: float, interval_s: float = 0.05):
        self.url, self.since, self.interval_s = http_url, since, interval_s
        self.not_ready_at: float | None = None
        self.ready_again_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpclient.InferenceServerClient(self.url, connection_timeout=1, network_timeout=1) as client:
            while not self._stop.is_set():
                try:
                    ready = client.is_server_ready()
                except Exception:  # noqa: BLE001 - a server that does not answer is not ready
                    ready = False
                now = time.monotonic()
                if not ready and self.not_ready_at is None:
                    self.not_ready_at = now
                elif ready and self.not_ready_at is not None:
                    self.ready_again_at = now
                    return
                time.sleep(self.interval_s)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(5)
        rel = lambda t: round(t - self.since, 2) if t is not None else None
        return {"not_ready_after_s": rel(self.not_ready_at), "ready_again_after_s": rel(self.ready_again_at)}


# -- scenarios --------------------------------------------------------------------------------
def kill_stub(
    server,
    workload: CheckedWorkload,
    *,
    stub_model: str | None = None,
    concurrency: int = 16,
    before_s: float = 2.0,
    unattended_s: float = 4.0,
    after_s: float = 3.0,
    remedy: bool = True,
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
        with httpclient.InferenceServerClient(server.http_url) as client:
            time.sleep(unattended_s)
            info["ready_flag_while_broken"] = bool(client.is_model_ready(stub_model))
            window_end = time.monotonic()
            info["errors_in_last_second_unattended"] = _errors_between(log, window_end - 1.0, window_end)
            info["stub_restarted_by_triton"] = any(
                p.pid not in info["stubs_before"] for p in stub_processes(server.process.pid, stub_model)
            )
            # Recovered only when the dead stub was replaced: a quiet second proves nothing, since
            # the dynamic batcher may not have sent a batch to the dead instance in it.
            info["recovered_by_itself"] = (
                info["stub_restarted_by_triton"] and info["errors_in_last_second_unattended"] == 0
            )
            if remedy and not info["recovered_by_itself"]:
                # A plain load of the (unchanged) loaded model was seen to return at once without
                # replacing the dead stub; unload + load always replaced it.
                log.events["remedy"] = time.monotonic()
                client.unload_model(stub_model, headers=_admin(server))
                _wait(lambda: not client.is_model_ready(stub_model), 60)
                client.load_model(stub_model, headers=_admin(server))
                log.events["remedy_done"] = time.monotonic()
                info["remedy"] = (
                    f"unload + load of {stub_model} (POST /v2/repository/models/{stub_model}/unload, /load)"
                )
                info["remedy_call_s"] = round(log.events["remedy_done"] - log.events["remedy"], 2)
        time.sleep(after_s)
        info.update(watch.stop())
        info["gate"] = bool(getattr(server, "gate", False))
        info["stubs_after"] = [p.pid for p in stub_processes(server.process.pid, stub_model)]

    log = run_checked_load(workload, server.http_url, concurrency=concurrency, during=during)
    info.update(client_view(log, log.events["fault"]))
    if "remedy" in log.events:
        info["remedy_at_s"] = _rel(log, log.events["remedy"])
        info["errors_after_remedy_done"] = sum(
            1 for r in log.records if r.status != "ok" and r.start >= log.events["remedy_done"]
        )
    info["recovered"] = info["errors_after_remedy_done" if "remedy" in log.events else "errors"] == 0 or (
        info.get("recovered_by_itself", False)
    )
    return info


def unload_reload(
    server, workload: CheckedWorkload, *, concurrency: int = 16, before_s: float = 2.0, after_s: float = 3.0
) -> dict:
    """Unload the model under load, wait until it is gone, load it again."""
    info: dict = {"scenario": "unload_reload", "model": workload.model, "concurrency": concurrency}

    def during(log: LoadLog) -> None:
        time.sleep(before_s)
        with httpclient.InferenceServerClient(server.http_url, network_timeout=300) as client:
            log.events["fault"] = time.monotonic()
            client.unload_model(workload.model, headers=_admin(server))
            _wait(lambda: not client.is_model_ready(workload.model), 60)
            log.events["unloaded"] = time.monotonic()
            client.load_model(workload.model, headers=_admin(server))
            log.events["loaded"] = time.monotonic()
        time.sleep(after_s)

    log = run_checked_load(workload, server.http_url, concurrency=concurrency, during=during)
    info.update(client_view(log, log.events["fault"]))
    info["unload_s"] = _rel(log, log.events["unloaded"])
    info["load_returned_s"] = _rel(log, log.events["loaded"])
    info["errors_after_load_returned"] = sum(
        1 for r in log.records if r.status != "ok" and r.start >= log.events["loaded"]
    )
    info["recovered"] = info["errors_after_load_returned"] == 0
    return info


def restart_server(
    server,
    workload: CheckedWorkload,
    *,
    concurrency: int = 16,
    before_s: float = 2.0,
    after_s: float = 3.0,
    make_server=None,
) -> tuple[dict, object]:
    """Stop the server (SIGTERM, as an orchestrator does) under load and start a new one on the
    same ports. Returns (report, the new server)."""
    from harness.serving.launchers import LocalTritonServer

    info: dict = {"scenario": "restart_server", "model": workload.model, "concurrency": concurrency}
    holder = {"server": server}
    make_server = make_server or (
        lambda old: LocalTritonServer(
            old.options, ports=(old.http_port, old.grpc_port, old.metrics_port), exit_timeout_s=old.exit_timeout_s
        )
    )

    def during(log: LoadLog) -> None:
        time.sleep(before_s)
        log.events["fault"] = time.monotonic()
        old = holder["server"]
        old.stop()
        log.events["stopped"] = time.monotonic()
        new = make_server(old)
        holder["server"] = new
        new.start()
        new.wait_ready()
        log.events["ready"] = time.monotonic()
        time.sleep(after_s)

    log = run_checked_load(workload, server.http_url, concurrency=concurrency, during=during)
    info.update(client_view(log, log.events["fault"]))
    info["stop_s"] = _rel(log, log.events["stopped"])
    info["ready_again_s"] = _rel(log, log.events["ready"])
    info["errors_after_ready"] = sum(1 for r in log.records if r.status != "ok" and r.start >= log.events["ready"])
    info["recovered"] = info["errors_after_ready"] == 0
    return info, holder["server"]


# -- CLI and docs -----------------------------------------------------------------------------
def run_all(
    deployment: str, model: str, scenarios: list[str], concurrency: int, stub_model: str | None = None
) -> list[dict]:
    """Every scenario on one server of ``deployment`` (subset: ``model`` + dependencies, explicit mode)."""
    server = deployment_server(deployment, [model], model_control_mode="explicit")
    reports = []
    server.start()
    try:
        server.wait_ready()
        workload = text_embedding_workload(server.http_url, model) if model != "echo" else echo_workload()
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
    text = (
        f"{r['scenario']} ({r.get('deployment', '')}/{r['model']}, c={r.get('concurrency')}): "
        f"{r['requests_total']} requests, {r['errors']} errors + {r['timeouts']} timeouts after the fault "
        f"(from +{r['first_error_s']} s to +{r['last_error_s']} s), service back at +{r['service_back_s']} s, "
        f"{r['wrong_answers']} wrong answers, recovered: {r['recovered']}"
    )
    if r["scenario"] == "kill_stub":
        text += (
            f"; by itself: {r.get('recovered_by_itself')}, ready flag while broken: "
            f"{r.get('ready_flag_while_broken')}, remedy: {r.get('remedy', 'none')}, "
            f"/v2/health/ready false at +{r.get('not_ready_after_s')} s, ready again at "
            f"+{r.get('ready_again_after_s')} s (gate: {r.get('gate')})"
        )
    return text


def write_docs(results_dir: Path = RESULTS_DIR, docs: Path = DOCS) -> str:
    """Replace the results section of docs/reliability.md with the figures in ``results_dir``."""
    soak = _read(results_dir / "soak.json")
    faults = _read(results_dir / "faults.json") or []
    fuzz = _read(results_dir / "fuzz.json")
    lines = [BEGIN, "", "_Generated by `make reliability` from `results/reliability/*.json`; do not edit by hand._", ""]
    if soak:
        m = soak["memory"]
        lines += [
            f"**Load held** ({soak.get('deployment')}/{soak['model']}, concurrency {soak['concurrency']}, "
            f"{soak['measured_s']} s after {soak['warmup_s']} s warm-up): {soak['requests']} requests, "
            f"**{soak['errors']} errors, {soak['timeouts']} timeouts, {soak['wrong_answers']} wrong answers**, "
            f"{soak['throughput_rps']} req/s.",
            "",
            "| latency | first third | last third | drift |",
            "|---|---|---|---|",
            f"| p50 ms | {soak['latency_first_third']['p50_ms']} | {soak['latency_last_third']['p50_ms']} | "
            f"x{soak['latency_drift'].get('p50_ratio')} |",
            f"| p99 ms | {soak['latency_first_third']['p99_ms']} | {soak['latency_last_third']['p99_ms']} | "
            f"x{soak['latency_drift'].get('p99_ratio')} |",
            "",
            f"Memory (RSS after warm-up -> end): total {m['total_start_mib']} -> {m['total_end_mib']} MiB "
            f"(**{m['total_growth_mib']:+} MiB, {m['total_growth_pct']}%**; bound "
            f"{soak.get('bounds', {}).get('max_growth_mib')} MiB).",
            "",
            "| process | start MiB | end MiB | growth MiB |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {k.split('#')[0]} | {v['start_mib']} | {v['end_mib']} | {v['growth_mib']:+} |"
            for k, v in m["processes"].items()
        ]
        lines.append("")
    long_soaks = [
        dict(json.loads(path.read_text()), report_name=path.stem) for path in sorted(results_dir.glob("soak_*.json"))
    ]
    for long_soak in long_soaks:
        lines += render_long_soak(long_soak, docs.parent / "plots")
    if faults:
        lines += [
            "**Faults survived** (verified load over HTTP; times relative to the fault):",
            "",
            "| fault | model | c | errors seen | error window | service back | wrong answers | recovered | how |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for f in faults:
            how = {
                "kill_stub": (
                    (
                        f"behind the gate: /v2/health/ready false at +{f.get('not_ready_after_s')} s, "
                        f"automatic unload + load, ready again at +{f.get('ready_again_after_s')} s"
                    )
                    if f.get("gate") and f.get("recovered_by_itself")
                    else (
                        f"Triton did {'' if f.get('recovered_by_itself') else 'not '}recover by itself "
                        f"(ready flag stayed {f.get('ready_flag_while_broken')}); "
                        f"{f.get('remedy', 'no remedy')} at +{f.get('remedy_at_s')} s"
                    )
                ),
                "unload_reload": f"unloaded at +{f.get('unload_s')} s, load returned at +{f.get('load_returned_s')} s",
                "restart_server": f"stopped at +{f.get('stop_s')} s, new server ready at +{f.get('ready_again_s')} s",
            }[f["scenario"]]
            window = f"+{f['first_error_s']} .. +{f['last_error_s']} s" if f["first_error_s"] is not None else "none"
            lines.append(
                f"| {f['scenario']} | {f['model']} | {f.get('concurrency')} | {f['errors'] + f['timeouts']} "
                f"of {f['requests_after_fault']} | {window} | +{f['service_back_s']} s | "
                f"{f['wrong_answers']} | {f['recovered']} | {how} |"
            )
        lines.append("")
        messages = {msg for f in faults for msg in f["error_messages"]}
        if messages:
            lines += ["Errors the clients saw:", ""] + [f"- `{m}`" for m in sorted(messages)] + [""]
    if fuzz:
        lines += [
            f"**Inputs tried**: {fuzz['total']} generated hostile inputs, {fuzz['results']} ended in a result "
            f"and {fuzz['input_errors']} in a clear `InputError`, 0 hangs or crashes (slowest "
            f"{fuzz['slowest_s']} s):",
            "",
            "| function | cases |",
            "|---|---|",
        ]
        lines += [f"| `{k}` | {v} |" for k, v in sorted(fuzz["per_function"].items())]
        if fuzz.get("served"):
            lines += [
                "",
                f"Served entry models fuzzed end to end: {fuzz['served']['requests']} requests to "
                f"{fuzz['served']['models']} models, every server healthy afterwards.",
            ]
        lines.append("")
    wrong = (
        (soak or {}).get("wrong_answers", 0)
        + sum(f["wrong_answers"] for f in faults)
        + sum(s["wrong_answers"] for s in long_soaks)
    )
    total = (
        (soak or {}).get("requests", 0)
        + sum(f["requests_total"] for f in faults)
        + sum(s["requests"] for s in long_soaks)
    )
    lines += [
        f"**Nothing lost**: {total} verified requests in these runs, {wrong} wrong or swapped answers; "
        "every request ended in its own correct answer or an explicit error.",
        "",
        END,
    ]
    section = "\n".join(lines)
    text = docs.read_text() if docs.exists() else f"# Reliability\n\n{BEGIN}\n{END}\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip() + "\n\n## Results\n\n" + section + "\n"
    docs.write_text(text)
    return section


def _stubs_mib(sample: dict) -> float:
    return round(sum(v for k, v in sample["rss_mib"].items() if k.startswith("stub:")), 1)


def render_long_soak(soak: dict, plots: Path, rows: int = 11) -> list[str]:
    """A long soak's memory over time: a table of RSS samples, the growth per third and a figure."""
    series = soak.get("memory_series") or []
    if len(series) < 4:
        return []
    name = f"{soak.get('deployment')}/{soak['model']}"
    picks = sorted({round(i * (len(series) - 1) / (rows - 1)) for i in range(rows)})
    lines = [
        f"**Memory over a long soak** ({name}, concurrency {soak['concurrency']}, {soak['measured_s']} s after "
        f"{soak['warmup_s']} s warm-up, {'behind the gate' if soak.get('gate') else 'no gate'}): "
        f"{soak['requests']} requests, **{soak['errors']} errors, {soak['timeouts']} timeouts, "
        f"{soak['wrong_answers']} wrong answers**, {soak['throughput_rps']} req/s; RSS sampled every "
        f"{series[1]['t_s'] - series[0]['t_s']:.0f} s. Command: `{soak.get('command', 'python -m harness.reliability.soak')}`"
        + (
            f"; load average at the end {soak['machine']['load_avg_at_end']} on {soak['machine']['cpu_count']} cores "
            "(a shared, busy machine)"
            if soak.get("machine")
            else ""
        )
        + ".",
        "",
        "| minute | tritonserver MiB | gate MiB | stubs MiB | total MiB |",
        "|---|---|---|---|---|",
    ]
    for i in picks:
        sample = series[i]
        lines.append(
            f"| {sample['t_s'] / 60:.1f} | {sample['rss_mib'].get('server', '–')} | "
            f"{sample['rss_mib'].get('gate', '–')} | {_stubs_mib(sample)} | {sample['total_mib']} |"
        )
    lines.append("")
    verdicts = []
    for key, label in (("server", "tritonserver"), ("total", "all processes")):
        trend = (soak.get("memory_trend") or {}).get(key)
        if trend:
            verdicts.append(
                f"{label} {trend['start_mib']} -> {trend['end_mib']} MiB, growth per third "
                f"{' / '.join(f'{g:+}' for g in trend['growth_per_third_mib'])} MiB: "
                f"**{'levels off' if trend['levelled'] else 'still growing'}**"
            )
    if verdicts:
        lines += ["; ".join(verdicts) + " (levels off: the last third grew < 2 MiB or < 1/4 of the first third).", ""]
    figure = plot_long_soak(soak, plots)
    if figure:
        lines += [f"![RSS over the soak ({soak.get('report_name', name)})](plots/{figure.name})", ""]
    return lines


def plot_long_soak(soak: dict, plots: Path) -> Path | None:
    """docs/plots/soak-<deployment>-rss.png: RSS of tritonserver, the gate and the stubs over time."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    series = soak["memory_series"]
    minutes = [s["t_s"] / 60 for s in series]
    figure, axis = plt.subplots(figsize=(7, 3.2))
    axis.plot(minutes, [s["rss_mib"].get("server") for s in series], label="tritonserver")
    if any("gate" in s["rss_mib"] for s in series):
        axis.plot(minutes, [s["rss_mib"].get("gate") for s in series], label="gate")
    axis.plot(minutes, [_stubs_mib(s) for s in series], label="Python stubs (sum)")
    axis.plot(minutes, [s["total_mib"] for s in series], label="total", linestyle="--")
    axis.set_xlabel("minutes after warm-up")
    axis.set_ylabel("RSS MiB")
    axis.set_ylim(bottom=0)
    axis.set_title(f"{soak.get('deployment')}/{soak['model']}, c={soak['concurrency']}: RSS over the soak")
    axis.legend(loc="lower right", fontsize=8)
    axis.grid(alpha=0.3)
    plots.mkdir(parents=True, exist_ok=True)
    path = plots / f"{soak.get('report_name') or 'soak-' + str(soak.get('deployment'))}-rss.png"
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def _read(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployment", default="embedding_cpu")
    parser.add_argument("--model", default="embedding_onnx_text")
    parser.add_argument("--stub-model", default=None, help="whose stub to kill (default: --model)")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "faults.json")
    parser.add_argument("--write-docs", action="store_true", help="only regenerate docs/reliability.md's results")
    args = parser.parse_args(argv)
    if args.write_docs:
        print(write_docs())
        return 0
    reports = run_all(args.deployment, args.model, args.scenario or list(SCENARIOS), args.concurrency, args.stub_model)
    write_json(reports, args.json)
    print(f"report: {args.json}")
    return 0 if all(r["recovered"] and not r["wrong_answers"] for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
