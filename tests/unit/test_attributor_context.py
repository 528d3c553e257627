"""The attributor context: every LLM method built with it shares one connection and one
concurrency limit per endpoint, the context closes what it opened exactly once, and
factories that take no context (older plugins) are still built."""

from __future__ import annotations

from typing import Any, cast

import pytest

from faultfinder.attributors.base import get_attributor, takes_context
from faultfinder.attributors.context import AttributorContext, ContextClosedError
from faultfinder.attributors.llm import ModelSettings
from faultfinder.attributors.llm.methods import LLM_METHODS
from faultfinder.server.attribution import AttributionService
from faultfinder.server.store import SpanStore
from tests.plugins.echo import EchoAttributor

ENDPOINT = ModelSettings(base_url="http://127.0.0.1:9/v1", model="m", concurrency=3)


def client_of(attributor: Any) -> Any:
    return attributor.client


async def test_llm_methods_share_one_client_and_limit_per_endpoint() -> None:
    context = AttributorContext(llm=ENDPOINT)
    attributors = [get_attributor(name, context) for name in LLM_METHODS]
    endpoints = {id(client_of(a).endpoint) for a in attributors}
    assert len(endpoints) == 1
    assert context.endpoints == 1
    endpoint = client_of(attributors[0]).endpoint
    assert endpoint.limiter.total_tokens == 3
    # Other call settings on the same endpoint keep the connection and its limit.
    longer = get_attributor("all_at_once", context, max_tokens=900)
    assert client_of(longer).endpoint is endpoint
    assert client_of(longer).settings.max_tokens == 900
    # Another model is another endpoint.
    other = get_attributor(
        "all_at_once", context, settings=ENDPOINT.model_copy(update={"model": "n"})
    )
    assert client_of(other).endpoint is not endpoint
    assert context.endpoints == 2
    await context.aclose()


async def test_the_context_closes_its_clients_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    context = AttributorContext(llm=ENDPOINT)
    endpoint = client_of(get_attributor("consensus", context)).endpoint
    closes: list[int] = []
    real_close = endpoint.openai.close

    async def counting_close() -> None:
        closes.append(1)
        await real_close()

    monkeypatch.setattr(endpoint.openai, "close", counting_close)
    await context.aclose()
    await context.aclose()
    assert closes == [1]
    assert endpoint.openai.is_closed()
    with pytest.raises(ContextClosedError):
        context.client()


async def test_the_service_closes_attributors_and_then_the_context() -> None:
    context = AttributorContext(llm=ENDPOINT)
    service = AttributionService(cast(SpanStore, None), context=context)
    shared = {id(client_of(service.attributor(name)).endpoint) for name in ("hybrid", "a2p")}
    assert len(shared) == 1
    endpoint = client_of(service.attributor("hybrid")).endpoint
    await service.aclose()
    assert endpoint.openai.is_closed()
    assert context.endpoints == 0


async def test_an_attributor_without_a_context_closes_its_own_client() -> None:
    attributor = get_attributor("all_at_once", settings=ENDPOINT)
    endpoint = client_of(attributor).endpoint
    await attributor.aclose()  # type: ignore[attr-defined]
    assert endpoint.openai.is_closed()


def test_a_plugin_factory_without_a_context_is_still_built() -> None:
    assert not takes_context(EchoAttributor)
    assert takes_context(type(get_attributor("all_at_once", settings=ENDPOINT)))
    built = get_attributor("echo", AttributorContext(llm=ENDPOINT))
    assert isinstance(built, EchoAttributor)


def test_the_learned_attributor_takes_the_contexts_model_unless_given_one() -> None:
    from faultfinder.attributors.learned import StepModel, default_model

    trained = StepModel.from_dict(default_model().to_dict())
    from_context = get_attributor("learned", AttributorContext(learned_model=trained))
    assert cast(Any, from_context).model is trained
    packaged = get_attributor("learned", AttributorContext())
    assert cast(Any, packaged).model is not trained
    given = default_model()
    explicit = get_attributor("learned", AttributorContext(learned_model=trained), model=given)
    assert cast(Any, explicit).model is given
