"""The replay proxy: an OpenAI-compatible endpoint between an agent program and its model.

The program only changes its base URL to `http://HOST:PORT/s/<session>/v1`. A session
records (each chat-completion call is forwarded to the model and kept, request and
reply) or injects: calls before the injection point are answered from a recording, but
only while each request equals the recorded one (the first that differs means the
program's prefix diverged; it and every later call are refused with HTTP 400, and the
session says where); the call at the injection point is answered with the flawed reply;
later calls go to the model live. Streaming requests get the same reply as
chat-completion chunks (`exchanges.sse_chunks`), tool calls included.

`ReplayProxy.serve()` runs the proxy on a thread of its own (the harness drives it from
ordinary code); `faultfinder inject proxy` serves it on its own, recording a session
per path name into a folder.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from litestar import Litestar, Request, Response, get, post
from litestar.params import FromPath
from litestar.response import Stream

from faultfinder.injection.exchanges import (
    Exchange,
    Recording,
    canonical_request,
    sse_chunks,
)

__all__ = ["DIVERGED_STATUS", "ReplayProxy", "Session"]

log = logging.getLogger(__name__)

DIVERGED_STATUS = 400
"""What a call is answered with once the program's requests left the recorded prefix (a
client error: OpenAI clients do not retry it, as they retry 409 and 5xx)."""

_UPSTREAM_TIMEOUT = httpx.Timeout(connect=10.0, read=900.0, write=60.0, pool=900.0)


@dataclass
class Session:
    """One program invocation's model calls, recorded or replayed."""

    id: str
    recording: Recording | None = None
    """In an injecting session: the successful run whose prefix is replayed."""
    inject_at: int | None = None
    """The 0-based model call answered with `injected_reply`."""
    injected_reply: dict[str, Any] | None = None
    save_to: Path | None = None
    """A recording session started by path name: where each call is saved."""
    calls: list[Exchange] = field(default_factory=list)
    diverged_at: int | None = None
    """The first call whose request differed from the recording's."""
    divergence: str | None = None
    upstream_errors: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def injecting(self) -> bool:
        return self.inject_at is not None

    @property
    def injected(self) -> bool:
        """Whether the program reached the injection point (its flawed reply was sent)."""
        return any(call.source == "injected" for call in self.calls)

    def as_recording(self, **info: Any) -> Recording:
        return Recording(exchanges=list(self.calls), info=dict(info))


class ReplayProxy:
    """The proxy's sessions and its HTTP app (see the module's docstring)."""

    def __init__(
        self,
        upstream: str,
        *,
        api_key: str = "none",
        record_dir: Path | None = None,
        sampling: Mapping[str, Any] | None = None,
    ):
        self.upstream = upstream.rstrip("/")
        self.api_key = api_key
        self.record_dir = record_dir
        self.sampling = dict(sampling or {})
        """Fields set on every request forwarded to the model, over the program's own
        (`faultfinder verify` decodes at temperature 0); replayed requests are compared
        as the program sent them."""
        self._sessions: dict[str, Session] = {}
        self._registry = threading.Lock()
        self._ids = itertools.count(1)
        self._client: httpx.AsyncClient | None = None
        self.address: tuple[str, int] | None = None

    # Sessions -----------------------------------------------------------------------

    def record(self) -> Session:
        """A new recording session."""
        return self._add(Session(id=f"r{next(self._ids)}"))

    def inject(self, recording: Recording, at: int, reply: dict[str, Any]) -> Session:
        """A new session replaying `recording` before call `at`, answering call `at` with
        `reply`, and calling the model after it."""
        if not 0 <= at < len(recording.exchanges):
            raise ValueError(f"injection call {at} is outside 0..{len(recording.exchanges) - 1}")
        return self._add(
            Session(
                id=f"i{next(self._ids)}", recording=recording, inject_at=at, injected_reply=reply
            )
        )

    def _add(self, session: Session) -> Session:
        with self._registry:
            self._sessions[session.id] = session
        return session

    def close_session(self, session: Session) -> None:
        with self._registry:
            self._sessions.pop(session.id, None)

    def base_url(self, session: Session) -> str:
        """The OpenAI base URL a program uses for `session`."""
        if self.address is None:
            raise RuntimeError("the proxy is not serving")
        host, port = self.address
        return f"http://{host}:{port}/s/{session.id}/v1"

    def _session(self, name: str) -> Session | None:
        with self._registry:
            found = self._sessions.get(name)
            if found is None and self.record_dir is not None:
                found = Session(id=name, save_to=self.record_dir / f"{name}.json")
                self._sessions[name] = found
            return found

    # Calls --------------------------------------------------------------------------

    async def _upstream(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self._client is None:  # pragma: no cover - set while serving
            raise RuntimeError("the proxy is not serving")
        whole = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        whole.update(self.sampling)
        try:
            answer = await self._client.post(
                f"{self.upstream}/chat/completions",
                json=whole,
                headers={"Authorization": f"Bearer {self.api_key}"},
            )
        except httpx.HTTPError as exc:
            return 502, _error(f"the model endpoint {self.upstream} failed: {exc!r}", "upstream")
        try:
            payload = answer.json()
        except ValueError:
            payload = _error(answer.text[:2000], "upstream")
        if not isinstance(payload, dict):
            payload = _error(str(payload)[:2000], "upstream")
        return answer.status_code, payload

    async def complete(self, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Answer one chat-completion call of session `name`: (HTTP status, reply)."""
        session = self._session(name)
        if session is None:
            return 404, _error(f"no replay session {name!r}", "not_found")
        async with session.lock:
            return await self._answer(session, body)

    async def _answer(self, session: Session, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        number = len(session.calls)
        if session.diverged_at is not None:
            return DIVERGED_STATUS, _error(session.divergence or "diverged", "diverged")
        recording = session.recording
        at = session.inject_at
        if recording is not None and at is not None and number <= at:
            expected = recording.exchanges[number]
            if canonical_request(body) != canonical_request(expected.request):
                session.diverged_at = number
                session.divergence = (
                    f"model call {number} differs from the recorded one: the program left"
                    " the recorded prefix"
                )
                return DIVERGED_STATUS, _error(session.divergence, "diverged")
            if number < at:
                session.calls.append(Exchange(body, expected.reply, source="recording"))
                return 200, expected.reply
            assert session.injected_reply is not None
            session.calls.append(Exchange(body, session.injected_reply, source="injected"))
            return 200, session.injected_reply
        started = time.perf_counter()
        status, reply = await self._upstream(body)
        if status >= 400:
            session.upstream_errors += 1
            return status, reply
        session.calls.append(Exchange(body, reply, seconds=time.perf_counter() - started))
        if session.save_to is not None:
            session.as_recording(session=session.id).save(session.save_to)
        return status, reply

    # HTTP ---------------------------------------------------------------------------

    def app(self) -> Litestar:
        proxy = self

        @post("/s/{name:str}/v1/chat/completions", status_code=200)
        async def chat_completions(
            name: FromPath[str], request: Request[Any, Any, Any]
        ) -> Response[Any]:
            try:
                body = await request.json()
            except ValueError:
                return Response(_error("the body is not JSON", "invalid_request"), status_code=400)
            if not isinstance(body, dict):
                return Response(
                    _error("the body must be a JSON object", "invalid_request"), status_code=400
                )
            status, reply = await proxy.complete(name, body)
            if status == 200 and body.get("stream"):
                options = body.get("stream_options")
                usage = isinstance(options, dict) and bool(options.get("include_usage"))
                return Stream(
                    sse_chunks(reply, include_usage=usage), media_type="text/event-stream"
                )
            return Response(reply, status_code=status)

        @get("/s/{name:str}/v1/models")
        async def models(name: FromPath[str]) -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "local", "object": "model"}]}

        @get("/healthz")
        async def healthz() -> dict[str, str]:
            return {"status": "ok"}

        return Litestar([chat_completions, models, healthz], debug=False)

    @contextmanager
    def serve(self, host: str = "127.0.0.1", port: int = 0) -> Iterator[ReplayProxy]:
        """Serve on a thread of its own until the block ends (port 0: a free port)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        self.address = (host, sock.getsockname()[1])
        server = uvicorn.Server(
            uvicorn.Config(self.app(), log_level="warning", lifespan="off", access_log=False)
        )

        async def run() -> None:
            async with httpx.AsyncClient(timeout=_UPSTREAM_TIMEOUT) as client:
                self._client = client
                try:
                    await server.serve(sockets=[sock])
                finally:
                    self._client = None

        thread = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the replay proxy did not start")
            time.sleep(0.02)
        try:
            yield self
        finally:
            server.should_exit = True
            thread.join(timeout=30)
            sock.close()
            self.address = None


def _error(message: str, code: str) -> dict[str, Any]:
    return {
        "error": {"message": f"faultfinder replay proxy: {message}", "type": code, "code": code}
    }
