"""Sections of the matrix that installed distributions add: each entry point of the group
``triton_harness.matrix_sections`` is a ``Sections`` object (the lab's: lab/pyproject.toml)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

GROUP = "triton_harness.matrix_sections"


@dataclass(frozen=True)
class Lesson:
    """A lesson of the headline screen: ``build(records, matrix)`` gives a dict with ``measured`` and
    the ``records`` it used; ``render(lesson)`` its markdown lines; ``plot(lesson, plt, save)`` its
    figure (``save(fig, name, rect)`` writes ``headline-<name>.png``), called when measured."""

    name: str
    build: Callable[[list[dict], dict], dict]
    render: Callable[[dict], list[str]]
    plot: Callable


@dataclass(frozen=True)
class CostKind:
    """A kind of row of the costs lesson: ``rows(matrix, results_dir)``, the title of its sentence,
    what the lesson's heading calls it, the command that measures it, its colour and name in the figure."""

    kind: str
    title: str
    heading: str
    command: str
    colour: str
    legend: str
    rows: Callable[[dict, Path], list[dict]]


class Sections:
    """What a distribution adds to the matrix; every hook's default adds nothing."""

    #: headline lessons, shown before the costs lesson
    lessons: tuple[Lesson, ...] = ()
    #: rows of the costs lesson after the core's
    costs: tuple[CostKind, ...] = ()

    def claims(self, record: dict) -> bool:
        """A record of this distribution's own kind, which the tables leave to its sections."""
        return False

    def markdown(self, records: list[dict]) -> list[str]:
        """Lines of results.md after the tables."""
        return []

    def pages(self, records: list[dict], deployments) -> dict[str, tuple[str, str]]:
        """Pages of their own, linked from results.md under their first line's title: kind -> (file
        name in docs/, text)."""
        return {}

    def json(self, records: list[dict]) -> dict:
        """Fields of results.json after the core's."""
        return {}


def installed() -> list[Sections]:
    return [entry_point.load() for entry_point in entry_points(group=GROUP)]
