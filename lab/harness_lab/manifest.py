"""The lab's tables of a deployment, ``lab/deployments/<deployment>.toml``, typed: ``[reliability]``,
``[peers]``, ``[scaleout]``. The deployment folder holds none of them, so a copied deployment
(``python -m harness new``) carries nothing of the lab. As in ``deployment.toml``, an unknown key or
a value of the wrong type is refused with the file and the key's path, and a name the table gives
must exist in the deployment's own manifest (an entry model, a benchmark)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import ValidationInfo, model_validator

from harness.deployments import Deployment, ManifestError, discover, get_deployment, load_module
from harness.manifest import Manifest, Strict, read_typed

#: Where the lab's tables live: one ``<deployment>.toml`` (and the Python files its tables name) each;
#: $HARNESS_LAB_DEPLOYMENTS_DIR, where set (as $HARNESS_DEPLOYMENTS_DIR for the deployments).
LAB_DEPLOYMENTS = Path(__file__).resolve().parents[1] / "deployments"


def lab_folder(folder: Path | None = None) -> Path:
    """``folder``, else $HARNESS_LAB_DEPLOYMENTS_DIR, else ``LAB_DEPLOYMENTS``."""
    return Path(folder or os.environ.get("HARNESS_LAB_DEPLOYMENTS_DIR") or LAB_DEPLOYMENTS)


class ReliabilitySpec(Strict):
    """``[reliability]``: what ``python -m harness soak`` / ``faults`` / ``gate-cost`` load by default."""

    #: The entry model loaded (``--model`` overrides it).
    model: str
    #: ``"file.py:function"`` of the lab folder: ``function(http_url, model)`` returns a ``harness.measuring.loadgen.Workload``
    #: of the reliability tools; unset: unique sentences to the model's one text input, each answer
    #: compared with the vector the same server gave that sentence alone before the load.
    workload: str | None = None


class PeerModel(Strict):
    """``[peers.models.<model>]``: one served model of the side-by-side run."""

    #: The request: ``text`` (``TEXT`` BYTES in, ``EMBEDDING`` out) or ``tokens`` (client-tokenized
    #: ``input_ids`` + ``attention_mask`` in, ``last_hidden_state`` out).
    request: Literal["text", "tokens"]
    #: The in-process ceiling it is compared with: a key of ``[peers] ceiling_onnx`` or ``sentence-transformers``.
    ceiling: str
    #: What it is (the records' ``variant``).
    describe: str = ""


class PeerRatio(Strict):
    """``[[peers.ratios]]``: one ratio of the results matrix's side-by-side table."""

    label: str
    #: A target (a model of ``[peers.models]``, ``infinity-<engine>``) or ``ceiling:<kind>``.
    top: str
    #: A target, ``ceiling`` (the top's own ceiling), ``best-peer`` (the faster peer, round by round) or
    #: ``ceiling:<kind>``.
    bottom: str
    goal: float
    #: A target: the goal holds only at workloads where it, too, is ahead of ``bottom`` (elsewhere
    #: the row reads ``n/a``), e.g. the OpenAI path ahead of a peer wherever the native path is.
    only_where_ahead: str = ""


class PeerVariant(Strict):
    """``[peers.variants.<name>]``: a config variant ``python -m harness peers`` serves by default on
    a tritonserver of its own (targets ``<model>[<name>]``), where the CPU has what it needs."""

    #: The benchmark whose ``config`` the variant's server runs (its checks: ``--config-variant <id>``).
    benchmark: str
    #: The ``[peers.models]`` it serves, those of them the run serves (``--models``).
    models: list[str]
    #: Served only on a CPU with one of these flags (``/proc/cpuinfo``); empty: on every CPU.
    cpu_flags: list[str] = []
    #: Its records' ``engine`` and ``precision`` (e.g. ``openvino``, ``bf16``); on ``openvino`` its
    #: targets' ceiling is their ONNX kind on OpenVINO too (``onnx-fp32@openvino``).
    engine: str = ""
    precision: str = ""
    #: What it is (the records' ``variant``).
    describe: str = ""


class PeersSpec(Strict):
    """``[peers]``: ``python -m harness peers``, the served models next to their in-process ceilings
    and a peer server (infinity-emb) on the same embedding model."""

    models: dict[str, PeerModel]
    #: Served by default (``--models``).
    default_models: list[str]
    #: The ONNX file of each ceiling kind (``onnx-fp32`` ...), relative to the deployment folder
    #: (on onnxruntime; kind ``<kind>@openvino``: the same file on OpenVINO).
    ceiling_onnx: dict[str, str]
    #: The served model whose config the ONNX ceiling follows (``onnx_max_batch_size``,
    #: ``tokenizer_parallelism``).
    ceiling_follows: str
    #: ``"file.py:function"`` of the lab folder: ``function()`` returns the in-process pieces of the run:
    #: ``model_dir`` (the sentence-transformers folder the peer and the torch ceiling load), ``dimension``
    #: (of a vector), ``tokenize(texts)`` (the client's ``input_ids`` / ``attention_mask``),
    #: ``embed(run, texts, max_rows)`` (tokenize, an onnxruntime ``session.run``, pool: the ONNX
    #: ceiling's work), ``sentences`` (the texts the run's requests carry) and ``mixed`` (texts of
    #: mixed lengths, for the ``mixed`` workload).
    embedding: str
    #: Served by a ``--variant`` server by default (``--variant-models``).
    variant_models: list[str] = []
    #: Config variants served by default, each on its own server (``--declared-variants``).
    variants: dict[str, PeerVariant] = {}
    #: The ceiling kind whose ONNX file the peer's ``optimum`` engine runs.
    peer_onnx: str = "onnx-fp32"
    #: What the results matrix's side-by-side section compares (its heading).
    title: str = ""
    ratios: list[PeerRatio] = []
    #: ``{ <[peers.models] model> = "<OpenAI model name>" }``: also served through the front gate's
    #: ``POST /v1/embeddings`` asking for that name (target ``openai:<model>``, the model's ceiling).
    openai_models: dict[str, str] = {}

    @model_validator(mode="after")
    def _names_exist(self):
        kinds = set(self.ceiling_onnx) | {"sentence-transformers"}
        named = {
            "default_models": self.default_models,
            "variant_models": self.variant_models,
            "ceiling_follows": [self.ceiling_follows],
            "openai_models": list(self.openai_models),
            **{f"variants.{name}.models": variant.models for name, variant in self.variants.items()},
        }
        for key, models in named.items():
            unknown = [m for m in models if m not in self.models]
            if unknown:
                raise ValueError(f"[peers] {key}: {unknown[0]!r} is not in [peers.models] ({list(self.models)})")
        for model, spec in self.models.items():
            if spec.ceiling not in kinds:
                raise ValueError(f"[peers.models.{model}] ceiling = {spec.ceiling!r}: one of {sorted(kinds)}")
        if self.peer_onnx not in self.ceiling_onnx:
            raise ValueError(f"[peers] peer_onnx = {self.peer_onnx!r} is not in ceiling_onnx")
        return self


class ScaleoutSpec(Strict):
    """``[scaleout]``: the multi-replica run (``python -m harness scaleout run``); the Kubernetes
    objects are committed files (deploy/k8s/)."""

    #: The entry model the multi-replica run calls (``TEXT`` in, ``EMBEDDING`` out); each replica
    #: loads it and the models it calls.
    model: str | None = None
    #: The models whose version 2 the run's roll brings.
    rolled_models: list[str] = []


class LabManifest(Strict):
    """A whole ``lab/deployments/<deployment>.toml``; validated with the deployment's manifest as
    context (``{"manifest": Manifest}``) its names are checked against the deployment's."""

    reliability: ReliabilitySpec | None = None
    peers: PeersSpec | None = None
    scaleout: ScaleoutSpec = ScaleoutSpec()

    @model_validator(mode="after")
    def _names_exist(self, info: ValidationInfo):
        manifest: Manifest | None = (info.context or {}).get("manifest")
        if manifest is None:
            return self
        entry = {
            "[reliability] model": self.reliability and self.reliability.model,
            "[scaleout] model": self.scaleout.model,
        }
        for key, model in entry.items():
            if model and model not in manifest.entry_models:
                raise ValueError(f"{key} = {model!r} is no entry model of {manifest.name} ({manifest.entry_models})")
        configured = {b.id for b in manifest.benchmarks if b.config}
        for name, variant in (self.peers.variants if self.peers else {}).items():
            if variant.benchmark not in configured:
                raise ValueError(
                    f"[peers.variants.{name}] benchmark = {variant.benchmark!r} is no benchmark with a config"
                )
        return self


def read_lab_manifest(path: Path, manifest: Manifest) -> LabManifest:
    """Parse and type-check one lab file against its deployment's ``manifest``."""
    return read_typed(path, LabManifest, {"manifest": manifest})


def lab_manifest(deployment: str | Deployment, folder: Path | None = None) -> LabManifest:
    """The lab's tables of ``deployment`` (``<folder>/<name>.toml``); no file: an empty ``LabManifest``."""
    path = lab_folder(folder) / f"{deployment if isinstance(deployment, str) else deployment.name}.toml"
    if not path.exists():
        return LabManifest()
    found = get_deployment(deployment) if isinstance(deployment, str) else deployment
    return read_lab_manifest(path, found.manifest)


def declaring(key: str, root: Path | None = None, folder: Path | None = None) -> Deployment:
    """The one deployment whose lab file sets ``key`` (a table such as ``reliability``, or a ``table.key``
    such as ``scaleout.model``): a tool's default when no ``--deployment`` is given."""

    def value(manifest: LabManifest):
        for part in key.split("."):
            manifest = getattr(manifest, part)
        return manifest

    folder = lab_folder(folder)
    found = [d for d in discover(root) if (folder / f"{d.name}.toml").exists() and value(lab_manifest(d, folder))]
    if len(found) != 1:
        table, _, name = key.partition(".")
        names = ", ".join(d.name for d in found) or "none"
        raise ManifestError(
            f"{len(found)} deployments declare [{table}]{' ' + name if name else ''} in {folder} ({names}): "
            "pass --deployment"
        )
    return found[0]


def resolve(deployment: str, reference: str, folder: Path | None = None) -> Callable:
    """``"file.py:function"`` of a lab table, relative to the lab folder."""
    folder = lab_folder(folder)
    file_name, _, attr = reference.partition(":")
    if not attr:
        raise ManifestError(f"{folder / deployment}.toml: {reference!r} must look like 'file.py:function'")
    module = load_module(folder / file_name, f"harness_lab_{deployment}_{Path(file_name).stem}")
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ManifestError(f"{folder / file_name} has no function {attr!r}") from None


def chosen(table: str, name: str | None) -> tuple[Deployment, LabManifest]:
    """The deployment called ``name`` (else the one whose lab file declares ``table``) and its lab tables."""
    deployment = get_deployment(name) if name else declaring(table)
    return deployment, lab_manifest(deployment)
