"""Optional bearer-token auth of the gate's public routes (off by default; docs/harness.md, "API keys").

With API keys set, every HTTP request and gRPC call but the health probes needs
``Authorization: Bearer <key>`` (gRPC: the ``authorization`` metadata) or the admin header.
"""

from __future__ import annotations

import hmac
from pathlib import Path

PROBE_PATHS = frozenset({"/v2/health/live", "/v2/health/ready"})
PROBE_METHODS = frozenset({"ServerLive", "ServerReady"})


def read_keys(path: str | Path | None) -> list[str]:
    """The API keys of a key file (one per line, blank lines and ``#`` comments skipped)."""
    if not path:
        return []
    keys = [line.strip() for line in Path(path).read_text().splitlines()]
    keys = [k for k in keys if k and not k.startswith("#")]
    if not keys:
        raise SystemExit(f"gate: API key file {path} holds no key")
    return keys


def bearer_ok(value: str | None, keys: list[str]) -> bool:
    """``value`` (an Authorization header) is ``Bearer <one of keys>``; compared in constant time."""
    scheme, _, token = (value or "").strip().partition(" ")
    token = token.strip().encode()
    # every key compared (a list, not a generator): the time does not tell which key matched
    return scheme.lower() == "bearer" and any([hmac.compare_digest(token, key.encode()) for key in keys])
