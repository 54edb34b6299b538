"""One ONNX file on OpenVINO and onnxruntime in this process: items/s side by side.

    python -m harness_lab.engines FILE.onnx [--batch 1 8] [--rounds 5] [--seconds 3] [--core 1]

One thread each on one pinned core, rounds alternating the engines; per batch the median and
range of items/s and of the ratio OpenVINO / onnxruntime, as JSON lines and a table."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from harness.measuring.engines import cpu_flags, cpu_session

ONNX_TYPES = {
    "tensor(float)": np.float32,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(uint8)": np.uint8,
}


def make_feed(session, batch: int, length: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for i in session.get_inputs():
        shape = [batch if k == 0 else (d if isinstance(d, int) and d > 0 else length) for k, d in enumerate(i.shape)]
        dtype = ONNX_TYPES[i.type]
        if np.issubdtype(dtype, np.floating):
            feed[i.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in i.name:
            feed[i.name] = np.ones(shape, dtype)
        else:
            feed[i.name] = rng.integers(0, 1000, shape).astype(dtype)
    return feed


def engines(path: str, f32: bool):
    """``{name: (run(feed) -> list of arrays, precision)}``, one thread each."""
    import openvino as ov

    session = cpu_session(path)
    names = [o.name for o in session.get_outputs()]
    found = {"onnxruntime": (lambda feed: session.run(names, feed), "f32")}
    core = ov.Core()
    model = core.read_model(path)
    variants = [("openvino-default", {})] + ([("openvino-f32", {"INFERENCE_PRECISION_HINT": "f32"})] if f32 else [])
    for label, extra in variants:
        compiled = core.compile_model(
            model, "CPU", {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY", **extra}
        )
        request = compiled.create_infer_request()
        ports = [compiled.output(n) for n in names]
        run = lambda feed, request=request, ports=ports: [np.array(request.infer(feed)[p]) for p in ports]
        found[label] = (run, compiled.get_property("INFERENCE_PRECISION_HINT").to_string())
    return session, found


def items_per_s(run, feed, batch: int, seconds: float) -> float:
    run(feed)
    count, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        run(feed)
        count += 1
    return count * batch / (time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--length", type=int, default=16, help="dynamic dims other than the batch (tokens)")
    parser.add_argument("--core", type=int, default=None, help="the one core to pin to (default: the last)")
    parser.add_argument("--f32", action="store_true", help="also run OpenVINO with INFERENCE_PRECISION_HINT=f32")
    args = parser.parse_args(argv)
    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    session, found = engines(args.file, args.f32)
    flags = ",".join(cpu_flags())
    print(f"file {args.file}, core {core}, cpu flags {flags}", flush=True)
    table = []
    for batch in args.batch:
        feed = make_feed(session, batch, args.length)
        reference = found["onnxruntime"][0](feed)
        rates = {name: [] for name in found}
        for r in range(args.rounds):
            order = list(found) if r % 2 == 0 else list(reversed(found))
            for name in order:
                rates[name].append(items_per_s(found[name][0], feed, batch, args.seconds))
        for name, (run, precision) in found.items():
            diff = max(float(np.abs(a - b).max()) for a, b in zip(run(feed), reference))
            ratios = [a / b for a, b in zip(rates[name], rates["onnxruntime"])]
            row = {
                "file": os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(args.file)))),
                "batch": batch,
                "engine": name,
                "precision": precision,
                "items_per_s_median": round(statistics.median(rates[name]), 1),
                "items_per_s_min": round(min(rates[name]), 1),
                "items_per_s_max": round(max(rates[name]), 1),
                "ratio_to_onnxruntime_median": round(statistics.median(ratios), 3),
                "ratio_min": round(min(ratios), 3),
                "ratio_max": round(max(ratios), 3),
                "max_abs_diff_vs_onnxruntime": diff,
                "cpu_flags": flags,
                "rounds": args.rounds,
                "seconds": args.seconds,
            }
            table.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'batch':>5} {'engine':<18} {'precision':<9} {'items/s median [min-max]':<28} ratio median [min-max]")
    for row in table:
        span = f"{row['items_per_s_median']} [{row['items_per_s_min']}-{row['items_per_s_max']}]"
        ratio = f"{row['ratio_to_onnxruntime_median']} [{row['ratio_min']}-{row['ratio_max']}]"
        print(f"{row['batch']:>5} {row['engine']:<18} {row['precision']:<9} {span:<28} {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
