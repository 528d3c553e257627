"""The dashboard: runs list, run page, overview and their live updates (server-sent events).

Pages are rendered on the server by Jinja with autoescaping on; the browser script
only swaps in freshly rendered regions when an event arrives and posts forms to the
JSON API. Dashboard pages are queries: with API keys configured they need a key,
which a browser presents once on the login page and then carries in an HttpOnly,
SameSite=Strict cookie that `DashboardGate` turns into the `Authorization` header
the API guard checks.
"""

from __future__ import annotations

import json
import re
import secrets
import time
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.cookies import CookieError, SimpleCookie
from importlib.resources import files
from itertools import combinations
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import Cookie, State
from litestar.di import NamedDependency
from litestar.exceptions import NotAuthorizedException
from litestar.params import FromPath, FromQuery
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, ServerSentEvent, Template
from litestar.response.sse import ServerSentEventMessage
from litestar.router import Router
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from faultfinder.attributors.base import available_attributors
from faultfinder.attributors.model import (
    Attribution,
    AttributionStatus,
    Step,
    Trajectory,
    normalise_agent,
)
from faultfinder.server.api.runs import RUN_STATUSES
from faultfinder.server.api.schemas import LabelOut, RunPage, RunSummary, Stats
from faultfinder.server.auth import KeyRing, presented_key
from faultfinder.server.events import RESET, RUN_CHANGED, EventBus
from faultfinder.server.runs import RunService
from faultfinder.server.settings import Settings
from faultfinder.server.store import InvalidCursorError, LabelStore, SpanStore, UnknownRunError

DASHBOARD_DIR = Path(str(files("faultfinder.dashboards")))
TEMPLATES_DIR = DASHBOARD_DIR / "templates"
STATIC_DIR = DASHBOARD_DIR / "static"

KEY_COOKIE = "faultfinder_key"
STREAM_LIFETIME_S = 15.0
"""An event stream ends after this long and the browser reconnects (resuming from its
last event id): an open dashboard never holds up a graceful shutdown for longer."""
HEARTBEAT_S = 5.0
SEARCH_PAGE = 200
SEARCH_SCAN_LIMIT = 2000
"""Text search reads at most this many runs per page of results."""
PREVIEW_CHARS = 160
CANDIDATE_MARKS = 5
"""Candidate steps of one attribution marked on the timeline (the highest scores)."""
LONG_CONTENT_CHARS = 400
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
LOGIN_CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
WINDOWS: dict[str, tuple[int, int]] = {
    "1h": (3600, 300),
    "24h": (86400, 3600),
    "7d": (7 * 86400, 6 * 3600),
    "30d": (30 * 86400, 86400),
}
"""Overview time windows: (window seconds, bucket seconds)."""
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
_API_WRITE = re.compile(r"^/api/runs/([^/]+)/(labels|outcome|attributions)$")


# --- formatting ------------------------------------------------------------------------


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
    """A stable colour per agent name, the same on every chart."""
    return PALETTE[sum(normalise_agent(agent).encode()) % len(PALETTE)]


def template_environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(str(TEMPLATES_DIR)),
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


# --- view models -----------------------------------------------------------------------


def primary_attribution(
    attributions: Sequence[Attribution], preferred: Sequence[str]
) -> Attribution | None:
    """The answer the dashboard leads with: the newest ok attribution of the first
    configured attributor that has one, else the newest ok attribution."""
    ok = [a for a in attributions if a.status is AttributionStatus.OK]
    for method in preferred:
        mine = [a for a in ok if a.method == method]
        if mine:
            return mine[-1]
    return ok[-1] if ok else None


@dataclass
class RunRowView:
    run: RunSummary
    culprit: Attribution | None

    @property
    def duration(self) -> float | None:
        started: float | None = self.run.started_at
        ended: float | None = self.run.ended_at
        return None if started is None or ended is None else ended - started


@dataclass
class StepMark:
    kind: str
    """culprit, blamed, candidate, label, reference, in-set."""
    text: str


@dataclass
class StepView:
    step: Step
    marks: list[StepMark] = field(default_factory=list)
    culprit: bool = False
    in_prediction_set: bool = False

    @property
    def preview(self) -> str:
        text = " ".join(self.step.content.split())
        return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"

    @property
    def is_long(self) -> bool:
        return len(self.step.content) > LONG_CONTENT_CHARS or self.step.content.count("\n") > 8


def step_views(
    trajectory: Trajectory,
    latest: Sequence[Attribution],
    primary: Attribution | None,
    labels: Sequence[LabelOut],
) -> list[StepView]:
    views = [StepView(step) for step in trajectory.steps]

    def mark(index: int | None, kind: str, text: str) -> None:
        if index is not None and 0 <= index < len(views):
            views[index].marks.append(StepMark(kind, text))

    if primary is not None and primary.step is not None and primary.step < len(views):
        views[primary.step].culprit = True
        mark(primary.step, "culprit", f"culprit · {primary.method}")
        if primary.prediction_set is not None:
            lo, hi = primary.prediction_set.lo, primary.prediction_set.hi
            for view in views[lo : hi + 1]:
                view.in_prediction_set = True
    for attribution in latest:
        if attribution is primary or attribution.status is not AttributionStatus.OK:
            continue
        mark(attribution.step, "blamed", f"blamed · {attribution.method}")
    for attribution in latest:
        strongest = sorted(attribution.candidates, key=lambda c: -c.score)[:CANDIDATE_MARKS]
        for candidate in strongest:
            if candidate.step != attribution.step:
                mark(candidate.step, "candidate", f"{attribution.method} {candidate.score:.2f}")
    if labels:
        label = labels[-1]
        mark(label.step, "label", f"human label · {label.agent}")
    reference = trajectory.metadata.get("label")
    if isinstance(reference, Mapping) and isinstance(reference.get("step"), int):
        mark(int(reference["step"]), "reference", f"reference label · {reference.get('agent')}")
    return views


def latest_per_method(
    attributions: Sequence[Attribution], primary: Attribution | None
) -> list[Attribution]:
    """Each method's newest answer, the primary's method first."""
    newest: dict[str, Attribution] = {}
    for attribution in attributions:
        newest[attribution.method] = attribution
    ordered = sorted(newest.values(), key=lambda a: a.method)
    if primary is not None:
        ordered.sort(key=lambda a: a.method != primary.method)
    return ordered


def run_matches(run: RunSummary, needle: str) -> bool:
    """Text search over what the runs list shows (id, project, agents, answers)."""
    haystack: list[str] = [run.id, run.project, run.outcome or "", *run.agents]
    for attribution in run.attributions:
        haystack += [
            attribution.method,
            attribution.agent or "",
            attribution.reason,
            attribution.error_category or "",
            attribution.failure_reason or "",
        ]
    return any(needle in text.casefold() for text in haystack)


async def find_runs(
    service: RunService,
    *,
    query: str | None,
    status: str | None,
    project: str | None,
    agent: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[RunPage, int | None]:
    """A page of runs; with a text `query`, the matches among up to SEARCH_SCAN_LIMIT runs
    (and how many runs were read)."""
    filters: dict[str, Any] = {"status": status, "project": project, "agent": agent}
    if not query:
        return await service.list_runs(**filters, limit=limit, cursor=cursor), None
    needle = query.casefold()
    found: list[RunSummary] = []
    scanned = 0
    next_cursor = cursor
    while True:
        page = await service.list_runs(**filters, limit=SEARCH_PAGE, cursor=next_cursor)
        found += [run for run in page.items if run_matches(run, needle)]
        scanned += len(page.items)
        next_cursor = page.next_cursor
        if next_cursor is None or len(found) >= limit or scanned >= SEARCH_SCAN_LIMIT:
            return RunPage(items=found, next_cursor=next_cursor), scanned


@dataclass(frozen=True)
class Agreement:
    first: str
    second: str
    runs: int
    agent: float
    step: float


def attributor_agreement(rows: Iterable[tuple[str, str, str, int, int]]) -> list[Agreement]:
    """How often two attributors name the same agent / step on runs both answered
    (each method's newest answer per run counts)."""
    answers: dict[str, dict[str, tuple[str, int]]] = defaultdict(dict)
    for run_id, method, agent, step, _created in rows:
        answers[run_id][method] = (normalise_agent(agent), step)
    pairs: dict[tuple[str, str], list[tuple[bool, bool]]] = defaultdict(list)
    for by_method in answers.values():
        for first, second in combinations(sorted(by_method), 2):
            (agent_a, step_a), (agent_b, step_b) = by_method[first], by_method[second]
            pairs[(first, second)].append((agent_a == agent_b, step_a == step_b))
    return [
        Agreement(
            first,
            second,
            len(marks),
            sum(a for a, _ in marks) / len(marks),
            sum(s for _, s in marks) / len(marks),
        )
        for (first, second), marks in sorted(pairs.items())
    ]


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    colour: str
    title: str


@dataclass
class Chart:
    width: int
    height: int
    bars: list[Bar] = field(default_factory=list)
    labels: list[tuple[float, float, str, str]] = field(default_factory=list)
    """(x, y, anchor, text) of axis and bar labels."""
    legend: list[tuple[str, str]] = field(default_factory=list)
    """(colour, agent) pairs."""


def blame_chart(blame: Mapping[str, int]) -> Chart:
    """Horizontal bars: failed runs blamed on each agent (top 12)."""
    top = sorted(blame.items(), key=lambda item: (-item[1], item[0]))[:12]
    row, left, width = 26, 170, 640
    chart = Chart(width=width, height=max(row * len(top) + 10, 40))
    most = max((count for _, count in top), default=1)
    for position, (agent, count) in enumerate(top):
        y = 5 + position * row
        length = (width - left - 60) * count / most
        chart.bars.append(
            Bar(left, y, length, row - 8, agent_colour(agent), f"{agent}: {count} runs")
        )
        short = agent if len(agent) <= 24 else agent[:23] + "…"
        chart.labels.append((left - 8, y + row / 2, "end", short))
        chart.labels.append((left + length + 6, y + row / 2, "start", str(count)))
    return chart


def blame_over_time_chart(stats: Stats, window_s: int, now: float) -> Chart:
    """Stacked columns: failed runs per blamed agent in each time bucket of the window."""
    width, height, left, bottom = 720, 220, 40, 30
    chart = Chart(width=width, height=height)
    bucket = stats.bucket_seconds
    first = int((now - window_s) // bucket * bucket)
    starts = list(range(first, int(now) + 1, bucket))
    counts = {int(b.start): b.counts for b in stats.blame_over_time}
    totals = [sum(counts.get(start, {}).values()) for start in starts]
    most = max(totals, default=0) or 1
    slot = (width - left - 10) / max(len(starts), 1)
    agents: set[str] = set()
    for index, start in enumerate(starts):
        y = float(height - bottom)
        for agent, count in sorted(counts.get(start, {}).items()):
            agents.add(agent)
            size = (height - bottom - 10) * count / most
            y -= size
            chart.bars.append(
                Bar(
                    left + index * slot + 1,
                    y,
                    max(slot - 2, 1),
                    size,
                    agent_colour(agent),
                    f"{format_time(start)}: {agent} {count}",
                )
            )
    chart.labels.append((left - 6, 14, "end", str(most)))
    chart.labels.append((left - 6, height - bottom, "end", "0"))
    for index in (0, len(starts) // 2, len(starts) - 1) if starts else ():
        stamp = datetime.fromtimestamp(starts[index], UTC)
        text = stamp.strftime("%H:%M" if window_s <= 86400 else "%m-%d")
        chart.labels.append((left + index * slot + slot / 2, height - 10, "middle", text))
    chart.legend = [(agent_colour(agent), agent) for agent in sorted(agents)]
    return chart


# --- the gate: cookie key, security headers, write announcements ------------------------


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def cookie_key(scope: Scope) -> str | None:
    """The API key the dashboard's login stored in the browser's cookie, if any."""
    raw = _header(scope, b"cookie")
    if raw is None:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw.decode("latin-1"))
    except CookieError:
        return None
    morsel = jar.get(KEY_COOKIE)
    return urllib.parse.unquote(morsel.value) if morsel is not None and morsel.value else None


class DashboardGate:
    """ASGI middleware for the dashboard.

    - A request without `Authorization`/`x-api-key` but with the login cookie gets the
      cookie's key as `Authorization: Bearer …`; the API guard then checks it as usual.
    - `/ui` responses get a strict Content-Security-Policy and related headers.
    - Successful writes to `/api/runs/{id}/labels|outcome|attributions` are published on
      the event bus, so open dashboards refresh.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if _header(scope, b"authorization") is None and _header(scope, b"x-api-key") is None:
            key = cookie_key(scope)
            if key:
                bearer = (b"authorization", b"Bearer " + key.encode("latin-1", "replace"))
                scope = {**scope, "headers": [*scope.get("headers", ()), bearer]}  # type: ignore[assignment,misc]
        path: str = scope.get("path", "")
        write = _API_WRITE.match(path) if scope.get("method") == "POST" else None
        dashboard = path == "/ui" or path.startswith("/ui/")
        if not write and not dashboard:
            await self.app(scope, receive, send)
            return

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                if dashboard:
                    headers = list(message.get("headers", []))
                    names = {bytes(name).lower() for name, _ in headers}
                    for name, value in (
                        (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
                        (b"x-content-type-options", b"nosniff"),
                        (b"referrer-policy", b"same-origin"),
                        (b"x-frame-options", b"DENY"),
                    ):
                        if name not in names:
                            headers.append((name, value))
                    message = {**message, "headers": headers}  # type: ignore[typeddict-item]
                if write and 200 <= message["status"] < 300:
                    bus: EventBus | None = getattr(scope["app"].state, "events", None)
                    if bus is not None:
                        run_id = urllib.parse.unquote(write.group(1))
                        bus.publish(RUN_CHANGED, {"run_id": run_id, "change": write.group(2)})
            await send(message)

        await self.app(scope, receive, send_wrapper)


# --- pages -----------------------------------------------------------------------------


def _blank(value: str | None) -> str | None:
    value = value.strip() if value is not None else None
    return value or None


def _context(request: Request[Any, Any, State], page: str, **values: Any) -> dict[str, Any]:
    keyring: KeyRing = request.app.state.keyring
    return {
        "page": page,
        "keys_enabled": keyring.enabled,
        "logged_in_by_cookie": cookie_key(request.scope) is not None,
        **values,
    }


def _login_page(request: Request[Any, Any, State], exc: Exception) -> Response[Any]:
    """401 on a dashboard page: the login form (its script and style are inline, with a
    nonce, because the static files need the key too)."""
    if request.url.path == "/ui/events" or "text/html" not in request.headers.get("accept", ""):
        return Response({"detail": str(exc), "status_code": 401}, status_code=401)
    nonce = _nonce()
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return Template(
        template_name="login.html",
        context={"nonce": nonce, "next": target, "page": "login"},
        status_code=401,
        headers={"content-security-policy": LOGIN_CONTENT_SECURITY_POLICY.format(nonce=nonce)},
    )


def _nonce() -> str:
    return secrets.token_urlsafe(16)


class DashboardController(Controller):
    """The web UI under `/ui/`."""

    include_in_schema = False
    exception_handlers = {NotAuthorizedException: _login_page}  # noqa: RUF012

    @get("/")
    async def root(self) -> Redirect:
        return Redirect("/ui/")

    @get("/ui")
    async def runs_page(
        self,
        request: Request[Any, Any, State],
        status: FromQuery[str | None] = None,
        project: FromQuery[str | None] = None,
        agent: FromQuery[str | None] = None,
        q: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int] = 50,
        *,
        runs: NamedDependency[RunService],
        settings: NamedDependency[Settings],
    ) -> Template:
        filters = {
            "status": _blank(status),
            "project": _blank(project),
            "agent": _blank(agent),
            "q": _blank(q),
        }
        limit = min(max(limit, 1), 200)
        problem: str | None = None
        page, scanned = RunPage(items=[]), None
        if filters["status"] is not None and filters["status"] not in RUN_STATUSES:
            problem = f"status must be one of {', '.join(RUN_STATUSES)}"
        else:
            try:
                page, scanned = await find_runs(
                    runs,
                    query=filters["q"],
                    status=filters["status"],
                    project=filters["project"],
                    agent=filters["agent"],
                    limit=limit,
                    cursor=_blank(cursor),
                )
            except InvalidCursorError as exc:
                problem = f"cursor: {exc}"
        rows = [RunRowView(run, primary_attribution(run.attributions, settings.attributors))
                for run in page.items]  # fmt: skip
        active = {name: value for name, value in filters.items() if value is not None}
        next_query = (
            urllib.parse.urlencode({**active, "cursor": page.next_cursor, "limit": limit})
            if page.next_cursor
            else None
        )
        return Template(
            template_name="runs.html",
            context=_context(
                request,
                "runs",
                rows=rows,
                filters=filters,
                statuses=RUN_STATUSES,
                problem=problem,
                scanned=scanned,
                next_query=next_query,
                paged=_blank(cursor) is not None,
                first_query=urllib.parse.urlencode(active),
            ),
        )

    @get("/ui/runs/{run_id:str}")
    async def run_page(
        self,
        request: Request[Any, Any, State],
        run_id: FromPath[str],
        runs: NamedDependency[RunService],
        settings: NamedDependency[Settings],
    ) -> Template:
        try:
            run = await runs.get_run(run_id)
        except UnknownRunError:
            return Template(
                template_name="missing.html",
                context=_context(request, "run", run_id=run_id),
                status_code=404,
            )
        labels = await runs.labels(run_id)
        jobs = await runs.jobs(run_id)
        primary = primary_attribution(run.attributions, settings.attributors)
        latest = latest_per_method(run.attributions, primary)
        trajectory = run.trajectory
        agents = list(dict.fromkeys((*trajectory.roster, *trajectory.agents)))
        reference = trajectory.metadata.get("label")
        return Template(
            template_name="run.html",
            context=_context(
                request,
                "run",
                run=run,
                run_id=run_id,
                trajectory=trajectory,
                steps=step_views(trajectory, latest, primary, labels),
                primary=primary,
                latest=latest,
                earlier=[a for a in run.attributions if all(a is not b for b in latest)],
                labels=labels,
                jobs=jobs,
                agents=agents,
                attributors=available_attributors(),
                default_attributor=settings.attributors[0] if settings.attributors else None,
                reference=reference if isinstance(reference, Mapping) else None,
                duration=(
                    run.ended_at - run.started_at
                    if run.started_at is not None and run.ended_at is not None
                    else None
                ),
            ),
        )

    @get("/ui/overview")
    async def overview_page(
        self,
        request: Request[Any, Any, State],
        runs: NamedDependency[RunService],
        store: NamedDependency[SpanStore],
        window: FromQuery[str] = "24h",
    ) -> Template:
        window = window if window in WINDOWS else "24h"
        window_s, bucket_s = WINDOWS[window]
        stats = await runs.stats(window_s=window_s, bucket_s=bucket_s)
        answers = await LabelStore(store.engine).ok_attributions()
        by_status = stats.runs_by_status
        attributed = by_status.get("attributed", 0)
        pending = by_status.get("failed", 0)
        return Template(
            template_name="overview.html",
            context=_context(
                request,
                "overview",
                stats=stats,
                window=window,
                windows=list(WINDOWS),
                attributed=attributed,
                pending=pending,
                failed_total=attributed + pending,
                total_runs=sum(by_status.values()),
                jobs=Counter(stats.jobs_by_status),
                agreement=attributor_agreement(answers),
                blame=blame_chart(stats.blame_by_agent),
                over_time=blame_over_time_chart(stats, window_s, time.time()),
            ),
        )

    @get("/ui/login")
    async def login_page(self) -> Redirect:
        # Only reached with a valid key (or with keys off): nothing to log in to.
        return Redirect("/ui/")

    @post("/ui/login", status_code=204)
    async def login(
        self, request: Request[Any, Any, State], keyring: NamedDependency[KeyRing]
    ) -> Response[None]:
        """Reached only past the guard, i.e. with a valid key in the request's headers:
        keep that key in a cookie for the pages, the event stream and the API calls."""
        key = presented_key(request.headers.get("authorization"), request.headers.get("x-api-key"))
        if not keyring.enabled or key is None:
            return Response(None, status_code=204)
        cookie = Cookie(
            key=KEY_COOKIE,
            value=urllib.parse.quote(key, safe=""),
            path="/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            max_age=30 * 86400,
        )
        return Response(None, status_code=204, cookies=[cookie])

    @post("/ui/logout", status_code=303)
    async def logout(self) -> Response[None]:
        cookie = Cookie(key=KEY_COOKIE, value="", path="/", max_age=0, httponly=True)
        return Response(None, status_code=303, headers={"location": "/ui/"}, cookies=[cookie])

    @get("/ui/events")
    async def events(
        self, request: Request[Any, Any, State], events: NamedDependency[EventBus]
    ) -> ServerSentEvent:
        """Server-sent events: spans stored, run status changes, attributions, writes."""
        return ServerSentEvent(event_stream(events, request.headers.get("last-event-id")))


async def event_stream(
    bus: EventBus,
    last_event_id: str | None,
    *,
    lifetime_s: float = STREAM_LIFETIME_S,
    heartbeat_s: float = HEARTBEAT_S,
) -> AsyncIterator[ServerSentEventMessage]:
    """One connection's events, resumed after `last_event_id`, for at most `lifetime_s`."""
    async with bus.subscribe(after=last_event_id) as subscription:
        # `retry`: the browser reconnects 1 s after the stream ends.
        yield ServerSentEventMessage(comment="connected", retry=1000, data=None)
        if subscription.missed:
            yield ServerSentEventMessage(event=RESET, data="{}")
        deadline = time.monotonic() + lifetime_s
        while (remaining := deadline - time.monotonic()) > 0:
            event = await subscription.next(min(heartbeat_s, remaining))
            if event is None:
                if subscription.closed:
                    if subscription.missed:
                        yield ServerSentEventMessage(event=RESET, data="{}")
                    return
                yield ServerSentEventMessage(comment="keep-alive", data=None)
                continue
            yield ServerSentEventMessage(
                id=event.id, event=event.kind, data=json.dumps(dict(event.data))
            )
