"""Network-bound scenario: a namespace whose loopback is shaped by tc (root), or a clear skip."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness_lab import netem

TRANSFER = r"""
import socket, sys, threading, time
size = int(sys.argv[1])
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
def sink():
    conn, _ = server.accept()
    got = 0
    while got < size:
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        got += len(chunk)
    conn.sendall(b"k"); conn.close()
threading.Thread(target=sink, daemon=True).start()
client = socket.create_connection(server.getsockname())
began = time.perf_counter()
client.sendall(b"x" * size); client.recv(1)
print(size * 8 / (time.perf_counter() - began))
"""


def test_rate_parsing_and_tc_commands():
    assert netem.rate_bits("100mbit") == 1e8
    assert netem.rate_bits("1.5gbit") == 1.5e9
    assert netem.rate_bits("10mbps") == 8e7
    with pytest.raises(ValueError, match="kbit"):
        netem.rate_bits("fast")
    (tbf,) = netem.tc_commands("100mbit")
    assert tbf[:6] == ["tc", "qdisc", "add", "dev", "lo", "root"] and "tbf" in tbf and "100mbit" in tbf
    delay, tbf = netem.tc_commands("10mbit", rtt_ms=20)
    assert "netem" in delay and "10ms" in delay, "half the round trip on the loopback's egress"
    assert tbf[5:7] == ["parent", "1:1"]


def test_link_ceiling_annotation():
    row = netem.annotate(
        {"bytes_sent_per_request": 90, "bytes_received_per_request": 1580}, {"rate": "1mbit", "rate_bits_per_s": 1e6}
    )
    assert row["link_ceiling_infer_per_s"] == round(1e6 / 8 / 1670, 2)
    assert netem.annotate({"bytes_sent_per_request": 0}, {"rate_bits_per_s": 1e6})["link_ceiling_infer_per_s"] is None


def test_clear_skip_without_root(monkeypatch, capsys):
    monkeypatch.setattr(netem.os, "geteuid", lambda: 1000)
    assert "root" in netem.why_not()
    assert netem.main(["bench", "embedding_cpu", "--rate", "10mbit"]) == 0
    assert "needs root" in capsys.readouterr().out
    with pytest.raises(netem.ShapingUnavailable, match="root"):
        netem.ShapedNamespace("10mbit").create()


def test_clear_skip_without_tools(monkeypatch):
    monkeypatch.setattr(netem.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netem.shutil, "which", lambda tool: None)
    assert "iproute2" in netem.why_not()


needs_shaping = pytest.mark.skipif(netem.why_not() is not None, reason=str(netem.why_not()))


@needs_shaping
def test_shaped_namespace_limits_loopback_and_is_removed():
    size = 2_000_000
    with netem.ShapedNamespace("16mbit") as ns:
        assert ns.name in netem.list_namespaces()
        assert "tbf" in ns.qdisc
        done = subprocess.run(
            ns.wrap([sys.executable, "-c", TRANSFER, str(size)]), capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        shaped = float(done.stdout)
    assert ns.name not in netem.list_namespaces(), "namespace must be deleted on exit"
    assert 4e6 < shaped < 16e6 * 1.5, f"{shaped / 1e6:.1f} Mbit/s through a 16mbit link"
    with netem.ShapedNamespace(None) as ns:  # the same namespace without shaping is far faster
        unshaped = float(
            subprocess.run(
                ns.wrap([sys.executable, "-c", TRANSFER, str(size)]), capture_output=True, text=True, timeout=60
            ).stdout
        )
    assert unshaped > 3 * shaped


@needs_shaping
def test_namespace_removed_when_the_body_fails_and_stale_ones_cleaned():
    with pytest.raises(RuntimeError):
        with netem.ShapedNamespace("10mbit") as ns:
            raise RuntimeError("boom")
    assert ns.name not in netem.list_namespaces()
    finished = subprocess.Popen(["true"])
    finished.wait()
    dead = finished.pid  # a process that no longer exists
    stale = f"{netem.PREFIX}{dead}-0"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in netem.cleanup_stale()
        assert stale not in netem.list_namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)


def test_without_benchmark_ids_the_manifests_network_scenarios_run(monkeypatch, capsys):
    from harness.deployments import discover
    from harness_lab import netem

    marked = sorted({b.id for d in discover() for b in d.benchmarks if b.network})
    assert netem.network_benchmarks(None) == marked
    for deployment in discover():
        own = [b.id for b in deployment.benchmarks if b.network]
        assert netem.network_benchmarks(deployment.name) == (own or [b.id for b in deployment.benchmarks])
    runs = []
    monkeypatch.setattr(netem, "why_not", lambda: None)
    monkeypatch.setattr("harness.serving.launchers.base.interrupt_on_sigterm", lambda: None)
    monkeypatch.setattr(netem, "run_bench", lambda deployment, **kw: runs.append((kw["rate"], kw["benchmarks"])) or [])
    monkeypatch.setattr(netem, "network_benchmarks", lambda deployment: ["a", "b"])
    assert netem.main(["bench", "--rate", "loopback", "1gbit", "100mbit"]) == 0
    assert runs == [(None, ["a", "b"]), ("1gbit", ["a", "b"]), ("100mbit", ["a", "b"])], "loopback: unshaped"
    monkeypatch.setattr(netem, "network_benchmarks", lambda deployment: [])
    assert netem.main(["bench"]) == 0 and "no benchmark is marked `network = true`" in capsys.readouterr().out
