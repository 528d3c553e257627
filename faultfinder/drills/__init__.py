"""Load and failure drills against real sidecars: `faultfinder bench ingest` (`ingest`),
`faultfinder bench chaos` (`chaos`: kills, overload, hostile inputs), the attribution
latency bench (`attribution_latency`) and the speed benches of the store, the lifecycle
sweep and the learned attributor (`store_speed`, `sweep_speed`, `learned_speed`)."""
