"""A deployment folder is a template a user reads: shared code is truly shared, model.py shows the model."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from harness import PROJECT_ROOT
from harness.deployments import discover

HELPERS = PROJECT_ROOT / "triton_helpers"


def _public_names(module: Path) -> set[str]:
    """Top-level functions, classes and constants ``module`` defines (no leading underscore)."""
    names = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {n for n in names if not n.startswith("_")}


def _imported_names(path: Path) -> set[str]:
    """``module.name`` for every ``from triton_helpers.module import name`` in ``path``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("triton_helpers."):
            found.update(f"{node.module.split('.', 1)[1]}.{alias.name}" for alias in node.names)
    return found


def test_triton_helpers_holds_only_what_two_deployments_use():
    """Every public name of triton_helpers is imported by two deployments or more, or used inside
    triton_helpers by one that is: what one deployment uses lives in its folder; nothing is dead."""
    modules = {p.stem: p for p in HELPERS.glob("*.py") if p.stem != "__init__"}
    users: dict[str, set[str]] = {f"{m}.{n}": set() for m, p in modules.items() for n in _public_names(p)}
    for deployment in discover():
        for path in deployment.path.rglob("*.py"):
            for name in _imported_names(path) & set(users):
                users[name].add(deployment.name)
    shared = {name for name, who in users.items() if len(who) >= 2}
    internal = set()
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and f"{module}.{node.name}" in shared:
                internal.update(f"{module}.{n.id}" for n in ast.walk(node) if isinstance(n, ast.Name))
    lonely = {name: sorted(who) for name, who in users.items() if name not in shared | internal}
    assert lonely == {}, f"triton_helpers names used by fewer than two deployments (or by none): {lonely}"


def test_every_model_py_shows_its_model():
    """Each Python model defines TritonPythonModel with its own initialize and execute (no bare subclass)."""
    thin = []
    for deployment in discover():
        for path in sorted(deployment.model_repository.glob("*/1/model.py")):
            tree = ast.parse(path.read_text())
            classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TritonPythonModel"]
            methods = {
                f.name for c in classes for f in c.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
            if not classes or not {"initialize", "execute"} <= methods:
                thin.append(f"{path.relative_to(PROJECT_ROOT)}: defines {sorted(methods)}")
    assert thin == [], "model.py files that do not show initialize and execute:\n  " + "\n  ".join(thin)


#: Fields a model's configs for different hardware (config.pbtxt and configs/<target>.pbtxt) may differ in.
MAY_DIFFER = (
    "backend",
    "platform",
    "default_model_filename",
    "version_policy",  # which model file (a static-shape export is another version)
    "max_batch_size",
    "dynamic_batching",
    "instance_group",
)
#: Parameters of an engine or a packed environment, not of the model.
ENGINE_PARAMETERS = re.compile(
    r"^(device_ids|static_model|profiling|dump_graph|plog|dump_data|EXECUTION_ENV_PATH|intra_op_thread_count"
    r"|inter_op_thread_count|execution_mode|enable_mem_arena|enable_mem_pattern|session\..*|memory\..*|max_batch_tokens"
    r"|PERFORMANCE_HINT|NUM_STREAMS|INFERENCE_NUM_THREADS)$"
)


def _tensor(spec: dict, batched: bool) -> tuple:
    """(name, datatype, dims without the batch dim); a static graph may fix what is -1 elsewhere."""
    dims = [int(d) for d in spec.get("dims") or []]
    if not batched and dims and dims[0] == -1:
        dims = dims[1:]  # static_model: no max_batch_size, the batch is the first dim
    return spec["name"], spec.get("data_type", "TYPE_FP32"), len(dims)


def _dims(spec, batched: bool) -> list[int]:
    dims = list(spec.dims)
    return dims[1:] if not batched and dims and dims[0] == -1 else dims


def _dims_agree(base, variant) -> list[str]:
    """Fixed dims of one config must be fixed the same in the other (-1 may become a size)."""
    from harness.repository import read_config

    found = []
    configs = [read_config(p) for p in (base, variant)]
    batched = [c.max_batch_size > 0 for c in configs]
    for field in ("input", "output"):
        for a, b in zip(*(getattr(c, field) for c in configs)):
            for x, y in zip(_dims(a, batched[0]), _dims(b, batched[1])):
                if x != y and -1 not in (x, y):
                    found.append(f"{field} {a.name}: dims {list(a.dims)} vs {list(b.dims)}")
    return found


def _comparable(path):
    from google.protobuf import json_format

    from harness.repository import read_config

    typed = read_config(path)
    config = json_format.MessageToDict(typed, preserving_proto_field_name=True)
    batched = typed.max_batch_size > 0
    for field in ("input", "output"):
        config[field] = [_tensor(t, batched) for t in config.get(field) or []]
    for field in MAY_DIFFER + ("optimization",):
        config.pop(field, None)
    params = {k: v for k, v in (config.pop("parameters", None) or {}).items() if not ENGINE_PARAMETERS.match(k)}
    return config, params


def test_a_models_configs_for_other_hardware_differ_only_where_they_may():
    """configs/npu.pbtxt and its CPU twin: backend/platform, model file, batching, instances and the
    engine's parameters may differ; names, inputs, outputs and the model's own parameters may not."""
    drift = []
    for deployment in discover():
        for variant in sorted(deployment.model_repository.glob("*/configs/*.pbtxt")):
            base = variant.parent.parent / "config.pbtxt"
            (config, params), (other, other_params) = _comparable(base), _comparable(variant)
            if config != other:
                keys = sorted(k for k in set(config) | set(other) if config.get(k) != other.get(k))
                drift.append(f"{variant.relative_to(PROJECT_ROOT)}: {keys} differ")
            drift += [f"{variant.relative_to(PROJECT_ROOT)}: {d}" for d in _dims_agree(base, variant)]
            if params != other_params:
                keys = sorted(k for k in set(params) | set(other_params) if params.get(k) != other_params.get(k))
                drift.append(f"{variant.relative_to(PROJECT_ROOT)}: the model's parameters {keys} differ")
    assert drift == [], "configs drifted from their CPU twin:\n  " + "\n  ".join(drift)
