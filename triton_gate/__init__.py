"""Front gate of the harness's servers: validation, honest readiness, isolation (see server.py)."""

import sys


def log(message: str) -> None:
    """One line of the gate's log (stderr; ``docker logs`` in the image)."""
    print(f"gate: {message}", file=sys.stderr, flush=True)
