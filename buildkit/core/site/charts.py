"""The geometry of the page's horizontal bar charts, in SVG user units; the template draws them inline.

A chart is groups of bars (a group: a scenario, or one torch release's images), each bar a label, a value in
bytes and a kind the stylesheet colours (nvidia, amd, hand, muted) in light and dark mode. Every bar also
carries its value as text, so no fact is told by colour or length alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

WIDTH = 640
LABEL_WIDTH = 232  # room for "ROCm 7.14 strix-halo" or "holding yesterday's nightly" at the page's font size
VALUE_ROOM = 84  # the value's text after the longest bar: "12.3 GiB"
ROW = 24
BAR = 16
HEADING = 22
MAX_LABEL = 34  # characters shown of a label; a longer one ends in "…" (its whole text is in the bar's title)


@dataclass(frozen=True)
class Item:
    label: str
    value: int
    kind: str  # nvidia | amd | hand | muted


@dataclass(frozen=True)
class PlacedBar:
    item: Item
    label: str  # the label as drawn (shortened)
    y: float  # top of its row
    length: float  # the bar's length; 0 for a value of 0

    @property
    def bar_y(self) -> float:
        return self.y + (ROW - BAR) / 2

    @property
    def text_y(self) -> float:
        return self.y + ROW / 2 + 4  # the baseline that centres 12-unit text on the row

    @property
    def value_x(self) -> float:
        return LABEL_WIDTH + self.length + 6


@dataclass(frozen=True)
class Heading:
    text: str
    y: float  # baseline


@dataclass(frozen=True)
class BarChart:
    title: str
    description: str  # what the chart shows, for screen readers (its <desc>)
    headings: tuple[Heading, ...]
    bars: tuple[PlacedBar, ...]
    height: float
    width: int = WIDTH
    label_width: int = LABEL_WIDTH


def _shortened(label: str) -> str:
    return label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "…"


def bar_chart(title: str, description: str, groups: Sequence[tuple[str, Sequence[Item]]]) -> BarChart | None:
    """Groups of bars (a group's heading "" for none) on one scale: the largest value spans the width left after
    the labels and the value's text. None when there is nothing to draw."""
    items = [item for _, group in groups for item in group]
    if not items:
        return None
    largest = max(item.value for item in items) or 1
    span = WIDTH - LABEL_WIDTH - VALUE_ROOM
    y = 0.0
    headings: list[Heading] = []
    bars: list[PlacedBar] = []
    for heading, group in groups:
        if not group:
            continue
        if heading:
            headings.append(Heading(heading, y + HEADING - 6))
            y += HEADING
        for item in group:
            length = 0.0 if item.value <= 0 else max(1.0, round(span * item.value / largest, 1))
            bars.append(PlacedBar(item, _shortened(item.label), y, length))
            y += ROW
    return BarChart(title, description, tuple(headings), tuple(bars), y + 4)
