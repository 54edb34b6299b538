"""``python -m harness hostile``: the project's hostile inputs against a server you run (e.g.
``python -m harness serve DEPLOYMENT``), one at a time, readiness checked after each; per class:
refused cleanly / accepted / server error / hung / server died.

    python -m harness hostile --mode external --url 127.0.0.1:8000 --grpc-url 127.0.0.1:8001
    python -m harness hostile --mode external --url 10.0.0.5:8000 --allow-remote --model my_model

Exit status: 0 every class refused cleanly, 1 some class was not, 3 stopped early (the server
did not come back, or the time budget ran out), 2 bad arguments or no model to try.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import sys
import time
from collections import Counter
from pathlib import Path

from triton_gate.tests.hostile_cases import CLASSES, all_cases, declared_bytes, overcommit_always
from triton_gate.tests.hostile_runner import NOT_RUN, REFUSED, SEVERITY, Endpoint, by_class, choose_target, run_cases


def is_loopback(url: str) -> bool:
    host = url.rpartition(":")[0].strip("[]") or url
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m harness hostile",
        description="Send the project's hostile inputs to a server, one at a time; report per class.",
    )
    parser.add_argument("--mode", choices=("external",), default="external", help="a server you run (the only mode)")
    parser.add_argument("--url", help="HTTP host:port of the server")
    parser.add_argument("--grpc-url", help="gRPC host:port (gRPC classes are skipped without it)")
    parser.add_argument("--allow-remote", action="store_true", help="allow a host other than loopback")
    parser.add_argument("--model", help="model to target (default: the first with inputs that clients may call)")
    parser.add_argument("--only", nargs="+", choices=list(CLASSES), metavar="CLASS", help="classes to run")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request before 'hung'")
    parser.add_argument("--wait-back", type=float, default=60.0, help="seconds to wait for a dead server to return")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole run")
    parser.add_argument("--json", help="write every outcome to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per request too")
    return parser.parse_args(argv)


def report_line(klass: str, verdict: str, outcomes) -> str:
    shown = max(outcomes, key=lambda o: SEVERITY.index(o.verdict))
    detail = f"{shown.case.name}: {shown.answer}"
    if shown.message:
        detail += f" {' '.join(shown.message.split())[:110]}"
    if shown.back_after_s is not None:
        detail += f" (ready again after {shown.back_after_s:.1f} s)"
    return f"  {klass:17} {verdict:16} {len(outcomes):2} req  {detail}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.url:
        print("hostile: it needs --url HOST:PORT of a server you run (python -m harness serve)", file=sys.stderr)
        return 2
    return run(args)


def remote_url(args) -> str | None:
    """The first of ``--url`` / ``--grpc-url`` that is not loopback, unless ``--allow-remote``."""
    urls = filter(None, (args.url, args.grpc_url))
    return None if args.allow_remote else next((url for url in urls if not is_loopback(url)), None)


def planned_cases(args, target) -> tuple[list, set[str], int]:
    """The cases to send (``--only``), those left out because they would fill memory here, and the
    bytes the crashers declare."""
    nbytes = declared_bytes()
    cases = [c for c in all_cases(target, nbytes, grpc=bool(args.grpc_url)) if not args.only or c.klass in args.only]
    skipped: set[str] = set()
    if overcommit_always() and is_loopback(args.url):
        skipped = {c.name for c in cases if c.allocates}
        cases = [c for c in cases if not c.allocates]
    return cases, skipped, nbytes


def print_classes(args, classes: dict, seconds: float, stopped: str | None) -> None:
    """One line per class (those not run say why), then the counts per verdict."""
    for klass in CLASSES:
        if klass in classes:
            print(report_line(klass, *classes[klass]))
        elif not args.only or klass in args.only:
            reason = "no gRPC url" if klass.startswith("grpc_") and not args.grpc_url else "not for this model"
            print(f"  {klass:17} {NOT_RUN:16}  0 req  {reason}")
    counts = Counter(verdict for verdict, _ in classes.values())
    print(
        f"{len(classes)} classes in {seconds:.1f} s: " + ", ".join(f"{counts[v]} {v}" for v in SEVERITY if v in counts)
    )
    if stopped:
        print(stopped)


def write_outcomes(args, target, nbytes: int, classes: dict, outcomes, stopped) -> None:
    """``--json``: every outcome, the verdict per class, and how the run ended."""
    report = {
        "url": args.url,
        "grpc_url": args.grpc_url,
        "model": target.model,
        "inputs": target.describe(),
        "declared_bytes": nbytes,
        "classes": {k: v for k, (v, _) in classes.items()},
        "outcomes": [o.as_dict() for o in outcomes],
        "stopped": stopped,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1))


def run(args) -> int:
    args.url, args.grpc_url = (u.removeprefix("http://").rstrip("/") if u else u for u in (args.url, args.grpc_url))
    remote = remote_url(args)
    if remote:
        print(
            f"hostile: {remote} is not a loopback address: name it with --allow-remote to send it these",
            file=sys.stderr,
        )
        return 2
    endpoint = Endpoint(args.url, args.grpc_url, timeout_s=args.timeout)
    if endpoint.wait_ready(10) is None:
        print(f"hostile: {args.url} is not ready (/v2/health/ready)", file=sys.stderr)
        return 2
    try:
        target = choose_target(endpoint, args.model)
    except (RuntimeError, OSError) as exc:
        print(f"hostile: {exc}", file=sys.stderr)
        return 2
    cases, skipped, nbytes = planned_cases(args, target)
    print(
        f"hostile inputs -> http://{args.url}"
        + (f", gRPC {args.grpc_url}" if args.grpc_url else ", no gRPC")
        + f"; model '{target.model}' ({target.describe()}); {len(cases)} requests, one at a time;"
        f" crashers declare {nbytes >> 30} GiB",
        flush=True,
    )
    if skipped:
        print(f"  not sent (vm.overcommit_memory=1 here: they would fill memory): {', '.join(sorted(skipped))}")

    def show(outcome):
        if args.verbose:
            print(
                f"    {outcome.case.klass}/{outcome.case.name}: {outcome.verdict} ({outcome.answer}, "
                f"{outcome.seconds:.2f} s) {' '.join(outcome.message.split())[:100]}",
                flush=True,
            )

    began = time.monotonic()
    outcomes, stopped = run_cases(endpoint, cases, wait_back_s=args.wait_back, budget_s=args.budget, on_outcome=show)
    classes = by_class(outcomes)
    print_classes(args, classes, time.monotonic() - began, stopped)
    if args.json:
        write_outcomes(args, target, nbytes, classes, outcomes, stopped)
    if stopped:
        return 3
    return 0 if all(v in (REFUSED, NOT_RUN) for v, _ in classes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
