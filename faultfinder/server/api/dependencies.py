"""The services a request handler may ask for by name (Litestar dependency injection).

`create_app` puts each service on the application state once, at start-up; a handler
declares the one it needs as a typed parameter (`runs: RunService`) instead of reading
the state and re-declaring its type.
"""

from __future__ import annotations

from typing import Any

from litestar.datastructures import State
from litestar.di import Provide

__all__ = ["DEPENDENCIES"]

SERVICES = (
    "attribution",
    "bench_history",
    "decoder",
    "events",
    "ingest",
    "jobs",
    "keyring",
    "metrics",
    "runs",
    "settings",
    "store",
    "writer",
)
"""The names on the application state that handlers receive as parameters."""


def _provider(name: str) -> Provide:
    def provide(state: State) -> Any:
        return state[name]

    provide.__name__ = f"provide_{name}"
    return Provide(provide, sync_to_thread=False)


DEPENDENCIES: dict[str, Provide] = {name: _provider(name) for name in SERVICES}
