"""The harness names no deployment: tools take deployment, model and workload from their
arguments or the deployment's manifest, so a copied or new deployment needs no harness edit.

Every non-test module under ``harness/`` (everything but ``harness/tests/``), comments and
docstrings included, is searched, case-insensitively, for

- every deployment folder name (``deployments/*/deployment.toml``, discovered, not listed), and
- every *distinctive* model name of those deployments (entry models and model folders).

The rule for distinctive: a model name is split at ``_``; it is distinctive when it has a digit
or when one of its parts is not a word of ``GENERIC_WORDS`` (ordinary English and serving words
such as ``text``, ``image``, ``embedding``, ``preprocess``). So ``resnet50``, ``embedding_onnx``
(``onnx``) and ``embedding_py`` (``py``) are distinctive, while ``tokenize``, ``preprocess``,
``text_embedding`` or ``zero_shot`` are not: a harness may say "tokenize" or "a text embedding"
without naming anyone's model. A distinctive name is matched as a substring (``efficientnet_lite0``
is found inside ``workload_efficientnet_lite0_b1``). Instead of a name, a docstring says e.g.
"a text-embedding deployment" or ``<deployment>``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from harness import PROJECT_ROOT

HARNESS = PROJECT_ROOT / "harness"
DEPLOYMENTS = PROJECT_ROOT / "deployments"

#: Parts of a model name that do not make it anyone's own (words a harness may use for itself).
GENERIC_WORDS = frozenset(
    """
    audio batch bytes classification classifier classify decode decoder detect detection detector
    embed embedding embeddings encode encoder ensemble feature features full image images label
    labels model models orchestrator pipeline pool pooling postprocess preprocess score scores shot
    speech step text token tokenize tokenizer tokens vector vectors zero
    """.split()
)


def deployment_names() -> tuple[set[str], set[str]]:
    """(deployment folder names, every entry model and model folder of them)."""
    folders, models = set(), set()
    for manifest in sorted(DEPLOYMENTS.glob("*/deployment.toml")):
        folder = manifest.parent
        folders.add(folder.name)
        table = tomllib.loads(manifest.read_text())
        models.update(table.get("entry_models", []))
        repository = folder / table.get("model_repository", "model_repository")
        if repository.is_dir():
            models.update(p.name for p in repository.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    return folders, models


def distinctive(model: str) -> bool:
    """A digit in it, or a part (split at ``_``) that is no generic word."""
    return bool(re.search(r"\d", model)) or any(part not in GENERIC_WORDS for part in model.lower().split("_"))


def forbidden_names() -> list[str]:
    folders, models = deployment_names()
    return sorted(folders | {m for m in models if distinctive(m)}, key=lambda n: (-len(n), n))


def harness_modules() -> list[Path]:
    return sorted(p for p in HARNESS.rglob("*.py") if "tests" not in p.relative_to(HARNESS).parts)


def mentions(names: list[str], files: list[Path]) -> list[str]:
    """``path:line: name`` for every line of ``files`` that holds one of ``names``."""
    pattern = re.compile("|".join(re.escape(n) for n in names), re.IGNORECASE)
    found = []
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in pattern.finditer(line):
                found.append(f"{path.relative_to(PROJECT_ROOT)}:{number}: {match.group(0)}")
    return found


def test_the_rule_keeps_generic_model_names_out():
    assert not distinctive("tokenize") and not distinctive("preprocess") and not distinctive("text_embedding")
    assert distinctive("resnet50") and distinctive("embedding_onnx") and distinctive("embedding_py")


def test_every_deployment_is_searched_for():
    folders, models = deployment_names()
    names = forbidden_names()
    assert folders and folders <= set(names)
    assert "tokenize" in models and "tokenize" not in names


def test_no_harness_module_names_a_deployment_or_its_models():
    found = mentions(forbidden_names(), harness_modules())
    assert not found, (
        f"{len(found)} mentions of a deployment or one of its models in non-test harness code (take it from an "
        "argument or the deployment's manifest; a docstring can say 'e.g. a text-embedding deployment'):\n"
        + "\n".join(found)
    )
