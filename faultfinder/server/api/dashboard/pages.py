"""The dashboard's pages (runs list, run page, overview, nightly benchmark, login) and their
live updates (server-sent events)."""

from __future__ import annotations

import json
import secrets
import time
import urllib.parse
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import Cookie, State
from litestar.di import NamedDependency
from litestar.exceptions import NotAuthorizedException
from litestar.params import FromPath, FromQuery, Parameter
from litestar.response import Redirect, ServerSentEvent, Template
from litestar.response.sse import ServerSentEventMessage

from faultfinder.attributors.base import available_attributors
from faultfinder.attributors.failure_modes import MODES
from faultfinder.server.api.dashboard.gate import (
    KEY_COOKIE,
    LOGIN_CONTENT_SECURITY_POLICY,
    cookie_key,
)
from faultfinder.server.api.dashboard.page_bounds import page_trajectory
from faultfinder.server.api.dashboard.render import agent_colours
from faultfinder.server.api.dashboard.run_view import (
    alarm_text,
    evidence_links,
    verdict,
    waterfall,
)
from faultfinder.server.api.dashboard.trends import nightly_rows, trend_charts
from faultfinder.server.api.dashboard.views import (
    RunRowView,
    StepWindow,
    attributor_agreement,
    bar_chart,
    blame_chart,
    blame_over_time_chart,
    find_runs,
    latest_per_method,
    mode_colours,
    mode_label,
    over_time_chart,
    primary_attribution,
    step_views,
)
from faultfinder.server.api.run_paths import stored_run_id
from faultfinder.server.api.runs import RUN_STATUSES
from faultfinder.server.auth import KeyRing, presented_key
from faultfinder.server.events import RESET, EventBus
from faultfinder.server.runs import RunService
from faultfinder.server.schemas import RunPage
from faultfinder.server.settings import Settings
from faultfinder.server.store import BenchHistory, InvalidCursorError, SpanStore, UnknownRunError

STREAM_LIFETIME_S = 15.0
"""An event stream ends after this long and the browser reconnects (resuming from its
last event id): an open dashboard never holds up a graceful shutdown for longer."""
HEARTBEAT_S = 5.0
WINDOWS: dict[str, tuple[int, int]] = {
    "1h": (3600, 300),
    "24h": (86400, 3600),
    "7d": (7 * 86400, 6 * 3600),
    "30d": (30 * 86400, 86400),
}
"""Overview time windows: (window seconds, bucket seconds)."""
STATUS_LABELS: dict[str, str] = {
    "failed": "failed · awaiting attribution",
    "attributed": "failed · attributed",
    "complete": "succeeded",
    "running": "running",
}
"""What each run status means to a reader: an attributed run is a failed run."""
NIGHTLY_WINDOWS: dict[str, int | None] = {"30d": 30, "90d": 90, "365d": 365, "all": None}
"""Nightly page windows: days of benchmark history drawn (None: all of it)."""
NIGHTLY_ENTRIES = 5000
"""History entries the nightly page reads at most (the newest)."""
NIGHTLY_REGRESSIONS = 20
"""Regressions the nightly page lists (the newest)."""


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
        mode: FromQuery[str | None] = None,
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
            "mode": _blank(mode),
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
                    mode=filters["mode"],
                    leading=settings.attributors,
                    limit=limit,
                    cursor=_blank(cursor),
                )
            except InvalidCursorError as exc:
                problem = f"cursor: {exc}"
        rows = [RunRowView(run, primary_attribution(run.attributions, settings.attributors))
                for run in page.items]  # fmt: skip
        culprits = [row.culprit.agent for row in rows if row.culprit and row.culprit.agent]
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
                statuses=STATUS_LABELS,
                modes=MODES,
                colours=agent_colours(culprits),
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
        steps_from: Annotated[int | None, Parameter(ge=0)] = None,
    ) -> Template:
        run_id = stored_run_id(run_id)
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
        trajectory = page_trajectory(run.trajectory, run_id)
        agents = list(dict.fromkeys((*trajectory.roster, *trajectory.agents)))
        reference = trajectory.metadata.get("label")
        views = step_views(trajectory, latest, primary, labels)
        evidence = evidence_links(primary, trajectory)
        window = StepWindow.around(
            len(views), steps_from, primary.step if primary is not None else None
        )
        return Template(
            template_name="run.html",
            context=_context(
                request,
                "run",
                run=run,
                run_id=run_id,
                trajectory=trajectory,
                steps=views[window.start : window.stop],
                waterfall=waterfall(trajectory.steps[window.start : window.stop]),
                verdict=verdict(primary),
                alarm=alarm_text(run.alarm),
                evidence=evidence,
                colours=agent_colours(agents),
                modes=MODES,
                window=window,
                step_href=window.href,
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
        answers = await store.ok_attributions()
        by_status = stats.runs_by_status
        attributed = by_status.get("attributed", 0)
        pending = by_status.get("failed", 0)
        colours = agent_colours(stats.blame_by_agent)  # the most blamed first
        by_mode = mode_colours(stats.blame_by_mode)
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
                succeeded=by_status.get("complete", 0),
                running=by_status.get("running", 0),
                blame=blame_chart(stats.blame_by_agent, colours),
                over_time=blame_over_time_chart(stats, window_s, time.time(), colours),
                modes=bar_chart(stats.blame_by_mode, by_mode, mode_label),
                modes_over_time=over_time_chart(
                    stats.modes_over_time, bucket_s, window_s, time.time(), by_mode, mode_label
                ),
            ),
        )

    @get("/ui/nightly")
    async def nightly_page(
        self,
        request: Request[Any, Any, State],
        bench_history: NamedDependency[BenchHistory],
        window: FromQuery[str] = "90d",
    ) -> Template:
        """The nightly benchmark: the latest suite run, regressions the gate flagged, and
        accuracy over time per attributor and dataset."""
        window = window if window in NIGHTLY_WINDOWS else "90d"
        days = NIGHTLY_WINDOWS[window]
        since = None if days is None else time.time_ns() - days * 86400 * 10**9
        entries = await bench_history.history(since_ns=since, limit=NIGHTLY_ENTRIES)
        latest_runs = await bench_history.recent_runs(limit=1)
        latest_run = latest_runs[0] if latest_runs else None
        latest = (
            await bench_history.run_entries(latest_run.id, with_records=False)
            if latest_run is not None
            else []
        )
        regressions = [entry for entry in reversed(entries) if entry.regression]
        return Template(
            template_name="nightly.html",
            context=_context(
                request,
                "nightly",
                window=window,
                windows=list(NIGHTLY_WINDOWS),
                latest_run=latest_run,
                latest=nightly_rows(latest),
                skipped=[
                    item for item in (latest_run.plan if latest_run else []) if item.get("skipped")
                ],
                regressions=nightly_rows(regressions[:NIGHTLY_REGRESSIONS]),
                regressions_total=len(regressions),
                charts=trend_charts(entries),
                entries=len(entries),
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
