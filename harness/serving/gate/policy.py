"""What the gate enforces per model, kept out of the models' config.pbtxt files.

A policy is plain JSON, derived once per deployment (``harness.deployments.Deployment.gate_policy``:
the manifest's entry models and ``[gate]`` table) and handed to the gate wherever it runs: inline
in the local gate's start-up file, as ``--policy-file`` to ``python -m harness.serving.gate serve``
(the CPU image, Compose replicas, Kubernetes pods). ::

    {"public": ["classify", "classifier"],                  # every other model is internal
     "max_body_bytes": {"classify": 33554432},              # else computed from the config
     "max_dims": {"classifier": {"images": [3, 1280, 1280]}}}   # batch dim excluded

Without a policy (``None``, or ``"public"`` absent) every model is public and the limits are the
ones computed from each config (``validate.body_limit``).
"""

from __future__ import annotations

import json
from pathlib import Path

KEYS = ("public", "max_body_bytes", "max_dims")


def check_policy(policy: dict | None) -> dict:
    """``policy`` with its keys and value types checked (ValueError naming the key); ``{}`` for None."""
    policy = dict(policy or {})
    unknown = sorted(set(policy) - set(KEYS))
    if unknown:
        raise ValueError(f"gate policy: unknown keys {unknown} (known: {list(KEYS)})")
    public = policy.get("public")
    if public is not None and not (isinstance(public, list) and all(isinstance(m, str) for m in public)):
        raise ValueError("gate policy: 'public' must be a list of model names")
    for model, limit in (policy.get("max_body_bytes") or {}).items():
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise ValueError(f"gate policy: max_body_bytes of {model!r} must be a positive integer")
    for model, inputs in (policy.get("max_dims") or {}).items():
        for name, dims in (inputs or {}).items():
            if not (isinstance(dims, list) and all(isinstance(d, int) and d > 0 for d in dims)):
                raise ValueError(f"gate policy: max_dims of {model!r} input {name!r} must be positive integers")
    return policy


def is_internal(policy: dict, model: str) -> bool:
    """A model that clients may not call (only the server's own ensembles and BLS calls)."""
    public = policy.get("public")
    return public is not None and model not in public


def read_policy(path: str | Path | None) -> dict:
    """The policy in the JSON file at ``path`` (``{}`` when no path is given)."""
    return check_policy(json.loads(Path(path).read_text())) if path else {}


def write_policy(policy: dict | None, path: str | Path) -> Path:
    """Write ``policy`` as JSON to ``path`` (read-only for others is enough: it holds no secret)."""
    path = Path(path)
    path.write_text(json.dumps(check_policy(policy), indent=1, sort_keys=True) + "\n")
    return path
