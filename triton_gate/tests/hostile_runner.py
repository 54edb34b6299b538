"""Sends the hostile cases one at a time and judges each: refused cleanly (a 4xx with a message;
401/403 for a restricted API), accepted, server error (5xx, a dropped connection), hung (no answer
in time) or server died (not ready afterwards). After a death it waits, up to a bound, for the
server to be ready again (a supervisor's restart, or ``restart`` here) before going on."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from triton_gate.tests.hostile_cases import Case, Target, valid_item

REFUSED, ACCEPTED, ERROR, HUNG, DIED, NOT_RUN = (
    "refused cleanly",
    "accepted",
    "server error",
    "hung",
    "server died",
    "not run",
)
#: Worst last: a class's verdict is the worst of its cases'.
SEVERITY = [NOT_RUN, REFUSED, ACCEPTED, ERROR, HUNG, DIED]
#: gRPC codes that say "your request is wrong" (the 4xx of gRPC).
GRPC_CLIENT_ERRORS = {
    "INVALID_ARGUMENT",
    "PERMISSION_DENIED",
    "UNAUTHENTICATED",
    "RESOURCE_EXHAUSTED",
    "NOT_FOUND",
    "FAILED_PRECONDITION",
    "OUT_OF_RANGE",
}


@dataclass
class Outcome:
    case: Case
    verdict: str
    answer: str  # "400", "INVALID_ARGUMENT", "connection closed", "timeout", ...
    message: str = ""
    seconds: float = 0.0
    #: After a death: seconds until ready again (None: not back within the bound).
    back_after_s: float | None = None

    def as_dict(self) -> dict:
        return {
            "class": self.case.klass,
            "case": self.case.name,
            "protocol": self.case.protocol,
            "request": self.case.summary,
            "verdict": self.verdict,
            "answer": self.answer,
            "message": self.message,
            "seconds": round(self.seconds, 3),
            "back_after_s": None if self.back_after_s is None else round(self.back_after_s, 2),
        }


@dataclass
class Endpoint:
    """Where the server listens: ``host:port`` of HTTP, and of gRPC if it is to be tried."""

    http_url: str
    grpc_url: str | None = None
    timeout_s: float = 10.0
    _channel: object = field(default=None, repr=False)
    _sentinel: http.client.HTTPConnection | None = field(default=None, repr=False)

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.http_url.rpartition(":")
        return host.strip("[]"), int(port)

    def http(self, method: str, path: str, body=None, headers=(), chunked=False, timeout=None):
        """One request on its own connection: (status, body bytes). Raises OSError/TimeoutError."""
        host, port = self.host_port
        connection = http.client.HTTPConnection(host, port, timeout=timeout or self.timeout_s)
        try:
            connection.putrequest(method, path, skip_accept_encoding=True)
            for name, value in headers:
                connection.putheader(name, value)
            connection.putheader("Connection", "close")
            if body is not None and not chunked:
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders()
            try:
                if callable(body):
                    for piece in body():
                        connection.send(piece)
                elif body is not None:
                    connection.send(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused before the whole body was read: its answer may still be there
            response = connection.getresponse()
            return response.status, response.read(1 << 20)
        finally:
            connection.close()

    def open_sentinel(self) -> None:
        """A keep-alive connection that lives as long as the process that accepted it: a server
        that crashed and was restarted within the grace period is told apart by it."""
        self.close_sentinel()
        host, port = self.host_port
        self._sentinel = http.client.HTTPConnection(host, port, timeout=3.0)
        if not self.sentinel_alive():
            self.close_sentinel()

    def sentinel_alive(self) -> bool:
        """Whether the sentinel connection still answers (True when there is none)."""
        if self._sentinel is None:
            return True
        try:
            self._sentinel.request("GET", "/v2/health/live")
            self._sentinel.getresponse().read()
            return True
        except (OSError, http.client.HTTPException):
            return False

    def close_sentinel(self) -> None:
        if self._sentinel is not None:
            self._sentinel.close()
            self._sentinel = None

    def ready(self, timeout: float = 3.0) -> bool:
        try:
            return self.http("GET", "/v2/health/ready", timeout=timeout)[0] == 200
        except (OSError, http.client.HTTPException):
            return False

    def wait_ready(self, bound_s: float, poll_s: float = 0.2) -> float | None:
        """Seconds until ``/v2/health/ready`` answers 200 (None: not within ``bound_s``)."""
        began = time.monotonic()
        while True:
            if self.ready():
                return time.monotonic() - began
            if time.monotonic() - began >= bound_s:
                return None
            time.sleep(poll_s)

    def grpc_call(self, method: str, request, timeout=None):
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        if self._channel is None:
            limit = 256 << 20
            self._channel = grpc.insecure_channel(
                self.grpc_url,
                options=[("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)],
            )
        stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        return getattr(stub, method)(request, timeout=timeout or self.timeout_s)

    def get_json(self, path: str, method: str = "GET", body: bytes | None = None):
        status, data = self.http(method, path, body)
        return status, (json.loads(data) if data[:1] in (b"{", b"[") else None)


def error_message(data: bytes) -> str:
    try:
        value = json.loads(data)
        return str(value.get("error", "")) if isinstance(value, dict) else ""
    except (ValueError, UnicodeDecodeError):
        return data.decode("utf-8", "replace").strip()[:300]


def judge_http(case: Case, status: int, data: bytes) -> tuple[str, str]:
    message = "" if 200 <= status < 300 else "".join(ch if ch.isprintable() else " " for ch in error_message(data))
    if case.restricted:
        return (REFUSED if status in (401, 403) else ACCEPTED), message
    if 200 <= status < 300:
        return ACCEPTED, message
    if 400 <= status < 500:
        return (REFUSED if message else ERROR), message or "4xx without a message"
    return ERROR, message


def judge_grpc(case: Case, code: str, details: str) -> str:
    if case.restricted:
        refused = code in ("PERMISSION_DENIED", "UNAUTHENTICATED") or "restricted" in details.lower()
        return REFUSED if refused else ACCEPTED
    if code == "OK":
        return ACCEPTED
    return REFUSED if code in GRPC_CLIENT_ERRORS and details else ERROR


def send(endpoint: Endpoint, case: Case) -> tuple[str, str, str, bool]:
    """(verdict if the server lives, answer, message, whether the request timed out)."""
    if case.protocol == "grpc":
        import grpc

        try:
            endpoint.grpc_call(case.grpc_method, case.grpc_request())
            return judge_grpc(case, "OK", ""), "OK", "", False
        except grpc.RpcError as exc:
            code, details = exc.code().name, exc.details() or ""
            return judge_grpc(case, code, details), code, details[:300], code == "DEADLINE_EXCEEDED"
    try:
        status, data = endpoint.http(case.method, case.path, case.body, case.headers, case.chunked)
    except TimeoutError:
        return HUNG, "timeout", f"no answer within {endpoint.timeout_s:g} s", True
    except (OSError, http.client.HTTPException) as exc:
        return ERROR, "connection closed", f"{type(exc).__name__}: {exc}"[:300], False
    verdict, message = judge_http(case, status, data)
    return verdict, str(status), message[:300], False


def run_cases(
    endpoint: Endpoint,
    cases: list[Case],
    *,
    wait_back_s: float = 60.0,
    budget_s: float = 300.0,
    grace_s: float = 2.0,
    settle_s: float = 1.8,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> tuple[list[Outcome], str | None]:
    """Every case in turn; (outcomes, why it stopped early or None). After a case the server must
    be ready within ``grace_s``, else the case killed it: up to ``wait_back_s`` for readiness
    (a supervisor's restart); not back means stop."""
    outcomes: list[Outcome] = []
    began = time.monotonic()
    stopped = None
    for index, case in enumerate(cases):
        if time.monotonic() - began > budget_s:
            stopped = f"stopped: the time budget of {budget_s:g} s is spent"
        if stopped:
            outcomes += [Outcome(c, NOT_RUN, "-", stopped) for c in cases[index:]]
            break
        endpoint.open_sentinel()
        start = time.monotonic()
        verdict, answer, message, timed_out = send(endpoint, case)
        seconds = time.monotonic() - start
        outcome = Outcome(case, verdict, answer, message, seconds)
        # A crashing tritonserver may still answer readiness while its crash handler prints the
        # backtrace: after a dropped connection or a timeout, look again only once that is over.
        dropped = answer == "connection closed" or (answer == "UNAVAILABLE" and not case.restricted) or timed_out
        time.sleep(settle_s if dropped else 0.05)
        restarted = dropped and not endpoint.sentinel_alive()  # died, and a supervisor was quick
        endpoint.close_sentinel()
        if restarted or endpoint.wait_ready(grace_s) is None:
            outcome.verdict = DIED
            down = time.monotonic()
            back = endpoint.wait_ready(wait_back_s)
            outcome.back_after_s = None if back is None else time.monotonic() - down
            if back is None:
                stopped = (
                    f"stopped: the server was not ready again within {wait_back_s:g} s after "
                    f"{case.klass}/{case.name}; the classes after it were not run"
                )
        elif timed_out:
            outcome.verdict = HUNG
        outcomes.append(outcome)
        if on_outcome:
            on_outcome(outcome)
    return outcomes, stopped


def by_class(outcomes: list[Outcome]) -> dict[str, tuple[str, list[Outcome]]]:
    """{class: (worst verdict, its outcomes)} in the order the classes ran."""
    grouped: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        grouped.setdefault(outcome.case.klass, []).append(outcome)
    result = {}
    for klass, items in grouped.items():
        run = [o for o in items if o.verdict != NOT_RUN]
        worst = max((o.verdict for o in run), key=SEVERITY.index) if run else NOT_RUN
        result[klass] = (worst, items)
    return result


# -- which model ---------------------------------------------------------------------------------
def model_names(endpoint: Endpoint) -> list[str]:
    """Ready models from the repository index, or (where that API is restricted) from statistics."""
    try:
        status, index = endpoint.get_json("/v2/repository/index", "POST", b"{}")
        if status == 200 and isinstance(index, list):
            return sorted({m["name"] for m in index if m.get("state", "READY") == "READY"})
    except (OSError, http.client.HTTPException, ValueError):
        pass
    status, stats = endpoint.get_json("/v2/models/stats")
    if status == 200 and isinstance(stats, dict):
        return sorted({m["name"] for m in stats.get("model_stats", [])})
    raise RuntimeError(f"cannot list the server's models (repository index and statistics answered {status})")


def load_target(endpoint: Endpoint, model: str) -> Target | None:
    status, metadata = endpoint.get_json(f"/v2/models/{model}")
    if status != 200 or not isinstance(metadata, dict) or not metadata.get("inputs"):
        return None
    status, config = endpoint.get_json(f"/v2/models/{model}/config")
    return Target.from_metadata(metadata, config if status == 200 and isinstance(config, dict) else None)


def choose_target(endpoint: Endpoint, model: str | None = None) -> Target:
    """``model``'s target, or the first model (by name) with inputs that answers a valid-looking
    request with something other than 403/404 (a gate's internal models answer 403)."""
    if model:
        target = load_target(endpoint, model)
        if target is None:
            raise RuntimeError(f"model {model!r}: no metadata with inputs at {endpoint.http_url}")
        return target
    for name in model_names(endpoint):
        target = load_target(endpoint, name)
        if target is None:
            continue
        body = json.dumps({"inputs": [valid_item(i) for i in target.inputs]}).encode()
        status, _ = endpoint.http("POST", target.infer_path, body)
        if status not in (403, 404):
            return target
    raise RuntimeError(f"no model with inputs that clients may call at {endpoint.http_url}")
