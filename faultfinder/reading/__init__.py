"""Reading spans: decoded `SpanRecord`s → what they mean (run ids, run facts, steps).

Pure: no I/O, no database, no web framework. The OTLP decoder (`faultfinder.server.otlp`)
produces the spans and stamps each with its run (`runs.run_id_of`); the store keeps them;
the assembler (`assembler.assemble_trajectory`) turns a run's spans into its `Trajectory`,
reading each span through `mapping.py` (faultfinder's attributes, then GenAI semconv,
then OpenInference, then a few frameworks' own shapes in `shapes.py`; message text in
`messages.py`, messages recorded as span events in `events.py`).
"""

from faultfinder.reading.assembler import assemble_trajectory
from faultfinder.reading.mapping import MappedSpan, map_span
from faultfinder.reading.model import AttributeValue, SpanEvent, SpanRecord, StatusCode
from faultfinder.reading.runs import RunFacts, run_facts, run_id_of, with_run_id

__all__ = [
    "AttributeValue",
    "MappedSpan",
    "RunFacts",
    "SpanEvent",
    "SpanRecord",
    "StatusCode",
    "assemble_trajectory",
    "map_span",
    "run_facts",
    "run_id_of",
    "with_run_id",
]
