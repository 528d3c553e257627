"""What a service hands the attributor factories it builds: the attributors' settings, the
learned model, and one model client connection per endpoint.

Every LLM method built with the same context shares its endpoint's connection and its
limit on calls in flight, so `ModelSettings.concurrency` bounds the calls to an endpoint,
not the calls of each method. The context closes the connections it opened, once, when the
service that made it stops (`aclose`, or `async with`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from faultfinder.attributors.llm.client import Endpoint, ModelClient
from faultfinder.attributors.llm.settings import ModelSettings

if TYPE_CHECKING:
    from faultfinder.attributors.learned import StepModel

__all__ = ["AttributorContext", "ContextClosedError"]


class ContextClosedError(RuntimeError):
    """A client was asked of a context that has been closed."""


@dataclass
class _Endpoints:
    opened: dict[tuple[str, str, str], Endpoint] = field(default_factory=dict)
    closed: bool = False


@dataclass(frozen=True, eq=False)
class AttributorContext:
    """Settings and shared resources for attributor factories (`get_attributor(name,
    context=...)` passes it to a factory that takes a `context` argument)."""

    llm: ModelSettings = field(default_factory=ModelSettings)
    """The model endpoint and call settings of the LLM methods."""
    prefilter_top_k: int = 0
    """Candidate steps the learned pre-filter names to the LLM methods (0: off)."""
    learned_model: StepModel | None = None
    """The learned model for the pre-filter; None: the packaged one."""
    _endpoints: _Endpoints = field(default_factory=_Endpoints, init=False, repr=False)

    def endpoint(self, settings: ModelSettings | None = None) -> Endpoint:
        """The shared connection to the endpoint of `settings` (default: `llm`), opened on
        first use with that endpoint's timeout and concurrency limit."""
        settings = settings or self.llm
        if self._endpoints.closed:
            raise ContextClosedError("the attributor context has been closed")
        key = Endpoint.key(settings)
        if key not in self._endpoints.opened:
            self._endpoints.opened[key] = Endpoint(settings)
        return self._endpoints.opened[key]

    def client(self, settings: ModelSettings | None = None) -> ModelClient:
        """A model client with `settings` (default: `llm`) on the shared endpoint."""
        settings = settings or self.llm
        return ModelClient(settings, endpoint=self.endpoint(settings))

    @property
    def endpoints(self) -> int:
        """How many endpoint connections the context has open."""
        return len(self._endpoints.opened)

    async def aclose(self) -> None:
        """Close every connection the context opened; later calls do nothing."""
        if self._endpoints.closed:
            return
        self._endpoints.closed = True
        opened = list(self._endpoints.opened.values())
        self._endpoints.opened.clear()
        for endpoint in opened:
            await endpoint.aclose()

    async def __aenter__(self) -> AttributorContext:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
