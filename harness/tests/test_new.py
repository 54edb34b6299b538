"""``python -m harness new NAME --from DEPLOYMENT``: the copy owns its names and passes its checks.

The server tests run ``pytest harness/ -k NAME`` on fresh copies, in a temporary project layout
(``<tmp>/deployments/NAME`` beside links to this project's other top-level entries, so the
copy's ``../../triton_helpers`` resolves as in the repository). The default suite follows
docs/adding-a-deployment.md's walk: ``make new`` from ``DEFAULT_SOURCE``, the copy's checks as
they are, then the copy serving its own ONNX file. ``HARNESS_NEW_ALL=1`` also copies and
checks every deployment of this project (CI).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from harness.__main__ import main
from harness.deployments import discover, get_deployment
from harness.new import MODEL_MIN_BYTES, copy_deployment, install_packages
from harness.provenance import file_sha256

#: The deployment the doc walk copies: one ONNX model to keep and three to drop.
DEFAULT_SOURCE = "yolo11_ensemble"
#: Parametrized from the project's own folder, never $HARNESS_DEPLOYMENTS_DIR: inside the nested
#: run (which points there at the copy) these ids stay the originals' and `-k <copy>` skips them.
SOURCES = [d.name for d in discover(PROJECT_ROOT / "deployments")]
ALL = os.environ.get("HARNESS_NEW_ALL") == "1"


def _run_doc_step(
    step: str, command: list[str], env: dict, *, timeout: int, stdin: str | None = None, tail_lines: int = 30
) -> None:
    """Runs one ``step`` of a doc's walk as ``command`` from the project root; asserts it succeeds and,
    for a pytest step, that its tests passed."""
    done = subprocess.run(
        command, input=stdin, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    tail = (done.stdout + done.stderr).strip().splitlines()[-tail_lines:]
    assert done.returncode == 0, f"`{step[:200]}` failed ({done.returncode}):\n" + "\n".join(tail)
    if "pytest" in step:
        assert re.search(r"\d+ passed", tail[-1]) and "failed" not in tail[-1], tail[-1]


def _uninstall_processing(name: str) -> None:
    """Uninstalls the processing package a walk's copy ``name`` installed into the shared venv."""
    subprocess.run(
        [sys.executable, "-m", "pip", "uninstall", "-y", "-q", f"{name.replace('_', '-')}-processing"],
        capture_output=True,
        check=False,
    )


def _project_layout(tmp_path: Path) -> Path:
    """``tmp_path/deployments`` with this project's other top-level entries linked beside it."""
    for entry in PROJECT_ROOT.iterdir():
        if entry.name != "deployments" and not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    root = tmp_path / "deployments"
    root.mkdir()
    return root


def _text_files(folder: Path):
    for path in folder.rglob("*"):
        if path.is_file() and path.stat().st_size < MODEL_MIN_BYTES:
            try:
                yield path, path.read_text()
            except UnicodeDecodeError:
                continue


@pytest.mark.exported
@pytest.mark.parametrize("source", SOURCES)
def test_copy_owns_its_names_and_copies_exported_files(tmp_path, source):
    get_deployment(source).export()
    name = f"{source}_copy{os.getpid()}"
    made = copy_deployment(name, source, root=tmp_path)
    original, copy = made.source, made.deployment
    assert copy.name == name and copy.path == (tmp_path / name).resolve()
    assert copy.entry_models == original.entry_models, "model names are the public contract: unchanged"
    packages = [p.parent.name for p in original.path.glob(f"{source}_*/pyproject.toml")]
    models = {p.name for p in original.model_repository.iterdir()}
    assert [p.name for p in made.packages] == [name + p[len(source) :] for p in packages]
    for package in made.packages:
        assert (package / "pyproject.toml").is_file()
    for path, text in _text_files(copy.path):
        for package in packages:
            assert not re.search(rf"(?<![\w]){package}(?![\w])", text), f"{path} still names {package}"
        assert f"deployments/{source}/" not in text, f"{path} names the original's folder"
        if source not in models and importlib.util.find_spec(source) is None:  # a model's or library's name stays
            links = rf"docs/deployments/{source}|#{source}"  # the original's pages: links that stay valid
            told = [l for l in text.splitlines() if re.search(rf"(?<![\w-]){source}(?![\w-])", re.sub(links, "", l))]
            assert not told, f"{path} still names {source}: {told[:3]}"
    title = (copy.path / "README.md").read_text().partition("\n")[0]
    assert title.startswith(f"# {name}: ") and copy.summary == title.removeprefix(f"# {name}: "), title
    tests = {p.name for p in original.path.rglob("test_*.py")}
    assert not tests & {p.name for p in copy.path.rglob("test_*.py")}, "pytest needs unique test basenames"
    for skipped in ("envs", "__pycache__", "build"):
        assert not list(copy.path.rglob(skipped)), f"{skipped} copied"
    assert not list(copy.path.rglob("*.egg-info"))
    for output in original.export_outputs():
        if output.exists():
            copied = copy.path / output.relative_to(original.path)
            assert copied.exists(), f"{copied}: exported file not copied"
            assert copied.stat().st_ino != output.stat().st_ino, f"{copied} is a hard link: an export writes into both"
            assert copied.read_bytes() == output.read_bytes(), f"{copied} differs from {output}"
    assert not copy.missing_exports(), "the copy has what it serves: no export needed"


#: The lab's own tables of a deployment (lab/deployments/<deployment>.toml) and the files they name.
LAB_FILES = PROJECT_ROOT / "lab" / "deployments"


@pytest.mark.parametrize("source", sorted(p.stem for p in LAB_FILES.glob("*.toml")))
def test_a_copy_carries_nothing_of_the_lab(tmp_path, source):
    """The lab's tables, files and hooks are the lab's: a copy of a deployment the lab runs on has no
    lab table, no lab file of its own and no function a lab table names, and imports nothing of the lab."""
    hooks = set(re.findall(r'"[\w./-]+\.py:(\w+)"', (LAB_FILES / f"{source}.toml").read_text()))
    copy = copy_deployment(f"{source}_copy{os.getpid()}", source, root=tmp_path).deployment
    table = tomllib.loads((copy.path / "deployment.toml").read_text())
    assert not {"reliability", "peers", "scaleout"} & set(table), "a lab table in the copy's deployment.toml"
    assert not (LAB_FILES / f"{copy.name}.toml").exists(), "a lab file made for the copy"
    for path, text in _text_files(copy.path):
        assert not re.search(r"^\s*(from|import)\s+harness_lab\b", text, re.MULTILINE), f"{path} imports the lab"
        named = [hook for hook in hooks if re.search(rf"\bdef {hook}\(", text)]
        assert not named, f"{path} defines {named}: a hook of the lab's tables"


def test_refusals_name_what_is_wrong(tmp_path, capsys):
    source = SOURCES[0]
    (tmp_path / "taken").mkdir()
    cases = [
        (["new", "taken", "--from", source], "taken already exists"),
        (["new", "my-model", "--from", source], "'my-model' is not a valid deployment name"),
        (["new", "class", "--from", source], "'class' is not a valid deployment name"),
        (["new", "my_model", "--from", "no_such_deployment"], "no deployment 'no_such_deployment'; known:"),
    ]
    for argv, message in cases:
        assert main([*argv, "--root", str(tmp_path), "--no-install"]) == 2
        assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"], "nothing left behind"


@pytest.mark.server
@pytest.mark.parametrize("source", SOURCES)
def test_copy_passes_pytest_harness_k_name(tmp_path, source):
    """What a user runs: ``harness new``, then ``pytest harness/ -k NAME``, with no edit."""
    if not ALL:
        pytest.skip(f"HARNESS_NEW_ALL=1 runs it (1-4 min each); the doc walk checks a {DEFAULT_SOURCE} copy")
    name = f"{source}_copy{os.getpid()}"  # the venv is shared: no clash with another run's copy
    root = _project_layout(tmp_path)
    made = copy_deployment(name, source, root=root)
    distributions = [tomllib.loads((p / "pyproject.toml").read_text())["project"]["name"] for p in made.packages]
    try:
        install_packages(made.packages)
        # Both installed at once: each package name imports from its own deployment's folder.
        originals = [made.source.path / (source + p.name[len(name) :]) for p in made.packages]
        folders = [*made.packages, *originals]
        where = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, importlib.util as u; print(*(u.find_spec(n).origin for n in sys.argv[1:]))",
            ]
            + [f.name for f in folders],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert [Path(w).parent for w in where] == folders, where
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "harness/", "-k", name, "-q", "-p", "no:cacheprovider"]
            + ["--bench-duration", "0.5", "-o", "addopts="],
            cwd=PROJECT_ROOT,
            env={**os.environ, "HARNESS_DEPLOYMENTS_DIR": str(root)},
            capture_output=True,
            text=True,
            timeout=1800,
        )
    finally:
        if distributions:
            subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", *distributions], check=False)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, f"pytest harness/ -k {name}: {summary}\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
    assert re.search(r"\d+ passed", summary) and "failed" not in summary and "error" not in summary, summary


DOC = PROJECT_ROOT / "docs" / "adding-a-deployment.md"
WALK = "## From a copy to serving your own ONNX file"
DOC_NAME = "my_model"


def doc_walk() -> list[tuple[str, str]]:
    """The walk of docs/adding-a-deployment.md in order: ``("run", command)`` for each line of a
    bash block, ``("write", path)`` + text for a block that a backticked path introduces."""
    text = DOC.read_text()
    section = text[text.index(WALK) :]
    steps, end = [], 0
    for block in re.finditer(r"^```(\w*)\n(.*?)^```", section, flags=re.S | re.M):
        before = section[end : block.start()]
        end = block.end()
        if block.group(1) == "bash":
            steps += [("run", line) for line in block.group(2).splitlines() if line and not line.startswith("#")]
        else:
            paths = re.findall(rf"`(deployments/{DOC_NAME}/[^`]+)`", before)
            assert paths, f"{DOC.name}: a block with no `deployments/{DOC_NAME}/...` file before it:\n{before}"
            steps.append(("write", paths[0], block.group(2)))
    return steps


def test_doc_walk_is_parsed():
    steps = doc_walk()
    assert steps[0] == ("run", f"make new NAME={DOC_NAME} FROM={DEFAULT_SOURCE}")
    assert [s[1] for s in steps if s[0] == "run"].count(
        f".venv/bin/pytest harness/ deployments/{DOC_NAME}/ -k {DOC_NAME}"
    ) == 2
    written = {s[1] for s in steps if s[0] == "write"}
    assert {f"deployments/{DOC_NAME}/{f}" for f in ("deployment.toml", "checks.py", "export.py")} <= written


#: The ONNX model the walk keeps, per deployment it copies (the doc names them).
KEPT_MODEL = {
    "yolo11_ensemble": "yolo11_detector",
    "resnet_npu": "resnet50",
    "embedding_cpu": "embedding_onnx",
    "cn_clip": "image_encoder",
}


def test_the_doc_names_the_model_to_keep_of_every_deployment():
    text = DOC.read_text()
    for source, kept in KEPT_MODEL.items():
        assert f"`{source}`" in text and f"`{kept}`" in text, f"{DOC.name} does not say what a {source} copy keeps"
        assert (PROJECT_ROOT / "deployments" / source / "model_repository" / kept).is_dir(), kept


@pytest.mark.server
@pytest.mark.parametrize("source", list(KEPT_MODEL))
def test_doc_walk_from_make_new_to_your_own_onnx_file(tmp_path, source):
    """docs/adding-a-deployment.md as a reader follows it, from the project root: `make new`, the
    copy's checks, then its own ONNX model's export, fixtures and checks. In a temporary project
    layout (the source linked into its deployments root), under a name of this run's own; from
    the doc's yolo11_ensemble, and from the other deployments with HARNESS_NEW_ALL=1 (CI)."""
    if source != DEFAULT_SOURCE and not ALL:
        pytest.skip(f"HARNESS_NEW_ALL=1 runs the walk from {source} too (minutes)")
    root = _project_layout(tmp_path)
    (root / source).symlink_to(PROJECT_ROOT / "deployments" / source)
    name = f"{DOC_NAME}{os.getpid()}"  # the venv is shared: never another run's (or your) my_model

    def local(text: str) -> str:
        text = text.replace(f"FROM={DEFAULT_SOURCE}", f"FROM={source}")
        text = text.replace(KEPT_MODEL[DEFAULT_SOURCE], KEPT_MODEL[source])
        text = text.replace(f"deployments/{DOC_NAME}", f"{root}/{DOC_NAME}")
        return text.replace(DOC_NAME, name).replace(DOC_NAME.replace("_", "-"), name.replace("_", "-"))

    env = {**os.environ, "HARNESS_DEPLOYMENTS_DIR": str(root)}
    made_from = get_deployment(source, PROJECT_ROOT / "deployments")
    before = [(p, p.stat().st_mtime_ns) for p in made_from.export_outputs() if p.exists()]
    try:
        for kind, what, *content in doc_walk():
            if kind == "write":
                Path(local(what)).write_text(local(content[0]))
                continue
            _run_doc_step(what, ["bash", "-c", local(what)], env, timeout=1800)
    finally:
        _uninstall_processing(name)
    served = root / name / "model_repository" / "my_onnx" / "1" / "model.onnx"
    assert not any(served.samefile(p) for p in made_from.export_outputs() if p.exists())
    assert [(p, p.stat().st_mtime_ns) for p in made_from.export_outputs() if p.exists()] == before, (
        "the original's exported files were written into"
    )


#: The swap guides of docs/adding-a-deployment.md, one section each; the first step names the source.
SWAP_HEADINGS = re.findall(r"^## Swapping the .*$", DOC.read_text(), flags=re.M)


def doc_swap(heading: str) -> list[tuple[str, str]]:
    """One swap guide of docs/adding-a-deployment.md in order: ``("bash", line)`` for each line of a
    bash block, ``("python", block)`` for each ```python run block."""
    text = DOC.read_text()
    start = text.index(heading)
    section = text[start : text.index("\n## ", start + len(heading))]
    steps = []
    for kind, block in re.findall(r"^```(bash|python run)\n(.*?)^```", section, flags=re.S | re.M):
        if kind == "bash":
            steps += [("bash", line) for line in block.splitlines() if line and not line.startswith("#")]
        else:
            steps.append(("python", block))
    return steps


def swap_source(heading: str) -> str:
    """The deployment a swap guide copies, from its first step (``make new NAME=... FROM=...``)."""
    return re.match(rf"make new NAME={DOC_NAME} FROM=(\w+)( |$)", doc_swap(heading)[0][1]).group(1)


@pytest.mark.parametrize("heading", SWAP_HEADINGS)
def test_doc_swap_is_parsed(heading):
    steps = doc_swap(heading)
    assert swap_source(heading) in SOURCES, steps[0]
    assert ("bash", f"make refresh NAME={DOC_NAME}") in steps
    assert steps[-1] == ("bash", f".venv/bin/pytest harness/ deployments/{DOC_NAME}/ -k {DOC_NAME}")


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def run_swap_guide(tmp_path: Path, heading: str) -> Path:
    """Follows one swap guide as a reader does, from the project root, on a copy under a name of
    this run's own in a temporary project layout; asserts each step succeeds, every pytest step
    passes, and the original's model repository and fixtures stay byte for byte. Returns the copy."""
    source = swap_source(heading)
    root = _project_layout(tmp_path)
    (root / source).symlink_to(PROJECT_ROOT / "deployments" / source)
    name = f"{DOC_NAME}{os.getpid()}"  # the venv is shared: never another run's (or your) my_model
    original = get_deployment(source, PROJECT_ROOT / "deployments")
    watched = [original.model_repository, original.fixtures_path]
    before = [_digests(folder) for folder in watched]

    def local(text: str) -> str:
        text = text.replace(f"deployments/{DOC_NAME}", f"{root}/{DOC_NAME}")
        return text.replace(DOC_NAME, name).replace(DOC_NAME.replace("_", "-"), name.replace("_", "-"))

    env = {**os.environ, "HARNESS_DEPLOYMENTS_DIR": str(root)}
    try:
        for kind, step in doc_swap(heading):
            if kind == "bash":
                _run_doc_step(step, ["bash", "-c", local(step)], env, timeout=2400, tail_lines=40)
            else:
                _run_doc_step(step, [sys.executable, "-"], env, stdin=local(step), timeout=2400, tail_lines=40)
    finally:
        _uninstall_processing(name)
    assert [_digests(folder) for folder in watched] == before, "the original's files were written into"
    return root / name


@pytest.mark.server
def test_doc_swap_of_the_embedding_model(tmp_path):
    """The embedding swap guide: a tiny CLS-pooled BERT folder of another size in a copy of
    embedding_cpu, `make refresh`, the copy's checks and tests on every path; the original's
    fixtures still describe what it serves."""
    if not ALL:
        pytest.skip("HARNESS_NEW_ALL=1 runs it (about 5 min, CI's harness-new-all stage)")
    copy = run_swap_guide(tmp_path, "## Swapping the embedding model")
    original = get_deployment(swap_source("## Swapping the embedding model"), PROJECT_ROOT / "deployments")
    assert json.loads((copy / "model" / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "cls"
    assert len(json.loads((copy / "fixtures" / "expected_embeddings.json").read_text())["embeddings"][0]) == 128
    manifest = get_deployment(copy.name, copy.parent).manifest  # written by refresh, from the model
    # the guide renames embedding_onnx to encoder: its text model follows as encoder_text
    assert manifest.openai.models["encoder_text"].tokens.vocab_size == 8000
    assert manifest.gate.max_dims["encoder"] == {"input_ids": [256], "attention_mask": [256]}
    for fixture in ("expected_embeddings.json", "expected_documents.json"):
        original.checks_module._assert_served_weights(
            original.model_repository, json.loads((original.fixtures_path / fixture).read_text())
        )


#: Per deployment, what a copy of it keeps (entry models) and the names it gives (``--rename``):
#: the acceptance of ``harness new --models ... --rename ...``. The default suite runs
#: ``SUBSET_DEFAULT``'s against a server; ``HARNESS_NEW_ALL=1`` every one.
SUBSETS = {
    "resnet_npu": (["classify_resnet50", "resnet50"], {"resnet50": "classifier"}),
    "yolo11_ensemble": (
        ["yolo11_ensemble", "yolo11_detector"],
        {"yolo11_ensemble": "detect", "yolo11_detector": "detector"},
    ),
    # the ONNX way: text in (embedding_onnx_text) and token ids in (embedding_onnx, which it runs)
    "embedding_cpu": (["embedding_onnx_text", "embedding_onnx"], {"embedding_onnx": "encoder"}),
    "cn_clip": (["text_embedding"], {"text_embedding": "sentence", "text_encoder": "encoder"}),
}
SUBSET_DEFAULT = "resnet_npu"


def _named(text: str, names) -> list[str]:
    return sorted(n for n in names if re.search(rf"(?<![A-Za-z0-9]){re.escape(n)}(?![A-Za-z0-9])", text))


def _original_names(source: str) -> set[str]:
    """The names a copy's README must not carry: the original's deployment and model names that
    the copy dropped or renamed (a kept internal name such as `preprocess` may stay)."""
    original = get_deployment(source, PROJECT_ROOT / "deployments")
    kept, renames = SUBSETS[source]
    from harness.rename import rename_text
    from harness.subset import needed_models

    needed = needed_models(original.model_repository, kept)
    folders = {p.name for p in original.model_repository.iterdir() if p.is_dir()}
    unchanged = {m for m in needed if rename_text(m, renames) == m}
    return {source} | (folders - unchanged)


def _assert_repository_consistent(copy) -> None:
    from harness.repository import config_files, read_config

    folders = {p.name for p in copy.model_repository.iterdir() if p.is_dir()}
    for folder in folders:
        for path in config_files(copy.model_repository / folder):
            config = read_config(path)
            assert config.name in ("", folder), f"{path}: name {config.name!r} is not its folder's"
            for step in config.ensemble_scheduling.step:
                assert step.model_name in folders, f"{path}: step {step.model_name} has no folder"
    for benchmark in copy.benchmarks:
        assert set(benchmark.models) | set(benchmark.config) <= folders, benchmark.id
        file_name, _, function = benchmark.workload.partition(":")
        assert f"def {function}(" in (copy.path / file_name).read_text(), f"{benchmark.id}: no {function}"
    for output in copy.manifest.export.outputs if copy.manifest.export else []:
        assert Path(output).parts[1] in folders, f"export output {output} is in no model folder"


@pytest.mark.parametrize("source", list(SUBSETS))
def test_new_keeps_the_models_asked_under_their_new_names(tmp_path, source):
    """``new --models --rename``: the repository, manifest and README of the copy hold the kept
    models under their new names, every reference resolves, and the README names no original."""
    kept, renames = SUBSETS[source]
    name = f"mine{os.getpid()}"
    made = copy_deployment(name, source, root=tmp_path, entry_models=kept, renames=renames)
    copy = made.deployment
    from harness.rename import rename_text

    assert copy.entry_models == [rename_text(m, renames) for m in made.source.entry_models if m in kept]
    _assert_repository_consistent(copy)
    readme = (copy.path / "README.md").read_text()
    assert not _named(readme, _original_names(source)), _named(readme, _original_names(source))
    assert f"Not measured yet: `make bench DEPLOYMENT={name} && make matrix`" in readme
    assert not re.search(r"\d[\d.,]* (items/s|ms\b)", readme), "a figure with no record of the copy"
    for model in copy.entry_models:
        assert f"`{model}`" in readme, f"the README does not say how to call {model}"


def test_rename_refuses_an_unknown_model_a_clash_and_a_bad_name(tmp_path, capsys, monkeypatch):
    copy_deployment("mine", SUBSET_DEFAULT, root=tmp_path)
    before = _digests(tmp_path / "mine")
    monkeypatch.setenv("HARNESS_DEPLOYMENTS_DIR", str(tmp_path))  # where rename finds the copy
    cases = [
        (["no_such_model=x"], "mine has no model no_such_model"),
        (["resnet50=efficientnet_lite0"], "two models would be called classify_efficientnet_lite0"),
        (["resnet50=not-a-name"], "'resnet50=not-a-name': write OLD=NEW"),
    ]
    for pairs, message in cases:
        assert main(["rename", "mine", *pairs]) == 2
        assert message in capsys.readouterr().err
    assert _digests(tmp_path / "mine") == before, "a refused rename changed nothing"


def _readme_commands(readme: Path) -> list[str]:
    text = readme.read_text()
    return [
        line
        for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)
        for line in block.splitlines()
        if line.strip() and not line.startswith("#")
    ]


def _run(command: str, env: dict, timeout: int = 2400) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["bash", "-c", command], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-40:])
    assert done.returncode == 0, f"`{command}` failed ({done.returncode}):\n{tail}"
    return done


@pytest.mark.server
@pytest.mark.parametrize("source", list(SUBSETS))
def test_a_subset_copy_with_its_own_names_passes_its_checks_and_its_readme_runs(tmp_path, source):
    """What a user runs: `harness new --models --rename`, then the commands of the copy's README
    as written: `refresh`, its pytest line (the copy's checks and tests on a real server), `readme`;
    its `make` lines (dry run) and client line (`--help`) serve, bench and call the copy."""
    if source != SUBSET_DEFAULT and not ALL:
        pytest.skip(f"HARNESS_NEW_ALL=1 runs it (minutes); the default suite runs {SUBSET_DEFAULT}'s")
    kept, renames = SUBSETS[source]
    root = _project_layout(tmp_path)
    (root / source).symlink_to(PROJECT_ROOT / "deployments" / source)
    name = f"mine{os.getpid()}"  # the venv is shared: no clash with another run's copy
    env = {**os.environ, "HARNESS_DEPLOYMENTS_DIR": str(root)}
    python = sys.executable

    def local(command: str) -> str:  # as written (the project's .venv, as the swap guides run), in the temporary root
        return command.replace(f"deployments/{name}", str(root / name))

    pairs = " ".join(f"{old}={new}" for old, new in renames.items())
    try:
        _run(f"{python} -m harness new {name} --from {source} --models {' '.join(kept)} --rename {pairs}", env)
        commands = _readme_commands(root / name / "README.md")
        ran = []
        for command in commands:
            if "-m harness" in command or "pytest" in command:
                done = _run(local(command), env)
                ran.append(command)
                if "pytest" in command:
                    summary = done.stdout.strip().splitlines()[-1]
                    assert re.search(r"\d+ passed", summary) and "failed" not in summary, summary
            elif command.startswith("make "):
                done = _run(f"{command} -n", env, timeout=120)
                assert re.search(rf"-m harness \w+ {name}\b", done.stdout), f"`{command}` does not run {name}"
            else:
                _run(f"{local(command)} --help", env, timeout=120)
        assert any("pytest" in c and f"-k {name}" in c for c in ran), f"the README has no test command: {commands}"
        assert any(f"harness refresh {name}" in c for c in ran), commands
    finally:
        subprocess.run(
            [python, "-m", "pip", "uninstall", "-y", "-q", f"{name}-processing"], capture_output=True, check=False
        )
    readme = (root / name / "README.md").read_text()
    assert not _named(readme, _original_names(source)), _named(readme, _original_names(source))


@pytest.mark.exported
def test_rename_later_renames_a_model_everywhere_and_rewrites_the_readme(tmp_path, monkeypatch):
    """``python -m harness rename`` on a copy: no text file of the copy names the old model, every
    reference resolves, the README calls the new name; an original's hand-written README is kept."""
    get_deployment(DEFAULT_SOURCE).export()
    copy_deployment("mine", DEFAULT_SOURCE, root=tmp_path)
    monkeypatch.setenv("HARNESS_DEPLOYMENTS_DIR", str(tmp_path))
    old = KEPT_MODEL[DEFAULT_SOURCE]
    assert main(["rename", "mine", f"{old}=detector"]) == 0
    copy = get_deployment("mine", tmp_path)
    assert "detector" in copy.entry_models and old not in copy.entry_models
    _assert_repository_consistent(copy)
    for path, text in _text_files(copy.path):
        assert not _named(text, [old]), f"{path} still names {old}"
    assert "| `detector` |" in (copy.path / "README.md").read_text()
    assert not copy.missing_exports(), "the exported files moved with their folders"
    original = PROJECT_ROOT / "deployments" / DEFAULT_SOURCE / "README.md"
    before = original.read_text()
    monkeypatch.delenv("HARNESS_DEPLOYMENTS_DIR")
    assert main(["readme", DEFAULT_SOURCE]) == 2
    assert original.read_text() == before, "an original's README is written by hand"
