"""Every command a reader types from README.md, docs/, lab/docs/ and the deployment READMEs runs as written.

Each line of a ```bash block is either run exactly as written (through bash, from the project
root), or a server command (`make deploy-*`) started in the background and waited for ("ready
in"), with the commands after it in the same document run against it, or skipped for a reason
stated in ``SKIPPED`` (the suite itself, multi-minute measurements, docker stages that .ci/run
runs, other hardware). A new command must fit one of these: an unclassified one fails
``test_every_doc_command_is_classified``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness import PROJECT_ROOT

DOCS = sorted(
    [
        PROJECT_ROOT / "README.md",
        *(PROJECT_ROOT / "docs").rglob("*.md"),
        *(PROJECT_ROOT / "lab" / "docs").rglob("*.md"),
        *(PROJECT_ROOT / "deployments").glob("*/README.md"),
        *(PROJECT_ROOT / "images").glob("*/README.md"),
    ]
)
SERVE = re.compile(r"^make (install )?deploy(-[a-z0-9-]+| DEPLOYMENT=\w+)\s*(#.*)?$")
SKIPPED = [
    (re.compile(r"<[a-z-]+>|\[--|/path/|\.\.\.|\$TRITON_ASCEND_IMAGE"), "a synopsis with placeholders, not a command"),
    (
        re.compile(r"\bpytest\b|^make test\b|^make fuzz\b"),
        "runs tests of this suite: CI runs the suite with `make test`",
    ),
    (
        re.compile(
            r"^make (bench|matrix|reliability|soak|faults|gate-cost)\b|harness (bench|matrix|"
            r"faults|gate-cost|soak|peers|pair-bench)\b|harness\.measuring\.alternate\b|"
            r"^mkdir -p /tmp/tune|^HARNESS_DEPLOYMENTS_DIR="
        ),
        "a measurement (minutes) that rewrites results/ or docs/: `make bench matrix` / `make reliability`",
    ),
    (
        re.compile(r"docker|^make image\b|pack-env-image|cpu-image|MODE=docker"),
        "docker mode: .ci/run's docker stages run it",
    ),
    (
        re.compile(r"^make scaleout\b|harness[. ]scaleout run\b"),
        "a multi-replica measurement in Docker (minutes, Compose + nginx) that rewrites results/scaleout/: `make scaleout`",
    ),
    (re.compile(r"make_fixtures\.py"), "regenerates the reference fixtures (after new weights), never in a test run"),
    (
        re.compile(r"TARGET=(npu|ngc)|perf_analyzer|npu-host"),
        "needs other hardware or interpreters (Ascend host, Python 3.10/3.12, glibc 2.38)",
    ),
    (re.compile(r"^conda[ -]|^/tmp/yolo11-env/"), "a hand-built conda-pack env: conda cannot be installed here"),
    (re.compile(r"^make install$|^cd deployments/resnet_npu && "), "set-up/export steps the suite's own start-up runs"),
    (
        re.compile(r"^cp -r deployments/\w+ /tmp/|^tritonserver --model-repository|^python client\.py"),
        "a deployment folder outside the repository: its tests/test_<name>_client.py does it in a temporary directory",
    ),
    (
        re.compile(r"\bmy_model\b|\bmy-model-"),
        "the walk from `make new` to your own ONNX file: harness/tests/test_new.py runs it in a temporary root",
    ),
]


def _commands(doc: Path) -> list[str]:
    """Command lines of the doc's ```bash blocks (continuations joined, comment lines dropped) and,
    in document order, each ```python run block as one command (the venv's Python reads it)."""
    text = doc.read_text()
    commands = []
    for kind, block in re.findall(r"^ *```(bash|sh|shell|python run)\n(.*?)^ *```", text, flags=re.S | re.M):
        if kind == "python run":
            commands.append(f".venv/bin/python - <<'PYTHON'\n{block}PYTHON")
            continue
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def classify(command: str) -> tuple[str, str]:
    """('serve' | 'run' | 'skip', reason)."""
    bare = re.sub(r"\s+#.*$", "", command)
    if SERVE.match(bare) and "MODE=" not in bare:
        return "serve", ""
    for pattern, reason in SKIPPED:
        if pattern.search(bare):
            return "skip", reason
    return "run", ""


class BackgroundServer:
    """A `make deploy-*` started as a reader would, stopped with Ctrl-C (SIGINT to its group)."""

    def __init__(self, command: str, timeout_s: float = 600):
        self.command = command
        self.output: list[str] = []
        self.process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not any(" ready in " in line for line in self.output):
            if self.process.poll() is not None or time.monotonic() > deadline:
                time.sleep(0.5)
                self.stop()
                pytest.fail(f"`{command}` never became ready:\n" + "".join(self.output[-40:]), pytrace=False)
            time.sleep(0.25)

    def _read(self) -> None:
        for line in self.process.stdout:
            self.output.append(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def serve_recipe(command: str) -> str:
    """The `python -m harness serve ...` line that `make` would run for a serve command: two doc
    commands with the same recipe serve the same thing, so one server answers both docs."""
    bare = re.sub(r"\s+#.*$", "", command).replace("make install ", "make ")
    done = subprocess.run(
        ["bash", "-c", bare.replace("make ", "make -n ", 1)], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    lines = [line for line in done.stdout.splitlines() if "-m harness serve " in line]
    assert done.returncode == 0 and len(lines) == 1, (
        f"`{command}`: make -n gives no single serve line:\n{done.stdout}{done.stderr}"
    )
    return lines[0].strip()


def command_groups() -> dict[str, dict]:
    """Runnable doc commands grouped by the server they need: ``{recipe or "": {"serve": [...], "run": [(doc, command)]}}``
    in document order; "" holds the commands that come before any server in their document."""
    groups: dict[str, dict] = {}
    for doc in DOCS:
        recipe = ""
        for command in _commands(doc):
            kind, _ = classify(command)
            if kind == "serve":
                recipe = serve_recipe(command)
                groups.setdefault(recipe, {"serve": [], "run": []})["serve"].append(command)
            elif kind == "run":
                groups.setdefault(recipe, {"serve": [], "run": []})["run"].append((doc, command))
    return groups


GROUPS = command_groups()
RUNNABLE = [doc for doc in DOCS if any(classify(c)[0] != "skip" for c in _commands(doc))]


def test_every_doc_command_is_classified():
    """The rules above cover each command; print what is skipped and why, for the reader of the log."""
    for doc in DOCS:
        for command in _commands(doc):
            kind, reason = classify(command)
            if kind == "skip":
                print(f"skip {doc.relative_to(PROJECT_ROOT)}: {command[:90]}  ({reason})")
    assert RUNNABLE, "no runnable command found in the docs: the parser is broken"


def test_the_classifier_catches_a_broken_client_command(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(
        "```bash\nmake deploy-embedding\n.venv/bin/python deployments/embedding_cpu/client.py \\\n"
        '  "A sentence." --model embedding_onnx\nmake test\n```\n'
    )
    commands = _commands(doc)
    assert [classify(c)[0] for c in commands] == ["serve", "run", "skip"]
    done = subprocess.run(["bash", "-c", commands[1]], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, "the old README command (no subcommand) must fail, so running it catches it"


def _group_id(recipe: str) -> str:
    found = re.search(r"-m harness serve (\S+)", recipe)
    return found.group(1) if found else "no-server"


@pytest.mark.server
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("recipe", list(GROUPS), ids=[_group_id(r) for r in GROUPS])
def test_doc_commands_run_as_written(recipe):
    """Each server is started once, by the first doc command that serves it (the others have the
    same `make -n` recipe); every doc command that needs it runs against it as written."""
    group = GROUPS[recipe]
    server = BackgroundServer(group["serve"][0]) if recipe else None
    failures = []
    try:
        for doc, command in group["run"]:
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", command], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600
            )
            if done.returncode != 0 or not done.stdout.strip():
                failures.append(
                    f"{doc.relative_to(PROJECT_ROOT)}: `{command}` -> exit {done.returncode}\n"
                    f"{done.stdout[-1500:]}{done.stderr[-1500:]}"
                )
    finally:
        if server is not None:
            server.stop()
    assert not failures, "\n".join(failures)
