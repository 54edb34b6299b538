"""Deployment discovery: a copied folder with an edited manifest is a new deployment."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from harness.deployments import ManifestError, discover, get_deployment
from harness.session import ServerPool

SOURCE = PROJECT_ROOT / "deployments" / "embedding_cpu"


def _copy_as(root: Path, name: str) -> Path:
    target = root / name
    shutil.copytree(SOURCE, target, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = target / "deployment.toml"
    manifest.write_text(manifest.read_text().replace('name = "embedding_cpu"', f'name = "{name}"'))
    return target


def test_every_deployment_in_the_repo_loads():
    names = [d.name for d in discover()]
    assert "embedding_cpu" in names
    for deployment in discover():
        for benchmark in deployment.benchmarks:
            assert callable(deployment.resolve(benchmark.workload))


def test_manifest_errors_name_the_problem(tmp_path):
    target = _copy_as(tmp_path, "broken_copy")
    manifest = target / "deployment.toml"
    manifest.write_text(manifest.read_text().replace('"embedding_py", "embedding_onnx"', '"no_such_model"'))
    with pytest.raises(ManifestError, match="no_such_model"):
        discover(tmp_path)


@pytest.mark.server
def test_copied_deployment_is_served_and_checked_with_no_harness_change(tmp_path):
    """What a user does: copy a folder, keep the models they want, edit the manifest, run."""
    get_deployment("embedding_cpu").export()
    target = _copy_as(tmp_path, "my_embedding")
    # keep a client-tokenized model, a text-in model, and the ensemble with its steps
    keep = {"embedding_onnx", "embedding_onnx_text", "embedding_onnx_text_ensemble", "tokenize", "pool_embedding"}
    for model in (target / "model_repository").iterdir():
        if model.name not in keep:
            shutil.rmtree(model)
    manifest = target / "deployment.toml"
    text = manifest.read_text()
    start = text.index("entry_models = [")
    text = (
        text[:start]
        + 'entry_models = ["embedding_onnx_text", "embedding_onnx", "embedding_onnx_text_ensemble"]'
        + text[text.index("]", start) + 1 :]
    )
    # OpenAI names of removed models go too (the manifest refuses a mapping to a model that is not an entry model)
    manifest.write_text(
        re.sub(r"\n\[openai\.models\.(embedding_py|embedding_onnx_int8)\]\n(?:[^\[\n].*\n)*", "\n", text)
    )
    copies = discover(tmp_path)
    assert [d.name for d in copies] == ["my_embedding"]
    copy = copies[0]
    assert copy.path == (tmp_path / "my_embedding").resolve()
    assert {"embedding_onnx_text_matches_reference", "bad_sentence_input_is_rejected_clearly"} <= set(copy.checks())
    pool = ServerPool(mode="local")
    try:
        ctx = pool.context(copy)
        assert str(tmp_path) in ctx.server.options.model_repository
        with ctx.http_client() as client:
            assert all(client.is_model_ready(m) for m in keep) and not client.is_model_ready("embedding_py")
        copy.checks()["embedding_onnx_text_matches_reference"](ctx)
    finally:
        pool.close()


def test_every_model_has_a_version_folder_in_git_or_from_its_export():
    """An empty version folder (an ensemble's ``1/``) is not kept by git unless it holds a file."""
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files", "deployments"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    if not tracked:
        pytest.skip("not a git checkout")
    for deployment in discover():
        exported = {
            p.relative_to(deployment.model_repository).parts[0]
            for p in deployment.export_outputs()
            if deployment.model_repository in p.parents
        }
        for model in sorted(p.name for p in deployment.model_repository.iterdir() if p.is_dir()):
            prefix = f"{deployment.model_repository.relative_to(PROJECT_ROOT)}/{model}/"
            versions = {path[len(prefix) :].split("/")[0] for path in tracked if path.startswith(prefix)}
            assert model in exported or any(v.isdigit() for v in versions), (
                f"{deployment.name}/{model}: no version folder in git (add {prefix}1/.gitkeep) and no export makes one"
            )


def test_export_runs_only_for_missing_outputs_and_force_adds_the_force_args(tmp_path):
    folder = tmp_path / "toy"
    (folder / "model_repository").mkdir(parents=True)
    (folder / "export.py").write_text(
        "import sys, pathlib\npathlib.Path('out.txt').write_text(' '.join(sys.argv[1:]) or 'plain')\n"
    )
    (folder / "deployment.toml").write_text(
        'name = "toy"\nentry_models = []\n[export]\ncommand = ["{python}", "export.py"]\n'
        'outputs = ["out.txt"]\nforce_args = ["--force"]\n'
    )
    (deployment,) = discover(tmp_path)
    assert deployment.export() is True and (folder / "out.txt").read_text() == "plain"
    assert deployment.export() is False, "all outputs present: nothing to run"
    assert deployment.export(force=True) is True and (folder / "out.txt").read_text() == "--force"


def test_a_variant_whose_gated_file_was_not_exported_is_skipped_by_the_benchmarks(tmp_path, capsys, monkeypatch):
    from harness.session import for_each_scenario

    folder = tmp_path / "toy"
    (folder / "model_repository" / "m" / "1").mkdir(parents=True)
    (folder / "model_repository" / "m" / "1" / "model.onnx").write_bytes(b"")
    (folder / "deployment.toml").write_text(
        'name = "toy"\nentry_models = ["m"]\nbenchmarks = [\n'
        '  { id = "plain", workload = "w.py:w", config = { m = { instance_count = 2 } } },\n'
        '  { id = "gated", workload = "w.py:w", config = { m = { default_model_filename = "model_int8.xml" } } },\n]\n'
    )
    (deployment,) = discover(tmp_path)
    assert [deployment.unexported_files(b.config) for b in deployment.benchmarks] == [
        [],
        ["m/<version>/model_int8.xml"],
    ]

    class Pool:  # what for_each_scenario asks of a ServerPool, without starting servers
        def context(self, deployment, overrides, models):
            return overrides

        def release(self, key):
            pass

    ran = []
    monkeypatch.setenv("HARNESS_DEPLOYMENTS_DIR", str(tmp_path))
    failed = for_each_scenario(Pool(), lambda d, b, ctx: ran.append(b.id), target="cpu")
    assert failed == [] and ran == ["plain"]
    assert "toy/gated: skipped, not exported here: m/<version>/model_int8.xml" in capsys.readouterr().out
