"""Package data: the web UI's templates and static files, and the Grafana dashboard."""
