"""Network-bound scenarios: benchmarks through a link of given bandwidth (and latency).

    python -m harness_lab.netem bench <deployment> --rate 100mbit --duration 3
    python -m harness_lab.netem bench --rate loopback 1gbit 100mbit   # what make bench-network runs
    python -m harness_lab.netem bench <deployment> --rate 100mbit --rtt-ms 20 --benchmark before after

As root, server and load generator run inside a private network namespace whose loopback ``tc``
shapes (``tbf`` rate, ``netem`` delay); records carry ``network`` and ``link_ceiling_infer_per_s``.
How, and what it runs: docs/harness.md, "Network-bound runs". Without root or ``ip``/``tc`` it says
so and exits 0. Each run first removes the namespaces runs that were killed left behind.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import PROJECT_ROOT

PREFIX = "harness-netem-"
_counter = itertools.count()
_UNITS = {"": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


class ShapingUnavailable(RuntimeError):
    """This machine cannot shape a link (not root, no ip/tc, no namespace support, no qdisc)."""


def rate_bits(rate: str) -> float:
    """``"100mbit"`` -> 1e8 bits/s (tc's units: bit/kbit/mbit/gbit, and bps/kbps/... for bytes)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", rate)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"rate {rate!r}: use a number with bit, kbit, mbit, gbit (or bps, kbps, mbps)")
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


def tc_commands(rate: str | None, rtt_ms: float = 0.0) -> list[list[str]]:
    """The ``tc`` commands (run inside the namespace) that shape its loopback."""
    commands = []
    parent = ["root"]
    if rtt_ms:
        commands.append(f"tc qdisc add dev lo root handle 1: netem delay {rtt_ms / 2:g}ms limit 100000".split())
        parent = ["parent", "1:1"]
    if rate:
        bits = rate_bits(rate)
        burst = max(int(bits / 8 / 100), 16 * 1024, 70 * 1024)  # >= 10 ms of traffic and > the loopback MTU
        shape = f"handle 2: tbf rate {rate} burst {burst} latency 200ms".split()
        commands.append(["tc", "qdisc", "add", "dev", "lo", *parent, *shape])
    return commands


def why_not() -> str | None:
    """None when this process can create and shape namespaces, else the reason it cannot."""
    if os.geteuid() != 0:
        return "network shaping needs root (ip netns add, tc); skipped"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"network shaping needs {' and '.join(missing)} (Debian: apt-get install iproute2); skipped"
    return None


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise ShapingUnavailable(f"`{' '.join(cmd)}` failed: {(done.stderr or done.stdout).strip()}")
    return done


class ShapedNamespace:
    """A private network namespace whose loopback is shaped; removed on exit.

    >>> with ShapedNamespace("100mbit", rtt_ms=0) as ns:
    ...     subprocess.run(ns.wrap(["python", "-m", "harness", "bench", "<deployment>"]))
    """

    def __init__(self, rate: str | None = "100mbit", rtt_ms: float = 0.0, name: str | None = None):
        if rate:
            rate_bits(rate)
        self.rate = rate
        self.rtt_ms = float(rtt_ms or 0.0)
        self.name = name or f"{PREFIX}{os.getpid()}-{next(_counter)}"
        self.created = False
        self.qdisc = ""

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def create(self) -> ShapedNamespace:
        reason = why_not()
        if reason:
            raise ShapingUnavailable(reason)
        _run(["ip", "netns", "add", self.name])
        self.created = True
        try:
            _run(["ip", "-n", self.name, "link", "set", "lo", "up"])
            for cmd in tc_commands(self.rate, self.rtt_ms):
                done = _run(self.wrap(cmd), check=False)
                if done.returncode != 0:
                    hint = ""
                    if "netem" in cmd and "unknown" in (done.stderr or "").lower():
                        hint = (
                            " -- this kernel has no sch_netem, so latency cannot be added here; "
                            "run with --rtt-ms 0 (bandwidth only)"
                        )
                    raise ShapingUnavailable(f"`{' '.join(cmd)}` failed: {done.stderr.strip()}{hint}")
            self.qdisc = _run(self.wrap(["tc", "qdisc", "show", "dev", "lo"])).stdout.strip()
        except BaseException:
            self.delete()
            raise
        return self

    def delete(self) -> None:
        if self.created:
            _run(["ip", "netns", "del", self.name], check=False)
            self.created = False

    def describe(self) -> dict:
        return {
            "rate": self.rate,
            "rtt_ms": self.rtt_ms,
            "namespace": self.name,
            "qdisc": self.qdisc,
            "rate_bits_per_s": rate_bits(self.rate) if self.rate else None,
        }

    def __enter__(self) -> ShapedNamespace:
        return self.create()

    def __exit__(self, *exc) -> None:
        self.delete()


def list_namespaces() -> list[str]:
    if shutil.which("ip") is None:
        return []
    done = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def cleanup_stale() -> list[str]:
    """Delete ``harness-netem-<pid>-*`` namespaces whose process is gone; returns their names."""
    removed = []
    for name in list_namespaces():
        match = re.fullmatch(re.escape(PREFIX) + r"(\d+)-\d+", name)
        if not match:
            continue
        pid = int(match.group(1))
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    return removed


def annotate(record: dict, network: dict) -> dict:
    """A bench record from inside the namespace, with the link it ran through and its ceiling."""
    record = {**record, "network": network}
    wire = (record.get("bytes_sent_per_request") or 0) + (record.get("bytes_received_per_request") or 0)
    bits = network.get("rate_bits_per_s")
    record["link_ceiling_infer_per_s"] = round(bits / 8 / wire, 2) if bits and wire else None
    return record


def run_bench(
    deployment: str | None,
    *,
    rate: str | None,
    rtt_ms: float,
    duration_s: float,
    warmup_s: float,
    target: str,
    concurrency: list[int] | None,
    benchmarks: list[str] | None,
    records_file: Path | None = None,
) -> list[dict]:
    """Run benchmark scenarios inside a shaped namespace; append annotated records; return them."""
    from harness.measuring.records import append_record, read_records, records_path

    records_file = records_file or records_path()
    cleanup_stale()
    with tempfile.TemporaryDirectory(prefix="harness-netem-") as tmp, ShapedNamespace(rate, rtt_ms) as ns:
        print(
            f"namespace {ns.name}: loopback shaped to {rate or 'unlimited'}"
            + (f", +{rtt_ms:g} ms RTT" if rtt_ms else "")
            + f"\n  {ns.qdisc}",
            flush=True,
        )
        # the core's bench, served inside the namespace on its loopback
        options = f"--mode local --target {target} --duration {duration_s} --warmup {warmup_s}"
        inner = [sys.executable, "-m", "harness", "bench", *([deployment] if deployment else []), *options.split()]
        if concurrency:
            inner += ["--concurrency", *map(str, concurrency)]
        if benchmarks:
            inner += ["--only", *benchmarks]
        env = {**os.environ, "HARNESS_RESULTS_DIR": tmp, "PYTHONUNBUFFERED": "1"}
        done = subprocess.run(ns.wrap(inner), env=env, cwd=PROJECT_ROOT)
        rows = [annotate(r, ns.describe()) for r in read_records(Path(tmp) / "records.jsonl")]
        for row in rows:
            append_record(row, records_file)
        if done.returncode != 0:
            raise RuntimeError(
                f"the benchmark inside {ns.name} failed (exit {done.returncode}); {len(rows)} records kept"
            )
    return rows


#: ``--rate`` values that mean: the namespace's loopback unshaped (the same serving path, no link limit).
UNSHAPED = ("loopback", "unlimited", "none", "")


def network_benchmarks(deployment: str | None) -> list[str]:
    """The benchmark ids to run without ``--benchmark``: those marked ``network = true`` (of
    ``deployment``, or of every deployment); every benchmark of a named deployment that marks none."""
    from harness.deployments import discover, get_deployment

    if deployment:
        chosen = get_deployment(deployment)
        return [b.id for b in chosen.benchmarks if b.network] or [b.id for b in chosen.benchmarks]
    return sorted({b.id for d in discover() for b in d.benchmarks if b.network})


def _bench(args) -> int:
    reason = why_not()
    if reason:
        print(f"bench-network: {reason}")
        return 0
    from harness.serving.launchers.base import interrupt_on_sigterm

    interrupt_on_sigterm()  # unwinds through ShapedNamespace.__exit__, which deletes the namespace
    benchmarks = args.benchmark or network_benchmarks(args.deployment)
    if not benchmarks:
        print(
            "bench-network: no benchmark is marked `network = true` in any manifest; name a deployment or "
            "benchmarks (make bench-network DEPLOYMENT=... / BENCH_ONLY=...)"
        )
        return 0
    rows = []
    try:
        for rate in args.rate:
            rows += run_bench(
                args.deployment,
                rate=None if rate in UNSHAPED else rate,
                rtt_ms=args.rtt_ms,
                duration_s=args.duration,
                warmup_s=args.warmup,
                target=args.target,
                concurrency=args.concurrency,
                benchmarks=benchmarks,
            )
    except ShapingUnavailable as exc:
        print(f"bench-network: cannot shape here: {exc}; skipped")
        return 0
    except RuntimeError as exc:
        print(f"bench-network: {exc}", file=sys.stderr)
        return 1
    for row in rows:
        print(
            f"{row['deployment']:16} {row['benchmark']:34} c={row['concurrency']:<3} {row['perf_throughput']:9.1f} "
            f"infer/s  link ceiling {row['link_ceiling_infer_per_s']} infer/s"
        )
    print(f"{len(rows)} records appended; `make matrix` writes docs/results-network.md")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness bench-network", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="run benchmark scenarios through a shaped link")
    bench.add_argument("deployment", nargs="?")
    bench.add_argument(
        "--rate",
        nargs="+",
        default=["100mbit"],
        help="link rates in tc units, one run each (default 100mbit); loopback: the namespace unshaped",
    )
    bench.add_argument("--rtt-ms", type=float, default=0.0, help="added round-trip time (needs sch_netem)")
    bench.add_argument("--target", default="cpu")
    bench.add_argument("--duration", type=float, default=5.0)
    bench.add_argument("--warmup", type=float, default=1.0)
    bench.add_argument("--concurrency", type=int, nargs="*")
    bench.add_argument(
        "--benchmark", nargs="*", help="these benchmark ids (default: those a manifest marks network = true)"
    )
    return _bench(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
