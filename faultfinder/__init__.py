"""faultfinder: an online failure-attribution sidecar for LLM agents.

The parts live in `faultfinder.attributors` (domain core), `faultfinder.sdk`
(agent-side helpers), `faultfinder.server` (the sidecar) and
`faultfinder.benchmarks` (datasets, replay, scoring).
"""

__version__ = "0.1.0"
