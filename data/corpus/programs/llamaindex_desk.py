"""A LlamaIndex returns desk: a custom Workflow of two steps, each run by its own
FunctionAgent. The Clerk looks the question up with the shop's JSON tools and writes a
note for the Cashier; the Cashier, who sees only the question and that note, answers it
(with the calculator for any arithmetic). Unlike `llamaindex_shop.py`, where the Clerk
may answer alone, every run has both agents, so a flaw can sit in the Clerk's lookup, in
its note or in the Cashier's answer. Traced by openinference-instrumentation-llama-index.

    echo "What did the Desk Lamp in order #W4817420 cost?" | python llamaindex_desk.py
"""

from __future__ import annotations

import asyncio
import sys

from corpus_tools import answer_line, calculate, read_task
from corpus_tracing import tracer_provider
from desk_prompts import CASHIER, clerk
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Event, StartEvent, StopEvent, Workflow, step
from llamaindex_parts import agent_model, clerk_tools
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

CLERK = clerk(example=True)


class Handover(Event):
    """The Clerk's note, passed to the Cashier with the question."""

    task: str
    note: str


class ReturnsDesk(Workflow):
    """Clerk, then Cashier: one step each."""

    def __init__(self, clerk: FunctionAgent, cashier: FunctionAgent) -> None:
        super().__init__(timeout=900)
        self.clerk = clerk
        self.cashier = cashier

    @step
    async def look_up(self, ev: StartEvent) -> Handover:
        note = await self.clerk.run(user_msg=ev.task, max_iterations=8)
        return Handover(task=ev.task, note=str(note))

    @step
    async def answer(self, ev: Handover) -> StopEvent:
        brief = f"Customer's question: {ev.task}\n\nClerk's note: {ev.note}"
        reply = await self.cashier.run(user_msg=brief, max_iterations=8)
        return StopEvent(result=str(reply))


def desk() -> ReturnsDesk:
    model = agent_model()
    clerk = FunctionAgent(
        name="Clerk",
        description="Looks up orders, customers and products.",
        system_prompt=CLERK,
        tools=clerk_tools(),
        llm=model,
    )
    cashier = FunctionAgent(
        name="Cashier",
        description="Answers from the Clerk's note, with the calculator.",
        system_prompt=CASHIER,
        tools=[FunctionTool.from_defaults(calculate)],
        llm=model,
    )
    return ReturnsDesk(clerk, cashier)


def main() -> int:
    task = read_task()
    provider = tracer_provider("corpus-llamaindex-desk")
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    try:

        async def run() -> object:
            return await desk().run(task=task)

        print(answer_line(str(asyncio.run(run()))))
    finally:
        provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
