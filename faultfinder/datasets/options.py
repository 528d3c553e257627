"""Command-line options that several benchmark and training commands share."""

from __future__ import annotations

from pathlib import Path

import click

from faultfinder.datasets import DATASETS_DIR_ENV

__all__ = ["FROM_DATABASE_HELP", "datasets_dir_option", "from_database_option"]

FROM_DATABASE_HELP = (
    "Also the runs people labelled in this sidecar database (SQLAlchemy async URL, e.g."
    " sqlite+aiosqlite:///faultfinder.db); with --dataset none, those alone."
)

datasets_dir_option = click.option(
    "--datasets-dir",
    envvar=DATASETS_DIR_ENV,
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Root of the datasets (${DATASETS_DIR_ENV}; default ../shared/datasets).",
)
"""`--datasets-dir DIRECTORY` (or $FAULTFINDER_DATASETS_DIR), passed as `datasets_dir`."""

from_database_option = click.option(
    "--from-database", "database_url", metavar="URL", help=FROM_DATABASE_HELP
)
"""`--from-database URL`: a sidecar database's labelled runs, passed as `database_url`."""
