"""Keep only some entry models of a deployment (``harness new NAME --from D --models M ...``).

What an entry model needs comes from the model repository alone: the steps of an ensemble
(``model_name``) and the models a Python model calls (BLS): a ``config.pbtxt`` parameter whose
value is a model's name (``parameters { key: "onnx_model" value: { string_value: "embedding_onnx" } }``).
Every config of a folder counts (``config.pbtxt`` and ``configs/*.pbtxt``). The other model
folders go, and with them what uses them:

- the manifest's benchmarks whose workload, ``models`` or ``config`` name a dropped model,
  its export outputs in dropped folders, its ``[gate]`` bounds and ``/v1`` models of dropped
  models;
- the functions ``check_*``, ``workload_*`` and ``test_*`` of the deployment's Python files that
  name a dropped model, in a string of their own or through the module's constants and helper
  functions they use (a test module left with no test goes too); the dropped models are taken
  out of the files' lists of model names;
- the Python env's pip packages that only the dropped models imported.
"""

from __future__ import annotations

import ast
import re
import shutil
import tomllib
from pathlib import Path

import yaml

from harness.deployments import MANIFEST, Deployment
from harness.repository import config_files, read_config

__all__ = ["keep_models", "needed_models", "set_manifest_key"]

_ALNUM = "A-Za-z0-9"
PRUNED_PREFIXES = ("check_", "workload_", "test_")


def needed_models(repository: Path, entries: list[str]) -> set[str]:
    """``entries`` and every model they reach through ensemble steps and BLS parameters."""
    folders = {p.name for p in repository.iterdir() if p.is_dir()}
    unknown = sorted(set(entries) - folders)
    if unknown:
        raise ValueError(f"no model {', '.join(unknown)} in {repository}; its models: {', '.join(sorted(folders))}")
    needed, todo = set(), list(entries)
    while todo:
        model = todo.pop()
        if model in needed:
            continue
        needed.add(model)
        for path in config_files(repository / model):
            config = read_config(path)
            steps = [s.model_name for s in config.ensemble_scheduling.step]
            callees = [p.string_value for p in config.parameters.values() if p.string_value in folders]
            todo += [m for m in steps + callees if m not in needed]
    return needed


def _names_any(text: str, models: set[str]) -> bool:
    return bool(models) and any(re.search(rf"(?<![{_ALNUM}]){re.escape(m)}(?![{_ALNUM}])", text) for m in models)


def _strings(node: ast.AST) -> list[str]:
    """The string constants of ``node``, less docstrings."""
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(node)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def _module_names(tree: ast.Module, folder: Path | None = None) -> dict[str, ast.AST]:
    """Top-level functions, and constants assigned plain literals (``A, B = "x", "y"`` too); with
    ``folder``, also the constants ``X.NAME`` of a module of that folder loaded as ``X = load(... "x.py" ...)``."""
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if folder and isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            files = [folder / f for f in _strings(node.value) if f.endswith(".py") and (folder / f).is_file()]
            for file in files[:1]:
                module = _module_names(ast.parse(file.read_text()))
                found.update(
                    (f"{ast.unparse(node.targets[0])}.{name}", n)
                    for name, n in module.items()
                    if not name[:1].islower()
                )
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            pairs = (
                zip(target.elts, value.elts)
                if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                else [(target, value)]
            )
            for name, literal in pairs:
                literal_only = all(
                    isinstance(n, (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.expr_context))
                    for n in ast.walk(literal)
                )
                if isinstance(name, ast.Name) and literal_only:
                    found[name.id] = literal
    return found


def _uses_dropped(node: ast.AST, names: dict[str, ast.AST], dropped: set[str], seen: set[str]) -> bool:
    if any(_names_any(s, dropped) for s in _strings(node)):
        return True
    used_names = {ast.unparse(n) for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))}
    for used in used_names & set(names) - seen:
        seen.add(used)
        if _uses_dropped(names[used], names, dropped, seen):
            return True
    return False


def prune_model_lists(path: Path, dropped: set[str]) -> None:
    """Take the dropped models out of ``path``'s top-level tuples and lists of names (``MODELS = ("a",
    "b")``) that keep another one; a list of dropped models only stays, so what uses it goes."""
    lines = path.read_text().splitlines(keepends=True)
    for node in reversed(ast.parse("".join(lines)).body):
        value = node.value if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if not isinstance(value, (ast.Tuple, ast.List)) or not all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
        ):
            continue
        kept = [e.value for e in value.elts if e.value not in dropped]
        if kept and len(kept) < len(value.elts):
            items = ", ".join(f'"{k}"' for k in kept)
            if isinstance(value, ast.List):
                literal = f"[{items}]"
            else:
                literal = f"({items},)" if len(kept) == 1 else f"({items})"
            lines[node.lineno - 1 : node.end_lineno] = [f"{ast.unparse(node.targets[0])} = {literal}\n"]
    path.write_text("".join(lines))


def prune_python(path: Path, dropped: set[str]) -> list[str]:
    """Remove the ``check_*`` / ``workload_*`` / ``test_*`` functions of ``path`` that use a dropped
    model, and the top-level calls that load one (``x = load(...dropped...)``, which would fail at
    import); returns their names. A test module left with no test is removed."""
    source = path.read_text()
    tree = ast.parse(source)
    names = _module_names(tree, path.parent)
    loads = {  # x = load(..."dropped"...): what uses x goes with it
        ast.unparse(n.targets[0]): n.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and _uses_dropped(n.value, {}, dropped, set())
    }
    names.update(loads)
    lines = source.splitlines(keepends=True)
    removed = []
    for node in reversed(tree.body):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name.startswith(PRUNED_PREFIXES)
            and _uses_dropped(node, names, dropped, {node.name})
        ):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            del lines[start : node.end_lineno]
            removed.append(node.name)
        elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) in loads:
            del lines[node.lineno - 1 : node.end_lineno]
            removed.append(ast.unparse(node.targets[0]))
    if not removed:
        return removed
    rest = ast.parse("".join(lines))
    if path.name.startswith("test_") and not any(
        isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name.startswith(("test_", "Test")) for n in rest.body
    ):
        path.unlink()
    else:
        path.write_text(re.sub(r"\n{4,}", "\n\n\n", "".join(lines)))
    return removed


# -- the manifest (edited as text: its comments and layout stay) --------------------------------


def _inline(value) -> str:
    """A TOML inline value."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_inline(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _inline(key)


def _drop_tables(text: str, table: str) -> str:
    """Remove ``[table]`` and ``[table.*]``, each with the comment lines just above it."""
    out: list[str] = []
    pending: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        header = re.match(r"^\[\[?([^\]]+)\]\]?", line)
        if header:
            name = header[1].strip()
            skipping = name == table or name.startswith(table + ".")
        if line.lstrip().startswith("#") and not header:
            pending.append(line)
            continue
        if not skipping:
            out += pending + [line]
        pending = []
    return "".join(out + ([] if skipping else pending))


def set_manifest_key(text: str, table: str | None, key: str, value) -> str:
    """Set ``key`` (one line, or a bracketed value over several) of ``[table]`` (None: top level)."""
    start = 0 if table is None else re.search(rf"^\[{re.escape(table)}\]\s*$", text, flags=re.M).end()
    end_match = re.compile(r"^\[", flags=re.M).search(text, start + 1 if table else 0)
    end = end_match.start() if end_match else len(text)
    section = text[start:end]
    pattern = re.compile(rf"^{re.escape(key)}\s*=\s*(\[[^\[\]]*\]|[^\n]*?)(\s+#[^\n]*)?$", flags=re.M)
    if value is None:
        section = pattern.sub("", section, count=1).replace("\n\n\n", "\n\n")
    else:
        section = pattern.sub(lambda m: f"{key} = {_inline(value)}{m[2] or ''}", section, count=1)
    return text[:start] + section + text[end:]


def _drop_benchmark_lines(text: str, ids: set[str]) -> str:
    """Remove the benchmarks ``ids``: an inline table's line (and the comments just above it) or a
    ``[[benchmarks]]`` table."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    for line in lines:
        found = re.search(r'\bid\s*=\s*"([^"]+)"', line)
        if found and found[1] in ids and line.lstrip().startswith("{"):
            while out and out[-1].lstrip().startswith("#") and out[-1].startswith(" "):
                out.pop()
            continue
        out.append(line)
    text = "".join(out)
    for benchmark_id in ids:
        text = re.sub(
            rf'^\[\[benchmarks\]\]\n(?:(?!\[\[)[^\n]*\n)*?id\s*=\s*"{re.escape(benchmark_id)}"\n(?:(?!\[\[|\[(?!benchmarks\.))[^\n]*\n?)*',
            "",
            text,
            flags=re.M,
        )
    return text


def _benchmark_models(deployment: Deployment, benchmark, models: set[str]) -> bool:
    """Whether the benchmark names a model of ``models`` (its workload, ``models``, ``config``)."""
    if set(benchmark.models) & models or set(benchmark.config) & models:
        return True
    file_name, _, function = benchmark.workload.partition(":")
    path = deployment.path / file_name
    if not path.exists():
        return False
    tree = ast.parse(path.read_text())
    names = _module_names(tree)
    node = names.get(function)
    return node is not None and _uses_dropped(node, names, models, {function})


def prune_manifest(deployment: Deployment, entries: list[str], dropped: set[str]) -> list[str]:
    """Edit the manifest for the models kept; returns the benchmark ids dropped."""
    path = deployment.path / MANIFEST
    text = path.read_text()
    data = tomllib.loads(text)
    gone = {b.id for b in deployment.benchmarks if _benchmark_models(deployment, b, dropped)}
    text = _drop_benchmark_lines(text, gone)
    for benchmark in deployment.benchmarks:
        if benchmark.id not in gone and benchmark.model_only in gone:
            text = re.sub(rf'model_only\s*=\s*"{re.escape(benchmark.model_only)}",\s*', "", text)
    text = set_manifest_key(text, None, "entry_models", entries)
    export = data.get("export") or {}
    outputs = [o for o in export.get("outputs", []) if not _names_any(o, dropped)]
    if outputs != export.get("outputs", outputs):
        text = set_manifest_key(text, "export", "outputs", outputs)
    for key, bounds in (data.get("gate") or {}).items():
        kept = {model: b for model, b in bounds.items() if model not in dropped}
        if kept != bounds:
            text = set_manifest_key(text, "gate", key, kept or None)
    text = _prune_openai(text, data.get("openai"), dropped, entries)
    path.write_text(text)
    return sorted(gone)


def _prune_openai(text: str, openai: dict | None, dropped: set[str], entries: list[str]) -> str:
    """``/v1`` models that name a dropped model go; a token-id path to a model that is no longer
    an entry model (clients may not call it) goes."""
    if not openai:
        return text
    served = {name: m for name, m in openai.get("models", {}).items() if not _names_any(str(m), dropped)}
    for name in set(openai.get("models", {})) - set(served):
        text = _drop_tables(text, f"openai.models.{name}")
    for name, mapping in served.items():
        if "tokens" in mapping and mapping["tokens"].get("model") not in entries:
            text = set_manifest_key(text, f"openai.models.{name}", "tokens", None)
    if not served:
        return _drop_tables(text, "openai")
    if openai.get("default") not in served:
        text = set_manifest_key(text, "openai", "default", next(iter(served)))
    return text


def keep_models(deployment: Deployment, entries: list[str]) -> list[str]:
    """Reduce ``deployment`` (a copy, edited in place) to ``entries`` and what they need; returns the
    model folders dropped."""
    not_entries = sorted(set(entries) - set(deployment.entry_models))
    if not_entries:
        raise ValueError(
            f"{', '.join(not_entries)}: not entry models of {deployment.name} ({', '.join(deployment.entry_models)})"
        )
    needed = needed_models(deployment.model_repository, entries)
    dropped = {p.name for p in deployment.model_repository.iterdir() if p.is_dir()} - needed
    if not dropped:
        return []
    prune_manifest(deployment, [m for m in deployment.entry_models if m in entries], dropped)
    dropped_code = "".join(f.read_text() for m in dropped for f in (deployment.model_repository / m).rglob("*.py"))
    for folder in sorted(dropped):
        shutil.rmtree(deployment.model_repository / folder)
    prune_recipe(deployment, dropped_code)
    sources = [
        p
        for p in sorted(deployment.path.rglob("*.py"))
        if "model_repository" not in p.relative_to(deployment.path).parts
    ]
    for path in sources:
        prune_model_lists(path, dropped)
    for path in sources:
        if path.is_file():
            prune_python(path, dropped)
    return sorted(dropped)


def _imports(code: str, module: str) -> bool:
    return bool(re.search(rf"^\s*(import|from)\s+{re.escape(module)}\b", code, flags=re.M))


def prune_recipe(deployment: Deployment, dropped_code: str) -> list[str]:
    """Take out of the Python env's recipe (``environment.yml``) the pip packages that only the
    dropped models imported (``torch`` when no kept model runs it); returns them."""
    path = deployment.path / "environment.yml"
    if not path.is_file():
        return []
    recipe = yaml.safe_load(path.read_text())
    local = [deployment.path / p for p in recipe.get("pip_no_deps", []) if not p.startswith("..")]
    kept_code = "".join(f.read_text() for folder in [deployment.model_repository, *local] for f in folder.rglob("*.py"))
    pips = next((d["pip"] for d in recipe.get("dependencies", []) if isinstance(d, dict) and "pip" in d), [])
    gone = []
    for requirement in pips:
        module = re.split(r"[<>=!~\s\[]", requirement)[0].replace("-", "_")
        if _imports(dropped_code, module) and not _imports(kept_code, module):
            gone.append(requirement)
    text = path.read_text()
    for requirement in gone:
        text = re.sub(rf"^\s*- {re.escape(requirement)}(?![\w.]).*\n", "", text, flags=re.M)
    path.write_text(text)
    return gone
