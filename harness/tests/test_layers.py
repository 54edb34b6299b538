"""The harness's module graph: no import cycle, counting imports inside functions too."""

from __future__ import annotations

import ast

from harness import PROJECT_ROOT

HARNESS = PROJECT_ROOT / "harness"


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in HARNESS.rglob("*.py"):
        if "tests" in path.relative_to(HARNESS).parts:
            continue
        name = ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts).removesuffix(".__init__")
        found[name] = ast.parse(path.read_text())
    return found


def import_graph() -> dict[str, set[str]]:
    """``{module: harness modules it imports}``; a module importing its own parent package is left out."""
    modules = _modules()
    graph = {}
    for name, tree in modules.items():
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("harness")}
        graph[name] = {t for t in targets if t in modules and t != name and not name.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_harness_has_no_import_cycle():
    graph = import_graph()
    assert "harness.serving.packenv" in graph and "harness.serving.launchers.local" in graph
    assert cycles(graph) == []


#: Lowest layer first; a module may import its own layer and the layers below it, never one above.
LAYERS = [
    (
        "core",
        (
            "harness",
            "harness.manifest",
            "harness.repository",
            "harness.tensors",
            "harness.variants",
            "harness.provenance",
            "harness.client_cli",
        ),
    ),
    ("serving", ("harness.serving",)),
    (
        "deployments",
        ("harness.deployments", "harness.context", "harness.session", "harness.packed_serving", "harness.new"),
    ),
    ("measuring", ("harness.measuring", "harness.testing")),
    ("tools", ("harness.tools",)),
    ("results", ("harness.measuring.matrix", "harness.__main__", "harness.conftest")),
]


def layer_of(module: str) -> int:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix != "harness" and module.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer of LAYERS: add it"
    return best[0]


def test_every_import_points_down_the_layers():
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in import_graph().items()
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_the_gate_imports_nothing_else_of_the_harness():
    """The CPU image copies harness/serving/gate/*.py alone (images/cpu/build.sh): the gate may import
    only its own package (and the two ``__init__`` modules above it)."""
    allowed = {"harness", "harness.serving"}
    outside = {
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.startswith("harness.serving.gate")
        for target in targets
        if not target.startswith("harness.serving.gate") and target not in allowed
    }
    assert outside == set()
