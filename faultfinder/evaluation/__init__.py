"""The evaluation harness: attributors scored against labelled datasets.

`faultfinder bench run` (`run`, with cross-validation of the learned attributor in
`run.cv`), the nightly suite and its history (`nightly`), leave-one-framework-out
transfer (`transfer`), the datasets replayed as OTLP into a live sidecar (`replay`), and
the reports and plots of a scored run (`report`, `plots`).
"""
