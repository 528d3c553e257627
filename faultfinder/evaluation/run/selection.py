"""Which records of a dataset a benchmark run attributes: a record list, a fixed fraction
of each subset, and at most N per subset."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from faultfinder.datasets import (
    BenchmarkRecord,
    DatasetError,
    UnknownDatasetError,
    load_dataset,
)
from faultfinder.evaluation.subsets import (
    SubsetError,
    parse_fraction,
    read_record_ids,
    select_records,
)

__all__ = ["choose_records", "load_records"]


def load_records(
    dataset: str,
    root: Path,
    limit: int | None,
    records_file: Path | None,
    fraction: str | None,
    subset_seed: int,
) -> tuple[list[BenchmarkRecord], str]:
    """The records the run attributes, and how they were chosen."""
    try:
        everything = list(load_dataset(dataset, root))
    except UnknownDatasetError as exc:
        raise click.BadParameter(str(exc), param_hint="'--dataset'") from None
    except DatasetError as exc:
        # The message names the folder or file and field at fault.
        raise click.ClickException(str(exc)) from None
    records, selection = choose_records(everything, limit, records_file, fraction, subset_seed)
    if not records:
        raise click.BadParameter(
            f"{dataset!r} has no records under {root}", param_hint="'--dataset'"
        )
    return records, selection


def choose_records(
    records: Sequence[BenchmarkRecord],
    limit: int | None,
    records_file: Path | None,
    fraction: str | None,
    subset_seed: int,
) -> tuple[list[BenchmarkRecord], str]:
    if records_file is not None and fraction is not None:
        raise click.UsageError("give either --records or --fraction, not both")
    try:
        if records_file is not None:
            chosen = select_records(records, record_ids=read_record_ids(records_file))
            description = f"records listed in {records_file}"
        elif fraction is not None:
            share = parse_fraction(fraction)
            chosen = select_records(records, fraction=share, seed=subset_seed)
            description = (
                f"fraction {share} per subset: sorted record ids shuffled with"
                f" random.Random({subset_seed}), first round(n×{share})"
            )
        else:
            chosen, description = list(records), "all records"
    except SubsetError as exc:
        raise click.ClickException(str(exc)) from None
    if limit is not None:
        chosen = _select(chosen, limit)
        description += f", at most {limit} per subset"
    return chosen, description


def _select(records: Sequence[BenchmarkRecord], limit: int | None) -> list[BenchmarkRecord]:
    if limit is None:
        return list(records)
    taken: dict[str, int] = {}
    selected = []
    for record in records:
        if taken.get(record.subset, 0) < limit:
            taken[record.subset] = taken.get(record.subset, 0) + 1
            selected.append(record)
    return selected
