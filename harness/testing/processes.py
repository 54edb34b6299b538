"""The processes of a served tree: RSS of tritonserver, the front gate and each Python-backend stub
(``process_memory``), the tree by role (``served_processes``) and the stubs serving one model
(``stub_processes``)."""

from __future__ import annotations

import re
from pathlib import Path

import psutil


def _label(process: psutil.Process) -> str:
    """``stub:<model>`` for a Python-backend stub (its 2nd argument is the model file), else the name."""
    try:
        cmdline = process.cmdline()
    except psutil.Error:
        return "gone"
    if cmdline and cmdline[0].endswith("triton_python_backend_stub") and len(cmdline) > 1:
        match = re.search(r"([^/]+)/\d+/[^/]+$", cmdline[1])
        return f"stub:{match.group(1) if match else cmdline[1]}"
    return process.name()


def _role(process: psutil.Process) -> str | None:
    """``server`` for tritonserver itself, ``gate`` for the front gate, else None."""
    try:
        cmdline = process.cmdline()
    except psutil.Error:
        return None
    if cmdline and Path(cmdline[0]).name == "tritonserver":
        return "server"
    if "triton_gate" in cmdline:
        return "gate"
    return None


def _tree(pid: int) -> list[psutil.Process]:
    """``pid`` and every process under it; none when it is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def process_memory(pid: int) -> dict[str, dict]:
    """RSS (MiB) of the process tree under ``pid``, keyed ``server``, ``gate`` and ``<label>#<pid>``
    (stubs: ``stub:<model>#<pid>``)."""
    out = {}
    for process in _tree(pid):
        try:
            rss = round(process.memory_info().rss / 2**20, 1)
        except psutil.Error:
            continue
        role = _role(process) or ("server" if process.pid == pid else None)
        key = role if role and role not in out else f"{_label(process)}#{process.pid}"
        out[key] = {"pid": process.pid, "rss_mib": rss}
    return out


def served_processes(pid: int) -> dict[str, list[psutil.Process]]:
    """The tree under ``pid`` by role: ``server`` (tritonserver), ``stubs`` (Python-backend stubs), ``gate``."""
    out: dict[str, list[psutil.Process]] = {"server": [], "stubs": [], "gate": []}
    for process in _tree(pid):
        role = _role(process) or ("stubs" if _label(process).startswith("stub:") else None)
        if role:
            out[role].append(process)
    return out


def stub_processes(pid: int, model: str) -> list[psutil.Process]:
    """The Python-backend stub processes serving ``model`` (children of server ``pid``)."""
    return [p for p in psutil.Process(pid).children(recursive=True) if _label(p) == f"stub:{model}"]
