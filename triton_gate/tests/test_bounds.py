"""Bounded work for every refusal, and bytes in flight within a budget, on a real gate in front of
a real tritonserver: a body that inflates (or streams) to 2 GiB is refused with 413 after the gate
read and inflated about its limit (the count comes from the gate's own log line), the connection
is closed, and liveness probes keep answering meanwhile; past a model's budget of bytes in flight a
request gets 503 with Retry-After."""

from __future__ import annotations

import re
import socket
import threading
import time
import zlib

import pytest
import requests

from harness.serving.launchers import LocalTritonServer, ServerOptions
from harness.tests.gate_cases import make_gate_repository
from triton_gate.policy import GatePolicy

LIMIT = 1 << 20
#: What the gate may read or inflate past the limit before it stops.
SLACK = 1 << 20
INFLATED = 2 << 30
POLICY = GatePolicy(
    public=["sink", "echo"], max_body_bytes={"sink": LIMIT, "echo": LIMIT}, max_bytes_in_flight={"sink": LIMIT}
)
REFUSED_LINE = re.compile(r"gate: refused (\d+) model=(\S+) client=\S+ read=(\d+) inflated=(\d+): (.*)")

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = make_gate_repository(tmp_path_factory.mktemp("bounds"))
    options = ServerOptions(str(repo), required_models=["sink", "echo"], gate_policy=POLICY)
    server = LocalTritonServer(options, gate_options={"admission_wait_s": 0.5})
    server.start()
    try:
        server.wait_ready(180)
        yield server
    finally:
        server.stop()


def compressed(wbits: int, total: int, block: int = 1 << 20):
    """``total`` zero bytes compressed as one stream (generated as it is sent)."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, wbits)
    zeros = bytes(block)
    for _ in range(total // block):
        piece = compressor.compress(zeros)
        if piece:
            yield piece
    yield compressor.flush()


def as_chunks(pieces):
    """``pieces`` as HTTP/1.1 chunks."""
    for piece in pieces:
        if piece:
            yield b"%x\r\n" % len(piece) + piece + b"\r\n"
    yield b"0\r\n\r\n"


def spaces(total: int, block: int = 1 << 16):
    for _ in range(total // block):
        yield b" " * block


def send_and_read(server, headers: dict, pieces) -> tuple[int, bool]:
    """(status, whether the gate closed the connection after it): the body is sent from a thread
    until the gate stops taking it; the answer is read meanwhile, as a browser or curl would."""
    host, port = server.http_url.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(f"POST /v2/models/echo/infer HTTP/1.1\r\nHost: gate\r\n{head}\r\n".encode())

    def send():
        try:
            for piece in pieces:
                sock.sendall(piece)
        except OSError:
            pass  # the gate closed the connection: what it refuses to read

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1 << 16)
    status = int(answer.split(b" ", 2)[1])
    closed = False
    try:
        while sock.recv(1 << 16):
            pass
        closed = True
    except ConnectionResetError:
        closed = True
    sender.join(60)
    sock.close()
    return status, closed and not sender.is_alive()


def poll_live(server, stop: threading.Event, answers: list) -> None:
    while not stop.is_set():
        try:
            answers.append(requests.get(f"http://{server.http_url}/v2/health/live", timeout=5).status_code)
        except requests.RequestException as exc:
            answers.append(type(exc).__name__)
        time.sleep(0.02)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "identity"])
def test_a_body_of_2_gib_is_refused_after_its_limit_and_probes_keep_answering(server, encoding):
    """Each body sent chunked (no Content-Length for the gate to refuse it by): 2 GiB of spaces, or
    a gzip or deflate stream that inflates to 2 GiB of zeros."""
    headers = {"Content-Type": "application/json", "Transfer-Encoding": "chunked", "Content-Encoding": encoding}
    if encoding == "identity":
        pieces = as_chunks(spaces(INFLATED))
    else:
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}[encoding]
        pieces = as_chunks(compressed(wbits, INFLATED))
    lines_before = len(REFUSED_LINE.findall(server.logs()))
    stop, answers = threading.Event(), []
    prober = threading.Thread(target=poll_live, args=(server, stop, answers))
    prober.start()
    try:
        status, closed = send_and_read(server, headers, pieces)
        time.sleep(0.5)  # probes after the refusal too
    finally:
        stop.set()
        prober.join()
    assert status == 413 and closed
    refused = REFUSED_LINE.findall(server.logs())[lines_before:]
    assert len(refused) == 1, refused
    code, model, read, inflated, _ = refused[0]
    assert (code, model) == ("413", "echo")
    assert LIMIT < max(int(read), int(inflated)) <= LIMIT + SLACK
    assert answers and set(answers) == {200}, answers


def test_past_the_budget_of_bytes_in_flight_a_request_gets_503_and_retry_after(server):
    """``sink`` has a budget of one full body in flight: a slow request holds it, a second one waits
    its bounded time and is refused; once the first is done, requests pass again."""
    body = b'{"parameters":{"sleep":"3"},"inputs":[{"name":"X","datatype":"FP32","shape":[1,1,1],"data":[1]}]}'
    url = f"http://{server.http_url}/v2/models/sink/infer"
    slow = threading.Thread(target=requests.post, args=(url,), kwargs={"data": body.ljust(LIMIT), "timeout": 30})
    slow.start()
    time.sleep(1.0)
    second = requests.post(url, data=body.replace(b'"3"', b'"0"'), timeout=30)
    slow.join()
    third = requests.post(url, data=body.replace(b'"3"', b'"0"'), timeout=30)
    assert second.status_code == 503 and second.headers.get("Retry-After") == "1", second.text
    assert "budget" in second.json()["error"]
    assert third.status_code == 200, third.text
