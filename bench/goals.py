"""The goals of the performance work, as one table: goal, measured, met or missed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Goal:
    area: str
    goal: str
    measured: str = "not run"
    met: bool | None = None  # None: not measured in this run
    shown: str = ""  # the verdict column when ``met`` is None and the goal is no measurement

    @property
    def verdict(self) -> str:
        if self.met is None:
            return self.shown or "not run"
        return "met" if self.met else "MISSED"


def table(goals: list[Goal]) -> str:
    """A Markdown table, one row per goal."""
    lines = ["| area | goal | measured | |", "|---|---|---|---|"]
    for goal in goals:
        verdict = goal.verdict if goal.met is not False else f"**{goal.verdict}**"
        lines.append(f"| {goal.area} | {goal.goal} | {goal.measured} | {verdict} |")
    return "\n".join(lines)
