"""The dashboard's rendering: where its templates and static files are, the Jinja
environment and the filters that format times, durations, percentages and agent colours."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.router import Router
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from faultfinder.attributors.model import (
    normalise_agent,
)

DASHBOARD_DIR = Path(str(files("faultfinder.dashboards")))
TEMPLATES_DIR = DASHBOARD_DIR / "templates"
STATIC_DIR = DASHBOARD_DIR / "static"

PALETTE = (
    "#4e79a7",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#9c755f",
    "#2b3a55",
    "#8cd17d",
    "#a0cbe8",
    "#d4a6c8",
    "#86864e",
    "#bab0ac",
)
"""Agent and attributor colours: categorical, with no red or orange, which the pages keep
for errors and for the blamed step."""


def format_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso_time(seconds: float | None) -> str:
    return "" if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat()


def format_duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 120:
        return f"{minutes} min {rest} s"
    return f"{minutes // 60} h {minutes % 60} min"


def format_period(seconds: int) -> str:
    """A bucket length in words: 300 → "5 min", 21600 → "6 h", 86400 → "1 day"."""
    if seconds % 86400 == 0:
        days = seconds // 86400
        return f"{days} day" + ("s" if days != 1 else "")
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def format_percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def agent_colour(agent: str) -> str:
    """A stable colour per agent name, for an agent no page-wide assignment covers."""
    return PALETTE[sum(normalise_agent(agent).encode()) % len(PALETTE)]


def agent_colours(agents: Iterable[str]) -> dict[str, str]:
    """One colour per agent of a page, distinct for the first `len(PALETTE)` agents (in
    the order given), so two agents never share a colour on one page and its charts."""
    colours: dict[str, str] = {}
    for agent in agents:
        if agent not in colours:
            colours[agent] = (
                PALETTE[len(colours)] if len(colours) < len(PALETTE) else agent_colour(agent)
            )
    return colours


def format_tokens(count: int | None) -> str:
    """1234 → "1.2k tok"; "" when not recorded."""
    if count is None:
        return ""
    return f"{count / 1000:.1f}k tok" if count >= 1000 else f"{count} tok"


def shorten(text: str | None, limit: int = 90) -> str:
    """One line of at most `limit` characters."""
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


_BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible_controls(value: Any) -> Any:
    """Text with its bidirectional controls shown as `[U+202E]` instead of applied.

    An agent name, a tool name or step content arrives from the agents' telemetry; a
    right-to-left override in it would make the page show one name and mean another.
    Every value a template prints passes through here (Jinja's `finalize`), before
    escaping."""
    if isinstance(value, str) and not hasattr(value, "__html__") and _BIDI_CONTROLS.search(value):
        return _BIDI_CONTROLS.sub(lambda match: f"[U+{ord(match.group()):04X}]", value)
    return value


def template_environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(str(TEMPLATES_DIR)),
        finalize=visible_controls,
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        time=format_time,
        iso=iso_time,
        duration=format_duration,
        period=format_period,
        percent=format_percent,
        colour=agent_colour,
        tokens=format_tokens,
        shorten=shorten,
        quote=lambda text: urllib.parse.quote(str(text), safe=""),
    )
    return environment


def dashboard_templates() -> TemplateConfig[JinjaTemplateEngine]:
    """The template configuration of the app (Jinja, autoescaped)."""
    return TemplateConfig(
        engine=JinjaTemplateEngine.from_environment(template_environment()),
    )


def dashboard_static_files() -> Router:
    """`/ui/static/…`: the dashboard's stylesheet and script (no third-party assets)."""
    return create_static_files_router(
        path="/ui/static", directories=[STATIC_DIR], name="dashboard-static"
    )
