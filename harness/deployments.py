"""Deployment discovery: every ``deployments/<name>/deployment.toml`` is a deployment; the manifest
alone says what it has, so a copied folder with an edited manifest needs no harness change."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from harness import PROJECT_ROOT
from harness.manifest import Benchmark, ConfigOverrides, Manifest, ManifestError, TargetSettings, read_manifest
from harness.serving.launchers import ServerOptions
from triton_gate.policy import GatePolicy

__all__ = ["Benchmark", "Deployment", "ManifestError", "discover", "discover_with_errors", "get_deployment"]

MANIFEST = "deployment.toml"
#: Packed envs live in <deployment>/envs; configs reach them as $$TRITON_MODEL_DIRECTORY/../../envs,
#: so in a container whose repository is mounted at /models they must be at /envs.
ENVS_MOUNT = "/envs"


@dataclasses.dataclass
class Deployment:
    """A deployment folder and its typed manifest."""

    path: Path
    manifest: Manifest

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def summary(self) -> str:
        return self.manifest.summary

    @property
    def model_repository(self) -> Path:
        return self.path / self.manifest.model_repository

    @property
    def fixtures_path(self) -> Path:
        return self.path / "fixtures"

    @property
    def entry_models(self) -> list[str]:
        return list(self.manifest.entry_models)

    @property
    def targets(self) -> list[str]:
        return list(self.manifest.targets)

    @property
    def benchmarks(self) -> list[Benchmark]:
        return list(self.manifest.benchmarks)

    def benchmark(self, benchmark_id: str) -> Benchmark:
        """The benchmark ``benchmark_id`` of the manifest; ValueError naming the known ids if none."""
        by_id = {b.id: b for b in self.manifest.benchmarks}
        if benchmark_id not in by_id:
            raise ValueError(f"{self.name} has no benchmark {benchmark_id!r} (it has {sorted(by_id)})")
        return by_id[benchmark_id]

    def export_outputs(self) -> list[Path]:
        return [self.path / p for p in self.manifest.export.outputs] if self.manifest.export else []

    def missing_exports(self) -> list[Path]:
        return [p for p in self.export_outputs() if not p.exists()]

    def unexported_files(self, overrides: dict[str, ConfigOverrides] | None) -> list[str]:
        """The ``default_model_filename`` files of a config variant that no version folder holds: an
        export step writes such a file (an INT8 IR, say) only where its accuracy gate holds."""
        named = {model: o.default_model_filename for model, o in (overrides or {}).items()}
        return [
            f"{model}/<version>/{filename}"
            for model, filename in named.items()
            if filename and not list((self.model_repository / model).glob(f"*/{filename}"))
        ]

    def run_step(self, command: list[str], python: str | None = None, check: bool = True) -> int:
        """Run a manifest command in the deployment's folder (``{python}``: ``python`` or this interpreter)."""
        command = [part.replace("{python}", python or sys.executable) for part in command]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return subprocess.run(command, cwd=self.path, check=check, env=env).returncode

    def export(self, force: bool = False, python: str | None = None, after_fixtures: bool = True) -> bool:
        """Run the manifest's export command when an output is missing, then (``after_fixtures``)
        the steps that read the committed fixtures; True if it ran."""
        spec = self.manifest.export
        if not spec or (not force and not self.missing_exports()):
            return False
        self.run_step(spec.command + (spec.force_args if force else []), python)
        missing = self.missing_exports()
        if missing:
            raise ManifestError(f"{self.name}: export ran but did not produce {[str(p) for p in missing]}")
        for step in spec.after_fixtures if after_fixtures else []:
            if self.run_step(step, python, check=False) != 0:
                print(f"{self.name}: `{' '.join(step)}` wrote nothing (its gate, above)")
        return True

    def server_options(self, target: str = "cpu", **overrides) -> ServerOptions:
        """Launcher options for this deployment on ``target`` (the manifest's [target.<t>] table)."""
        if target not in self.targets:
            raise ManifestError(f"{self.name} does not support target {target!r} (it has {self.targets})")
        per_target = self.manifest.target.get(target) or TargetSettings()
        options = ServerOptions(
            model_repository=str(self.model_repository),
            target=target,
            required_models=self.entry_models,
            allow_grpc="grpc" in per_target.protocols,
            gate_policy=self.gate_policy(),
            **per_target.model_dump(exclude={"protocols"}),
        )
        if (self.path / "envs").is_dir():
            options.mounts[str(self.path / "envs")] = ENVS_MOUNT
        return dataclasses.replace(options, **overrides)

    def serving_options(self, mode: str, target: str = "cpu", image: str | None = None, **overrides) -> ServerOptions:
        """``server_options`` for a server of ``mode``: exported first where the harness starts it
        (local, docker), ``image`` over the target's, and in docker mode the packed env attached."""
        if mode in ("local", "docker"):
            self.export()
        options = self.server_options(target, **overrides)
        if image:
            options.image = image
        if mode == "docker":
            from harness.serving.launchers.docker_envs import attach_packed_env

            attach_packed_env(self, options)  # the launcher packs it when missing or stale
        return options

    def gate_policy(self) -> GatePolicy:
        """What the front gate enforces for this deployment: clients call the entry models only
        (ensemble steps and BLS targets are internal), with the ``[gate]`` table's bounds and the
        ``[openai]`` table's ``/v1`` mapping."""
        gate = self.manifest.gate
        return GatePolicy(public=self.entry_models, openai=self.manifest.openai, **dict(gate))

    @property
    def checks_module(self) -> ModuleType | None:
        """The ``[tests] module`` file, imported once."""
        module_file = self.manifest.tests.module
        return self._import(module_file) if module_file else None

    def _import(self, file_name: str) -> ModuleType:
        """A Python file of the deployment folder, imported once per process."""
        return load_module(self.path / file_name, f"deployment_{self.name}_{Path(file_name).stem}")

    def checks(self) -> dict[str, Callable]:
        """``check_<name>`` functions of the checks module, by name without the prefix."""
        module = self.checks_module
        found = vars(module) if module else {}
        return {
            name.removeprefix("check_"): fn for name, fn in found.items() if name.startswith("check_") and callable(fn)
        }

    def resolve(self, reference: str) -> Callable:
        """Resolve ``"file.py:function"`` relative to the deployment folder."""
        file_name, _, attr = reference.partition(":")
        if not attr:
            raise ManifestError(f"{self.name}: {reference!r} must look like 'file.py:function'")
        try:
            return getattr(self._import(file_name), attr)
        except AttributeError:
            raise ManifestError(f"{self.name}: {file_name} has no function {attr!r}") from None


def load_module(path: Path, module_name: str, fresh: bool = False) -> ModuleType:
    """Import a Python file by path under a unique module name (``fresh``: again, even if imported)."""
    if not path.exists():
        raise ManifestError(f"{path} does not exist")
    if module_name in sys.modules and not fresh:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_deployment(path: Path) -> Deployment:
    """Parse and validate one deployment folder."""
    manifest_path = path / MANIFEST
    manifest = read_manifest(manifest_path)
    if manifest.name != path.name:
        raise ManifestError(f"{manifest_path}: name {manifest.name!r} differs from its folder {path.name!r}")
    deployment = Deployment(path=path.resolve(), manifest=manifest)
    if not deployment.model_repository.is_dir():
        raise ManifestError(f"{manifest_path}: model repository {deployment.model_repository} does not exist")
    for model in deployment.entry_models:
        if not (deployment.model_repository / model).is_dir():
            raise ManifestError(f"{manifest_path}: entry model {model!r} has no folder in the model repository")
    return deployment


def deployments_root(root: Path | None = None) -> Path:
    """Where deployments are looked for: ``root``, $HARNESS_DEPLOYMENTS_DIR or ./deployments."""
    return Path(root or os.environ.get("HARNESS_DEPLOYMENTS_DIR") or PROJECT_ROOT / "deployments")


def discover_with_errors(root: Path | None = None) -> tuple[list[Deployment], dict[Path, str]]:
    """Deployments under ``root`` that load, and for each folder that does not, why (one broken
    folder never hides the others)."""
    found, broken = [], {}
    for manifest in sorted(deployments_root(root).glob(f"*/{MANIFEST}")):
        try:
            found.append(load_deployment(manifest.parent))
        except (ManifestError, OSError) as exc:
            broken[manifest.parent] = str(exc) if isinstance(exc, ManifestError) else f"{manifest}: {exc}"
    return found, broken


def discover(root: Path | None = None) -> list[Deployment]:
    """All deployments under ``root`` (default: $HARNESS_DEPLOYMENTS_DIR or ./deployments); a broken
    manifest raises ``ManifestError``."""
    found, broken = discover_with_errors(root)
    if broken:
        raise ManifestError("\n".join(broken.values()))
    return found


def get_deployment(name: str, root: Path | None = None) -> Deployment:
    """The deployment called ``name`` (``-`` read as ``_``; a unique prefix will do), with the list
    of known ones in the error."""
    normalised = name.replace("-", "_")
    folder = deployments_root(root) / normalised
    if (folder / MANIFEST).exists():
        return load_deployment(folder)  # a broken manifest says what is wrong with it
    found, _ = discover_with_errors(root)
    matches = [d for d in found if d.name.startswith(normalised)]
    if len(matches) == 1:
        return matches[0]
    raise ManifestError(f"no deployment {name!r}; known: {sorted(d.name for d in found)}")
