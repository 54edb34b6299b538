"""``python -m harness new NAME --from DEPLOYMENT``: copy a deployment as a template under a new name.

The copy owns every name that would clash with its original's when both are installed or
collected at once, and nothing else changes:

- the manifest's ``name`` (and the conda env name of ``environment.yml``), and the deployment's
  name wherever it stands as a word or a word's prefix (README title and text, docstrings,
  ``client.py --help``, ``<old>_client`` module names), except in model names and where it is
  also a model's or an importable library's name (a deployment named after the library it
  imports): then only the paths and commands below and the README title;
- the deployment's own packages, any ``<old>_*`` folder with a ``pyproject.toml`` (folder,
  imports and distribution name become ``<new>_*``), installed with ``pip install --no-deps -e``
  into the running interpreter's environment, as ``make install`` does for the originals;
- its test modules ``test_*.py`` (``test_<old>_x`` or ``test_x`` becomes ``test_<new>_x``: pytest needs
  unique basenames);
- paths and commands that name the deployment (``deployments/<old>/``, ``DEPLOYMENT=<old>``,
  ``python -m harness <command> <old>``, ``-k <old>``, ``get_deployment("<old>")``).

Model and tensor names stay: each deployment is its own server. Exported model files (files of
1 MiB or more) are copied with ``cp --reflink=auto`` (a copy-on-write clone where the file system
has them, a plain copy elsewhere), never hard-linked, so the copy's export can write its files
without touching the original's. Packed envs (``envs/``), ``__pycache__``, ``*.egg-info`` and
``build/`` are not copied. The copy's README starts with what to edit first.
"""

from __future__ import annotations

import importlib.util
import keyword
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness.copy_readme import write_readme
from harness.deployments import MANIFEST, Deployment, ManifestError, deployments_root, get_deployment, load_deployment
from harness.manifest import read_manifest
from harness.rename import MODEL_MIN_BYTES, SKIPPED_DIRS, parse_renames, rename_models, rewrite_tree, skipped
from harness.subset import keep_models, set_manifest_key

__all__ = ["NewDeployment", "add_arguments", "copy_deployment", "new_command"]

_WORD = r"[A-Za-z0-9_]"


@dataclass
class NewDeployment:
    """What :func:`copy_deployment` made."""

    deployment: Deployment
    source: Deployment
    renamed: dict[str, str]
    packages: list[Path] = field(default_factory=list)
    models: list[Path] = field(default_factory=list)
    #: model folders left out (``entry_models``) and renamed (``renames``)
    dropped_models: list[str] = field(default_factory=list)
    renamed_models: dict[str, str] = field(default_factory=dict)


def _distribution_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def owned_names(source: Path, old: str, new: str) -> dict[str, str]:
    """``{old name: new name}`` of what the copy must own: its packages' import and distribution
    names and its test modules' names."""
    names = {}
    for pyproject in sorted(source.glob(f"{old}_*/pyproject.toml")):
        package = pyproject.parent.name
        names[package] = new + package[len(old) :]
        distribution = tomllib.loads(pyproject.read_text()).get("project", {}).get("name")
        if (
            distribution
            and distribution != package
            and _distribution_name(distribution).startswith(_distribution_name(old) + "-")
        ):
            separator = "-" if "-" in distribution else "_"  # kept as the original spells it
            names[distribution] = new.replace("_", separator) + distribution[len(old) :]
    for test in sorted(source.rglob("test_*.py")):
        if not any(skipped(p.name) for p in test.relative_to(source).parents):
            own = test.stem.startswith(f"test_{old}")
            names[test.stem] = f"test_{new}" + (test.stem[len(f"test_{old}") :] if own else test.stem[len("test") :])
    return names


def _rewrite_rules(old: str, new: str, names: dict[str, str], kept: set[str]) -> list[tuple[re.Pattern, str]]:
    """(pattern, replacement) pairs applied to every copied text file and to each path part: the
    owned names, then ``old`` as a word and as a word's prefix (``<old>_client``), except in the
    names in ``kept`` (models); only where it names the deployment when ``old`` itself is kept
    (a model's or an importable package's name)."""
    named = re.escape(old)
    if old not in kept:  # one pass: a new name that starts with the old one is not renamed again
        owned = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        # not in links to the original's pages (docs/deployments/<old>.md, #<old> anchors): they stay valid
        word = re.compile(
            rf"(?<!{_WORD})(?<!docs/deployments/)(?<!#)(?:{owned + '|' if owned else ''}{named}(?:_\w+)?)(?!{_WORD})"
        )

        def rename(match: re.Match) -> str:
            found = match[0]
            return names.get(found) or (found if found in kept else new + found[len(old) :])

        return [(word, rename)]
    rules = [(re.compile(rf"(?<!{_WORD}){re.escape(a)}(?!{_WORD})"), b) for a, b in names.items()]
    for context in (
        r"deployments/",
        r"DEPLOYMENT=",
        r"-k ",
        r"python -m harness [a-z][a-z-]* (?:--[a-z-]+ )*",
        r"get_deployment\([\"']",
    ):
        rules.append((re.compile(rf"(?<!{_WORD})({context}){named}(?!{_WORD})"), rf"\g<1>{new}"))
    return rules


def _rewrite(text: str, rules) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def _copy_file(source: str, target: str) -> None:
    """A model file (``MODEL_MIN_BYTES`` or more): a copy-on-write clone where the file system has them
    (``cp --reflink=auto``), else a plain copy, as any other file: never a hard link, whose target an
    export would write into."""
    if (
        os.path.getsize(source) >= MODEL_MIN_BYTES
        and shutil.which("cp")
        and subprocess.run(
            ["cp", "--reflink=auto", "--preserve=mode,timestamps", str(source), str(target)], capture_output=True
        ).returncode
        == 0
    ):
        return
    shutil.copy2(source, target)


def edit_first_note(source: str) -> str:
    """The paragraph put under the copy's README title."""
    return (
        f"\n> Made from `{source}` by `python -m harness new`. What to edit first: this README's "
        '"Your own model" section; then `python -m harness refresh` regenerates models and fixtures '
        "in order ([docs/adding-a-deployment.md](../../docs/adding-a-deployment.md)).\n"
    )


def check_name(name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(
            f"{name!r} is not a valid deployment name: use a Python identifier (letters, digits and _, "
            "no leading digit, not a keyword); it names the folder and the deployment's own package"
        )


def copy_deployment(
    name: str,
    source: str,
    root: Path | None = None,
    entry_models: list[str] | None = None,
    renames: dict[str, str] | None = None,
) -> NewDeployment:
    """Copy deployment ``source`` to ``<root>/<name>`` (root: the deployments root) under ``name``;
    with ``entry_models``, only those and what they need (harness.subset); ``renames``:
    ``{model: its new name}`` (harness.rename). A copy whose original has a README.md.j2 gets its
    README rendered from it (harness.copy_readme)."""
    check_name(name)
    original = get_deployment(source)
    root = deployments_root(root)
    target = root / name
    if target.exists():
        raise ValueError(f"{target} already exists: pick another NAME or remove that folder")
    old = original.name
    names = owned_names(original.path, old, name)
    taken = [n for n in names.values() if "-" not in n and not n.startswith("test_") and importlib.util.find_spec(n)]
    if taken:
        raise ValueError(
            f"a package {', '.join(taken)} is already importable here (an earlier copy?): "
            f"pick another NAME or `pip uninstall` it"
        )
    kept = {p.name for p in original.model_repository.iterdir() if p.is_dir()}
    if importlib.util.find_spec(old) is not None:  # a library of that name: its imports stay
        kept.add(old)
    rules = _rewrite_rules(old, name, names, kept)
    root.mkdir(parents=True, exist_ok=True)
    staging = root.parent / f".{name}.partial"  # outside the root: discovery never sees it half made
    if staging.exists():
        shutil.rmtree(staging)
    try:
        _copy_tree(original.path, staging, rules, old, name)
        dropped, renamed = _make_own(staging, entry_models, renames or {})
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return NewDeployment(
        deployment=load_deployment(target),
        source=original,
        renamed=names,
        packages=[target / names[p.parent.name] for p in sorted(original.path.glob(f"{old}_*/pyproject.toml"))],
        models=sorted(p for p in target.rglob("*") if p.is_file() and p.stat().st_size >= MODEL_MIN_BYTES),
        dropped_models=dropped,
        renamed_models=renamed,
    )


def _copy_tree(source: Path, staging: Path, rules, old: str, name: str) -> None:
    """``source`` into ``staging`` (model files cloned), then its text files and names rewritten by
    ``rules``, the top-level files made the copy's own."""
    ignored = shutil.ignore_patterns(*SKIPPED_DIRS, "*.egg-info")
    shutil.copytree(source, staging, symlinks=True, ignore=ignored, copy_function=_copy_file)

    def rewrite(path: Path, text: str) -> str:
        text = _rewrite(text, rules)
        return _own_top_file(path, text, old, name) if path.parent == staging else text

    rewrite_tree(staging, rewrite, lambda part: _rewrite(part, rules))


def _own_top_file(path: Path, text: str, old: str, name: str) -> str:
    """The manifest's ``name``, the env's name and the README's title of the copy."""
    if path.name == MANIFEST:
        text, count = re.subn(
            rf'^name\s*=\s*"(?:{re.escape(old)}|{re.escape(name)})"', f'name = "{name}"', text, count=1, flags=re.M
        )
        if not count:
            raise ManifestError(f"{path}: no top-level name = {old!r} line to rename")
    if path.name == "environment.yml":
        text = re.sub(rf"^name:\s*{re.escape(old)}\s*$", f"name: {name}", text, flags=re.M)
    if path.name == "README.md":
        title, _, rest = text.partition("\n")
        title = re.sub(rf"^# {re.escape(old)}(?!{_WORD})", f"# {name}", title)
        text = f"{title}\n{edit_first_note(old)}{rest}"
    return text


def _make_own(
    staging: Path, entry_models: list[str] | None, renames: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The staged copy reduced to ``entry_models``, its models renamed, its README its own;
    returns the model folders dropped and ``{old: new}`` of those renamed."""
    staged = Deployment(path=staging.resolve(), manifest=read_manifest(staging / MANIFEST))
    dropped = keep_models(staged, entry_models) if entry_models else []
    renamed = rename_models(staged, renames) if renames else {}
    staged = Deployment(path=staging.resolve(), manifest=read_manifest(staging / MANIFEST))  # as both edited it
    readme = write_readme(staged, replace=True)
    if readme is not None:  # the manifest's summary: the README's title, not the original's claims
        title = readme.read_text().partition("\n")[0]
        summary = title.removeprefix(f"# {staged.name}:").strip()
        manifest = staging / MANIFEST
        manifest.write_text(set_manifest_key(manifest.read_text(), None, "summary", summary))
    return dropped, renamed


def install_packages(packages: list[Path]) -> None:
    """``pip install --no-deps -e`` each package into the running interpreter's environment;
    with its setuptools when it has one, so no index is needed."""
    if not packages:
        return
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    if importlib.util.find_spec("setuptools") is not None:
        command.append("--no-build-isolation")
    for package in packages:
        command += ["-e", str(package)]
    subprocess.run(command, check=True)


def add_arguments(parser) -> None:
    parser.add_argument("name", help="the new deployment's name (a Python identifier)")
    parser.add_argument("--from", dest="source", required=True, metavar="DEPLOYMENT", help="the deployment to copy")
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="deployments folder to create it in (default: $HARNESS_DEPLOYMENTS_DIR or ./deployments)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        metavar="MODEL",
        help="keep only these entry models and what they need (ensemble steps, BLS callees), their checks, "
        "tests and benchmarks (default: all)",
    )
    parser.add_argument(
        "--rename",
        nargs="+",
        default=[],
        metavar="OLD=NEW",
        help="give models names of the copy's own (later: python -m harness rename NAME OLD=NEW ...)",
    )
    parser.add_argument(
        "--no-install", action="store_true", help="do not pip-install the copy's own packages (editable)"
    )


def new_command(args) -> int:
    made = copy_deployment(
        args.name, args.source, root=args.root, entry_models=args.models, renames=parse_renames(args.rename)
    )
    copy = made.deployment
    print(f"{copy.name}: copied from {made.source.name} into {copy.path}")
    for old, new in made.renamed.items():
        print(f"  renamed {old} -> {new}")
    if made.dropped_models:
        print(f"  left out (not needed by {', '.join(made.deployment.entry_models)}): {', '.join(made.dropped_models)}")
    for old, new in made.renamed_models.items():
        print(f"  model {old} -> {new}")
    if made.models:
        print(f"  {len(made.models)} exported model file(s) copied (cloned where the file system can)")
    if made.packages and not args.no_install:
        install_packages(made.packages)
        print(f"  installed (editable) into {sys.prefix}: {', '.join(p.name for p in made.packages)}")
    print(f"next: pytest harness/ {copy.path} -k {copy.name}   (docs/adding-a-deployment.md)")
    return 0
