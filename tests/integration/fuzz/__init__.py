"""The fuzz suite: the OTLP decoders (`test_decoders`) and the HTTP API of a real sidecar
(`test_api`) take hostile input without crashing.

Cases per target: `FAULTFINDER_FUZZ_EXAMPLES` (default 200). The nightly run:
`FAULTFINDER_FUZZ_EXAMPLES=10000 .venv/bin/pytest tests/integration/fuzz
--hypothesis-show-statistics`, or `faultfinder bench chaos --fuzz 10000`.
"""
