"""Docs cannot rot: every make target, script, module, CLI command, path and link that README.md,
docs/ and lab/docs/ name must exist (generated files count when git ignores them: they are produced by a
command the docs name)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from harness import PROJECT_ROOT
from harness.__main__ import tools

DOCS = (
    [PROJECT_ROOT / "README.md"]
    + sorted((PROJECT_ROOT / "docs").rglob("*.md"))
    + sorted((PROJECT_ROOT / "lab" / "docs").rglob("*.md"))
)
TOP_LEVEL = (
    "deployments/",
    "harness/",
    "lab/",
    "docs/",
    "triton_helpers/",
    "triton_gate/",
    "requirements/",
    ".ci/",
    "results/",
)
PATH_SUFFIXES = (".py", ".md", ".toml", ".pbtxt", ".txt", ".yml", ".yaml", ".json", ".jsonl", ".csv", ".png")
HARNESS_COMMANDS = ("list", "export", "serve", "bench", "pack-env", "new", "rename", "readme", "refresh", *tools())


def _code(text: str) -> list[str]:
    """Fenced code blocks (line by line) and inline code spans; a ```text block is the record of a past
    run (e.g. a removed tool's command next to its finding), not an instruction, and is not checked."""
    blocks = re.findall(r"^```([^\n]*)\n(.*?)^```", text, flags=re.S | re.M)
    fenced = [body for info, body in blocks if info.strip() != "text"]
    without_fences = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    # `<commit>:<path or command>` names what existed at that commit (a removed tool's record): not checked.
    spans = [span for span in re.findall(r"`([^`\n]+)`", without_fences) if not re.match(r"[0-9a-f]{7,40}:", span)]
    return [line for block in fenced for line in block.splitlines()] + spans


def _make_targets() -> set[str]:
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", makefile, flags=re.M))


#: The copy that docs/adding-a-deployment.md's walk makes (`make new NAME=my_model`) and fills; a
#: generated path like a git-ignored one (harness/tests/test_new.py follows the walk).
MADE_BY_DOCS = ("deployments/my_model/",)


def _ignored(relative: str) -> bool:
    if relative.startswith(MADE_BY_DOCS):
        return True
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", relative], cwd=PROJECT_ROOT, capture_output=True)
    return done.returncode == 0


def _looks_like_path(token: str) -> bool:
    token = token.strip("\"'(),;:")
    if not token or any(c in token for c in "<>*{}$|=") or "://" in token or token.startswith("-"):
        return False
    return token.startswith(TOP_LEVEL) or (
        "/" not in token and token.endswith(PATH_SUFFIXES) and token in ("README.md", "Makefile", "pyproject.toml")
    )


def _mentions(doc: Path) -> dict[str, set]:
    text = doc.read_text()
    found: dict[str, set] = {"make": set(), "paths": set(), "modules": set(), "commands": set(), "links": set()}
    for code in _code(text):
        for match in re.finditer(r"(?:^|[;&|(]\s*|\s)make\s+([^;&|`]*)", " " + code):
            for token in match.group(1).split():
                if "=" in token or token.startswith("-"):
                    continue
                if not re.fullmatch(r"[a-z][a-z0-9_-]*", token):
                    break
                found["make"].add(token)
        for token in code.split():
            if _looks_like_path(token):
                found["paths"].add(token.strip("\"'(),;:").rstrip("."))
        for module in re.findall(r"python3?\s+-m\s+(harness(?:\.[a-z_]+)*)", code):
            found["modules"].add(module)
        for command in re.findall(r"-m\s+harness\s+([a-z_-]+)", code):
            found["commands"].add(command)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not target.startswith(("http://", "https://", "mailto:", "#")):
            found["links"].add(target.split("#", 1)[0])
    return found


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(PROJECT_ROOT)) for d in DOCS])
def test_everything_a_doc_names_exists(doc):
    mentions = _mentions(doc)
    targets = _make_targets()
    problems = [f"make target `{t}` is not in the Makefile" for t in sorted(mentions["make"] - targets)]
    for path in sorted(mentions["paths"]):
        if not (PROJECT_ROOT / path).exists() and not _ignored(path):
            problems.append(f"path `{path}` does not exist (and is not a generated, git-ignored file)")
    for module in sorted(mentions["modules"]):
        file = PROJECT_ROOT / (module.replace(".", "/") + ".py")
        package = PROJECT_ROOT / module.replace(".", "/") / "__main__.py"
        if not file.exists() and not package.exists():
            problems.append(f"module `python -m {module}` does not exist")
    for command in sorted(mentions["commands"] - set(HARNESS_COMMANDS)):
        problems.append(f"`python -m harness {command}`: no such subcommand (known: {HARNESS_COMMANDS})")
    for link in sorted(mentions["links"]):
        if link and not (doc.parent / link).exists():
            problems.append(f"link ({link}) points to nothing")
    assert not problems, f"{doc.relative_to(PROJECT_ROOT)}:\n  " + "\n  ".join(problems)


def test_harness_subcommands_list_is_current():
    """HARNESS_COMMANDS above must follow the parser of harness/__main__.py."""
    import contextlib
    import io

    from harness.__main__ import main

    usage = io.StringIO()
    with contextlib.redirect_stdout(usage), contextlib.suppress(SystemExit):
        main(["--help"])
    declared = set(re.search(r"\{([a-z,_-]+)\}", usage.getvalue()).group(1).split(","))
    assert declared == set(HARNESS_COMMANDS), f"harness/__main__.py declares {sorted(declared)}"


def test_the_checker_catches_rot(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(
        "Run `make no-such-target` then `python -m harness.nope`, read "
        "`deployments/embedding_cpu/nope.py` and [x](missing.md).\n"
        "```bash\nmake install matrix DEPLOYMENT=x\n.venv/bin/python -m harness frobnicate\n```\n"
    )
    mentions = _mentions(doc)
    assert mentions["make"] == {"no-such-target", "install", "matrix"}
    assert "deployments/embedding_cpu/nope.py" in mentions["paths"]
    assert mentions["modules"] == {"harness.nope", "harness"} and "frobnicate" in mentions["commands"]
    assert mentions["links"] == {"missing.md"}


#: Files whose comments and strings name paths a reader follows: code, configs, recipes, deployment READMEs.
SOURCE_SUFFIXES = (".py", ".pbtxt", ".yml", ".yaml", ".toml", ".txt", ".sh", ".md")
#: Notes a user does not have: never cited from the repository.
NOT_SHIPPED = ("PLATFORM.md", "SPEC.md", "requirements/base.txt")


def _tracked_sources() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=PROJECT_ROOT, capture_output=True, text=True).stdout.split()
    if not listed:
        pytest.skip("not a git checkout")
    return [
        PROJECT_ROOT / f
        for f in listed
        if (f.endswith(SOURCE_SUFFIXES) or f.endswith("Makefile") or f.endswith("Dockerfile"))
        and not f.startswith("docs/results")  # generated
        and "/tests/" not in f  # tests name made-up paths on purpose
        and (PROJECT_ROOT / f).exists()
    ]


def _named_paths(text: str) -> set[str]:
    """Tokens that name a file or folder of this repository from its root (``harness/x.py``)."""
    found = set()
    for token in re.split(r"[\s`'\"(),;\[\]]+", text):
        token = token.split("::", 1)[0].split("#", 1)[0].rstrip(".:")
        last = token.rstrip("/").rsplit("/", 1)[-1]
        named = token.endswith("/") or "." in last  # a folder or a file, not a unit such as images/s
        if named and token.startswith(TOP_LEVEL + ("images/",)) and not any(c in token for c in "<>*{}$|=\\%"):
            found.add(token)
    return found


def test_every_path_that_code_configs_and_readmes_name_exists():
    """Comments, docstrings, configs and deployment READMEs name only paths that exist (or that a
    documented command generates, git-ignored), and cite no note a user does not have."""
    problems = []
    for source in _tracked_sources():
        text = source.read_text(errors="replace")
        where = source.relative_to(PROJECT_ROOT)
        for note in NOT_SHIPPED:
            if note in text and source.name != "test_docs.py":
                problems.append(f"{where}: cites {note}, which a user of the repository does not have")
        for path in sorted(_named_paths(text)):
            clean = path.rstrip("/")
            if (source.parent / clean).exists() and source.suffix == ".md":
                continue  # a link relative to the page
            if not (PROJECT_ROOT / clean).exists() and not _ignored(clean) and not _ignored(clean + "/"):
                problems.append(f"{where}: names `{path}`, which does not exist")
    assert not problems, "\n  ".join(["missing paths:"] + problems)


def test_the_path_finder_reads_comments():
    assert _named_paths("# see harness/nope.py (docs/x.md#part), 3 images/s, deployments/d/ here.") == {
        "harness/nope.py",
        "docs/x.md",
        "deployments/d/",
    }
