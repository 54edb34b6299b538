"""Beyond one machine: replica footprints (``footprint``), capacity (``capacity``), multi-replica runs of
the committed swarm stacks (``swarm``, ``run``, ``nodes``). Command line: ``python -m harness scaleout``."""

import socket
import subprocess
import time


class ScaleoutError(RuntimeError):
    """The stack cannot be brought up or driven as asked; one line that says what to do."""


def wait_for(predicate, deadline_s: float, what: str, period_s: float = 0.5):
    """``predicate()``'s first true value, tried every ``period_s``; ScaleoutError after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ScaleoutError(f"{what}: not within {deadline_s:.0f} s")
        time.sleep(period_s)


def docker(*args: str, timeout_s: float = 300, check: bool = True) -> str:
    """``docker <args>``'s stdout; ``check``: ScaleoutError when it fails."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)
    if check and done.returncode != 0:
        raise ScaleoutError(f"docker {' '.join(args[:3])} failed: {(done.stderr or done.stdout).strip()[-600:]}")
    return done.stdout


def host_address(towards: str = "10.255.255.255") -> str:
    """The local address the kernel sends from towards ``towards``; by default the one the swarm
    advertises (the host's address on its default route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((towards, 1))
            return sock.getsockname()[0]
        except OSError:
            return "127.0.0.1"
