"""How the matrix writes numbers and tables: every figure of its pages goes through these."""

from __future__ import annotations

from tabulate import tabulate


def number(value, digits: int = 1) -> str:
    """Thousands separated, ``digits`` decimals (0: an integer); "–" for none or NaN."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, int) or digits == 0:
        return f"{int(round(value)):,}"
    return f"{value:,.{digits}f}"


def rate(value: float) -> str:
    """Items/s on the headline screen and bar labels: integers from 100, one decimal from 10, two below."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def size(value: float) -> str:
    """Bytes per request: MB / kB / B."""
    if value >= 1e6:
        return f"{value / 1e6:.1f} MB"
    if value >= 1e4:
        return f"{value / 1e3:.0f} kB"
    return f"{value / 1e3:.1f} kB" if value >= 1e3 else f"{value:.0f} B"


def ratio(value: float) -> str:
    return f"{value:.2f}x"


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def table(rows: list[list], headers: str | list[str]) -> str:
    """A GitHub Markdown table, cells as given (no number parsing); ``headers`` as in its header row,
    ``"a | b | c"``, or a list."""
    names = [h.strip() for h in headers.split(" | ")] if isinstance(headers, str) else headers
    return tabulate(rows, headers=names, tablefmt="github", disable_numparse=True)


def captioned(caption: str, rows: list[list], headers: str | list[str]) -> list[str]:
    """Lines of results.md: ``caption`` and its table, blank lines around."""
    return ["", caption, "", table(rows, headers), ""]
