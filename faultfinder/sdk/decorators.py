"""Decorators that record each call of a function as a step: `@agent` an agent turn,
`@tool` a tool call, for plain and async functions alike.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

from faultfinder.sdk.steps import AgentStep, ToolCall

__all__ = ["agent", "tool"]

P = ParamSpec("P")
R = TypeVar("R")


def _refuse_generators(fn: Callable[..., Any], decorator: str, helper: str) -> None:
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"@{decorator} cannot wrap generator {fn.__qualname__}: its step would end before "
            f"it yields; use `with {helper}(…)` inside it instead"
        )


def agent(name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`@agent("Planner")` — each call of the function (sync or async) is one agent step;
    its return value, unless None, is what the agent said."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        _refuse_generators(fn, "agent", "agent_step")
        step_name = name or fn.__name__
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def call_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                async with AgentStep(step_name) as step:
                    result = await fn(*args, **kwargs)
                    if result is not None:
                        step.say(result)
                    return result

            return cast(Callable[P, R], call_async)

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            with AgentStep(step_name) as step:
                result = fn(*args, **kwargs)
                if result is not None:
                    step.say(result)
                return result

        return call

    return decorate


def tool(name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`@tool("search")` — each call of the function (sync or async) is one tool call,
    with its arguments and return value recorded."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        _refuse_generators(fn, "tool", "tool_call")
        tool_name = name or fn.__name__
        signature = inspect.signature(fn)

        def arguments(*args: Any, **kwargs: Any) -> dict[str, Any]:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return {}  # the call itself raises the TypeError, recorded on the span
            return {k: v for k, v in bound.arguments.items() if k not in ("self", "cls")}

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def call_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                async with ToolCall(tool_name, arguments(*args, **kwargs)) as call:
                    result = await fn(*args, **kwargs)
                    call.result(result)
                    return result

            return cast(Callable[P, R], call_async)

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            with ToolCall(tool_name, arguments(*args, **kwargs)) as recorded:
                result = fn(*args, **kwargs)
                recorded.result(result)
                return result

        return call

    return decorate
