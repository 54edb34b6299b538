"""What the gate enforces per model, kept out of the models' config.pbtxt files.

A policy is a ``GatePolicy``, derived once per deployment (``harness.deployments.Deployment.gate_policy``:
the manifest's entry models, ``[gate]`` and ``[openai]`` tables) and handed to the gate wherever it
runs as its JSON (``model_dump_json`` / ``model_validate_json``): inline in the local gate's
start-up file, as ``--policy-file`` to ``python -m triton_gate serve``
(the CPU image, Compose and swarm replicas, Kubernetes pods). ::

    {"public": ["classify", "classifier"],                  # every other model is internal
     "max_body_bytes": {"classify": 33554432},              # else computed from the config
     "max_dims": {"classifier": {"images": [3, 1280, 1280]}},   # batch dim excluded
     "openai": {"default": "fast", "models": {"fast": {"text": {...}, "tokenizer": {...}, "tokens": {...}}}}}

``openai``: the models of ``POST /v1/embeddings`` (``openai_api``: what each part names).

Without a policy (``public`` unset) every model is public and the limits are the ones computed
from each config (``validate.body_limit``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

NonEmptyStr = Annotated[str, Field(min_length=1)]


class Strict(BaseModel):
    """A table of known keys only, each of its declared type (no bool for an int, no "1" for 1)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class OpenAIText(Strict):
    """A text-in entry model (BYTES in, one vector per text out)."""

    model: NonEmptyStr
    input: str = "TEXT"
    output: str = "EMBEDDING"
    #: Its output of each text's token count (``[batch, 1]`` ints): ``usage`` sums it, with no
    #: ``tokenizer`` request for text input.
    tokens_output: str | None = None


class OpenAITokenizer(Strict):
    """The server model that tokenizes as the text path does (``usage`` counts its non-padding
    tokens; without ``text`` it feeds ``tokens``)."""

    model: NonEmptyStr
    ids: NonEmptyStr
    input: str = "TEXT"
    #: Its attention-mask output; without one, tokens are the ids other than ``pad_id``.
    mask: str | None = None
    pad_id: NonNegativeInt | None = None


class OpenAITokens(Strict):
    """A token-in entry model for ``input`` given as token ids."""

    model: NonEmptyStr
    output: NonEmptyStr
    ids: str = "input_ids"
    mask: str | None = None
    #: For a ``[batch, tokens, dim]`` output: ``mean`` over the mask, ``cls`` (the first token),
    #: ``lasttoken`` (the last token the mask keeps); ``none``: the output as it is.
    pooling: Literal["mean", "cls", "lasttoken", "none"] = "mean"
    normalize: bool = False
    pad_id: NonNegativeInt | None = None
    #: Ids outside ``0..vocab_size-1`` are refused with 400 before the model sees them.
    vocab_size: PositiveInt | None = None


class OpenAIModel(Strict):
    """What one OpenAI model name runs: a text path (``text``, or ``tokenizer`` + ``tokens``) or a token path."""

    text: OpenAIText | None = None
    tokenizer: OpenAITokenizer | None = None
    tokens: OpenAITokens | None = None

    @model_validator(mode="after")
    def _maps_a_path(self):
        if self.text is None and self.tokens is None:
            raise ValueError("maps neither text nor tokens")
        return self

    def entry_parts(self) -> list[str]:
        """Its parts that name entry models (``text``, ``tokens``; the tokenizer may be internal)."""
        return [part for part in ("text", "tokens") if getattr(self, part) is not None]


class OpenAIMapping(Strict):
    """``POST /v1/embeddings`` and ``GET /v1/models`` on the gate's HTTP port, by OpenAI model name."""

    models: dict[str, OpenAIModel] = Field(min_length=1)
    #: The model of a request that names none.
    default: str | None = None

    @model_validator(mode="after")
    def _default_is_mapped(self):
        if self.default is not None and self.default not in self.models:
            raise ValueError(f"[openai] default = {self.default!r} is not in [openai.models] ({list(self.models)})")
        return self


class GateBounds(Strict):
    """Bounds the gate enforces beyond what each config implies."""

    #: Largest request body per model, in bytes (else computed from the config, else 64 MiB).
    max_body_bytes: dict[str, PositiveInt] = {}
    #: Largest dims per input of a model, batch dim excluded: ``{ model = { input = [3, 1280, 1280] } }``.
    max_dims: dict[str, dict[str, list[PositiveInt]]] = {}
    #: Bytes of request bodies in flight to tritonserver per model (else 4 bodies of
    #: its largest size; ``body.Admission``): past it a request waits, then gets 503 + Retry-After.
    max_bytes_in_flight: dict[str, PositiveInt] = {}


class GatePolicy(GateBounds):
    """A deployment's whole gate policy."""

    #: The models clients may call; None: every model.
    public: list[str] | None = None
    openai: OpenAIMapping | None = None

    def is_internal(self, model: str) -> bool:
        """A model that clients may not call (only the server's own ensembles and BLS calls)."""
        return self.public is not None and model not in self.public


def write_policy(policy: GatePolicy, path: str | Path) -> Path:
    """Write ``policy`` as JSON to ``path`` (read-only for others is enough: it holds no secret)."""
    path = Path(path)
    path.write_text(policy.model_dump_json(indent=1) + "\n")
    return path
