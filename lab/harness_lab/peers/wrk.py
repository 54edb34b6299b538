"""wrk (Debian package, C, one event loop) posting pre-built JSON bodies, pinned to its own cores.

The bodies rotate per request; ``-c`` keep-alive connections each keep one request outstanding
(a closed loop at concurrency ``c``); a Lua ``done`` hook prints the summary as one JSON line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.measuring.pinning import cores_label

#: Lua script: bodies from the file named by the first script argument, rotated per request.
SCRIPT = r"""
local requests = {}
local index = 0

function init(args)
  local headers = {["Content-Type"] = "application/json"}
  for line in io.lines(args[1]) do
    requests[#requests + 1] = wrk.format("POST", nil, headers, line)
  end
  index = math.random(#requests) - 1
end

function request()
  index = index % #requests + 1
  return requests[index]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "bytes_read": %d, "errors_connect": %d, "errors_read": %d, ' ..
    '"errors_write": %d, "errors_status": %d, "errors_timeout": %d, "p50_us": %d, "p90_us": %d, "p95_us": %d, ' ..
    '"p99_us": %d, "avg_us": %.1f, "max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(95), latency:percentile(99),
    latency.mean, latency.max))
end
"""


class WrkError(RuntimeError):
    """wrk is missing, failed, or printed no summary."""


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if not found:
        raise WrkError("wrk is not installed: run `make wrk` (Debian package wrk)")
    return found


def wrk_version() -> str:
    out = subprocess.run([wrk_binary(), "-v"], capture_output=True, text=True).stdout
    match = re.search(r"wrk (\S+)", out)
    return match.group(1) if match else "unknown"


#: The latencies the Lua hook prints (``<key>_us``), the records' ``perf_latency_<key>`` (ms).
LATENCIES = ("p50", "p90", "p95", "p99", "avg")
ERRORS = ("errors_connect", "errors_read", "errors_write", "errors_status", "errors_timeout")


@dataclass
class WrkResult:
    """One wrk run: closed loop at ``concurrency`` for ``duration_s``; ``latency_ms`` by ``LATENCIES``."""

    url: str
    concurrency: int
    duration_s: float
    requests: int
    errors: int
    latency_ms: dict[str, float]
    bytes_received_per_request: float
    bytes_sent_per_request: float

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0

    def metrics(self, items_per_request: int) -> dict:
        """The harness's record fields (model_analyzer names, ms)."""
        return {
            "concurrency": self.concurrency,
            "duration_s": round(self.duration_s, 3),
            "requests": self.requests,
            "errors": self.errors,
            "perf_throughput": round(self.requests_per_second, 2),
            "items_per_second": round(self.requests_per_second * items_per_request, 2),
            **{f"perf_latency_{key}": round(value, 3) for key, value in self.latency_ms.items()},
            "bytes_sent_per_request": round(self.bytes_sent_per_request),
            "bytes_received_per_request": round(self.bytes_received_per_request),
        }


class WrkGenerator:
    """Runs wrk on ``cores`` (taskset) with one thread and ``concurrency`` connections."""

    def __init__(self, cores: set[int] | None = None, timeout_s: float = 30.0):
        self.binary = wrk_binary()
        self.cores = set(cores) if cores else None
        self.timeout_s = timeout_s
        self.version = wrk_version()
        self._dir = Path(tempfile.mkdtemp(prefix="wrk-"))
        self._script = self._dir / "bodies.lua"
        self._script.write_text(SCRIPT)

    def describe(self) -> str:
        return f"wrk {self.version} (1 thread, pre-built JSON bodies, cores {cores_label(self.cores)})"

    def run(self, url: str, bodies: list[bytes], concurrency: int, duration_s: float) -> WrkResult:
        """POST ``bodies`` (rotating) to ``url`` for ``duration_s`` at ``concurrency``."""
        if not bodies or any(b"\n" in body for body in bodies):
            raise WrkError("bodies must be non-empty single-line JSON documents")
        bodies_file = self._dir / f"bodies-{os.getpid()}-{abs(hash(tuple(bodies)))}.jsonl"
        if not bodies_file.exists():
            bodies_file.write_bytes(b"\n".join(bodies) + b"\n")
        seconds = max(1, round(duration_s))
        command = [
            self.binary,
            "-t1",
            f"-c{concurrency}",
            f"-d{seconds}s",
            f"--timeout={int(self.timeout_s)}s",
            "-s",
            str(self._script),
            url,
            "--",
            str(bodies_file),
        ]
        if self.cores:
            command = ["taskset", "-c", cores_label(self.cores)] + command
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + self.timeout_s + 30)
        line = next((l for l in done.stdout.splitlines() if l.startswith("WRK_JSON ")), None)
        if done.returncode != 0 or line is None:
            raise WrkError(f"wrk failed (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
        data = json.loads(line[len("WRK_JSON ") :])
        requests = data["requests"]
        return WrkResult(
            url=url,
            concurrency=concurrency,
            duration_s=data["duration_us"] / 1e6,
            requests=requests,
            errors=sum(data[key] for key in ERRORS),
            latency_ms={key: data[f"{key}_us"] / 1e3 for key in LATENCIES},
            bytes_received_per_request=data["bytes_read"] / requests if requests else 0.0,
            bytes_sent_per_request=sum(len(b) for b in bodies) / len(bodies),
        )

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> WrkGenerator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
