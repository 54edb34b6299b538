"""What the gate enforces per model, kept out of the models' config.pbtxt files.

A policy is plain JSON, derived once per deployment (``harness.deployments.Deployment.gate_policy``:
the manifest's entry models and ``[gate]`` table) and handed to the gate wherever it runs: inline
in the local gate's start-up file, as ``--policy-file`` to ``python -m harness.serving.gate serve``
(the CPU image, Compose replicas, Kubernetes pods). ::

    {"public": ["classify", "classifier"],                  # every other model is internal
     "max_body_bytes": {"classify": 33554432},              # else computed from the config
     "max_dims": {"classifier": {"images": [3, 1280, 1280]}},   # batch dim excluded
     "openai": {"default": "fast", "models": {"fast": {"text": {...}, "tokenizer": {...}, "tokens": {...}}}}}

``openai``: the models of ``POST /v1/embeddings`` (``openai_api``: what each part names).

Without a policy (``None``, or ``"public"`` absent) every model is public and the limits are the
ones computed from each config (``validate.body_limit``).
"""

from __future__ import annotations

import json
from pathlib import Path

KEYS = ("public", "max_body_bytes", "max_dims", "openai")
#: The parts of an ``openai`` model and their keys: required, optional.
OPENAI_PARTS = {
    "text": ({"model", "input", "output"}, {"tokens_output"}),
    "tokenizer": ({"model", "input", "ids"}, {"mask", "pad_id"}),
    "tokens": ({"model", "ids", "output"}, {"mask", "pooling", "normalize", "pad_id", "vocab_size"}),
}


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
    if policy.get("openai") is not None:
        check_openai(policy["openai"])
    return policy


def check_openai(openai: dict) -> None:
    """The ``openai`` key: every model maps a text path (``text``, or ``tokenizer`` + ``tokens``)
    or a token path, with the keys each part needs (ValueError naming the model and key)."""
    if not isinstance(openai, dict) or set(openai) - {"default", "models"}:
        raise ValueError("gate policy: 'openai' must be an object of 'default' and 'models'")
    models = openai.get("models")
    if not isinstance(models, dict) or not models:
        raise ValueError("gate policy: openai 'models' must map at least one OpenAI model name")
    if openai.get("default") is not None and openai["default"] not in models:
        raise ValueError(f"gate policy: openai default {openai['default']!r} is not in its models {sorted(models)}")
    for name, spec in models.items():
        where = f"gate policy: openai model {name!r}"
        if not isinstance(spec, dict) or not spec or set(spec) - set(OPENAI_PARTS):
            raise ValueError(f"{where} must be an object of {sorted(OPENAI_PARTS)}")
        if "text" not in spec and "tokens" not in spec:
            raise ValueError(f"{where} maps neither a 'text' nor a 'tokens' model")
        for part, table in spec.items():
            required, optional = OPENAI_PARTS[part]
            if not isinstance(table, dict) or not required <= set(table) or set(table) - required - optional:
                raise ValueError(f"{where} {part!r} needs {sorted(required)} (may have {sorted(optional)})")
            for key in required | (optional & set(table)):
                value = table[key]
                if key == "normalize":
                    ok = isinstance(value, bool)
                elif key in ("pad_id", "vocab_size"):
                    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
                elif key == "pooling":
                    ok = value in ("mean", "none")
                else:
                    ok = isinstance(value, str) and bool(value)
                if not ok:
                    raise ValueError(f"{where} {part}.{key} = {value!r} has the wrong type or value")


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
