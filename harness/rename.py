"""``python -m harness rename DEPLOYMENT old=new ...``: give a deployment's models names of its own.

A model name stands in many places: its folder, its ``config.pbtxt`` ``name``, the ensembles'
``model_name`` steps, the BLS callees' config parameters, the manifest (entry models,
benchmarks, export outputs, gate and ``/v1`` tables), the fixtures' keys, the checks, tests,
client and scripts (string literals, and the functions named after it such as
``workload_<model>_b1``). One rule rewrites every one: ``old`` where no letter or digit is next
to it, so ``_`` separates, and a model named after another (``classify_<old>``,
``<old>_uint8``) follows it, as the deployment's code derives those names. In Python files,
only string literals, comments and names the deployment itself defines are rewritten, never a
library's attribute or an imported name (``torchvision.models.resnet50`` stays). The
deployment's own name and its packages' names are never touched. ``.npz`` fixtures get their
keys renamed; other binary files (exported models) are left as they are.
"""

from __future__ import annotations

import ast
import io
import logging
import re
import shutil
import tokenize
from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.copy_readme import write_readme
from harness.deployments import Deployment, get_deployment, load_deployment

__all__ = ["add_arguments", "parse_renames", "rename_command", "rename_models", "rename_text", "skipped", "text_of"]

log = logging.getLogger(__name__)

#: Files this large (exported models, weights) are never rewritten; every tracked file is smaller.
MODEL_MIN_BYTES = 1 << 20
#: Folders a copy or a rename never touches (with ``*.egg-info``): packed envs and build outputs.
SKIPPED_DIRS = frozenset({"envs", "__pycache__", "build", ".pytest_cache"})
_ALNUM = "A-Za-z0-9"


def parse_renames(pairs: list[str]) -> dict[str, str]:
    """``["old=new", ...]`` as ``{old: new}``; a malformed pair or a new name that is not an
    identifier raises ValueError."""
    renames = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new.isidentifier():
            raise ValueError(f"{pair!r}: write OLD=NEW, NEW a model name of letters, digits and _ (an identifier)")
        renames[old] = new
    return renames


def _pattern(renames: dict[str, str], protected: list[str]) -> re.Pattern:
    """``old`` with no letter or digit beside it; a protected name found first is kept whole."""
    kept = "|".join(re.escape(p) for p in sorted(protected, key=len, reverse=True)) or "(?!)"
    olds = "|".join(re.escape(o) for o in sorted(renames, key=len, reverse=True))
    return re.compile(rf"(?<![{_ALNUM}])(?:(?P<kept>{kept})|(?P<old>{olds}))(?![{_ALNUM}])")


def rename_text(text: str, renames: dict[str, str], protected: list[str] = ()) -> str:
    """``text`` with every model name of ``renames`` replaced (the rule of this module)."""
    pattern = _pattern(renames, list(protected))
    return pattern.sub(lambda m: m["kept"] or renames[m["old"]], text)


def _defined_names(sources: list[str]) -> set[str]:
    """Names the deployment's Python files define (functions, classes, variables, arguments),
    less those they import: the identifiers a rename may rewrite."""
    defined, imported = set(), set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imported.update((a.asname or a.name).split(".")[0] for a in node.names)
    return defined - imported


def rename_python(source: str, renames: dict[str, str], protected: list[str], defined: set[str]) -> str:
    """``source`` with the models renamed in its strings, comments and the names in ``defined``."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits = []
    for token in tokens:
        rewritable = token.type in (tokenize.STRING, tokenize.COMMENT) or (
            token.type == tokenize.NAME and token.string in defined
        )
        if rewritable:
            new = rename_text(token.string, renames, protected)
            if new != token.string:
                start = offsets[token.start[0] - 1] + token.start[1]
                end = offsets[token.end[0] - 1] + token.end[1]
                edits.append((start, end, new))
    for start, end, new in reversed(edits):
        source = source[:start] + new + source[end:]
    return source


def _rename_npz(path: Path, renames: dict[str, str], protected: list[str]) -> None:
    with np.load(path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    renamed = {rename_text(key, renames, protected): value for key, value in arrays.items()}
    if list(renamed) != list(arrays):
        np.savez(path, **renamed)


def skipped(name: str) -> bool:
    """A folder of ``SKIPPED_DIRS`` or an ``*.egg-info``."""
    return name in SKIPPED_DIRS or name.endswith(".egg-info")


def _files(folder: Path):
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if path.is_file() and not path.is_symlink() and not any(skipped(p) for p in parts):
            yield path


def text_of(path: Path) -> str | None:
    """The file's text when it is a small UTF-8 text file, else None (a model, a binary)."""
    if path.stat().st_size >= MODEL_MIN_BYTES:
        return None
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\0" in text else text


def plan_renames(deployment: Deployment, renames: dict[str, str]) -> dict[str, str]:
    """``{folder: new folder}`` of every model the renames reach (the named ones and those named
    after them); refuses an unknown model or two models ending under one name."""
    models = sorted(p.name for p in deployment.model_repository.iterdir() if p.is_dir())
    unknown = sorted(set(renames) - set(models))
    if unknown:
        raise ValueError(f"{deployment.name} has no model {', '.join(unknown)}; its models: {', '.join(models)}")
    protected = own_names(deployment)
    folders = {m: rename_text(m, renames, protected) for m in models}
    after = list(folders.values())
    clashes = sorted({n for n in after if after.count(n) > 1})
    if clashes:
        raise ValueError(f"after the rename two models would be called {', '.join(clashes)}: pick other names")
    return {old: new for old, new in folders.items() if old != new}


def own_names(deployment: Deployment) -> list[str]:
    """Names a model rename never touches: the deployment's and its packages'."""
    packages = [p.parent.name for p in deployment.path.glob("*/pyproject.toml")]
    return [deployment.name, *packages]


def rename_models(deployment: Deployment, renames: dict[str, str]) -> dict[str, str]:
    """Rename models of ``deployment`` in place (this module's rule); returns ``{old folder: new}``."""
    folders = plan_renames(deployment, renames)
    if not folders:
        return folders
    protected = own_names(deployment)
    files = list(_files(deployment.path))
    python = [text_of(p) for p in files if p.suffix == ".py"]
    defined = _defined_names([t for t in python if t is not None])
    for path in files:
        if path.suffix == ".npz":
            _rename_npz(path, renames, protected)

    def rewrite(path: Path, text: str) -> str:
        if path.suffix == ".py":
            return rename_python(text, renames, protected, defined)
        return rename_text(text, renames, protected)

    rewrite_tree(deployment.path, rewrite, lambda name: rename_text(name, renames, protected))
    return folders


def rewrite_tree(folder: Path, rewrite: Callable[[Path, str], str], rename: Callable[[str], str]) -> None:
    """Each small text file of ``folder`` as ``rewrite(path, text)`` gives it, then the files and
    folders renamed as ``rename(name)`` gives it, deepest first (``SKIPPED_DIRS`` left as they are)."""
    for path in _files(folder):
        text = text_of(path)
        new = text if text is None else rewrite(path, text)
        if new != text:
            path.write_text(new)
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        name = rename(path.name)
        if name != path.name and not any(skipped(p) for p in path.relative_to(folder).parts):
            shutil.move(path, path.with_name(name))


def add_arguments(parser) -> None:
    parser.add_argument("deployment")
    parser.add_argument("renames", nargs="+", metavar="OLD=NEW", help="a model's name and its new one")


def rename_command(args) -> int:
    deployment = get_deployment(args.deployment)
    folders = rename_models(deployment, parse_renames(args.renames))
    for old, new in folders.items():
        print(f"{deployment.name}: model {old} -> {new}")
    write_readme(load_deployment(deployment.path))
    print(f"next: pytest harness/ {deployment.path} -k {deployment.name}")
    return 0
