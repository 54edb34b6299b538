"""The matrix's figures (``docs/plots/``): throughput vs concurrency, latency vs throughput and
bytes per request of each deployment's measured rows."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from harness.measuring.matrix.cells import generator_family

#: The figures of each deployment, ``docs/plots/<deployment>-<kind>.png``.
PLOT_KINDS = ("throughput", "latency", "bytes")


def plot(name: str, rows: list[dict], folder: Path) -> dict[str, Path]:
    """Throughput vs concurrency, latency vs throughput, bytes per request; PNG paths by kind."""
    measured = [r for r in rows if r["measured"]]
    if not measured:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    series: dict[str, list[dict]] = defaultdict(list)
    for r in measured:
        series[f"{r['benchmark']} [{r['server_mode']}/{r['target']}, {generator_family(r)}]"].append(r)
    for points in series.values():
        points.sort(key=lambda r: int(r["concurrency"]))
    written = {}

    def save(fig, kind: str) -> None:
        written[kind] = folder / f"{name}-{kind}.png"
        fig.tight_layout()
        fig.savefig(written[kind], dpi=100, metadata={"Software": None})
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, points in series.items():
        ax.plot([p["concurrency"] for p in points], [p["perf_throughput"] for p in points], marker="o", label=label)
    ax.set(xlabel="concurrency (requests in flight)", ylabel="infer/s", title=f"{name}: throughput vs concurrency")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "throughput")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, points in series.items():
        (line,) = ax.plot(
            [p["perf_throughput"] for p in points],
            [p["perf_latency_p50"] for p in points],
            marker="o",
            label=f"{label} p50",
        )
        ax.plot(
            [p["perf_throughput"] for p in points],
            [p["perf_latency_p99"] for p in points],
            marker="x",
            linestyle="--",
            color=line.get_color(),
            label=f"{label} p99",
        )
    ax.set(xlabel="infer/s", ylabel="latency (ms)", title=f"{name}: latency vs throughput")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "latency")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = list(series)
    sent = [series[k][-1].get("bytes_sent_per_request") or 0 for k in labels]
    received = [series[k][-1].get("bytes_received_per_request") or 0 for k in labels]
    positions = range(len(labels))
    ax.barh([p - 0.2 for p in positions], sent, height=0.4, label="sent")
    ax.barh([p + 0.2 for p in positions], received, height=0.4, label="received")
    ax.set_yticks(list(positions), [k.split(" [")[0] for k in labels], fontsize=7)
    ax.set_xscale("log")
    ax.set(xlabel="bytes per request (log)", title=f"{name}: bytes on the wire per request")
    ax.legend()
    save(fig, "bytes")
    return written
