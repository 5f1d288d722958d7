"""The result table: one row per figure, forklog beside its baseline, the ratio, the target and whether it is met."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Row:
    section: str
    measure: str
    value: str  # forklog's figure
    baseline: str = ""  # what it is compared with
    baseline_value: str = ""
    ratio: float | None = None  # forklog / baseline (for times: lower is better; for rates: higher is better)
    target: str = ""
    met: bool | None = None  # None: no target (an informative row) or skipped
    note: str = ""

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def skipped(section: str, measure: str, why: str, target: str = "") -> Row:
    return Row(section, measure, "skipped", target=target, note=why)


def _ratio(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.2f}x" if value < 100 else f"{value:.0f}x"


def _verdict(row: Row) -> str:
    if row.met is None:
        return "skipped" if row.value == "skipped" and row.target else ""
    return "MET" if row.met else "MISSED"


def render(rows: Sequence[Row], header: str) -> str:
    columns = ["measure", "forklog", "baseline", "baseline figure", "ratio", "target", "result", "note"]
    table = [
        [
            f"{row.section}: {row.measure}",
            row.value,
            row.baseline,
            row.baseline_value,
            _ratio(row.ratio),
            row.target,
            _verdict(row),
            row.note,
        ]
        for row in rows
    ]
    widths = [max(len(columns[i]), *(len(line[i]) for line in table)) for i in range(len(columns) - 1)]
    right = {1, 3, 4}

    def fmt(cells: list[str]) -> str:
        parts = [(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])) for i, cell in enumerate(cells[:-1])]
        return ("  ".join(parts) + "  " + cells[-1]).rstrip()

    lines = [header, "", fmt(columns), fmt(["-" * w for w in widths] + ["----"])]
    section = None
    for row, cells in zip(rows, table, strict=True):
        if section is not None and row.section != section:
            lines.append("")
        section = row.section
        lines.append(fmt(cells))
    met = sum(1 for row in rows if row.met is True)
    missed = [f"{row.section}: {row.measure}" for row in rows if row.met is False]
    lines += ["", f"targets met: {met}, missed: {len(missed)}"]
    lines += [f"  missed: {name}" for name in missed]
    return "\n".join(lines)
