"""faultfinder: an online failure-attribution sidecar for LLM agents.

The parts live in `faultfinder.attributors` (domain core), `faultfinder.sdk`
(agent-side helpers), `faultfinder.server` (the sidecar), `faultfinder.datasets`
(labelled runs), `faultfinder.evaluation` (scoring, replay, the nightly suite),
`faultfinder.training` (the learned attributor's training), `faultfinder.injection`
(labelled failures from successful runs) and `faultfinder.drills` (load and chaos).
"""

__version__ = "0.1.0"
