"""What refusals and a burst of the largest requests cost a server behind the gate.

    python -m harness gate-bounds                       # refusals only, on the [reliability] deployment's text model
    python -m harness gate-bounds --deployment D --model TEXT_MODEL --burst-model TOKEN_ID_MODEL

1. Refusals: a gzip and a deflate body that inflate to 2 GiB and a chunked body of 2 GiB, each sent
   to ``--model``: the seconds to the gate's 413, whether it closed the connection, and the worst
   latency of ``/v2/health/live`` polled meanwhile (beside its idle latency).
2. A burst: ``--concurrency`` requests at once of the largest JSON request the gate accepts for
   ``--burst-model`` (``max_batch_size`` rows of its ``[gate] max_dims`` token ids): the peak RSS
   growth of tritonserver and its stubs over idle, beside the bound lab/docs/reliability.md states
   ("Token budgets"), the growth left 30 s after, the 503s of the gate's bytes-in-flight budget
   (each request is sent again after its ``Retry-After`` until answered), and the p99 of small
   requests sent meanwhile (one short row to the same model; liveness probes) over their p99 when
   idle.

The report: results/reliability/gate_bounds.json.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psutil
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from harness.testing.servers import deployment_server, started, stop_server
from harness_lab.reliability.report import write_json
from harness_lab.reliability.servers import chosen_target, target_parser
from triton_gate.http_front import RETRY_AFTER_S

MIB = 1 << 20
INFLATED = 2 << 30
#: RSS growth of one onnxruntime run of all-MiniLM-L6-v2 per padded token at 512 tokens (lab/docs/reliability.md).
RSS_PER_TOKEN = 64 * 1024


def zeros_stream(wbits: int | None, total: int = INFLATED, block: int = MIB):
    """``total`` zero bytes, compressed as one zlib stream of ``wbits`` (None: as they are)."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, wbits) if wbits else None
    zeros = bytes(block)
    for _ in range(total // block):
        yield compressor.compress(zeros) if compressor else zeros
    if compressor:
        yield compressor.flush()


class Poller(threading.Thread):
    """Calls ``request()`` back to back until stopped; keeps each call's latency in seconds."""

    def __init__(self, request, pause_s: float = 0.02):
        super().__init__(daemon=True)
        self.request, self.pause_s = request, pause_s
        self.latencies: list[float] = []
        self.failures = 0
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.is_set():
            began = time.perf_counter()
            try:
                self.request()
                self.latencies.append(time.perf_counter() - began)
            except Exception:  # a probe that fails is counted, not raised: the run measures it
                self.failures += 1
            self.stopping.wait(self.pause_s)

    def stop(self) -> dict:
        self.stopping.set()
        self.join()
        ms = np.array(self.latencies or [np.nan]) * 1e3
        return {
            "count": len(self.latencies),
            "failures": self.failures,
            "p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "max_ms": round(float(ms.max()), 2),
        }


def polled(request, seconds: float) -> dict:
    """``Poller`` run alone for ``seconds``: the idle latency."""
    poller = Poller(request)
    poller.start()
    time.sleep(seconds)
    return poller.stop()


def refuse(http_url: str, model: str, encoding: str) -> dict:
    """One 2 GiB body of ``encoding`` (gzip, deflate, chunked) to ``model``: seconds to the answer,
    its status line, and whether the gate closed the connection after it."""
    wbits = {"gzip": 31, "deflate": 15, "chunked": None}[encoding]
    head = {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    if wbits:
        head["Content-Encoding"] = encoding
    host, port = http_url.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=120)
    lines = "".join(f"{key}: {value}\r\n" for key, value in head.items())
    began = time.perf_counter()
    sock.sendall(f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: gate\r\n{lines}\r\n".encode())

    def send():
        try:
            for piece in zeros_stream(wbits):
                if piece:
                    sock.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the gate closed the connection: what it should do

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    answer = b""
    while b"\r\n" not in answer and (piece := sock.recv(65536)):
        answer += piece
    seconds = time.perf_counter() - began
    closed = _closed(sock)
    sock.close()
    sender.join(60)
    return {
        "encoding": encoding,
        "status_line": answer.split(b"\r\n")[0].decode(),
        "seconds": round(seconds, 3),
        "closed": closed,
    }


def _closed(sock) -> bool:
    """Whether the peer closed ``sock`` (reads until EOF or a reset, 10 s at most): a peer that
    closes with our body still unread resets the connection, a close all the same."""
    sock.settimeout(10)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except OSError:
        return False


def rss_by_process(root: psutil.Process) -> dict[str, int]:
    """RSS of tritonserver and of its stubs under ``root``, by process name (the gate's process
    is not counted)."""
    found = {"tritonserver": 0, "triton_python_backend_stub": 0}
    for process in [root, *root.children(recursive=True)]:
        try:
            if process.name() in found:
                found[process.name()] += process.memory_info().rss
        except psutil.Error:
            pass
    return found


def tree_rss(root: psutil.Process) -> int:
    """RSS of tritonserver and its stubs under ``root``, together."""
    return sum(rss_by_process(root).values())


def ids_inputs(ids: np.ndarray, binary: bool) -> list:
    """``ids`` and a full attention mask; JSON tensors unless ``binary``."""
    inputs = []
    for name, values in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
        tensor = httpclient.InferInput(name, list(values.shape), "INT64")
        tensor.set_data_from_numpy(values, binary_data=binary)
        inputs.append(tensor)
    return inputs


def ids_request(url: str, model: str, ids: np.ndarray, binary: bool) -> None:
    """``ids`` to ``model``; its output comes back as binary data."""
    outputs = [httpclient.InferRequestedOutput("last_hidden_state", binary_data=True)]
    with httpclient.InferenceServerClient(url, network_timeout=900, connection_timeout=900) as client:
        client.infer(model, ids_inputs(ids, binary), outputs=outputs)


def retried_request(url: str, model: str, ids: np.ndarray, binary: bool) -> int:
    """``ids_request`` as a well-behaved client sends it: after a 503 (the gate's bytes-in-flight
    budget is full) it waits the gate's ``Retry-After`` and sends it again; the 503s it got."""
    refused = 0
    while True:
        try:
            ids_request(url, model, ids, binary)
            return refused
        except InferenceServerException as exc:
            if exc.status() != "503":
                raise
            refused += 1
            time.sleep(RETRY_AFTER_S)


def refusals(deployment: str, model: str) -> dict:
    """Part 1 on a server of ``model`` alone."""
    server = started(deployment_server(deployment, [model]))
    try:
        live = f"http://{server.http_url}/v2/health/live"

        def probe():
            requests.get(live, timeout=30).raise_for_status()

        rows = []
        for encoding in ("gzip", "deflate", "chunked"):
            poller = Poller(probe)
            poller.start()
            row = refuse(server.http_url, model, encoding)
            rows.append({**row, "probes": poller.stop()})
            print(rows[-1], flush=True)
        return {"model": model, "idle_probes": polled(probe, 3), "refusals": rows}
    finally:
        stop_server(server)


def burst_bound(server, model: str, output_bytes: int) -> int:
    """The stated bound of a burst's RSS growth (lab/docs/reliability.md, "Token budgets"): each
    instance's run holds at most ``max_batch_tokens`` x 64 KiB, the outputs are held about twice,
    plus 64 MiB of allocator slack."""
    from harness.repository import parameter, read_config

    config = read_config(f"{server.options.model_repository}/{model}/config.pbtxt")
    instances = sum(group.count for group in config.instance_group) or 1
    return instances * int(parameter(config, "max_batch_tokens")) * RSS_PER_TOKEN + 2 * output_bytes + 64 * MIB


def burst(deployment: str, model: str, concurrency: int) -> dict:
    """Part 2 on a server of ``model`` alone."""
    from harness.deployments import get_deployment

    dep = get_deployment(deployment)
    vocab_size, positions = dep.checks_module.token_limits()
    server = started(deployment_server(dep, [model]))
    try:
        url, root = server.http_url, psutil.Process(server.process.pid)
        config = requests.get(f"http://{url}/v2/models/{model}/config", timeout=30).json()
        shape = (config["max_batch_size"], positions)
        largest = [np.random.default_rng(seed).integers(0, vocab_size, shape) for seed in range(concurrency)]
        small = np.random.default_rng(99).integers(0, vocab_size, (1, 16))
        lanes = {
            "small_request": lambda: ids_request(url, model, small, binary=True),
            "live_probe": lambda: requests.get(f"http://{url}/v2/health/live", timeout=60).raise_for_status(),
        }
        idle_latency = {name: polled(call, 5) for name, call in lanes.items()}
        idle_parts = rss_by_process(root)
        idle = sum(idle_parts.values())
        pollers = {name: Poller(call) for name, call in lanes.items()}
        peak = 0
        for poller in pollers.values():
            poller.start()
        began = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            running = [pool.submit(retried_request, url, model, ids, False) for ids in largest]
            while not all(job.done() for job in running):
                peak = max(peak, tree_rss(root))
                time.sleep(0.02)
            failures = [str(job.exception()) for job in running if job.exception()]
            refused = sum(job.result() for job in running if not job.exception())
        seconds = time.perf_counter() - began
        during = {name: poller.stop() for name, poller in pollers.items()}
        time.sleep(30)
        output_bytes = concurrency * shape[0] * positions * config["output"][0]["dims"][-1] * 4  # FP32
        return {
            "model": model,
            "concurrency": concurrency,
            "request_shape": list(shape),
            "request_json_bytes": len(
                httpclient.InferenceServerClient.generate_request_body(ids_inputs(largest[0], False))[0]
            ),
            "failures": failures,
            "refused_503_then_retried": refused,
            "seconds": round(seconds, 1),
            "idle_rss_mib": round(idle / MIB, 1),
            "peak_growth_mib": round((peak - idle) / MIB, 1),
            "bound_mib": round(burst_bound(server, model, output_bytes) / MIB, 1),
            "growth_30s_after_mib": round((tree_rss(root) - idle) / MIB, 1),
            "growth_30s_after_by_process_mib": {
                name: round((rss - idle_parts[name]) / MIB, 1) for name, rss in rss_by_process(root).items()
            },
            "idle": idle_latency,
            "during": during,
            "p99_over_idle": {name: round(during[name]["p99_ms"] / idle_latency[name]["p99_ms"], 1) for name in lanes},
        }
    finally:
        stop_server(server)


def main(argv: list[str] | None = None) -> int:
    parser = target_parser(__doc__, "gate_bounds.json", concurrency=8)
    parser.add_argument("--burst-model", default=None, help="a token-id model of the deployment (none: no burst)")
    args = parser.parse_args(argv)
    deployment, model = chosen_target(parser, args)
    report = {
        "deployment": deployment,
        "refusal": refusals(deployment, model),
        "burst": burst(deployment, args.burst_model, args.concurrency) if args.burst_model else None,
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average_1m": round(psutil.getloadavg()[0], 2),
    }
    write_json(report, args.json)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
